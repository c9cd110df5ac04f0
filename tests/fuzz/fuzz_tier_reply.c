/* libFuzzer target: the merge of the operator's tiering controls
 * (kvp__client_tier_merge, src/client/tierctl.c), whose replies are bytes
 * from whoever answers on kvplane.api.<ns>.tier. The input is cut in two
 * at the first byte's offset; each part that parses as JSON is a reply
 * (as it came), the first byte also picks the partition count and a
 * missing partition. Properties: it never crashes or leaks; it always
 * returns an object (memory permitting) with "advisors" and "missing"
 * arrays; without "error", some advisor acted and nothing is missing. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t cut = size ? data[0] % (size + 1) : 0;
  json_t *all = json_object(), *reps = json_array(), *missing = json_array();
  const char *parts[2] = {(const char *)data, (const char *)data + cut};
  size_t lens[2] = {cut, size - cut};
  for (int k = 0; k < 2; k++) {
    json_t *r = json_loadb(parts[k], lens[k], JSON_DECODE_ANY, NULL);
    if (r != NULL)
      json_array_append_new(reps, r);
  }
  if (size > 0 && data[0] & 0x80)
    json_array_append_new(missing, json_integer(data[0] & 3));
  json_object_set_new(all, "partitions", json_integer(size ? data[0] % 5 : 0));
  json_object_set_new(all, "replies", reps);
  json_object_set_new(all, "missing", missing);

  json_t *out = kvp__client_tier_merge(all, 1000);
  if (out == NULL)
    abort(); /* no allocation fails at these sizes */
  json_t *acted = json_object_get(out, "advisors"), *miss = json_object_get(out, "missing");
  if (!json_is_array(acted) || !json_is_array(miss))
    abort();
  if (json_object_get(out, "error") == NULL &&
      (json_array_size(acted) == 0 || json_array_size(miss) != 0))
    abort();
  json_decref(out);
  json_decref(all);
  return 0;
}
