/* kvplane-sim: simulated workers replaying a request trace.
 *
 * Each worker is a thread that owns a simulated two-tier KV cache
 * (src/sim/simcache.h) and a real publisher; requests are routed to workers
 * round robin, each
 * request's blocks are hashed with kvplane's chained sequence hashes over
 * deterministic tokens, and every cache change goes out as KV events over
 * NATS. With --expect the final registered sets are written as CSV
 * (worker,tier,hash as signed 64-bit) so they can be compared with the
 * advisor's database. */
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
#include "sim/simcache.h"
#include "sim/trace.h"

#define BLOCK_TOKENS 512

typedef struct req_s {
  uint64_t ts_ms;
  size_t off, n; /* into the shared id array */
} req_t;

typedef struct worker_s {
  int index;
  pthread_t thread;
  req_t *reqs;
  size_t nreqs, cap;
  kvp_simcache_t *cache;
  kvp_publisher_t *pub;
  int rc;
} worker_t;

static struct {
  const char *server, *ns, *trace, *expect;
  int workers, mode;
  size_t g1, g2, limit;
  uint64_t block_bytes;
  double speedup;
  uint64_t *ids;
  size_t nids;
} g = {"nats://127.0.0.1:4222", "default", NULL, NULL, 4, KVP_PUB_CORE, 2048, 8192, 0,
       /* Llama-3-8B in fp16: 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
        * = 128 KiB per token, 64 MiB per 512-token block. */
       UINT64_C(512) * 131072, 0, NULL, 0};

static void usage(FILE *f) {
  fprintf(f,
          "usage: kvplane-sim --trace FILE [options]\n\n"
          "Replays a Mooncake-format trace (JSONL, plain or gzip) through simulated\n"
          "workers, each with a two-tier (G1/G2) LRU KV cache and a kvplane publisher.\n\n"
          "  -t, --trace FILE       trace to replay (required)\n"
          "  -s, --server URL       NATS server(s), comma-separated (default %s)\n"
          "  -n, --ns NAME          namespace (default %s)\n"
          "  -w, --workers N        simulated workers, 1..256 (default %d)\n"
          "  -m, --mode MODE        core or jetstream (default core)\n"
          "      --g1-blocks N      G1 capacity per worker in 512-token blocks (default %zu)\n"
          "      --g2-blocks N      G2 capacity per worker (default %zu)\n"
          "      --block-bytes N    bytes of KV data per block (default %" PRIu64
          ", Llama-3-8B fp16)\n"
          "  -l, --limit N          replay only the first N requests (default: all)\n"
          "  -x, --speedup X        pace requests at X times trace time (default 0: no pacing)\n"
          "  -e, --expect FILE      write the final registered sets as CSV worker,tier,hash\n"
          "  -h, --help             this text\n\n"
          "exit status: 0 when every event was published (and acked in JetStream mode),\n"
          "1 for bad arguments or an unreadable trace, 2 when publishing failed.\n",
          g.server, g.ns, g.workers, g.g1, g.g2, g.block_bytes);
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
    dst->reqs[dst->nreqs++] = (req_t){r.timestamp_ms, g.nids, r.nhash_ids};
    g.nids += r.nhash_ids;
    count++;
  }
  kvp_trace_close(t);
  fprintf(stderr, "kvplane-sim: %zu requests, %zu block references from %s\n", count, g.nids,
          g.trace);
  return 0;
}

/* The cache is created after the publisher (it needs the publisher's sink),
 * so the snapshot callback goes through the worker. */
