/* kvplane-sim: simulated workers replaying a request trace.
 *
 * Each worker is a thread that embeds what a real worker embeds: a block
 * manager (include/kvplane/blockmgr.h) with G1 and G2 pools, and a publisher
 * fed by the block manager's event sink. Requests are routed to workers
 * round robin. A request's prompt is input_length tokens, the deterministic
 * tokens behind its trace hash ids (kvp_trace_block_tokens), so requests
 * that share leading ids share chained sequence hashes and prefix-cache
 * hits; then output_length decoded tokens are appended. A worker keeps up to
 * --batch sequences running at once, freeing the oldest when it needs room.
 * The "engine" writes each new block's sequence hash into its KV bytes and
 * checks it on every prefix hit, so a wrong onboard copy would be counted.
 * With --expect the final registered sets are written as CSV
 * (worker,tier,hash as signed 64-bit) for comparison with the advisor's
 * database. */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/blockmgr.h"
#include "sim/trace.h"

#define BLOCK_TOKENS 512

typedef struct req_s {
  uint64_t ts_ms;
  size_t off, n; /* into the shared id array */
  uint32_t input_len, output_len;
} req_t;

#define MAX_BATCH 256

typedef struct worker_s {
  int index;
  pthread_t thread;
  req_t *reqs;
  size_t nreqs, cap;
  kvp_blockmgr_t *bm;
  kvp_publisher_t *pub;
  kvp_seq_t *live[MAX_BATCH]; /* running sequences, oldest at head */
  size_t head, nlive;
  uint64_t skipped, corrupt, decode_stops;
  int rc;
} worker_t;

static struct {
  const char *server, *ns, *trace, *expect;
  int workers, mode, decode;
  size_t g1, g2, limit, batch;
  uint32_t layers, inner_dim;
  double speedup;
  uint64_t *ids;
  size_t nids;
} g = {"nats://127.0.0.1:4222", "default", NULL, NULL, 4, KVP_PUB_CORE, 1, 2048, 8192, 0, 8,
       /* The KV bytes the workers really allocate and copy: 2 layers x 512
        * tokens x 8 fp16 elements = 16 KiB per block, so four workers fit in
        * memory on a laptop (a Llama-3-8B block would be 64 MiB). */
       2, 8, 0, NULL, 0};

static void usage(FILE *f) {
  fprintf(f,
          "usage: kvplane-sim --trace FILE [options]\n\n"
          "Replays a Mooncake-format trace (JSONL, plain or gzip) through simulated\n"
          "workers, each embedding a kvplane block manager (G1 and G2 pools, offload on\n"
          "eviction, onboarding) and a kvplane publisher.\n\n"
          "  -t, --trace FILE       trace to replay (required)\n"
          "  -s, --server URL       NATS server(s), comma-separated (default %s)\n"
          "  -n, --ns NAME          namespace (default %s)\n"
          "  -w, --workers N        simulated workers, 1..256 (default %d)\n"
          "  -m, --mode MODE        core or jetstream (default core)\n"
          "      --g1-blocks N      G1 capacity per worker in 512-token blocks (default %zu)\n"
          "      --g2-blocks N      G2 capacity per worker, 0 for none (default %zu)\n"
          "      --layers N         KV layers per block (default %u)\n"
          "      --inner-dim N      fp16 elements per token and layer (default %u)\n"
          "      --batch N          sequences running at once per worker, 1..%d (default %zu)\n"
          "      --no-decode        do not append the output tokens\n"
          "  -l, --limit N          replay only the first N requests (default: all)\n"
          "  -x, --speedup X        pace requests at X times trace time (default 0: no pacing)\n"
          "  -e, --expect FILE      write the final registered sets as CSV worker,tier,hash\n"
          "  -h, --help             this text\n\n"
          "exit status: 0 when every event was published (and acked in JetStream mode),\n"
          "1 for bad arguments or an unreadable trace, 2 when publishing failed or a\n"
          "reused block's KV bytes were wrong.\n",
          g.server, g.ns, g.workers, g.g1, g.g2, g.layers, g.inner_dim, MAX_BATCH, g.batch);
}

static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "kvplane-sim: %s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n", opt,
            s, min, max);
    exit(1);
  }
  return v;
}

