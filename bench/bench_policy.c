/* kvp-bench policy: the tiering policies against the optimum.
 *
 * Why this file is long: the trace, the worker's recording, the engine's
 * rounds over it and the suite's figures are one measurement; MIN is apart
 * (bench_policy_min.c).
 *
 * First the bundled Mooncake trace (kvp_bench_trace_path) goes through a
 * worker: the real block manager (G1 g1= blocks, G2 g2= blocks, 512-token
 * blocks of blockb= bytes, each request allocated then freed) offloading
 * its G2 victims to a G3 volume and reading misses from G3, then G4, both
 * volumes of the mem plugin (plugins/mem: the process's memory, so that no
 * disk or kernel is in the figures). Its G3 keeps every block: the
 * manager's events record the worker's lower-tier stream, in order, with
 * the request each event came in (blocks offloaded to G3, blocks read from
 * G3 or G4). That stream does not depend on the policy: a block read from
 * G3 or from G4 lands in G1 alike, and with an unbounded G4 nothing is
 * lost. (The offloads run on the manager's thread; the replay waits for
 * them every 16 requests, so an offload may be recorded a few requests
 * late.)
 *
 * Then, per policy and G3 capacity (5%, 10%, 25% of the trace's distinct
 * blocks), the stream is replayed through the tiering engine's planning:
 * the candidates the engine builds from its index (every G3 block, and the
 * G4 blocks hot enough to be promoted: with an unbounded G4 no other can
 * move), with their last access and a hit count decaying with the index's
 * default half-life (1 h) in the trace's time, planned by the policy
 * (kvp__tier_pol_plan, the call engine.c makes) after every request that
 * left G3 past its capacity (high watermark 1.0, the low one half a block
 * below: a round demotes to one block under the capacity, as MIN, which
 * evicts exactly; a low watermark of 0.97 left 3% of G3 unused after each
 * round and cost lru 0.006 of hit ratio at 10%) and every 64 requests (for
 * the promotions; no minimum residence); the moves are applied at once to
 * the replay's G3 and G4. They are counted, not copied: every block has
 * blockb bytes, so a move is blockb bytes whoever carries it, and the
 * figure is the policy's, not a volume's. The policy's
 * hooks see every lower-tier read (on_access) and every placement
 * (on_move). A block offloaded again while in G4 keeps its fresh G3 copy
 * (one copy between G3 and G4).
 *
 * Figures, per policy and capacity: the G3 hit ratio (blocks read from G3
 * over blocks read from G3 or G4) and the bytes moved per G3 hit (the
 * worker's G3 writes, demotions and promotions, over G3 hits), each beside
 * Belady's MIN over the same stream and capacity (bench_policy_min.c) as
 * the baseline. MIN evicts exactly and does not keep prefixes whole: the
 * limit is the stricter one. On the bundled trace it hits every read at
 * all three capacities: the blocks that will be read again are never more
 * than a few percent of the distinct blocks at once (printed), and MIN
 * knows which they are; the policies must guess it among the blocks every
 * G2 eviction writes.
 *
 * Then G3 admission after N hits (the block manager's g3_min_hits = N - 1:
 * admission1 admits every G2 victim, the manager's default; admission2 is
 * vLLM's store_threshold=2), each recorded through the block manager with
 * that setting and replayed with the default policy at 10%: G3 bytes
 * written and the G3 hit ratio, beside admission1. The hit ratio's
 * denominator is admission1's lower-tier reads for every N: the blocks the
 * worker wanted from below G2 and could have had (G1 and G2 behave the
 * same whatever is admitted: a block read from G3 or recomputed lands in
 * G1 alike; checked, the misses below G2 are printed per N). A block not
 * admitted is in neither G3 nor G4 and is recomputed: it is no read at
 * all, so G3 hits over G3 and G4 reads would be 1.000 for a G3 that holds
 * all of the few blocks admitted, while the worker recomputes the rest.
 *
 *   kvp-bench policy [requests=N] [g1=BLOCKS] [g2=BLOCKS] [blockb=BYTES]
 *                    [pct=P] [policy=NAME [params="k=v ..."]] [admission=0|1]
 *                    [dump=PATH]
 *
 * requests= replays the first N requests only (default: all 12,031);
 * pct= runs the capacity P% only (one of 5, 10, 25), policy= that policy
 * only, with its policy_params params=, and admission=0 skips admission
 * (while trying a policy out); dump= writes the trace and the stream for
 * bench/policy_reuse.py (which blocks are read again, and the best an
 * order that knows a block's count, parenthood and age can do). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_policy.h"
#include "common/map64.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "sim/trace.h"
#include "tier/policy.h"

#define NS "bench"
#define BASE_MS 1700000000000ull /* the trace's time 0 */
#define HALF_LIFE_MS 3600000.0   /* the index's default hit half-life */
#define ROUND_EVERY 64           /* requests between rounds, at least */
#define DRAIN_EVERY 16           /* requests between waits for the offloads */

