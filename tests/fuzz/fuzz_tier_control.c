/* libFuzzer target: the operator's tiering control request
 * (kvplane.api.<ns>.tier, src/advisor/control.c), outside bytes from any
 * NATS client. Errors are expected; crashes, overruns, and a parse that
 * succeeds with no blocks or an error without a message are not. */
#include <stdint.h>
#include <stdlib.h>

#include "advisor/control.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp__adv_ctl_t c;
  char err[512] = "";
  int rc = kvp__adv_ctl_parse(data, size, &c, err, sizeof err);
  if (rc == 0 && (c.hashes == NULL || c.n == 0 || c.op > KVP__CTL_DELETE))
    abort();
  if (rc != 0 && (c.hashes != NULL || (err[0] == 0 && rc != KVP_ENOMEM)))
    abort();
  free(c.hashes);
  return 0;
}