static int load_trace(worker_t *w) {
  kvp_trace_t *t;
  kvp_trace_req_t r;
  char err[512];
  size_t count = 0, cap = 0;
  int rc;

  if ((rc = kvp_trace_open(&t, g.trace, err, sizeof err)) != 0) {
    fprintf(stderr, "kvplane-sim: %s\n", err);
    return rc;
  }
  while ((g.limit == 0 || count < g.limit) && (rc = kvp_trace_next(t, &r, err, sizeof err)) != 0) {
    if (rc < 0) {
      fprintf(stderr, "kvplane-sim: %s: %s\n", g.trace, err);
      kvp_trace_close(t);
      return rc;
    }
    if (r.nhash_ids == 0)
      continue;
    if (g.nids + r.nhash_ids > cap) {
      cap = (g.nids + r.nhash_ids) * 2;
      g.ids = realloc(g.ids, cap * sizeof *g.ids);
    }
    /* Round robin: the trace's requests mostly share their first blocks (a
     * common system prompt), so routing by first block would load one worker. */
    worker_t *dst = &w[count % (size_t)g.workers];
    if (dst->nreqs == dst->cap) {
      dst->cap = dst->cap ? dst->cap * 2 : 256;
      dst->reqs = realloc(dst->reqs, dst->cap * sizeof *dst->reqs);
    }
    if (g.ids == NULL || dst->reqs == NULL) {
      kvp_trace_close(t);
      return KVP_ENOMEM;
    }
    memcpy(g.ids + g.nids, r.hash_ids, r.nhash_ids * sizeof *g.ids);
    /* The prompt is input_length tokens, clamped to what the ids cover. */
    uint64_t in = r.input_length;
    if (in == 0 || in > (uint64_t)r.nhash_ids * BLOCK_TOKENS)
      in = (uint64_t)r.nhash_ids * BLOCK_TOKENS;
    dst->reqs[dst->nreqs++] =
        (req_t){r.timestamp_ms, g.nids, r.nhash_ids, (uint32_t)in,
                (uint32_t)(r.output_length > 65536 ? 65536 : r.output_length)};
    g.nids += r.nhash_ids;
    count++;
  }
  kvp_trace_close(t);
  fprintf(stderr, "kvplane-sim: %zu requests, %zu block references from %s\n", count, g.nids,
          g.trace);
  return 0;
}

/* The block manager is created after the publisher (it needs the
 * publisher's sink), so the snapshot callback goes through the worker. */