typedef struct trace_s {
  uint64_t *hash; /* every request's chained sequence hashes, back to back */
  size_t *off;    /* per request: its first hash, and off[nreq] the end */
  uint64_t *ts;   /* per request, ms */
  size_t nreq, distinct;
} trace_t;

typedef struct blk_s {
  uint64_t hash, parent, last_ms, freq_ms;
  double freq;
  uint32_t pos3;                        /* its place in the G3 list */
  uint8_t has_parent, in3, in4, listed; /* listed: in the hot list */
} blk_t;

typedef struct rec_s {
  pthread_mutex_t mu;
  stream_ev_t *ev;
  size_t n, cap;
  uint64_t *parent; /* per event: the Stored G3's parent (hash itself: none) */
  size_t pcap;
} rec_t;

typedef struct result_s {
  uint64_t hits3, hits4, written, demoted, promoted, skipped, rounds;
  double secs;
} result_t;

/* --- the trace ------------------------------------------------------------ */

static int load_trace(trace_t *t, size_t max_req) {
  kvp_trace_t *tr = NULL;
  kvp_trace_req_t q;
  char err[512];
  size_t nh = 0, hcap = 0, rcap = 0;
  kvp__map64_t seen;
  int rc;

  memset(t, 0, sizeof *t);
  if (kvp_trace_open(kvp_bench_trace_path(), &tr, err, sizeof err) != 0) {
    fprintf(stderr, "bench policy: %s\n", err);
    return -1;
  }
  kvp__map64_init(&seen, 1 << 18);
  uint64_t seed = kvp_hash_seed(NULL);
  while (t->nreq < max_req && (rc = kvp_trace_next(tr, &q, err, sizeof err)) == 1) {
    if (t->nreq + 2 > rcap) {
      rcap = rcap ? 2 * rcap : 16384;
      t->off = realloc(t->off, rcap * sizeof *t->off);
      t->ts = realloc(t->ts, rcap * sizeof *t->ts);
    }
    if (nh + q.nhash_ids > hcap) {
      hcap = (nh + q.nhash_ids) * 2;
      t->hash = realloc(t->hash, hcap * sizeof *t->hash);
    }
    if (t->off == NULL || t->ts == NULL || t->hash == NULL)
      return -1;
    t->off[t->nreq] = nh;
    t->ts[t->nreq++] = q.timestamp_ms;
    for (size_t i = 0; i < q.nhash_ids; i++) {
      /* The trace's ids name prefix-aware blocks; chained hashes of them
       * coincide exactly where the trace says two prefixes do. */
      uint64_t local = kvp_hash_chain(q.hash_ids[i], 0x6b7670, seed);
      uint64_t h = i == 0 ? local : kvp_hash_chain(t->hash[nh - 1], local, seed);
      t->hash[nh++] = h;
      if (kvp__map64_find(&seen, h) == NULL && kvp__map64_put(&seen, h, 1) != 0)
        return -1;
    }
  }
  t->off[t->nreq] = nh;
  t->distinct = kvp__map64_count(&seen);
  kvp__map64_free(&seen);
  kvp_trace_close(tr);
  return rc < 0 ? -1 : 0;
}

