/* The hyperbolic policy: the block with the fewest reads per unit of age
 * leaves first. Its priority is freq^weight / (age + tau), after
 * hyperbolic caching (Blankstein et al., USENIX ATC 2017, whose priority
 * is hits over time in the cache): freq is the index's decayed hit count
 * (every request that used the block, in any tier, counts), age the time
 * since its last access, tau ([tiering] policy_params = "tau=1s") keeps a
 * block read this very millisecond from an infinite priority, and weight
 * (default 1) how much the count weighs against the age (0: lru).
 *
 * Why it fits a G3: a G3 holds what fell out of G1 and G2, and whether a
 * block will be read again is told best by how often it was used (a
 * conversation at its fifth turn is likelier to have a sixth than one at
 * its first) and how long ago (a conversation quiet for long has likely
 * ended); lru hears only the second, lfu only the first. On the bundled
 * trace (kvp-bench policy) it is the closest to Belady's MIN of the
 * policies at 5%, 10% and 25% of the distinct blocks.
 *
 * Prefixes stay whole for free and by kvp__tier_plan: a child's count is
 * at most its parent's (every request that reads the child reads the
 * parent) and its last access at most as recent, so a child's priority is
 * never above its parent's; the plan still moves leaves only.
 *
 * Stateless: the candidates' last access and count are all it reads; ties
 * go least recently accessed first, then by hash, so plans are
 * deterministic. */
#include <math.h>
#include <stdlib.h>

#include "kvplane/status.h"
#include "tier/policy.h"

static const kvp__tier_policy_key_t keys[] = {
    {"weight", 0, 1.0, 0, 4, "exponent of the hit count in the priority (0: lru)"},
    {"tau", 1, 1000, 1, 86400000, "added to every block's age"},
};

typedef struct hyp_s {
  double weight, tau_ms;
} hyp_t;

/* The priority's inverse, so that higher leaves first: (age + tau) /
 * freq^weight. A count of 0 (a block the index has not counted) is taken
 * as the smallest count there is. */
static double coldness(const hyp_t *s, const kvp__tier_cand_t *c, uint64_t now) {
  double age = now > c->last_access_ms ? (double)(now - c->last_access_ms) : 0;
  double f = c->freq > 1e-6 ? c->freq : 1e-6;
  return (age + s->tau_ms) / (s->weight == 1.0 ? f : pow(f, s->weight));
}

static int hyp_colder(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                      uint64_t now) {
  double ca = coldness(ctx, a, now), cb = coldness(ctx, b, now);
  if (ca != cb)
    return ca > cb;
  if (a->last_access_ms != b->last_access_ms)
    return a->last_access_ms < b->last_access_ms;
  return a->hash < b->hash;
}

static int hyp_open(const double *conf, void **state) {
  hyp_t *s = malloc(sizeof *s);
  if (s == NULL)
    return KVP_ENOMEM;
  *s = (hyp_t){.weight = conf[0], .tau_ms = conf[1]};
  *state = s;
  return 0;
}

static void hyp_close(void *state) {
  free(state);
}

static int hyp_plan(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                    const kvp__tier_cand_t *c, size_t n, uint64_t now, kvp__tier_move_t **moves,
                    size_t *nmoves) {
  kvp__tier_order_t ord = {hyp_colder, state};
  return kvp__tier_plan(&ord, prm, vols, nvols, c, n, now, moves, nmoves);
}

const kvp__tier_policy_t kvp__tier_policy_hyperbolic = {
    .name = "hyperbolic",
    .help = "fewest reads per unit of age first: count^weight / (age + tau) (weight, tau)",
    .keys = keys,
    .nkeys = sizeof keys / sizeof keys[0],
    .open = hyp_open,
    .close = hyp_close,
    .plan = hyp_plan,
};
