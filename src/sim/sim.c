/* Simulated workers replaying a trace: see sim.h. */
#include "sim/sim.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/array.h"
#include "common/clock.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/volume.h"
#include "sim/trace.h"

#define BLOCK_TOKENS KVP_SIM_BLOCK_TOKENS

typedef struct req_s {
  uint64_t ts_ms;
  size_t off, n; /* into the shared id array */
  uint32_t input_len, output_len;
} req_t;

typedef struct worker_s {
  kvp__sim_t *sim;
  int index;
  char id[32];
  pthread_t thread;
  req_t *reqs;
  size_t nreqs, cap;
  atomic_size_t done; /* requests replayed, read by kvp__sim_progress */
  kvp_blockmgr_t *bm;
  kvp_publisher_t *pub;
  kvp_volume_t *g3, *g4;
  char volume_ns[KVP_PARTITION_NS_MAX + 1]; /* <ns>, or <ns>-p<p> when partitioned */
  kvp_seq_t *live[KVP_SIM_MAX_BATCH];       /* running sequences, oldest at head */
  size_t head, nlive;
  uint64_t skipped, corrupt, decode_stops;
  int rc;
} worker_t;

struct kvp__sim_s {
  kvp__sim_opts_t o;
  kvp_layout_t layout;
  uint64_t *ids; /* every request's hash ids, back to back */
  size_t nids, ids_cap, nreqs;
  double seconds;
  worker_t *w;
};

void kvp__sim_opts_init(kvp__sim_opts_t *o) {
  /* The KV bytes the workers really allocate and copy: 2 layers x 512
   * tokens x 8 fp16 elements = 16 KiB per block, so four workers fit in
   * memory on a laptop (a Llama-3-8B block would be 64 MiB). */
  *o = (kvp__sim_opts_t){.servers = "nats://127.0.0.1:4222",
                         .ns = "default",
                         .workers = 4,
                         .mode = KVP_PUB_CORE,
                         .decode = 1,
                         .g1_blocks = 2048,
                         .g2_blocks = 8192,
                         .batch = 8,
                         .layers = 2,
                         .inner_dim = 8};
}

static int load_trace(kvp__sim_t *s, char *err, size_t errlen) {
  kvp_trace_t *t;
  kvp_trace_req_t r;
  char why[512];
  int rc;

  if ((rc = kvp_trace_open(s->o.trace, &t, why, sizeof why)) != 0) {
    snprintf(err, errlen, "%s", why);
    return rc;
  }
  while ((s->o.limit == 0 || s->nreqs < s->o.limit) &&
         (rc = kvp_trace_next(t, &r, why, sizeof why)) != 0) {
    if (rc < 0) {
      snprintf(err, errlen, "%s: %s", s->o.trace, why);
      goto out;
    }
    if (r.nhash_ids == 0)
      continue;
    /* Round robin: the trace's requests mostly share their first blocks (a
     * common system prompt), so routing by first block would load one worker. */
    worker_t *dst = &s->w[s->nreqs % (size_t)s->o.workers];
    if ((rc = KVP_ARRAY_RESERVE(s->ids, s->ids_cap, s->nids + r.nhash_ids, 4096)) != 0 ||
        (rc = KVP_ARRAY_RESERVE(dst->reqs, dst->cap, dst->nreqs + 1, 256)) != 0) {
      snprintf(err, errlen, "%s: out of memory after %zu requests", s->o.trace, s->nreqs);
      goto out;
    }
    memcpy(s->ids + s->nids, r.hash_ids, r.nhash_ids * sizeof *s->ids);
    /* The prompt is input_length tokens, clamped to what the ids cover. */
    uint64_t in = r.input_length;
    if (in == 0 || in > (uint64_t)r.nhash_ids * BLOCK_TOKENS)
      in = (uint64_t)r.nhash_ids * BLOCK_TOKENS;
    dst->reqs[dst->nreqs++] =
        (req_t){r.timestamp_ms, s->nids, r.nhash_ids, (uint32_t)in,
                (uint32_t)(r.output_length > 65536 ? 65536 : r.output_length)};
    s->nids += r.nhash_ids;
    s->nreqs++;
  }
  rc = 0;
out:
  kvp_trace_close(t);
  return rc;
}