/* --- recording: the real block manager ------------------------------------ */

static int rec_emit(void *ctx, const kvp_event_t *e) {
  rec_t *r = ctx;
  int stored = e->type == KVP_EV_STORED && e->tier == KVP_TIER_G3;
  int read = e->type == KVP_EV_ACCESSED && (e->tier == KVP_TIER_G3 || e->tier == KVP_TIER_G4);
  if (!stored && !read)
    return 0;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < e->nhashes; i++) {
    if (r->n == r->cap) {
      r->cap = r->cap ? 2 * r->cap : 65536;
      r->ev = realloc(r->ev, r->cap * sizeof *r->ev);
      r->parent = realloc(r->parent, r->cap * sizeof *r->parent);
      if (r->ev == NULL || r->parent == NULL)
        abort(); /* a benchmark out of memory */
    }
    r->ev[r->n] = (stream_ev_t){e->hashes[i], stored ? STREAM_INSERT : STREAM_REF};
    r->parent[r->n++] = i > 0 ? e->hashes[i - 1] : e->has_parent ? e->parent_hash : e->hashes[i];
  }
  pthread_mutex_unlock(&r->mu);
  return 0;
}

/* A volume of the mem plugin: a store of this process, named after the
 * recording. */
static kvp_volume_t *open_vol(int run, const char *name) {
  kvp_volume_t *v = NULL;
  char err[512], store[64];
  snprintf(store, sizeof store, "bench-policy-%d-%s", run, name);
  kvp_volume_param_t p[1] = {{"store", store}};
  if (kvp_volume_open(KVP_BINARY_DIR "/plugins", "mem", name, p, 1, &v, err, sizeof err) != 0)
    fprintf(stderr, "bench policy: %s\n", err);
  return v;
}

static int del_one(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  char err[256];
  (void)bytes;
  kvp_volume_delete(ctx, ns, hash, err, sizeof err);
  return 0;
}

/* Empties a mem volume: its store outlives the handle. */
static void empty_vol(kvp_volume_t *v) {
  char err[256];
  if (v != NULL)
    kvp_volume_iterate(v, del_one, v, err, sizeof err);
}

typedef struct cfg_s {
  uint32_t g1, g2, blockb;
} cfg_t;

/* Replays t through the real block manager with G3 admission after admit
 * hits, G3 and G4 volumes of the mem plugin (no files: nothing is left
 * behind by a run killed midway) and a G3 that keeps every block it is
 * given: the worker's lower-tier stream, in order, into out, with per
 * request its first event (at[q]); *below: the blocks looked up and found
 * in neither G1 nor G2. */
