/* libFuzzer target: the live rebalance request
 * (kvplane.api.<ns>.partitions.<advisor>, src/advisor/rebalance.c),
 * outside bytes from any NATS client. Errors are expected; crashes,
 * overruns, a parse that succeeds with a partition out of range or named
 * twice, and an error without a message are not. */
#include <stdint.h>
#include <stdlib.h>

#include "advisor/rebalance.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t add[64], drop[64], seen[16] = {0};
  int nadd = -1, ndrop = -1;
  char err[256] = "";
  int rc = kvp__adv_parts_parse(data, size, 16, add, &nadd, drop, &ndrop, err, sizeof err);
  if (rc != 0 && (err[0] == 0 || nadd != 0 || ndrop != 0))
    abort();
  if (rc == 0 && (nadd < 0 || nadd > 64 || ndrop < 0 || ndrop > 64))
    abort();
  for (int i = 0; rc == 0 && i < nadd + ndrop; i++) {
    uint32_t p = i < nadd ? add[i] : drop[i - nadd];
    if (p >= 16 || seen[p]++)
      abort();
  }
  return 0;
}
