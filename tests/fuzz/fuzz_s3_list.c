/* libFuzzer target: one ListObjectsV2 page as an S3 server sends it
 * (outside bytes), through the s3 plugin's page reader
 * (plugins/s3/s3_list.c): keys, XML entities, sizes and the continuation
 * token. Errors are expected; crashes, overruns and keys that are not the
 * plugin's are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "s3_list.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int seen(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  (void)hash;
  (void)bytes;
  size_t n = strlen(ns);
  if (n == 0 || n > 64 || ctx == NULL)
    abort();                     /* the reader passed a namespace it must refuse */
  return ++*(int *)ctx > 100000; /* a stop from the callback ends the walk */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *xml = malloc(size + 1), token[1024];
  int count = 0, truncated = 0;
  if (xml == NULL)
    return 0;
  memcpy(xml, data, size);
  xml[size] = '\0';
  int rc = kvp__s3_list_page(xml, "kv/", seen, &count, token, sizeof token, &truncated);
  if (memchr(token, '\0', sizeof token) == NULL)
    abort(); /* the token is always a string */
  if (rc == KVP_EPROTO && (!truncated || token[0] != '\0'))
    abort();
  free(xml);
  return 0;
}