static int worker_snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  worker_t *w = ctx;
  return kvp_simcache_snapshot(w->cache, tier, hashes, parents, n);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  uint32_t tokens[BLOCK_TOKENS];
  uint64_t *seq = NULL;
  size_t seq_cap = 0;
  uint64_t start = kvp__now_ns();

  for (size_t i = 0; i < w->nreqs && w->rc == 0; i++) {
    const req_t *r = &w->reqs[i];
    if (r->n > seq_cap) {
      seq_cap = r->n;
      seq = realloc(seq, seq_cap * sizeof *seq);
      if (seq == NULL) {
        w->rc = KVP_ENOMEM;
        break;
      }
    }
    for (size_t b = 0; b < r->n; b++) {
      kvp_trace_block_tokens(g.ids[r->off + b], tokens, BLOCK_TOKENS);
      uint64_t local = kvp_hash_block(tokens, BLOCK_TOKENS, KVP_HASH_SEED);
      seq[b] = b == 0 ? local : kvp_hash_chain(seq[b - 1], local, KVP_HASH_SEED);
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
    w->rc = kvp_simcache_request(w->cache, seq, r->n);
    kvp_publisher_poll(w->pub); /* answer resync requests on the owner thread */
  }
  free(seq);
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
      if (kvp_simcache_snapshot(w[i].cache, tier, &h, &p, &n) != 0)
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
  static const struct option opts[] = {{"trace", required_argument, 0, 't'},
                                       {"server", required_argument, 0, 's'},
                                       {"ns", required_argument, 0, 'n'},
                                       {"workers", required_argument, 0, 'w'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"g1-blocks", required_argument, 0, 1},
                                       {"g2-blocks", required_argument, 0, 2},
                                       {"limit", required_argument, 0, 'l'},
                                       {"block-bytes", required_argument, 0, 3},
                                       {"speedup", required_argument, 0, 'x'},
                                       {"expect", required_argument, 0, 'e'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
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
      g.g2 = parse_count("--g2-blocks", optarg, 1, 1u << 30);
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
  w = calloc((size_t)g.workers, sizeof *w);
  if (w == NULL || load_trace(w) != 0)
    return 1;

  for (int i = 0; i < g.workers; i++) {
    kvp_publisher_opts_t o;
    char id[32];
    snprintf(id, sizeof id, "sim-%d", i);
    w[i].index = i;
    kvp_publisher_opts_init(&o);
    o.servers = g.server;
    o.ns = g.ns;
    o.worker_id = id;
    o.model = "mooncake-replay";
    o.mode = g.mode;
    o.stream_create = 1;
    o.block_tokens = BLOCK_TOKENS;
    o.block_bytes = g.block_bytes;
    o.snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2);
    /* Resync snapshots: called inside kvp_publisher_poll on the worker's own
     * thread, the one that owns the cache. */
    o.snapshot = worker_snapshot;
    o.snapshot_ctx = &w[i];
    if (kvp_publisher_open(&o, &w[i].pub, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane-sim: worker %s: publisher: %s\n", id, err);
      return 2;
    }
    if (kvp_simcache_create(&w[i].cache, g.g1, g.g2, BLOCK_TOKENS, g.block_bytes,
                            kvp_publisher_sink(w[i].pub)) != 0) {
      fprintf(stderr, "kvplane-sim: worker %s: out of memory\n", id);
      return 2;
    }
  }
  uint64_t t0 = kvp__now_ns();
  for (int i = 0; i < g.workers; i++)
    pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
  for (int i = 0; i < g.workers; i++)
    pthread_join(w[i].thread, NULL);
  double secs = (double)(kvp__now_ns() - t0) / 1e9;

  uint64_t hits = 0, g2hits = 0, misses = 0, events = 0, blocks = 0;
  for (int i = 0; i < g.workers; i++) {
    kvp_simcache_figures_t cf;
    kvp_publisher_figures_t pf;
    kvp_simcache_figures(w[i].cache, &cf);
    kvp_publisher_figures(w[i].pub, &pf);
    hits += cf.g1_hits;
    g2hits += cf.g2_hits;
    misses += cf.misses;
    events += pf.sent;
    blocks += pf.blocks;
    if (w[i].rc != 0) {
      fprintf(stderr, "kvplane-sim: worker sim-%d: %s\n", i, kvp_strerror(w[i].rc));
      status = 2;
    }
    printf("sim-%d: %zu requests, G1 %zu blocks, G2 %zu blocks, %" PRIu64 " events sent, %" PRIu64
           " dropped\n",
           i, w[i].nreqs, cf.g1_blocks, cf.g2_blocks, pf.sent, pf.dropped);
  }
  uint64_t refs = hits + g2hits + misses;
  printf("replay: %.2f s, %" PRIu64 " block references, G1 hit rate %.1f%%, G2 hit rate %.1f%%, "
         "%" PRIu64 " events carrying %" PRIu64 " block hashes\n",
         secs, refs, refs ? 100.0 * (double)hits / (double)refs : 0.0,
         refs ? 100.0 * (double)g2hits / (double)refs : 0.0, events, blocks);
  if (g.expect)
    write_expect(w);
  for (int i = 0; i < g.workers; i++) {
    kvp_publisher_close(w[i].pub);
    kvp_simcache_destroy(w[i].cache);
    free(w[i].reqs);
  }
  free(w);
  free(g.ids);
  return status;
}
