/* libFuzzer target: the `partition` argument of the advisor's
 * GET /readyz?partition=P (src/advisor/metrics.c), outside bytes from any
 * HTTP client (libmicrohttpd hands it over URL-decoded, NUL-terminated).
 * Errors are expected; crashes, overruns, an answer other than 1, 0,
 * KVP_ENOENT or KVP_EINVAL, a non-ready answer without a reason, and a 200
 * for anything but the decimal number of a ready owned partition are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/metrics.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kvp__adv_metrics_snap_t s;
  char arg[64], why[128];
  if (size >= sizeof arg)
    return 0;
  memcpy(arg, data, size);
  arg[size] = '\0';
  s.part_count = 16;
  s.nparts = 3;
  s.parts[0] = (kvp__adv_part_fig_t){.p = 0, .ready = 1};
  s.parts[1] = (kvp__adv_part_fig_t){.p = 5, .ready = 0, .behind = 9};
  s.parts[2] = (kvp__adv_part_fig_t){.p = 15, .ready = 1};
  for (int have = 0; have < 2; have++) {
    why[0] = '\0';
    int rc = kvp__adv_metrics_partition_ready(&s, have, arg, why, sizeof why);
    if (rc != 1 && rc != 0 && rc != KVP_ENOENT && rc != KVP_EINVAL)
      abort();
    if (rc != 1 && why[0] == '\0')
      abort();
    if (rc == 1) {
      if (arg[0] == '\0' || strspn(arg, "0123456789") != strlen(arg))
        abort();
      unsigned long v = strtoul(arg, NULL, 10);
      if (!have || (v != 0 && v != 15))
        abort();
    }
  }
  return 0;
}