static int record(const trace_t *t, const cfg_t *cfg, uint32_t admit, rec_t *out, size_t *at,
                  double *secs, uint64_t *below) {
  rec_t ev = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kvp_volume_t *g3 = NULL, *g4 = NULL;
  kvp_blockmgr_t *bm = NULL;
  kvp_blockmgr_stats_t st;
  int rc = -1;

  if ((g3 = open_vol((int)admit, "g3")) == NULL || (g4 = open_vol((int)admit, "g4")) == NULL)
    goto out;
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_opts_init(&o);
  o.layout = (kvp_layout_t){
      .num_layers = 1, .page_size = 512, .inner_dim = cfg->blockb / 512, .elem_size = 1};
  o.g1_blocks = cfg->g1;
  o.g2_blocks = cfg->g2;
  o.g3 = g3;
  o.g4 = g4;
  o.volume_ns = NS;
  o.g3_wait = 1; /* every victim reaches G3 */
  o.g3_min_hits = admit > 0 ? admit - 1 : 0;
  o.sink = (kvp_event_sink_t){rec_emit, &ev};
  if (kvp_blockmgr_create(&o, &bm) != 0)
    goto out;
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t q = 0; q < t->nreq; q++) {
    kvp_seq_t *s = NULL;
    at[q] = ev.n;
    if (kvp_seq_create_hashed(bm, t->hash + t->off[q], t->off[q + 1] - t->off[q], NULL, 0, &s) != 0)
      goto out;
    if (kvp_seq_allocate(s) != 0)
      fprintf(stderr, "bench policy: request %zu does not fit in G1: skipped\n", q);
    kvp_seq_free(s);
    /* The offloads run on the manager's thread meanwhile; a drain per
     * request would cost a thread handoff each (seconds on a loaded
     * machine) for events that land a few requests later at most. */
    if (q % DRAIN_EVERY == DRAIN_EVERY - 1)
      kvp_blockmgr_drain(bm);
  }
  kvp_blockmgr_drain(bm);
  at[t->nreq] = ev.n;
  *secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  kvp_blockmgr_stats(bm, &st);
  *below = st.lookups - st.hits_g1 - st.hits_g2;
  if (st.offloads_g3_failed || st.offloads_g3_dropped || st.lower_corrupt) {
    fprintf(stderr, "bench policy: offloads failed %llu, dropped %llu, reads corrupt %llu\n",
            (unsigned long long)st.offloads_g3_failed, (unsigned long long)st.offloads_g3_dropped,
            (unsigned long long)st.lower_corrupt);
    goto out;
  }
  *out = ev;
  ev.ev = NULL;
  ev.parent = NULL;
  rc = 0;
out:
  kvp_blockmgr_destroy(bm);
  empty_vol(g3);
  empty_vol(g4);
  kvp_volume_close(g3);
  kvp_volume_close(g4);
  free(ev.ev);
  free(ev.parent);
  return rc;
}

/* --- replay: the engine's planning over G3 and G4 ------------------------------ */

typedef struct replay_s {
  kvp__tier_pol_t *pol;
  kvp__tier_params_t prm;
  kvp__map64_t at; /* hash -> index in blk */
  blk_t *blk;
  size_t nblk, blk_cap, n3, n4, capacity; /* capacity: G3's, in blocks */
  kvp__tier_cand_t *cands;
  size_t cands_cap;
  /* The blocks in G3, and those whose count reached promote_freq (a G4
   * block can move only when it is there): a round's candidates, without
   * a pass over every block. */
  uint32_t *g3, *hot;
  size_t ng3, nhot, g3_cap, hot_cap;
  result_t *res;
} replay_t;

static void g3_add(replay_t *r, blk_t *b) {
  if (r->ng3 == r->g3_cap) {
    r->g3_cap = r->g3_cap ? 2 * r->g3_cap : 65536;
    if ((r->g3 = realloc(r->g3, r->g3_cap * sizeof *r->g3)) == NULL)
      abort();
  }
  b->in3 = 1;
  b->pos3 = (uint32_t)r->ng3;
  r->g3[r->ng3++] = (uint32_t)(b - r->blk);
  r->n3++;
}

static void g3_del(replay_t *r, blk_t *b) {
  uint32_t last = r->g3[--r->ng3];
  r->g3[b->pos3] = last;
  r->blk[last].pos3 = b->pos3;
  b->in3 = 0;
  r->n3--;
}

static blk_t *blk_get(replay_t *r, uint64_t hash, uint64_t parent, int has_parent) {
  uint64_t i;
  if (kvp__map64_get(&r->at, hash, &i) == 0)
    return &r->blk[i];
  if (r->nblk == r->blk_cap) {
    r->blk_cap = r->blk_cap ? 2 * r->blk_cap : 65536;
    if ((r->blk = realloc(r->blk, r->blk_cap * sizeof *r->blk)) == NULL)
      abort();
  }
  if (kvp__map64_put(&r->at, hash, r->nblk) != 0)
    abort();
  r->blk[r->nblk] = (blk_t){.hash = hash, .parent = parent, .has_parent = (uint8_t)has_parent};
  return &r->blk[r->nblk++];
}

