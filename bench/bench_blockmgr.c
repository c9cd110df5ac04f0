/* kvp-bench blockmgr: the embedded block manager replaying the conversation
 * trace (data/conversation_trace.jsonl.gz, KVP_TRACE), against hash-only.
 *
 * Each trace hash id is expanded to 512 deterministic tokens
 * (kvp_trace_block_tokens); a request's prompt is its ids' token blocks
 * concatenated and cut to input_length (clamped to 512 * ids). Per request
 * the block manager does kvp_seq_create + kvp_seq_allocate + kvp_seq_free:
 * chained hashing, prefix lookup in G1 then G2, onboarding G2 hits, new
 * blocks evicting LRU G1 blocks (offloaded to G2, evicting there), Stored /
 * Removed / Accessed events into a counting sink.
 *
 * The baseline ("hash-only") is the same loop doing only kvp_hash_sequence
 * over the same tokens with the same block size. Both loops build each
 * prompt into a reusable buffer (memcpy from the token table), so the copy is
 * in both. "blocks" are the full blocks of the prompts (input_length /
 * block size per request, summed); a trailing partial block is not counted.
 *
 * Two block sizes: 512 tokens (the trace's blocks) and 16 (each id gives 32
 * blocks). G1 and G2 are smaller than the working set W (distinct full
 * blocks of the trace at that block size): G1 = W/8, G2 = W/4 by default.
 * KV bytes are kept small so the figures are the manager's metadata work,
 * not memcpy of KV data: by default 1 layer x 2 x 2 B = 4 B per token, as
 * many bytes as the block's tokens (2 KiB per 512-token block, 64 B per
 * 16-token block); offload and onboard copy those bytes. (With 2 layers x 8
 * x 2 B, 16 KiB per 512-token block, the cold copies of offloads and onboards
 * alone take longer than hashing: layers=2 inner=8 elem=2.) The pools'
 * memory is the library's system storage, touched when the pools are
 * created (untimed).
 *
 * Best of N rounds (5 for 512 tokens, 3 for 16), each with a fresh manager,
 * block manager and baseline alternating so drift hits both; only the replay
 * loops are timed. One more round with a clock around each call reports the
 * split between kvp_seq_create / allocate / free (not part of the figures).
 * Single-threaded; pin it for steadier figures (taskset -c 1 kvp-bench ...).
 *
 * Options (key=value): layers=, inner=, elem= (layout), g1div=, g2div=
 * (G1 = W/g1div, G2 = W/g2div; g2div=0: no G2), r512=, r16= (rounds),
 * only=512|16, offload=0|1|2 (kvp_offload_t: on eviction, write-through,
 * none), minhits= (offload_min_hits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kvplane/blockmgr.h"
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "sim/trace.h"

#define ID_TOKENS 512u

/* --- the trace in memory ------------------------------------------------ */

typedef struct req_s {
  uint32_t first; /* offset into trace_t.rows */
  uint32_t nids;
  uint32_t ntokens; /* input_length clamped to 512 * nids */
} req_t;

typedef struct trace_s {
  req_t *reqs;
  size_t nreqs;
  uint32_t *rows; /* per request id, its row in tokens */
  size_t nrows_used, rows_cap;
  uint32_t *tokens; /* ndistinct x 512 */
  size_t ndistinct;
  uint64_t total_tokens;
  uint32_t max_tokens;
} trace_t;

/* id -> row, open addressing (rows are dense, UINT32_MAX = empty). */
typedef struct idmap_s {
  uint64_t *k;
  uint32_t *v;
  size_t cap, n;
} idmap_t;

static size_t slot_of(uint64_t h, size_t cap) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 29) & (cap - 1);
}