/* The block manager is created after the publisher (it needs the
 * publisher's sink), so the snapshot callback goes through the worker. */
static int worker_snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  worker_t *w = ctx;
  return kvp_blockmgr_snapshot(w->bm, tier, hashes, parents, n);
}

static int open_volumes(kvp__sim_t *s, worker_t *w, char *err, size_t errlen) {
  char path[4096], cap[32], name[64];
  int rc;

  snprintf(path, sizeof path, "%s/g3", s->o.volume_dir);
  mkdir(s->o.volume_dir, 0700);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/g3/%s", s->o.volume_dir, w->id);
  snprintf(cap, sizeof cap, "%llu", (unsigned long long)s->o.g3_capacity);
  snprintf(name, sizeof name, "g3-%s", w->id);
  kvp_volume_param_t p3[3] = {{"path", path}, {"fsync", "off"}, {"capacity", cap}};
  if ((rc = kvp_volume_open(s->o.plugin_dir, "posix", name, p3, 3, &w->g3, err, errlen)) != 0)
    return rc;
  snprintf(path, sizeof path, "%s/g4", s->o.volume_dir);
  kvp_volume_param_t p4[2] = {{"path", path}, {"fsync", "off"}};
  return kvp_volume_open(s->o.plugin_dir, "posix", "g4-shared", p4, 2, &w->g4, err, errlen);
}

static int open_worker(kvp__sim_t *s, worker_t *w, char *err, size_t errlen) {
  kvp_publisher_opts_t o;
  kvp_blockmgr_opts_t bo;
  char why[512];
  int rc;

  kvp_publisher_opts_init(&o);
  snprintf(o.nats.servers, sizeof o.nats.servers, "%s", s->o.servers);
  o.ns = s->o.ns;
  o.worker_id = w->id;
  o.model = "mooncake-replay";
  o.mode = s->o.mode;
  o.stream_create = 1;
  o.partitions = s->o.partitions;
  o.block_tokens = BLOCK_TOKENS;
  o.block_bytes = kvp_layout_block_stride(&s->layout);
  o.snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2);
  if (s->o.volume_dir != NULL && (rc = open_volumes(s, w, err, errlen)) != 0)
    return rc;
  if (w->g3 != NULL) {
    o.snapshot_tiers |= 1u << KVP_TIER_G3;
    snprintf(o.snapshot_volumes[KVP_TIER_G3], sizeof o.snapshot_volumes[0], "%s",
             kvp_volume_name(w->g3));
  }
  /* Resync snapshots: called inside kvp_publisher_poll on the worker's own
   * thread, the one that owns the cache. */
  o.snapshot = worker_snapshot;
  o.snapshot_ctx = w;
  if ((rc = kvp_publisher_open(&o, &w->pub, why, sizeof why)) != 0) {
    snprintf(err, errlen, "worker %s: publisher: %s", w->id, why);
    return rc;
  }
  kvp_blockmgr_opts_init(&bo);
  bo.layout = s->layout;
  bo.g1_blocks = (uint32_t)s->o.g1_blocks;
  bo.g2_blocks = (uint32_t)s->o.g2_blocks;
  bo.sink = kvp_publisher_sink(w->pub);
  bo.g3 = w->g3;
  bo.g4 = w->g4;
  /* A partitioned deployment keeps partition p's objects under <ns>-p<p>
   * (docs/SCALE.md, "Tiering across partitions"): the worker puts and reads
   * where its partition's advisor moves, evicts and scrubs. */
  if (s->o.partitions > 0)
    rc = kvp_partition_volume_ns(w->volume_ns, sizeof w->volume_ns, s->o.ns,
                                 kvp_partition_of(w->id, s->o.partitions));
  else
    rc = snprintf(w->volume_ns, sizeof w->volume_ns, "%s", s->o.ns) < (int)sizeof w->volume_ns
             ? 0
             : KVP_ETOOBIG;
  if (rc != 0) {
    snprintf(err, errlen, "worker %s: namespace '%s' makes no volume namespace: %s", w->id, s->o.ns,
             kvp_strerror(rc));
    return rc;
  }
  bo.volume_ns = w->volume_ns;
  /* The replay runs an hour of trace in seconds: the scheduler waits for
   * the G3 puts rather than dropping them, so G3 holds what it would in
   * real time. */
  bo.g3_threads = 1;
  bo.g3_queue = 256;
  bo.g3_wait = 1;
  bo.g3_min_hits = 1; /* a block never reused is not worth an SSD write */
  if ((rc = kvp_blockmgr_create(&bo, &w->bm)) != 0) {
    snprintf(err, errlen, "worker %s: block manager: %s", w->id, kvp_strerror(rc));
    return rc;
  }
  return 0;
}

