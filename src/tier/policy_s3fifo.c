/* The s3fifo policy (Yang et al., "FIFO queues are all you need for cache
 * eviction", SOSP'23) over G3: a block new to G3 enters a small FIFO queue
 * S (small: its share of G3's blocks, 0.1), or the main queue M when the
 * ghost queue remembers it leaving S recently; each access sets a counter
 * (at most 3). Room is made from S while S is over its share, else from M:
 * the head of S goes to M when it was accessed there, else it leaves G3
 * (and its hash enters the ghost queue, of ghost times M's blocks); the
 * head of M goes back to M's tail with one count less when it has one,
 * else it leaves G3. One-hit blocks thus leave soon, blocks read again
 * stay.
 *
 * A plan turns that into an order: the queues are run over a copy of the
 * state until every G3 block has left, and the order they left in ranks
 * them (G4 blocks are ranked lru among themselves). The rules of
 * kvp__tier_plan then demote leaves in that order, so a parent held by
 * its children leaves later than S3-FIFO alone would say. The steps before
 * the last block the plan demoted are then applied to the state (the
 * counters spent, the moves from S to M).
 *
 * Why this file is long: the queues' state, its sync from the candidates,
 * the run that ranks and the commit of its steps belong together. */
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/map64.h"
#include "kvplane/status.h"
#include "tier/policy.h"

#define Q_S 1
#define Q_M 2
#define FREQ_MAX 3
#define NO_RANK UINT64_MAX

typedef struct rec_s {
  uint64_t hash;
  uint64_t seq;            /* position in its queue: lower is nearer the head */
  uint64_t last_access_ms; /* the last access counted */
  uint64_t round;
  uint8_t queue, freq;
} rec_t;

/* One step of a ranking run: rec, what happened to it. */
#define STEP_LEAVE 0
#define STEP_TO_M 1
#define STEP_AGAIN 2

typedef struct s3_s {
  double small, ghost;
  kvp__map64_t at; /* hash -> index in recs (G3 blocks) */
  rec_t *recs;
  size_t n, cap;
  uint64_t seq, round;
  kvp__map64_t ghosts; /* hash -> its ghost_seq */
  uint64_t *ring;      /* ghost hashes, oldest first from ring_head */
  size_t ring_head, ring_n, ring_cap;
  uint64_t ghost_seq;
  /* The ranking run's scratch. */
  uint64_t *rank; /* per record */
  uint32_t *qs, *qm;
  uint8_t *freq;
  uint32_t *steps; /* rec << 2 | kind */
  size_t rank_cap, qs_cap, qm_cap, freq_cap, steps_cap, nsteps;
  uint64_t *cand_rank; /* per candidate; NO_RANK: not in G3 */
  size_t cand_rank_cap;
  const kvp__tier_cand_t *base;
} s3_t;

static const kvp__tier_policy_key_t keys[] = {
    {"small", 0, 0.1, 0.01, 0.9, "share of G3's blocks the small queue S holds"},
    {"ghost", 0, 0.9, 0, 4, "hashes the ghost queue remembers, per block of G3"},
};

static rec_t *find(s3_t *s, uint64_t hash) {
  uint64_t i;
  return kvp__map64_get(&s->at, hash, &i) == 0 ? &s->recs[i] : NULL;
}

static void forget(s3_t *s, uint64_t hash) {
  uint64_t i;
  if (kvp__map64_del(&s->at, hash, &i) != 0)
    return;
  if (i != s->n - 1) {
    s->recs[i] = s->recs[s->n - 1];
    kvp__map64_put(&s->at, s->recs[i].hash, i); /* replaces: no allocation */
  }
  s->n--;
}

/* Remembers hash as a block that left S unread; the oldest ghosts go past
 * ghost x G3's blocks. */
static void ghost_add(s3_t *s, uint64_t hash) {
  size_t limit = (size_t)(s->ghost * (double)s->n) + 16;
  if (s->ghost <= 0)
    return;
  if (s->ring_n == s->ring_cap) {
    size_t ncap = s->ring_cap ? 2 * s->ring_cap : 1024;
    uint64_t *r = malloc(ncap * sizeof *r);
    if (r == NULL)
      return;
    for (size_t i = 0; i < s->ring_n; i++)
      r[i] = s->ring[(s->ring_head + i) % s->ring_cap];
    free(s->ring);
    s->ring = r;
    s->ring_cap = ncap;
    s->ring_head = 0;
  }
  s->ring[(s->ring_head + s->ring_n++) % s->ring_cap] = hash;
  kvp__map64_put(&s->ghosts, hash, ++s->ghost_seq);
  while (s->ring_n > limit) {
    kvp__map64_del(&s->ghosts, s->ring[s->ring_head], NULL);
    s->ring_head = (s->ring_head + 1) % s->ring_cap;
    s->ring_n--;
  }
}