static int idmap_grow(idmap_t *m) {
  size_t cap = m->cap ? m->cap * 2 : 1u << 16;
  uint64_t *k = malloc(cap * sizeof *k);
  uint32_t *v = malloc(cap * sizeof *v);
  if (k == NULL || v == NULL) {
    free(k);
    free(v);
    return -1;
  }
  memset(v, 0xff, cap * sizeof *v);
  for (size_t i = 0; i < m->cap; i++) {
    if (m->v[i] == UINT32_MAX)
      continue;
    size_t j = slot_of(m->k[i], cap);
    while (v[j] != UINT32_MAX)
      j = (j + 1) & (cap - 1);
    k[j] = m->k[i];
    v[j] = m->v[i];
  }
  free(m->k);
  free(m->v);
  m->k = k;
  m->v = v;
  m->cap = cap;
  return 0;
}

/* Returns the row of id, adding it (row = n) when new; UINT32_MAX on ENOMEM. */
static uint32_t idmap_row(idmap_t *m, uint64_t id) {
  if ((m->n + 1) * 2 > m->cap && idmap_grow(m) != 0)
    return UINT32_MAX;
  size_t j = slot_of(id, m->cap);
  while (m->v[j] != UINT32_MAX) {
    if (m->k[j] == id)
      return m->v[j];
    j = (j + 1) & (m->cap - 1);
  }
  m->k[j] = id;
  m->v[j] = (uint32_t)m->n;
  return (uint32_t)m->n++;
}

static void trace_free(trace_t *t) {
  free(t->reqs);
  free(t->rows);
  free(t->tokens);
  memset(t, 0, sizeof *t);
}

static int trace_load(trace_t *t, const char *path) {
  kvp_trace_t *tr = NULL;
  kvp_trace_req_t rq;
  char err[256];
  idmap_t m = {0};
  uint64_t *ids = NULL; /* distinct ids in row order */
  size_t ids_cap = 0, reqs_cap = 0;
  int rc;

  memset(t, 0, sizeof *t);
  if (kvp_trace_open(path, &tr, err, sizeof err) != 0) {
    fprintf(stderr, "bench blockmgr: %s\n", err);
    return -1;
  }
  while ((rc = kvp_trace_next(tr, &rq, err, sizeof err)) != 0) {
    if (rc < 0) {
      if (rc == KVP_EPROTO) {
        fprintf(stderr, "bench blockmgr: skipping %s\n", err);
        continue;
      }
      fprintf(stderr, "bench blockmgr: %s\n", err);
      goto fail;
    }
    if (rq.nhash_ids == 0 || rq.input_length == 0)
      continue;
    if (t->nreqs == reqs_cap) {
      reqs_cap = reqs_cap ? reqs_cap * 2 : 16384;
      req_t *r = realloc(t->reqs, reqs_cap * sizeof *r);
      if (r == NULL)
        goto nomem;
      t->reqs = r;
    }
    if (t->nrows_used + rq.nhash_ids > t->rows_cap) {
      size_t cap = t->rows_cap ? t->rows_cap : 1u << 18;
      while (cap < t->nrows_used + rq.nhash_ids)
        cap *= 2;
      uint32_t *r = realloc(t->rows, cap * sizeof *r);
      if (r == NULL)
        goto nomem;
      t->rows = r;
      t->rows_cap = cap;
    }
    uint64_t ntok = rq.input_length;
    if (ntok > (uint64_t)ID_TOKENS * rq.nhash_ids)
      ntok = (uint64_t)ID_TOKENS * rq.nhash_ids;
    /* Ids past input_length contribute no tokens; drop them. */
    size_t nids = (size_t)((ntok + ID_TOKENS - 1) / ID_TOKENS);
    req_t *r = &t->reqs[t->nreqs++];
    r->first = (uint32_t)t->nrows_used;
    r->nids = (uint32_t)nids;
    r->ntokens = (uint32_t)ntok;
    for (size_t i = 0; i < nids; i++) {
      size_t before = m.n;
      uint32_t row = idmap_row(&m, rq.hash_ids[i]);
      if (row == UINT32_MAX)
        goto nomem;
      if (m.n != before) {
        if (m.n > ids_cap) {
          ids_cap = ids_cap ? ids_cap * 2 : 1u << 16;
          uint64_t *p = realloc(ids, ids_cap * sizeof *p);
          if (p == NULL)
            goto nomem;
          ids = p;
        }
        ids[row] = rq.hash_ids[i];
      }
      t->rows[t->nrows_used++] = row;
    }
    t->total_tokens += ntok;
    if (ntok > t->max_tokens)
      t->max_tokens = (uint32_t)ntok;
  }
  kvp_trace_close(tr);
  tr = NULL;
  t->ndistinct = m.n;
  t->tokens = malloc(t->ndistinct * ID_TOKENS * sizeof *t->tokens);
  if (t->tokens == NULL)
    goto nomem;
  for (size_t i = 0; i < t->ndistinct; i++)
    kvp_trace_block_tokens(ids[i], &t->tokens[i * ID_TOKENS], ID_TOKENS);
  free(m.k);
  free(m.v);
  free(ids);
  return t->nreqs ? 0 : -1;
nomem:
  fprintf(stderr, "bench blockmgr: out of memory loading the trace\n");
fail:
  kvp_trace_close(tr);
  free(m.k);
  free(m.v);
  free(ids);
  trace_free(t);
  return -1;
}