static int worker_snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  worker_t *w = ctx;
  return kvp_blockmgr_snapshot(w->bm, tier, hashes, parents, n);
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
  w->head = (w->head + 1) % MAX_BATCH;
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
  kvp_seq_t *s;
  int rc;

  for (size_t b = 0; b < r->n; b++)
    kvp_trace_block_tokens(g.ids[r->off + b], tokens + b * BLOCK_TOKENS, BLOCK_TOKENS);
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
  if (w->nlive == g.batch)
    retire_oldest(w);
  w->live[(w->head + w->nlive++) % MAX_BATCH] = s;
  for (uint32_t i = 0; g.decode && i < r->output_len; i++) {
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

static void *worker_main(void *arg) {
  worker_t *w = arg;
  uint32_t *tokens = NULL;
  size_t tokens_cap = 0;
  uint64_t start = kvp__now_ns();

  for (size_t i = 0; i < w->nreqs && w->rc == 0; i++) {
    const req_t *r = &w->reqs[i];
    if (r->n * BLOCK_TOKENS > tokens_cap) {
      tokens_cap = r->n * BLOCK_TOKENS;
      free(tokens);
      if ((tokens = malloc(tokens_cap * sizeof *tokens)) == NULL) {
        w->rc = KVP_ENOMEM;
        break;
      }
    }
    if (g.speedup > 0) {
      uint64_t due = start + (uint64_t)((double)r->ts_ms * 1e6 / g.speedup);
      uint64_t now = kvp__now_ns();
      if (due > now) {
        struct timespec ts = {(time_t)((due - now) / 1000000000u),
                              (long)((due - now) % 1000000000u)};
        nanosleep(&ts, NULL);
      }
    }
    w->rc = run_request(w, r, (uint64_t)i * (uint64_t)g.workers + (uint64_t)w->index, tokens);
    kvp_publisher_poll(w->pub); /* answer resync requests on the owner thread */
  }
  /* Requests finish: their blocks stay cached. */
  while (retire_oldest(w))
    ;
  free(tokens);
  if (w->rc == 0) {
    kvp_publisher_poll(w->pub);
    w->rc = kvp_publisher_flush(w->pub, 60000);
  }
  return NULL;
}

static void write_expect(worker_t *w) {
  FILE *f = fopen(g.expect, "w");
  if (f == NULL) {
    perror(g.expect);
    return;
  }
  for (int i = 0; i < g.workers; i++) {
    for (int tier = KVP_TIER_G1; tier <= KVP_TIER_G2; tier++) {
      uint64_t *h, *p;
      size_t n;
      if (kvp_blockmgr_snapshot(w[i].bm, tier, &h, &p, &n) != 0)
        continue;
      for (size_t k = 0; k < n; k++)
        fprintf(f, "sim-%d,%d,%" PRId64 "\n", i, tier, kvp_hash_to_i64(h[k]));
      free(h);
      free(p);
    }
  }
  fclose(f);
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"trace", required_argument, 0, 't'},   {"server", required_argument, 0, 's'},
      {"ns", required_argument, 0, 'n'},      {"workers", required_argument, 0, 'w'},
      {"mode", required_argument, 0, 'm'},    {"g1-blocks", required_argument, 0, 1},
      {"g2-blocks", required_argument, 0, 2}, {"limit", required_argument, 0, 'l'},
      {"layers", required_argument, 0, 3},    {"inner-dim", required_argument, 0, 4},
      {"batch", required_argument, 0, 5},     {"no-decode", no_argument, 0, 6},
      {"speedup", required_argument, 0, 'x'}, {"expect", required_argument, 0, 'e'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  worker_t *w;
  char err[512];
  int c, status = 0;

  while ((c = getopt_long(argc, argv, "t:s:n:w:m:l:x:e:h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      g.trace = optarg;
      break;
    case 's':
      g.server = optarg;
      break;
    case 'n':
      g.ns = optarg;
      break;
    case 'w':
      g.workers = (int)parse_count("--workers", optarg, 1, 256);
      break;
    case 'm':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "jetstream") != 0) {
        fprintf(stderr, "kvplane-sim: --mode: '%s' is not core or jetstream\n", optarg);
        return 1;
      }
      g.mode = strcmp(optarg, "core") == 0 ? KVP_PUB_CORE : KVP_PUB_JETSTREAM;
      break;
    case 1:
      g.g1 = parse_count("--g1-blocks", optarg, 1, 1u << 30);
      break;
    case 2:
      g.g2 = parse_count("--g2-blocks", optarg, 0, 1u << 30);
      break;
    case 3:
      g.layers = (uint32_t)parse_count("--layers", optarg, 1, 1024);
      break;
    case 4:
      g.inner_dim = (uint32_t)parse_count("--inner-dim", optarg, 1, 1u << 20);
      break;
    case 5:
      g.batch = parse_count("--batch", optarg, 1, MAX_BATCH);
      break;
    case 6:
      g.decode = 0;
      break;
    case 'l':
      g.limit = parse_count("--limit", optarg, 1, UINT32_MAX);
      break;
    case 'x': {
      char *end;
      g.speedup = strtod(optarg, &end);
      if (*end != '\0' || g.speedup < 0) {
        fprintf(stderr, "kvplane-sim: --speedup: '%s' is not a number >= 0\n", optarg);
        return 1;
      }
      break;
    }
    case 'e':
      g.expect = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 1;
    }
  }
  if (g.trace == NULL || optind != argc) {
    fprintf(stderr, "kvplane-sim: %s\n", g.trace ? "unexpected argument" : "--trace is required");
    usage(stderr);
    return 1;
  }
  kvp_layout_t layout = {.num_layers = g.layers,
                         .page_size = BLOCK_TOKENS,
                         .inner_dim = g.inner_dim,
                         .elem_size = 2,
                         .alignment = 64};
  int lrc = kvp_layout_check(&layout);
  if (lrc != 0) {
    fprintf(stderr, "kvplane-sim: --layers/--inner-dim: %s\n", kvp_strerror(lrc));
    return 1;
  }
  w = calloc((size_t)g.workers, sizeof *w);
  if (w == NULL || load_trace(w) != 0)
    return 1;

  for (int i = 0; i < g.workers; i++) {
    kvp_publisher_opts_t o;
    char id[32];
    snprintf(id, sizeof id, "sim-%d", i);
    w[i].index = i;
    kvp_publisher_opts_init(&o);
    snprintf(o.nats.servers, sizeof o.nats.servers, "%s", g.server);
    o.ns = g.ns;
    o.worker_id = id;
    o.model = "mooncake-replay";
    o.mode = g.mode;
    o.stream_create = 1;
    o.block_tokens = BLOCK_TOKENS;
    o.block_bytes = kvp_layout_block_stride(&layout);
    o.snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2);
    /* Resync snapshots: called inside kvp_publisher_poll on the worker's own
     * thread, the one that owns the cache. */
    o.snapshot = worker_snapshot;
    o.snapshot_ctx = &w[i];
    if (kvp_publisher_open(&o, &w[i].pub, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane-sim: worker %s: publisher: %s\n", id, err);
      return 2;
    }
    kvp_blockmgr_opts_t bo;
    kvp_blockmgr_opts_init(&bo);
    bo.layout = layout;
    bo.g1_blocks = (uint32_t)g.g1;
    bo.g2_blocks = (uint32_t)g.g2;
    bo.sink = kvp_publisher_sink(w[i].pub);
    int rc = kvp_blockmgr_create(&bo, &w[i].bm);
    if (rc != 0) {
      fprintf(stderr, "kvplane-sim: worker %s: block manager: %s\n", id, kvp_strerror(rc));
      return 2;
    }
  }
  uint64_t t0 = kvp__now_ns();
  for (int i = 0; i < g.workers; i++)
    pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
  for (int i = 0; i < g.workers; i++)
    pthread_join(w[i].thread, NULL);
  double secs = (double)(kvp__now_ns() - t0) / 1e9;

  uint64_t lookups = 0, hits = 0, g2hits = 0, events = 0, blocks = 0, corrupt = 0;
  for (int i = 0; i < g.workers; i++) {
    kvp_blockmgr_stats_t bs;
    kvp_publisher_stats_t pf;
    kvp_blockmgr_stats(w[i].bm, &bs);
    kvp_publisher_stats(w[i].pub, &pf);
    lookups += bs.lookups;
    hits += bs.hits_g1;
    g2hits += bs.hits_g2;
    events += pf.sent;
    blocks += pf.blocks;
    corrupt += w[i].corrupt;
    if (w[i].rc != 0) {
      fprintf(stderr, "kvplane-sim: worker sim-%d: %s\n", i, kvp_strerror(w[i].rc));
      status = 2;
    }
    printf("sim-%d: %zu requests (%" PRIu64 " larger than G1, skipped), G1 %u blocks cached, "
           "G2 %u, %" PRIu64 " G1 evictions, %" PRIu64 " offloads, %" PRIu64 " onboards, "
           "%" PRIu64 " events sent, %" PRIu64 " dropped\n",
           i, w[i].nreqs, w[i].skipped, bs.g1.state[KVP_BLOCK_REGISTERED],
           bs.g2.state[KVP_BLOCK_REGISTERED], bs.g1.evictions, bs.offloads, bs.onboards, pf.sent,
           pf.dropped);
  }
  printf("replay: %.2f s, %" PRIu64 " prompt blocks looked up, G1 hit rate %.1f%%, G2 (onboarded) "
         "%.1f%%, %" PRIu64 " events carrying %" PRIu64 " block hashes, %" PRIu64
         " reused blocks with wrong bytes\n",
         secs, lookups, lookups ? 100.0 * (double)hits / (double)lookups : 0.0,
         lookups ? 100.0 * (double)g2hits / (double)lookups : 0.0, events, blocks, corrupt);
  if (corrupt > 0)
    status = 2;
  if (g.expect)
    write_expect(w);
  for (int i = 0; i < g.workers; i++) {
    kvp_publisher_close(w[i].pub);
    kvp_blockmgr_destroy(w[i].bm);
    free(w[i].reqs);
  }
  free(w);
  free(g.ids);
  return status;
}