static double decayed(const blk_t *b, uint64_t now) {
  return now > b->freq_ms ? b->freq * exp2(-(double)(now - b->freq_ms) / HALF_LIFE_MS) : b->freq;
}

/* A round of the engine: candidates, the policy's plan, the moves. */
static int round_once(replay_t *r, uint64_t now) {
  size_t n = 0;
  kvp__tier_move_t *m = NULL;
  size_t nm = 0;
  if (r->nblk > r->cands_cap) {
    r->cands_cap = r->blk_cap;
    if ((r->cands = realloc(r->cands, r->cands_cap * sizeof *r->cands)) == NULL)
      return -1;
  }
  for (size_t k = 0; k < r->ng3 + r->nhot; k++) {
    blk_t *b = &r->blk[k < r->ng3 ? r->g3[k] : r->hot[k - r->ng3]];
    double f = decayed(b, now);
    if (k >= r->ng3) {
      if (f < r->prm.promote_freq) { /* cooled down: off the list */
        b->listed = 0;
        r->hot[k - r->ng3] = r->hot[--r->nhot];
        k--;
        continue;
      }
      if (b->in3 || !b->in4)
        continue;
    }
    r->cands[n++] = (kvp__tier_cand_t){.hash = b->hash,
                                       .parent = b->parent,
                                       .has_parent = b->has_parent,
                                       .vol = b->in3 ? 0 : 1,
                                       .bytes = 1,
                                       .last_access_ms = b->last_ms,
                                       .freq = f,
                                       .since_ms = b->last_ms};
  }
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = r->capacity, .used = r->n3},
                          {.tier = 4, .used = r->n4}};
  if (kvp__tier_pol_plan(r->pol, &r->prm, v, 2, r->cands, n, now, &m, &nm) != 0)
    return -1;
  r->res->rounds++;
  for (size_t k = 0; k < nm; k++) {
    uint64_t i;
    if (m[k].kind == KVP__TIER_EVICT || kvp__map64_get(&r->at, m[k].hash, &i) != 0)
      continue;
    blk_t *b = &r->blk[i];
    int demote = m[k].from == 0;
    if (demote)
      g3_del(r, b);
    else
      g3_add(r, b);
    b->in4 = (uint8_t)demote;
    r->n4 += demote ? 1 : (size_t)-1;
    *(demote ? &r->res->demoted : &r->res->promoted) += 1;
    kvp__tier_pol_move(r->pol, b->hash, demote ? 3 : 4, demote ? 4 : 3, now);
  }
  free(m);
  return 0;
}

/* Replays the recorded stream (ev, at) of trace t with policy and a G3 of
 * capacity blocks. */