/* Builds request r's prompt into buf; returns its token count. */
static inline size_t build_prompt(const trace_t *t, const req_t *r, uint32_t *buf) {
  const uint32_t *rows = &t->rows[r->first];
  size_t n = r->ntokens, off = 0;
  for (uint32_t i = 0; i < r->nids; i++) {
    const uint32_t *src = &t->tokens[(size_t)rows[i] * ID_TOKENS];
    if (n - off >= ID_TOKENS) {
      memcpy(buf + off, src, ID_TOKENS * sizeof *buf); /* constant size: vector copy */
      off += ID_TOKENS;
    } else {
      memcpy(buf + off, src, (n - off) * sizeof *buf);
      off = n;
    }
  }
  return n;
}

/* --- working set: distinct full blocks at a block size ------------------- */

static size_t working_set(const trace_t *t, size_t page, uint32_t *buf, uint64_t *hashes,
                          uint64_t *total_blocks) {
  size_t cap = 1u << 16, n = 0;
  uint64_t tot = 0;
  while (cap < t->total_tokens / page * 2)
    cap *= 2;
  uint64_t *set = calloc(cap, sizeof *set);
  int has_zero = 0;
  if (set == NULL)
    return 0;
  for (size_t q = 0; q < t->nreqs; q++) {
    size_t nt = build_prompt(t, &t->reqs[q], buf);
    size_t nb = kvp_hash_sequence(buf, nt, page, KVP_HASH_SEED, hashes, nt / page);
    tot += nb;
    for (size_t i = 0; i < nb; i++) {
      uint64_t h = hashes[i];
      if (h == 0) {
        n += !has_zero;
        has_zero = 1;
        continue;
      }
      size_t j = slot_of(h, cap);
      while (set[j] != 0 && set[j] != h)
        j = (j + 1) & (cap - 1);
      if (set[j] == 0) {
        set[j] = h;
        n++;
      }
    }
  }
  free(set);
  *total_blocks = tot;
  return n;
}

/* --- counting sink ------------------------------------------------------ */

typedef struct count_sink_s {
  uint64_t events[8];
  uint64_t hashes[8];
} count_sink_t;

static int count_emit(void *ctx, const kvp_event_t *ev) {
  count_sink_t *c = ctx;
  c->events[ev->type & 7]++;
  c->hashes[ev->type & 7] += ev->nhashes;
  return 0;
}

/* --- storage ------------------------------------------------------------ */

/* --- one configuration -------------------------------------------------- */

typedef struct cfg_s {
  uint32_t layers, inner, elem;
  uint32_t g1div, g2div;
  int r512, r16;
  int offload; /* kvp_offload_t */
  uint32_t min_hits;
} cfg_t;

typedef struct result_s {
  double bm_blocks_per_s, hash_blocks_per_s;
  double bm_ns, hash_ns;
  double metadata_per_block;
  int ok;
} result_t;

