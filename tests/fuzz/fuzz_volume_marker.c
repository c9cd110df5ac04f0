/* libFuzzer target: a volume identity marker's text (outside bytes: the
 * posix plugin's <path>/.kvplane-volume, the s3 plugin's
 * <prefix>.kvplane-volume object) through kvp_plugin_parse_marker
 * (plugins/plugin_util.h), which both plugins read it with. Refusals are
 * expected; crashes, overruns, an id that is not 32 hex digits and a
 * namespace that is not one are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), id[33], ns[65];
  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  memset(id, 'x', sizeof id);
  memset(ns, 'x', sizeof ns);
  if (kvp_plugin_parse_marker(text, id, ns) == 0) {
    if (strlen(id) != 32 || strspn(id, "0123456789abcdef") != 32)
      abort();
    if (memchr(ns, '\0', sizeof ns) == NULL || (ns[0] != '\0' && !kvp_plugin_ns_ok(ns)))
      abort();
  }
  free(text);
  return 0;
}