static int replay(const trace_t *t, const rec_t *ev, const size_t *at, const char *policy,
                  const char *params, size_t capacity, result_t *res) {
  replay_t r = {.capacity = capacity, .res = res};
  char err[512];
  int rc = -1;

  memset(res, 0, sizeof *res);
  kvp__tier_params_init(&r.prm);
  r.prm.high_watermark = 1.0;
  r.prm.low_watermark = 1.0 - 0.5 / (double)(capacity ? capacity : 1);
  r.prm.min_residence_ms = 0;
  kvp__map64_init(&r.at, t->distinct);
  if (kvp__tier_pol_open(policy, params, &r.pol, err, sizeof err) != 0) {
    fprintf(stderr, "bench policy: %s\n", err);
    goto out;
  }
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t q = 0; q < t->nreq; q++) {
    uint64_t now = BASE_MS + t->ts[q];
    const uint64_t *h = t->hash + t->off[q];
    size_t nh = t->off[q + 1] - t->off[q];
    /* What the index learns: every block of the prompt read now. */
    for (size_t i = 0; i < nh; i++) {
      blk_t *b = blk_get(&r, h[i], i ? h[i - 1] : h[i], i > 0);
      b->freq = decayed(b, now) + 1;
      b->freq_ms = b->last_ms = now;
      if (b->freq >= r.prm.promote_freq && !b->listed) {
        if (r.nhot == r.hot_cap) {
          r.hot_cap = r.hot_cap ? 2 * r.hot_cap : 4096;
          if ((r.hot = realloc(r.hot, r.hot_cap * sizeof *r.hot)) == NULL)
            goto out;
        }
        b->listed = 1;
        r.hot[r.nhot++] = (uint32_t)(b - r.blk);
      }
    }
    for (size_t k = at[q]; k < at[q + 1]; k++) {
      uint64_t x = ev->ev[k].hash;
      blk_t *b = blk_get(&r, x, ev->parent[k], ev->parent[k] != x);
      if (ev->ev[k].kind == STREAM_REF) {
        *(b->in3 ? &res->hits3 : &res->hits4) += 1;
        kvp__tier_pol_access(r.pol, x, b->in3 ? 3 : 4, now);
        continue;
      }
      res->written++;
      if (b->in4) { /* one copy between G3 and G4: the fresh one stays */
        b->in4 = 0;
        r.n4--;
      }
      if (!b->in3) {
        g3_add(&r, b);
        kvp__tier_pol_move(r.pol, x, 0, 3, now);
      }
    }
    if ((r.n3 > capacity || q % ROUND_EVERY == 0) && round_once(&r, now) != 0)
      goto out;
  }
  res->secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  rc = 0;
out:
  kvp__tier_pol_close(r.pol);
  kvp__map64_free(&r.at);
  free(r.blk);
  free(r.cands);
  free(r.g3);
  free(r.hot);
  return rc;
}

/* --- the suite --------------------------------------------------------------- */

/* dump=PATH: the trace and the worker's lower-tier stream (admission after
 * 1 hit), as text for bench/policy_reuse.py: per request "R q ts_ms
 * hash...", then its events, "w hash parent" (offloaded to G3) or "r hash
 * parent" (read from G3 or G4); hashes in hex, parent = hash for none. */
static int write_dump(const char *path, const trace_t *t, const rec_t *ev, const size_t *at) {
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "bench policy: %s: %s\n", path, strerror(errno));
    return -1;
  }
  for (size_t q = 0; q < t->nreq; q++) {
    fprintf(f, "R %zu %llu", q, (unsigned long long)t->ts[q]);
    for (size_t i = t->off[q]; i < t->off[q + 1]; i++)
      fprintf(f, " %llx", (unsigned long long)t->hash[i]);
    fputc('\n', f);
    for (size_t k = at[q]; k < at[q + 1]; k++)
      fprintf(f, "%c %llx %llx\n", ev->ev[k].kind == STREAM_REF ? 'r' : 'w',
              (unsigned long long)ev->ev[k].hash, (unsigned long long)ev->parent[k]);
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "bench policy: %s: %s\n", path, strerror(errno));
    return -1;
  }
  printf("# the stream is in %s (bench/policy_reuse.py reads it)\n", path);
  return 0;
}

static int opt(const char *arg, const char *key, long lo, long hi, long *v) {
  size_t n = strlen(key);
  char *end;
  if (strncmp(arg, key, n) != 0)
    return 0;
  errno = 0;
  *v = strtol(arg + n, &end, 10);
  return end != arg + n && *end == '\0' && errno == 0 && *v >= lo && *v <= hi;
}

static double ratio(uint64_t a, uint64_t b) {
  return a + b ? (double)a / (double)(a + b) : 0;
}