static uint64_t stats_sig(const kvp_blockmgr_stats_t *s) {
  return s->g1.evictions * 31 + s->g2.evictions * 37 + s->onboards * 41 + s->offloads * 43 +
         s->hits_g1 * 47 + s->hits_g2 * 53 + s->events * 59 + s->lookups * 61;
}

static int run(const trace_t *t, size_t page, int rounds, const cfg_t *cfg, result_t *res) {
  const size_t max_blocks = t->max_tokens / page + 1;
  uint32_t *buf = malloc(((size_t)t->max_tokens + ID_TOKENS) * sizeof *buf);
  uint64_t *hashes = malloc(max_blocks * sizeof *hashes);
  uint64_t total_blocks = 0, best_bm = UINT64_MAX, best_hash = UINT64_MAX, sig = 0;
  uint64_t best_copy = UINT64_MAX;
  kvp_blockmgr_stats_t st = {0};
  count_sink_t sink;
  char name[96], tag[16];
  int rc = 0;

  memset(res, 0, sizeof *res);
  if (buf == NULL || hashes == NULL) {
    free(buf);
    free(hashes);
    return -1;
  }
  snprintf(tag, sizeof tag, "%zutok", page);
  size_t w = working_set(t, page, buf, hashes, &total_blocks);
  if (w == 0) {
    free(buf);
    free(hashes);
    return -1;
  }

  kvp_blockmgr_opts_t o;
  kvp_blockmgr_opts_init(&o);
  o.layout = (kvp_layout_t){.num_layers = cfg->layers,
                            .page_size = (uint32_t)page,
                            .inner_dim = cfg->inner,
                            .elem_size = cfg->elem,
                            .alignment = 0};
  o.offload = cfg->offload;
  o.offload_min_hits = cfg->min_hits;
  o.g1_blocks = (uint32_t)(w / cfg->g1div);
  o.g2_blocks = cfg->g2div ? (uint32_t)(w / cfg->g2div) : 0;
  if (o.g1_blocks < max_blocks)
    o.g1_blocks = (uint32_t)max_blocks; /* one request must fit */
  o.sink = (kvp_event_sink_t){count_emit, &sink};
  /* System storage, as a worker has it: allocated, touched and huge-page
   * hinted when the manager is created (untimed), so copies do not fault. */
  size_t stride = kvp_layout_check(&o.layout) == 0 ? kvp_layout_block_stride(&o.layout) : 0;

  printf("# %s: %zu requests, %llu full blocks (%llu tokens); working set W = %zu distinct blocks;"
         " G1 %u blocks (W/%u), G2 %u blocks (W/%u), offload policy %d (min hits %u); block %u "
         "layers x %zu x %u x %u B = %zu B per block\n",
         tag, t->nreqs, (unsigned long long)total_blocks, (unsigned long long)t->total_tokens, w,
         o.g1_blocks, cfg->g1div, o.g2_blocks, cfg->g2div, o.offload, o.offload_min_hits,
         cfg->layers, page, cfg->inner, cfg->elem, stride);

  uint64_t failures = 0;
  for (int r = 0; r < rounds && rc == 0; r++) {
    kvp_blockmgr_t *bm = NULL;
    memset(&sink, 0, sizeof sink);
    int crc = kvp_blockmgr_create(&o, &bm);
    if (crc != 0) {
      fprintf(stderr, "bench blockmgr: kvp_blockmgr_create: %s\n", kvp_strerror(crc));
      rc = -1;
      break;
    }
    uint64_t blocks = 0;
    failures = 0;
    uint64_t t0 = kvp_bench_now_ns();
    for (size_t q = 0; q < t->nreqs; q++) {
      size_t n = build_prompt(t, &t->reqs[q], buf);
      kvp_seq_t *s = NULL;
      if (kvp_seq_create(bm, buf, n, NULL, 0, &s) != 0) {
        failures++;
        continue;
      }
      if (kvp_seq_allocate(s) != 0)
        failures++;
      else
        blocks += n / page;
      kvp_seq_free(s);
    }
    uint64_t dt = kvp_bench_now_ns() - t0;
    if (dt < best_bm)
      best_bm = dt;
    kvp_blockmgr_stats(bm, &st);
    if (r == 0)
      sig = stats_sig(&st);
    else if (stats_sig(&st) != sig)
      fprintf(stderr,
              "bench blockmgr: %s round %d: counts differ from round 0 (not deterministic)\n", tag,
              r);
    if (failures || blocks != total_blocks)
      fprintf(stderr, "bench blockmgr: %s: %llu requests failed; %llu of %llu blocks allocated\n",
              tag, (unsigned long long)failures, (unsigned long long)blocks,
              (unsigned long long)total_blocks);
    /* Cross-check (untimed): the manager's sequence hashes are the
     * baseline's. */
    if (r == 0) {
      size_t n = build_prompt(t, &t->reqs[0], buf), nh = 0;
      kvp_seq_t *s = NULL;
      size_t nb = kvp_hash_sequence(buf, n, page, KVP_HASH_SEED, hashes, max_blocks);
      if (kvp_seq_create(bm, buf, n, NULL, 0, &s) == 0) {
        const uint64_t *sh = kvp_seq_hashes(s, &nh);
        if (nh != nb || (nb && memcmp(sh, hashes, nb * sizeof *sh) != 0))
          fprintf(stderr, "bench blockmgr: %s: sequence hashes differ from kvp_hash_sequence\n",
                  tag);
        kvp_seq_free(s);
      }
    }
    kvp_blockmgr_destroy(bm);

    /* Baseline: hash-only over the same prompts. */
    uint64_t acc = 0, hblocks = 0;
    t0 = kvp_bench_now_ns();
    for (size_t q = 0; q < t->nreqs; q++) {
      size_t n = build_prompt(t, &t->reqs[q], buf);
      size_t nb = kvp_hash_sequence(buf, n, page, KVP_HASH_SEED, hashes, max_blocks);
      hblocks += nb;
      if (nb)
        acc ^= hashes[nb - 1];
    }
    dt = kvp_bench_now_ns() - t0;
    kvp_bench_sink(acc);
    if (dt < best_hash)
      best_hash = dt;
    if (hblocks != total_blocks)
      fprintf(stderr, "bench blockmgr: baseline hashed %llu of %llu blocks\n",
              (unsigned long long)hblocks, (unsigned long long)total_blocks);

    /* For reference: building the prompts alone, the part both loops share. */
    acc = 0;
    t0 = kvp_bench_now_ns();
    for (size_t q = 0; q < t->nreqs; q++) {
      size_t n = build_prompt(t, &t->reqs[q], buf);
      acc += buf[n - 1];
    }
    dt = kvp_bench_now_ns() - t0;
    kvp_bench_sink(acc);
    if (dt < best_copy)
      best_copy = dt;
  }
  /* One more round, not part of the figures, with a clock around each
   * call: where the manager's time goes. */
  uint64_t split[3] = {0, 0, 0};
  if (rc == 0) {
    kvp_blockmgr_t *bm = NULL;
    memset(&sink, 0, sizeof sink);
    if (kvp_blockmgr_create(&o, &bm) == 0) {
      for (size_t q = 0; q < t->nreqs; q++) {
        size_t n = build_prompt(t, &t->reqs[q], buf);
        kvp_seq_t *s = NULL;
        uint64_t a = kvp_bench_now_ns();
        if (kvp_seq_create(bm, buf, n, NULL, 0, &s) != 0)
          continue;
        uint64_t b = kvp_bench_now_ns();
        kvp_seq_allocate(s);
        uint64_t c = kvp_bench_now_ns();
        kvp_seq_free(s);
        uint64_t d = kvp_bench_now_ns();
        split[0] += b - a;
        split[1] += c - b;
        split[2] += d - c;
      }
      kvp_blockmgr_destroy(bm);
    }
  }
  if (rc == 0) {
    double nb = (double)total_blocks;
    uint64_t cap = (uint64_t)st.g1.capacity + st.g2.capacity;
    res->bm_blocks_per_s = nb * 1e9 / (double)best_bm;
    res->hash_blocks_per_s = nb * 1e9 / (double)best_hash;
    res->bm_ns = (double)best_bm / nb;
    res->hash_ns = (double)best_hash / nb;
    res->metadata_per_block = cap ? (double)st.metadata_bytes / (double)cap : 0;
    res->ok = failures == 0;
    printf("# %s: best of %d rounds; blocks = full prompt blocks replayed; hash-only ="
           " kvp_hash_sequence over the same prompt bytes (both loops build the prompts)\n",
           tag, rounds);
#define FIG(suffix) (snprintf(name, sizeof name, "blockmgr.%s.%s", tag, suffix), name)
    kvp_bench_report(FIG("blocks_per_s"), res->bm_blocks_per_s, "blocks/s", "hash-only",
                     res->hash_blocks_per_s);
    kvp_bench_report(FIG("ns_per_block"), res->bm_ns, "ns", "hash-only", res->hash_ns);
    kvp_bench_report(FIG("hit_rate"), st.hit_rate, "(G1+G2 hits / lookups)", NULL, 0);
    kvp_bench_report(FIG("hits_g1"), (double)st.hits_g1, "blocks", NULL, 0);
    kvp_bench_report(FIG("hits_g2"), (double)st.hits_g2, "blocks", NULL, 0);
    kvp_bench_report(FIG("lookups"), (double)st.lookups, "blocks", NULL, 0);
    kvp_bench_report(FIG("evictions_g1"), (double)st.g1.evictions, "blocks", NULL, 0);
    kvp_bench_report(FIG("evictions_g2"), (double)st.g2.evictions, "blocks", NULL, 0);
    kvp_bench_report(FIG("onboards"), (double)st.onboards, "blocks", NULL, 0);
    kvp_bench_report(FIG("offloads"), (double)st.offloads, "blocks", NULL, 0);
    kvp_bench_report(FIG("dedups"), (double)st.dedups, "blocks", NULL, 0);
    kvp_bench_report(FIG("events"), (double)st.events, "events", NULL, 0);
    kvp_bench_report(FIG("event_block_hashes"),
                     (double)(sink.hashes[KVP_EV_STORED] + sink.hashes[KVP_EV_REMOVED] +
                              sink.hashes[KVP_EV_ACCESSED]),
                     "hashes", NULL, 0);
    kvp_bench_report(FIG("metadata_bytes_per_block"), res->metadata_per_block, "B", NULL, 0);
#undef FIG
    printf("# %s: events stored %llu (%llu hashes), removed %llu (%llu), accessed %llu (%llu);"
           " sink errors %llu; metadata %zu B over %llu G1+G2 blocks\n",
           tag, (unsigned long long)sink.events[KVP_EV_STORED],
           (unsigned long long)sink.hashes[KVP_EV_STORED],
           (unsigned long long)sink.events[KVP_EV_REMOVED],
           (unsigned long long)sink.hashes[KVP_EV_REMOVED],
           (unsigned long long)sink.events[KVP_EV_ACCESSED],
           (unsigned long long)sink.hashes[KVP_EV_ACCESSED], (unsigned long long)st.event_errors,
           st.metadata_bytes, (unsigned long long)cap);
    printf("# %s: building the prompts alone (memcpy from the token table, in both loops above)"
           " takes %.1f ns per block: manager %.1f, hash-only %.1f ns per block without it\n",
           tag, (double)best_copy / nb, res->bm_ns - (double)best_copy / nb,
           res->hash_ns - (double)best_copy / nb);
    printf("# %s: split (one extra round, clock around each call): kvp_seq_create %.1f,"
           " kvp_seq_allocate %.1f, kvp_seq_free %.1f ns per block\n",
           tag, (double)split[0] / nb, (double)split[1] / nb, (double)split[2] / nb);
  }
  free(buf);
  free(hashes);
  return rc;
}

