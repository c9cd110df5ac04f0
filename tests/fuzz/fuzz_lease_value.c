/* libFuzzer target: a tiering lease's value (src/advisor/lease.c), bytes
 * from the JetStream key-value bucket kvplane-leases-<ns>, which any NATS
 * client allowed to write there may have put. Errors are expected;
 * crashes, overruns, an unterminated or empty description, and a success
 * that does not name an advisor are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/lease.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[160];
  memset(out, 'x', sizeof out);
  int rc = kvp__adv_lease_holder(data, size, out, sizeof out);
  if (memchr(out, '\0', sizeof out) == NULL || out[0] == '\0')
    abort();
  if (rc != 0 && rc != KVP_EINVAL)
    abort();
  if (rc == 0 && strncmp(out, "advisor ", 8) != 0)
    abort();
  /* A short buffer is cut, never overrun. */
  char small[8];
  kvp__adv_lease_holder(data, size, small, sizeof small);
  if (memchr(small, '\0', sizeof small) == NULL)
    abort();
  return 0;
}