KVP_BENCH_SUITE(policy, "tiering policies' G3 hit ratio vs Belady's MIN on the Mooncake trace") {
  static const int pcts[] = {5, 10, 25};
  long requests = 1 << 30, g1 = 1024, g2 = 2048, blockb = 512, only_pct = 0, admission = 1;
  const char *only = NULL, *params = NULL, *dump = NULL;
  cfg_t cfg;
  trace_t t;
  rec_t stream[3];
  size_t *at[3] = {NULL};
  double rsecs[3] = {0};
  uint64_t below[3] = {0};
  result_t res;
  char fig[128];
  int rc = 1;

  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "policy=", 7) == 0 && kvp__tier_policy_find(argv[i] + 7) != NULL) {
      only = argv[i] + 7;
      continue;
    }
    if (strncmp(argv[i], "params=", 7) == 0) {
      params = argv[i] + 7;
      continue;
    }
    if (strncmp(argv[i], "dump=", 5) == 0 && argv[i][5] != '\0') {
      dump = argv[i] + 5;
      continue;
    }
    if (!opt(argv[i], "requests=", 1, 1 << 30, &requests) &&
        !opt(argv[i], "g1=", 256, 1 << 20, &g1) && !opt(argv[i], "g2=", 0, 1 << 22, &g2) &&
        !opt(argv[i], "pct=", 1, 100, &only_pct) && !opt(argv[i], "admission=", 0, 1, &admission) &&
        (!opt(argv[i], "blockb=", 512, 1 << 24, &blockb) || blockb % 512 != 0)) {
      fprintf(stderr,
              "bench policy: bad option '%s' (requests=N g1=BLOCKS g2=BLOCKS "
              "blockb=BYTES, a multiple of 512; pct=P policy=NAME params=\"k=v ...\" "
              "admission=0|1 dump=PATH)\n",
              argv[i]);
      return 1;
    }
  }
  if (params != NULL && only == NULL) {
    fprintf(stderr, "bench policy: params= needs policy=\n");
    return 1;
  }
  memset(stream, 0, sizeof stream);
  cfg = (cfg_t){(uint32_t)g1, (uint32_t)g2, (uint32_t)blockb};
  uint64_t t0 = kvp_bench_now_ns();
  if (load_trace(&t, (size_t)requests) != 0)
    return 1;
  printf("# %zu requests, %zu block references, %zu distinct blocks; G1 %ld, G2 %ld blocks of "
         "%ld bytes; G3 at 5/10/25%% of the distinct blocks, G4 unbounded\n",
         t.nreq, t.off[t.nreq], t.distinct, g1, g2, blockb);
  /* The worker's streams, through the real block manager: admission after
   * 1 (every victim), 2 and 3 hits. */
  for (int a = 0; a < (admission ? 3 : 1); a++) {
    if ((at[a] = malloc((t.nreq + 1) * sizeof *at[a])) == NULL ||
        record(&t, &cfg, (uint32_t)a + 1, &stream[a], at[a], &rsecs[a], &below[a]) != 0)
      goto out;
    printf("# admission%d: the block manager's replay took %.1f s: %zu lower-tier events; %llu "
           "blocks missed G1 and G2\n",
           a + 1, rsecs[a], stream[a].n, (unsigned long long)below[a]);
  }
  if (dump != NULL && write_dump(dump, &t, &stream[0], at[0]) != 0)
    goto out;
  if (params != NULL)
    printf("# %s with policy_params \"%s\"\n", only, params);
  for (size_t p = 0; p < sizeof pcts / sizeof pcts[0]; p++) {
    if (only_pct != 0 && pcts[p] != only_pct)
      continue;
    size_t cap = t.distinct * (size_t)pcts[p] / 100;
    min_result_t mr;
    if (bench_policy_min(stream[0].ev, stream[0].n, cap, &mr) != 0)
      goto out;
    double min_ratio = mr.refs ? (double)mr.hits / (double)mr.refs : 0;
    printf("# min %d%% (%zu blocks): %llu of %llu reads hit; at most %llu blocks to be read "
           "again at once\n",
           pcts[p], cap, (unsigned long long)mr.hits, (unsigned long long)mr.refs,
           (unsigned long long)mr.live_max);
    double min_bph =
        mr.hits ? (double)(mr.written + mr.demoted + mr.promoted) * blockb / (double)mr.hits : 0;
    snprintf(fig, sizeof fig, "policy.min.%dpct.g3_hit_ratio", pcts[p]);
    kvp_bench_report(fig, min_ratio, "ratio", NULL, 0);
    snprintf(fig, sizeof fig, "policy.min.%dpct.bytes_per_hit", pcts[p]);
    kvp_bench_report(fig, min_bph, "B", NULL, 0);
    for (int k = 0; kvp__tier_policy_names[k]; k++) {
      const char *name = kvp__tier_policy_names[k];
      if (only != NULL && strcmp(name, only) != 0)
        continue;
      if (replay(&t, &stream[0], at[0], name, params, cap, &res) != 0)
        goto out;
      snprintf(fig, sizeof fig, "policy.%s.%dpct.g3_hit_ratio", name, pcts[p]);
      kvp_bench_report(fig, ratio(res.hits3, res.hits4), "ratio", "min", min_ratio);
      snprintf(fig, sizeof fig, "policy.%s.%dpct.bytes_per_hit", name, pcts[p]);
      double bph = res.hits3 ? (double)(res.written + res.demoted + res.promoted) * blockb /
                                   (double)res.hits3
                             : 0;
      kvp_bench_report(fig, bph, "B", "min", min_bph);
      printf("#   %s %d%%: %.2f s, %llu rounds, %llu G3 writes, %llu demoted, %llu promoted\n",
             name, pcts[p], res.secs, (unsigned long long)res.rounds,
             (unsigned long long)res.written, (unsigned long long)res.demoted,
             (unsigned long long)res.promoted);
    }
  }
  /* Admission after N hits, the default policy at 10%. */
  size_t cap10 = t.distinct / 10;
  double w1 = 0, h1 = 0;
  uint64_t demand = 0; /* admission1's lower-tier reads */
  for (size_t k = 0; k < stream[0].n; k++)
    demand += stream[0].ev[k].kind == STREAM_REF;
  for (int a = 0; a < (admission ? 3 : 0); a++) {
    if (replay(&t, &stream[a], at[a], kvp__tier_policy_names[0], NULL, cap10, &res) != 0)
      goto out;
    double w = (double)res.written * blockb;
    double h = demand ? (double)res.hits3 / (double)demand : 0;
    if (a == 0)
      w1 = w, h1 = h;
    snprintf(fig, sizeof fig, "policy.admission%d.10pct.g3_bytes_written", a + 1);
    kvp_bench_report(fig, w, "B", "admission1", w1);
    snprintf(fig, sizeof fig, "policy.admission%d.10pct.g3_hit_ratio", a + 1);
    kvp_bench_report(fig, h, "ratio", "admission1", h1);
    uint64_t read = res.hits3 + res.hits4;
    printf("#   admission%d: %llu G3 hits, %llu G4 hits, %llu recomputed (of %llu reads with "
           "admission1)\n",
           a + 1, (unsigned long long)res.hits3, (unsigned long long)res.hits4,
           (unsigned long long)(demand > read ? demand - read : 0), (unsigned long long)demand);
  }
  printf("# %.1f s in all\n", (double)(kvp_bench_now_ns() - t0) / 1e9);
  rc = 0;
out:
  for (int a = 0; a < 3; a++) {
    free(stream[a].ev);
    free(stream[a].parent);
    free(at[a]);
  }
  free(t.hash);
  free(t.off);
  free(t.ts);
  return rc;
}