static void parse_args(int argc, char **argv, cfg_t *c, int *only) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '=');
    if (eq == NULL)
      continue;
    long v = strtol(eq + 1, NULL, 10);
    if (v < 0)
      continue;
    size_t k = (size_t)(eq - a);
    if (k == 6 && !strncmp(a, "layers", k) && v > 0)
      c->layers = (uint32_t)v;
    else if (k == 5 && !strncmp(a, "inner", k) && v > 0)
      c->inner = (uint32_t)v;
    else if (k == 4 && !strncmp(a, "elem", k))
      c->elem = (uint32_t)v;
    else if (k == 5 && !strncmp(a, "g1div", k) && v > 0)
      c->g1div = (uint32_t)v;
    else if (k == 5 && !strncmp(a, "g2div", k))
      c->g2div = (uint32_t)v;
    else if (k == 4 && !strncmp(a, "r512", k) && v > 0)
      c->r512 = (int)v;
    else if (k == 3 && !strncmp(a, "r16", k) && v > 0)
      c->r16 = (int)v;
    else if (k == 4 && !strncmp(a, "only", k))
      *only = (int)v;
    else if (k == 7 && !strncmp(a, "offload", k))
      c->offload = (int)v;
    else if (k == 7 && !strncmp(a, "minhits", k))
      c->min_hits = (uint32_t)v;
  }
}