int kvp__sim_create(const kvp__sim_opts_t *o, kvp__sim_t **out, char *err, size_t errlen) {
  kvp__sim_t *s;
  int rc;

  *out = NULL;
  if (o->trace == NULL || o->workers < 1 || o->workers > KVP_SIM_MAX_WORKERS || o->batch < 1 ||
      o->batch > KVP_SIM_MAX_BATCH || o->g1_blocks < 1 || o->g1_blocks > UINT32_MAX ||
      o->g2_blocks > UINT32_MAX || o->speedup < 0) {
    snprintf(err, errlen,
             "simulation options out of range (trace, workers 1..%d, batch 1..%d, "
             "G1/G2 blocks, speedup >= 0)",
             KVP_SIM_MAX_WORKERS, KVP_SIM_MAX_BATCH);
    return KVP_EINVAL;
  }
  /* Before the trace is read; the publisher would take "" for its defaults. */
  if (!kvp_subject_token_valid(o->ns)) {
    snprintf(err, errlen, "namespace: '%s' is not 1..64 characters of [A-Za-z0-9_-]",
             o->ns ? o->ns : "");
    return KVP_EINVAL;
  }
  if (o->servers == NULL || o->servers[0] == '\0') {
    snprintf(err, errlen, "servers: empty");
    return KVP_EINVAL;
  }
  if ((s = calloc(1, sizeof *s)) == NULL ||
      (s->w = calloc((size_t)o->workers, sizeof *s->w)) == NULL) {
    free(s);
    snprintf(err, errlen, "out of memory");
    return KVP_ENOMEM;
  }
  s->o = *o;
  s->layout = (kvp_layout_t){.num_layers = o->layers,
                             .page_size = BLOCK_TOKENS,
                             .inner_dim = o->inner_dim,
                             .elem_size = 2,
                             .alignment = 64};
  if ((rc = kvp_layout_check(&s->layout)) != 0) {
    snprintf(err, errlen, "layers %u x inner dim %u: %s", o->layers, o->inner_dim,
             kvp_strerror(rc));
    goto fail;
  }
  for (int i = 0; i < o->workers; i++) {
    s->w[i].sim = s;
    s->w[i].index = i;
    snprintf(s->w[i].id, sizeof s->w[i].id, "sim-%d", i);
  }
  if ((rc = load_trace(s, err, errlen)) != 0)
    goto fail;
  for (int i = 0; i < o->workers; i++)
    if ((rc = open_worker(s, &s->w[i], err, errlen)) != 0)
      goto fail;
  *out = s;
  return 0;
fail:
  kvp__sim_destroy(s);
  return rc;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* Frees the oldest running sequence. Returns 0 when none was running. */
static int retire_oldest(worker_t *w) {
  if (w->nlive == 0)
    return 0;
  kvp_seq_free(w->live[w->head]);
  w->head = (w->head + 1) % KVP_SIM_MAX_BATCH;
  w->nlive--;
  return 1;
}

/* The engine's side of a block: it writes the block's identity into its KV
 * bytes when it computes it, and checks them when it reuses it. */
static void engine_touch(worker_t *w, kvp_seq_t *s) {
  kvp_pool_t *g1 = kvp_blockmgr_pool(w->bm, KVP_TIER_G1);
  size_t nb, nh, cached = kvp_seq_cached_tokens(s) / BLOCK_TOKENS;
  const uint32_t *blocks = kvp_seq_blocks(s, &nb);
  const uint64_t *hashes = kvp_seq_hashes(s, &nh);

  for (size_t i = 0; i < nh && i < nb; i++) {
    uint64_t *kv = kvp_pool_block_layer(g1, blocks[i], 0);
    if (i < cached) {
      if (*kv != hashes[i])
        w->corrupt++;
    } else {
      *kv = hashes[i];
    }
  }
}

static int run_request(worker_t *w, const req_t *r, uint64_t rid, uint32_t *tokens) {
  const kvp__sim_t *sim = w->sim;
  kvp_seq_t *s;
  int rc;

  for (size_t b = 0; b < r->n; b++)
    kvp_trace_block_tokens(sim->ids[r->off + b], tokens + b * BLOCK_TOKENS, BLOCK_TOKENS);
  if ((rc = kvp_seq_create(w->bm, tokens, r->input_len, NULL, 0, &s)) != 0)
    return rc;
  while ((rc = kvp_seq_allocate(s)) == KVP_ENOSPC && retire_oldest(w))
    ;
  if (rc != 0) { /* larger than G1 even with nothing else running */
    kvp_seq_free(s);
    w->skipped++;
    return rc == KVP_ENOSPC ? 0 : rc;
  }
  engine_touch(w, s);
  if (w->nlive == sim->o.batch)
    retire_oldest(w);
  w->live[(w->head + w->nlive++) % KVP_SIM_MAX_BATCH] = s;
  for (uint32_t i = 0; sim->o.decode && i < r->output_len; i++) {
    uint32_t tok = (uint32_t)(mix(rid << 20 | i) % 151936u);
    while ((rc = kvp_seq_append(s, tok)) == KVP_ENOSPC && w->nlive > 1 && retire_oldest(w))
      ;
    if (rc == KVP_ENOSPC) {
      w->decode_stops++;
      break;
    }
    if (rc != 0)
      return rc;
  }
  return 0;
}

static void pace(uint64_t start_ns, uint64_t ts_ms, double speedup) {
  uint64_t due = start_ns + (uint64_t)((double)ts_ms * 1e6 / speedup);
  uint64_t now = kvp__now_ns();
  if (due <= now)
    return;
  struct timespec ts = {(time_t)((due - now) / 1000000000u), (long)((due - now) % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  const kvp__sim_t *sim = w->sim;
  uint32_t *tokens = NULL;
  size_t tokens_cap = 0;
  uint64_t start = kvp__now_ns();

  for (size_t i = 0; i < w->nreqs && w->rc == 0; i++) {
    const req_t *r = &w->reqs[i];
    if (KVP_ARRAY_RESERVE(tokens, tokens_cap, r->n * BLOCK_TOKENS, BLOCK_TOKENS) != 0) {
      w->rc = KVP_ENOMEM;
      break;
    }
    if (sim->o.speedup > 0)
      pace(start, r->ts_ms, sim->o.speedup);
    w->rc = run_request(w, r, (uint64_t)i * (uint64_t)sim->o.workers + (uint64_t)w->index, tokens);
    atomic_fetch_add_explicit(&w->done, 1, memory_order_relaxed);
    kvp_publisher_poll(w->pub); /* answer resync requests on the owner thread */
  }
  /* Requests finish: their blocks stay cached. */
  while (retire_oldest(w))
    ;
  free(tokens);
  kvp_blockmgr_drain(w->bm); /* the G3 puts, and their events, are done */
  if (w->rc == 0) {
    kvp_publisher_poll(w->pub);
    w->rc = kvp_publisher_flush(w->pub, 60000);
  }
  return NULL;
}

int kvp__sim_run(kvp__sim_t *s) {
  int started = 0, rc = 0;
  uint64_t t0 = kvp__now_ns();

  for (int i = 0; i < s->o.workers; i++)
    atomic_store(&s->w[i].done, 0);
  for (; started < s->o.workers; started++)
    if (pthread_create(&s->w[started].thread, NULL, worker_main, &s->w[started]) != 0) {
      rc = KVP_ENOMEM;
      break;
    }
  for (int i = 0; i < started; i++) {
    pthread_join(s->w[i].thread, NULL);
    if (rc == 0)
      rc = s->w[i].rc;
  }
  s->seconds = (double)(kvp__now_ns() - t0) / 1e9;
  return rc;
}

size_t kvp__sim_progress(kvp__sim_t *s) {
  size_t n = 0;
  for (int i = 0; i < s->o.workers; i++)
    n += atomic_load_explicit(&s->w[i].done, memory_order_relaxed);
  return n;
}

size_t kvp__sim_requests(const kvp__sim_t *s) {
  return s->nreqs;
}

size_t kvp__sim_block_refs(const kvp__sim_t *s) {
  return s->nids;
}

double kvp__sim_seconds(const kvp__sim_t *s) {
  return s->seconds;
}

void kvp__sim_worker_stats(kvp__sim_t *s, int i, kvp__sim_worker_stats_t *out) {
  worker_t *w = &s->w[i];
  kvp_blockmgr_stats_t bs;
  kvp_publisher_stats_t ps;

  kvp_blockmgr_stats(w->bm, &bs);
  kvp_publisher_stats(w->pub, &ps);
  *out =
      (kvp__sim_worker_stats_t){.requests = w->nreqs,
                                .skipped = w->skipped,
                                .decode_stops = w->decode_stops,
                                .corrupt = w->corrupt,
                                .lookups = bs.lookups,
                                .hits_g1 = bs.hits_g1,
                                .hits_g2 = bs.hits_g2,
                                .g1_cached = bs.g1.state[KVP_BLOCK_REGISTERED],
                                .g2_cached = bs.g2.state[KVP_BLOCK_REGISTERED],
                                .g1_evictions = bs.g1.evictions,
                                .offloads = bs.offloads,
                                .onboards = bs.onboards,
                                .events_sent = ps.sent,
                                .events_resent = ps.resent,
                                .events_dropped = ps.dropped,
                                .blocks_sent = ps.blocks,
                                .g3_cached = bs.g3_blocks,
                                .offloads_g3 = bs.offloads_g3,
                                .offloads_g3_lost = bs.offloads_g3_failed + bs.offloads_g3_dropped,
                                .hits_g3 = bs.hits_g3,
                                .hits_g4 = bs.hits_g4,
                                .rc = w->rc};
}

int kvp__sim_write_expect(kvp__sim_t *s, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "w");
  int rc = 0;

  if (f == NULL) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return KVP_EIO;
  }
  for (int i = 0; i < s->o.workers && rc == 0; i++) {
    int last = s->w[i].g3 ? KVP_TIER_G3 : KVP_TIER_G2;
    for (int tier = KVP_TIER_G1; tier <= last && rc == 0; tier++) {
      uint64_t *h, *p;
      size_t n;
      if ((rc = kvp_blockmgr_snapshot(s->w[i].bm, tier, &h, &p, &n)) != 0) {
        snprintf(err, errlen, "%s: snapshot of %s G%d: %s", path, s->w[i].id, tier,
                 kvp_strerror(rc));
        break;
      }
      for (size_t k = 0; k < n; k++)
        fprintf(f, "%s,%d,%" PRId64 "\n", s->w[i].id, tier, kvp_hash_to_i64(h[k]));
      free(h);
      free(p);
    }
  }
  if ((ferror(f) | fclose(f)) != 0 && rc == 0) {
    snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    rc = KVP_EIO;
  }
  return rc;
}

void kvp__sim_destroy(kvp__sim_t *s) {
  if (s == NULL)
    return;
  for (int i = 0; i < s->o.workers; i++) {
    kvp_blockmgr_destroy(s->w[i].bm); /* finishes its G3 puts, which emit */
    kvp_publisher_close(s->w[i].pub);
    kvp_volume_close(s->w[i].g3);
    kvp_volume_close(s->w[i].g4);
    free(s->w[i].reqs);
  }
  free(s->w);
  free(s->ids);
  free(s);
}
