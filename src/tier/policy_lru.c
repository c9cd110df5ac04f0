/* The default coldness order: least recently accessed first; within one
 * second of each other, the lower decayed hit frequency first; then the
 * hash, so that plans are deterministic. */
#include "tier/policy.h"

static int lru_colder(const kvp__tier_cand_t *a, const kvp__tier_cand_t *b, uint64_t now_ms) {
  (void)now_ms;
  uint64_t d = a->last_access_ms > b->last_access_ms ? a->last_access_ms - b->last_access_ms
                                                     : b->last_access_ms - a->last_access_ms;
  if (d >= 1000)
    return a->last_access_ms < b->last_access_ms;
  if (a->freq != b->freq)
    return a->freq < b->freq;
  if (a->last_access_ms != b->last_access_ms)
    return a->last_access_ms < b->last_access_ms;
  return a->hash < b->hash;
}

const kvp__tier_policy_t kvp__tier_policy_lru = {"lru", lru_colder};