KVP_BENCH_SUITE(blockmgr, "block manager replaying the trace (512/16-token blocks) vs hash-only") {
  cfg_t cfg = {.layers = 1, .inner = 2, .elem = 2, .g1div = 8, .g2div = 4, .r512 = 5, .r16 = 3};
  int only = 0;
  trace_t t;
  result_t r512 = {0}, r16 = {0};
  int rc = 0;

  parse_args(argc, argv, &cfg, &only);
  uint64_t t0 = kvp_bench_now_ns();
  if (trace_load(&t, kvp_bench_trace_path()) != 0)
    return 1;
  printf("# trace %s: %zu requests, %zu distinct ids (512 tokens each), %llu prompt tokens;"
         " loaded and expanded in %.2f s\n",
         kvp_bench_trace_path(), t.nreqs, t.ndistinct, (unsigned long long)t.total_tokens,
         (double)(kvp_bench_now_ns() - t0) / 1e9);
  if (only == 0 || only == 512)
    rc |= run(&t, 512, cfg.r512, &cfg, &r512);
  if (rc == 0 && (only == 0 || only == 16))
    rc |= run(&t, 16, cfg.r16, &cfg, &r16);
  if (rc == 0) {
    if (only == 0 || only == 512) {
      double ratio = r512.bm_blocks_per_s / r512.hash_blocks_per_s;
      printf("target 512tok: blocks/s within 3x of hash-only (ratio >= 0.333): %s (ratio %.3f)\n",
             r512.ok && ratio >= 1.0 / 3.0 ? "MET" : "NOT MET", ratio);
      printf("target 512tok: metadata <= 64 B per block: %s (%.1f B)\n",
             r512.metadata_per_block <= 64 ? "MET" : "NOT MET", r512.metadata_per_block);
    }
    if (only == 0 || only == 16) {
      printf("target 16tok: >= 10M blocks/s on one core: %s (%.2fM blocks/s)\n",
             r16.ok && r16.bm_blocks_per_s >= 10e6 ? "MET" : "NOT MET", r16.bm_blocks_per_s / 1e6);
      printf("target 16tok: metadata <= 64 B per block: %s (%.1f B)\n",
             r16.metadata_per_block <= 64 ? "MET" : "NOT MET", r16.metadata_per_block);
    }
  }
  trace_free(&t);
  printf("# suite time %.1f s\n", (double)(kvp_bench_now_ns() - t0) / 1e9);
  return rc;
}