/* A block new to G3: into M when a ghost, else into S. */
static rec_t *admit(s3_t *s, uint64_t hash, uint64_t access_ms) {
  if (KVP_ARRAY_RESERVE(s->recs, s->cap, s->n + 1, 1024) != 0 ||
      kvp__map64_put(&s->at, hash, s->n) != 0)
    return NULL;
  int ghost = kvp__map64_del(&s->ghosts, hash, NULL) == 0; /* its ring slot ages out */
  rec_t *r = &s->recs[s->n++];
  *r = (rec_t){.hash = hash,
               .seq = ++s->seq,
               .last_access_ms = access_ms,
               .round = s->round,
               .queue = ghost ? Q_M : Q_S};
  return r;
}

static void read_again(rec_t *r, uint64_t now) {
  if (r->freq < FREQ_MAX)
    r->freq++;
  r->last_access_ms = now;
}

static int s3_open(const double *conf, void **state) {
  s3_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return KVP_ENOMEM;
  s->small = conf[0];
  s->ghost = conf[1];
  kvp__map64_init(&s->at, 0);
  kvp__map64_init(&s->ghosts, 0);
  *state = s;
  return 0;
}

static void s3_close(void *state) {
  s3_t *s = state;
  kvp__map64_free(&s->at);
  kvp__map64_free(&s->ghosts);
  free(s->recs);
  free(s->ring);
  free(s->rank);
  free(s->qs);
  free(s->qm);
  free(s->freq);
  free(s->steps);
  free(s->cand_rank);
  free(s);
}

static void s3_access(void *state, uint64_t hash, int tier, uint64_t now) {
  rec_t *r = tier == 3 ? find(state, hash) : NULL;
  if (r != NULL)
    read_again(r, now);
}

static void s3_move(void *state, uint64_t hash, int from_tier, int to_tier, uint64_t now) {
  s3_t *s = state;
  rec_t *r;
  if (from_tier == 3 && to_tier != 3 && (r = find(s, hash)) != NULL) {
    if (r->queue == Q_S)
      ghost_add(s, hash);
    forget(s, hash);
  } else if (to_tier == 3 && find(s, hash) == NULL) {
    admit(s, hash, now);
  }
}

static void s3_remove(void *state, uint64_t hash, int tier) {
  if (tier == 3)
    forget(state, hash);
}

static int by_seq(const void *a, const void *b, void *ctx) {
  const rec_t *r = ctx;
  uint64_t x = r[*(const uint32_t *)a].seq, y = r[*(const uint32_t *)b].seq;
  return x < y ? -1 : x > y;
}

/* Runs the queues over a copy of the state until every block has left:
 * rank[i] is the order record i left in; steps lists what happened. */
static int run(s3_t *s) {
  size_t n = s->n, ns = 0, nm = 0, hs = 0, hm = 0;
  uint64_t next = 0;

  /* M takes each block once from S and at most FREQ_MAX times again. */
  if (KVP_ARRAY_RESERVE(s->rank, s->rank_cap, n + 1, 1024) != 0 ||
      KVP_ARRAY_RESERVE(s->qs, s->qs_cap, n + 1, 1024) != 0 ||
      KVP_ARRAY_RESERVE(s->qm, s->qm_cap, (FREQ_MAX + 2) * n + 1, 1024) != 0 ||
      KVP_ARRAY_RESERVE(s->freq, s->freq_cap, n + 1, 1024) != 0 ||
      KVP_ARRAY_RESERVE(s->steps, s->steps_cap, (FREQ_MAX + 3) * n + 1, 1024) != 0)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    s->freq[i] = s->recs[i].freq;
    if (s->recs[i].queue == Q_S)
      s->qs[ns++] = (uint32_t)i;
    else
      s->qm[nm++] = (uint32_t)i;
  }
  qsort_r(s->qs, ns, sizeof *s->qs, by_seq, s->recs);
  qsort_r(s->qm, nm, sizeof *s->qm, by_seq, s->recs);
  size_t target = (size_t)(s->small * (double)n);
  s->nsteps = 0;
  while (hs < ns || hm < nm) {
    uint32_t i;
    int kind;
    if (hs < ns && (ns - hs > target || hm == nm)) {
      i = s->qs[hs++];
      kind = s->freq[i] > 0 ? STEP_TO_M : STEP_LEAVE;
      if (kind == STEP_TO_M) {
        s->freq[i] = 0;
        s->qm[nm++] = i;
      }
    } else {
      i = s->qm[hm++];
      kind = s->freq[i] > 0 ? STEP_AGAIN : STEP_LEAVE;
      if (kind == STEP_AGAIN) {
        s->freq[i]--;
        s->qm[nm++] = i;
      }
    }
    if (kind == STEP_LEAVE)
      s->rank[i] = next++;
    s->steps[s->nsteps++] = i << 2 | (uint32_t)kind;
  }
  return 0;
}

