/* libFuzzer target: the live rebalance request
 * (kvplane.api.<ns>.partitions.<advisor>, src/advisor/rebalance.c),
 * outside bytes from any NATS client. Errors are expected; crashes,
 * overruns, a parse that succeeds with a partition out of range, named
 * twice in one list, in both add and drop, in both tier and untier or in
 * both drop and tier, and an error without a message or with counts left
 * set are not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/rebalance.h"
#include "kvplane/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Marks l's partitions with bit in seen; aborts on one out of range or
 * already marked with a bit of clash. */
static void mark(const uint32_t *l, int n, uint8_t *seen, uint8_t bit, uint8_t clash) {
  if (n < 0 || n > KVP__ADV_PARTS_REQ_MAX)
    abort();
  for (int i = 0; i < n; i++) {
    if (l[i] >= 16 || seen[l[i]] & (bit | clash))
      abort();
    seen[l[i]] |= bit;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp__adv_parts_req_t r;
  uint8_t seen[16] = {0};
  char err[256] = "";
  memset(&r, 0xff, sizeof r);
  int rc = kvp__adv_parts_parse(data, size, 16, &r, err, sizeof err);
  if (rc != 0) {
    if (err[0] == 0 || r.nadd || r.ndrop || r.ntier || r.nuntier)
      abort();
    return 0;
  }
  enum { ADD = 1, DROP = 2, TIER = 4, UNTIER = 8 };
  mark(r.add, r.nadd, seen, ADD, DROP);
  mark(r.drop, r.ndrop, seen, DROP, ADD);
  mark(r.tier, r.ntier, seen, TIER, UNTIER | DROP);
  mark(r.untier, r.nuntier, seen, UNTIER, TIER);
  return 0;
}
