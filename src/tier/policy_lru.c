/* The default policy, lru: least recently accessed first; within one
 * second of each other, the lower decayed hit frequency first; then the
 * hash, so that plans are deterministic. Stateless: the index's last access
 * and frequency are all it reads. */
#include "tier/policy.h"

static int lru_colder(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                      uint64_t now_ms) {
  (void)ctx;
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

const kvp__tier_order_t kvp__tier_order_lru = {lru_colder, NULL};

static int lru_plan(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                    const kvp__tier_cand_t *cands, size_t ncands, uint64_t now_ms,
                    kvp__tier_move_t **moves, size_t *nmoves) {
  (void)state;
  return kvp__tier_plan(&kvp__tier_order_lru, prm, vols, nvols, cands, ncands, now_ms, moves,
                        nmoves);
}

const kvp__tier_policy_t kvp__tier_policy_lru = {
    .name = "lru",
    .help = "least recently used first, prefix-aware, with the promotion band (the default)",
    .plan = lru_plan,
};