/* Applies the run's steps up to the one where the record ranked last left
 * (last: a rank, NO_RANK for none). */
static void commit(s3_t *s, uint64_t last) {
  if (last == NO_RANK)
    return;
  for (size_t k = 0; k < s->nsteps; k++) {
    uint32_t i = s->steps[k] >> 2, kind = s->steps[k] & 3;
    rec_t *r = &s->recs[i];
    if (kind == STEP_LEAVE) {
      if (s->rank[i] == last)
        break;
      continue;
    }
    if (kind == STEP_TO_M) {
      r->queue = Q_M;
      r->freq = 0;
    } else {
      r->freq = r->freq > 0 ? r->freq - 1 : 0;
    }
    r->seq = ++s->seq; /* to M's tail */
  }
}

static int s3_colder(const void *ctx, const kvp__tier_cand_t *a, const kvp__tier_cand_t *b,
                     uint64_t now) {
  const s3_t *s = ctx;
  uint64_t ra = s->cand_rank[a - s->base], rb = s->cand_rank[b - s->base];
  if (ra != NO_RANK && rb != NO_RANK)
    return ra < rb;
  return kvp__tier_order_lru.colder(NULL, a, b, now);
}

static int s3_plan(void *state, const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                   const kvp__tier_cand_t *c, size_t n, uint64_t now, kvp__tier_move_t **moves,
                   size_t *nmoves) {
  s3_t *s = state;
  int rc;

  *moves = NULL;
  *nmoves = 0;
  if (KVP_ARRAY_RESERVE(s->cand_rank, s->cand_rank_cap, n ? n : 1, 1024) != 0)
    return KVP_ENOMEM;
  /* Sync with the candidates: blocks new to G3 are admitted (in the
   * candidates' order of last access), accesses the hook did not see
   * count, blocks gone from G3 are forgotten. */
  s->round++;
  for (size_t i = 0; i < n; i++) {
    if (vols[c[i].vol].tier != 3)
      continue;
    rec_t *r = find(s, c[i].hash);
    if (r == NULL) {
      if (admit(s, c[i].hash, c[i].last_access_ms) == NULL)
        return KVP_ENOMEM;
    } else {
      if (c[i].last_access_ms > r->last_access_ms)
        read_again(r, c[i].last_access_ms);
      r->round = s->round;
    }
  }
  for (size_t i = 0; i < s->n;)
    if (s->recs[i].round != s->round)
      forget(s, s->recs[i].hash);
    else
      i++;
  if ((rc = run(s)) != 0)
    return rc;
  for (size_t i = 0; i < n; i++) {
    uint64_t k;
    s->cand_rank[i] = vols[c[i].vol].tier == 3 && kvp__map64_get(&s->at, c[i].hash, &k) == 0
                          ? s->rank[k]
                          : NO_RANK;
  }
  s->base = c;
  kvp__tier_order_t ord = {s3_colder, s};
  if ((rc = kvp__tier_plan(&ord, prm, vols, nvols, c, n, now, moves, nmoves)) != 0)
    return rc;
  uint64_t last = NO_RANK;
  for (size_t k = 0; k < *nmoves; k++) {
    uint64_t r = s->cand_rank[(*moves)[k].cand];
    if (vols[(*moves)[k].from].tier == 3 && r != NO_RANK && (last == NO_RANK || r > last))
      last = r;
  }
  commit(s, last);
  return 0;
}

const kvp__tier_policy_t kvp__tier_policy_s3fifo = {
    .name = "s3fifo",
    .help = "S3-FIFO: a small FIFO for new blocks, a main one for blocks read again, a ghost "
            "queue (small, ghost)",
    .keys = keys,
    .nkeys = sizeof keys / sizeof keys[0],
    .open = s3_open,
    .close = s3_close,
    .on_access = s3_access,
    .on_move = s3_move,
    .on_remove = s3_remove,
    .plan = s3_plan,
};
