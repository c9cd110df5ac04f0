/* The lfu policy: least frequently used first, by a hit count that decays
 * with a half-life of its own ([tiering] policy_params = "half_life=10m"),
 * so that a prefix that was hot an hour ago does not hold G3 against one
 * hot now; equal counts go least recently used first, then by hash.
 *
 * State: per block in a G3 or G4 volume, its count and when it was last
 * decayed. An access (on_access, or a later last access in the plan's
 * candidates when the hook was not called) adds one; a block new to the
 * candidates starts at one. A block no longer among the candidates is
 * forgotten; a block that goes to G4 keeps its count, so that one read
 * back often returns to G3 with its history. */
#include <math.h>
#include <stdlib.h>

#include "common/array.h"
#include "common/map64.h"
#include "kvplane/status.h"
#include "tier/policy.h"

typedef struct rec_s {
  uint64_t hash;
  double count;
  uint64_t t_ms;           /* count is as of this time */
  uint64_t last_access_ms; /* the last access counted */
  uint64_t round;          /* the last plan that saw it among the candidates */
} rec_t;

typedef struct lfu_s {
  double half_life_ms;
  kvp__map64_t at; /* hash -> index in recs */
  rec_t *recs;
  size_t n, cap;
  uint64_t round;
  double *score; /* per candidate of the current plan */
  size_t score_cap;
  const kvp__tier_cand_t *base;
} lfu_t;

static const kvp__tier_policy_key_t keys[] = {
    {"half_life", 1, 600000, 1000, 30.0 * 86400000, "half-life of the hit count"},
};

static double decayed(const lfu_t *s, const rec_t *r, uint64_t now) {
  if (now <= r->t_ms)
    return r->count;
  return r->count * exp2(-(double)(now - r->t_ms) / s->half_life_ms);
}

static rec_t *find(lfu_t *s, uint64_t hash) {
  uint64_t i;
  return kvp__map64_get(&s->at, hash, &i) == 0 ? &s->recs[i] : NULL;
}

static rec_t *add(lfu_t *s, uint64_t hash, uint64_t now) {
  if (KVP_ARRAY_RESERVE(s->recs, s->cap, s->n + 1, 1024) != 0 ||
      kvp__map64_put(&s->at, hash, s->n) != 0)
    return NULL;
  rec_t *r = &s->recs[s->n++];
  *r = (rec_t){.hash = hash, .count = 1, .t_ms = now, .last_access_ms = now, .round = s->round};
  return r;
}

static void forget(lfu_t *s, uint64_t hash) {
  uint64_t i;
  if (kvp__map64_del(&s->at, hash, &i) != 0)
    return;
  if (i != s->n - 1) {
    s->recs[i] = s->recs[s->n - 1];
    kvp__map64_put(&s->at, s->recs[i].hash, i); /* replaces: no allocation */
  }
  s->n--;
}

static void hit(lfu_t *s, rec_t *r, uint64_t now) {
  r->count = decayed(s, r, now) + 1;
  r->t_ms = now > r->t_ms ? now : r->t_ms;
  r->last_access_ms = now;
}

static int lfu_open(const double *conf, void **state) {
  lfu_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return KVP_ENOMEM;
  s->half_life_ms = conf[0];
  kvp__map64_init(&s->at, 0);
  *state = s;
  return 0;
}

static void lfu_close(void *state) {
  lfu_t *s = state;
  kvp__map64_free(&s->at);
  free(s->recs);
  free(s->score);
  free(s);
}

static void lfu_access(void *state, uint64_t hash, int tier, uint64_t now) {
  lfu_t *s = state;
  (void)tier;
  rec_t *r = find(s, hash);
  if (r == NULL)
    add(s, hash, now);
  else
    hit(s, r, now);
}

static void lfu_move(void *state, uint64_t hash, int from_tier, int to_tier, uint64_t now) {
  lfu_t *s = state;
  (void)from_tier;
  if (to_tier == 0)
    forget(s, hash);
  else if (find(s, hash) == NULL)
    add(s, hash, now);
}

static void lfu_remove(void *state, uint64_t hash, int tier) {
  (void)tier;
  forget(state, hash);
}

static int lfu_colder(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                      uint64_t now) {
  const lfu_t *s = ctx;
  (void)now;
  return kvp__tier_colder_by_score(s->score, s->base, a, b);
}

static int lfu_plan(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                    const kvp__tier_cand_t *c, size_t n, uint64_t now, kvp__tier_move_t **moves,
                    size_t *nmoves) {
  lfu_t *s = state;

  *moves = NULL;
  *nmoves = 0;
  if (KVP_ARRAY_RESERVE(s->score, s->score_cap, n ? n : 1, 1024) != 0)
    return KVP_ENOMEM;
  s->round++;
  for (size_t i = 0; i < n; i++) {
    rec_t *r = find(s, c[i].hash);
    if (r == NULL && (r = add(s, c[i].hash, c[i].last_access_ms)) == NULL)
      return KVP_ENOMEM;
    else if (c[i].last_access_ms > r->last_access_ms)
      hit(s, r, c[i].last_access_ms); /* an access the hook did not report */
    r->round = s->round;
    s->score[i] = decayed(s, r, now);
  }
  for (size_t i = 0; i < s->n;)
    if (s->recs[i].round != s->round)
      forget(s, s->recs[i].hash); /* moves the last record here: look again */
    else
      i++;
  s->base = c;
  kvp__tier_order_t ord = {lfu_colder, s};
  return kvp__tier_plan(&ord, prm, vols, nvols, c, n, now, moves, nmoves);
}

const kvp__tier_policy_t kvp__tier_policy_lfu = {
    .name = "lfu",
    .help = "least frequently used first, by a hit count with a half-life (half_life)",
    .keys = keys,
    .nkeys = sizeof keys / sizeof keys[0],
    .open = lfu_open,
    .close = lfu_close,
    .on_access = lfu_access,
    .on_move = lfu_move,
    .on_remove = lfu_remove,
    .plan = lfu_plan,
};
