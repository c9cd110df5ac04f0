/* kvplane-sim: simulated workers replaying a request trace; the workers are
 * library code (src/sim/sim.h), this is the command line and the report.
 * With --expect the final registered sets are written as CSV
 * (worker,tier,hash as signed 64-bit) for comparison with the advisor's
 * database. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "metrics/build_info.h"
#include "sim/sim.h"

static void usage(FILE *f) {
  kvp__sim_opts_t o;
  kvp__sim_opts_init(&o);
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
          "      --partitions N     the servers map the event subjects to N partitions\n"
          "                         (kvplane nats-config N): in jetstream mode each worker\n"
          "                         publishes into its partition's stream (made when\n"
          "                         absent), not the unpartitioned one; with --volumes\n"
          "                         it keeps its objects under <ns>-p<partition>, where\n"
          "                         its partition's advisor tiers them\n"
          "      --g1-blocks N      G1 capacity per worker in 512-token blocks (default %zu)\n"
          "      --g2-blocks N      G2 capacity per worker, 0 for none (default %zu)\n"
          "      --layers N         KV layers per block (default %u)\n"
          "      --inner-dim N      fp16 elements per token and layer (default %u)\n"
          "      --batch N          sequences running at once per worker, 1..%d (default %zu)\n"
          "      --no-decode        do not append the output tokens\n"
          "  -l, --limit N          replay only the first N requests (default: all)\n"
          "  -x, --speedup X        pace requests at X times trace time (default 0: no pacing)\n"
          "  -e, --expect FILE      write the final registered sets as CSV worker,tier,hash\n"
          "      --volumes DIR      G3 and G4: each worker offloads G2 victims to its own posix\n"
          "                         volume g3-<worker> (DIR/g3/<worker>) and reads G4 from\n"
          "                         g4-shared (DIR/g4); scratch volumes, fsync off\n"
          "      --g3-capacity N    bytes per worker's G3 volume (default 0: unbounded)\n"
          "      --plugin-dir DIR   volume plugins (default $KVPLANE_PLUGIN_DIR, else\n"
          "                         lib/kvplane/plugins of the installed tree)\n"
          "  -V, --version          print the version and build, and exit\n"
          "  -h, --help             this text\n\n"
          "Per worker it prints the distinct events it sent and, apart, the JetStream\n"
          "resends of them (a resend is not a new event).\n\n"
          "exit status: 0 when every event was published (and acked in JetStream mode),\n"
          "1 for bad arguments or an unreadable trace, 2 when publishing failed or a\n"
          "reused block's KV bytes were wrong.\n",
          o.servers, o.ns, o.workers, o.g1_blocks, o.g2_blocks, o.layers, o.inner_dim,
          KVP_SIM_MAX_BATCH, o.batch);
}

/* Digits only: strtoull takes "-1" as 2^64 - 1 and clamps an overflow to
 * it, which --g3-capacity (up to UINT64_MAX) would have taken. */
static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
    fprintf(stderr, "kvplane-sim: %s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n", opt,
            s, min, max);
    exit(1);
  }
  return v;
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
                                       {"layers", required_argument, 0, 3},
                                       {"inner-dim", required_argument, 0, 4},
                                       {"batch", required_argument, 0, 5},
                                       {"no-decode", no_argument, 0, 6},
                                       {"speedup", required_argument, 0, 'x'},
                                       {"expect", required_argument, 0, 'e'},
                                       {"volumes", required_argument, 0, 7},
                                       {"g3-capacity", required_argument, 0, 8},
                                       {"plugin-dir", required_argument, 0, 9},
                                       {"partitions", required_argument, 0, 10},
                                       {"version", no_argument, 0, 'V'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  kvp__sim_opts_t o;
  kvp__sim_t *sim;
  const char *expect = NULL;
  char err[512];
  int c, status = 0;

  kvp__sim_opts_init(&o);
  if (strrchr(argv[0], '/') != NULL)
    argv[0] = strrchr(argv[0], '/') + 1; /* getopt's messages: the name, not the path */
  while ((c = getopt_long(argc, argv, "t:s:n:w:m:l:x:e:hV", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      o.trace = optarg;
      break;
    case 's':
      if (optarg[0] == '\0') { /* the publisher would take "" for its default server */
        fprintf(stderr, "kvplane-sim: --server: empty\n");
        return 1;
      }
      o.servers = optarg;
      break;
    case 'n':
      /* Checked here: "" would be published as "default", and another bad
       * name failed only once the trace was read, with exit status 2. */
      if (!kvp_subject_token_valid(optarg)) {
        fprintf(stderr, "kvplane-sim: --ns: '%s' is not 1..64 characters of [A-Za-z0-9_-]\n",
                optarg);
        return 1;
      }
      o.ns = optarg;
      break;
    case 'w':
      o.workers = (int)parse_count("--workers", optarg, 1, KVP_SIM_MAX_WORKERS);
      break;
    case 'm':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "jetstream") != 0) {
        fprintf(stderr, "kvplane-sim: --mode: '%s' is not core or jetstream\n", optarg);
        return 1;
      }
      o.mode = strcmp(optarg, "core") == 0 ? KVP_PUB_CORE : KVP_PUB_JETSTREAM;
      break;
    case 1:
      o.g1_blocks = parse_count("--g1-blocks", optarg, 1, 1u << 30);
      break;
    case 2:
      o.g2_blocks = parse_count("--g2-blocks", optarg, 0, 1u << 30);
      break;
    case 3:
      o.layers = (uint32_t)parse_count("--layers", optarg, 1, 1024);
      break;
    case 4:
      o.inner_dim = (uint32_t)parse_count("--inner-dim", optarg, 1, 1u << 20);
      break;
    case 5:
      o.batch = parse_count("--batch", optarg, 1, KVP_SIM_MAX_BATCH);
      break;
    case 6:
      o.decode = 0;
      break;
    case 'l':
      o.limit = parse_count("--limit", optarg, 1, UINT32_MAX);
      break;
    case 'x': {
      char *end;
      errno = 0;
      o.speedup = strtod(optarg, &end);
      if (*optarg == '\0' || *end != '\0' || errno != 0 || !isfinite(o.speedup) ||
          !(o.speedup >= 0)) {
        fprintf(stderr, "kvplane-sim: --speedup: '%s' is not a number >= 0\n", optarg);
        return 1;
      }
      break;
    }
    case 'e':
      expect = optarg;
      break;
    case 7:
      o.volume_dir = optarg;
      break;
    case 8:
      o.g3_capacity = parse_count("--g3-capacity", optarg, 0, UINT64_MAX);
      break;
    case 9:
      o.plugin_dir = optarg;
      break;
    case 10:
      o.partitions = (uint32_t)parse_count("--partitions", optarg, 1, KVP_PARTITIONS_MAX);
      break;
    case 'V':
      kvp__build_print_version(stdout, "kvplane-sim");
      return 0;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 1;
    }
  }
  if (o.trace == NULL || optind != argc) {
    fprintf(stderr, "kvplane-sim: %s\n", o.trace ? "unexpected argument" : "--trace is required");
    usage(stderr);
    return 1;
  }
  int rc = kvp__sim_create(&o, &sim, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "kvplane-sim: %s\n", err);
    /* Bad options and an unreadable trace are the caller's; the rest is
     * publishing (NATS) or memory. */
    return rc == KVP_EINVAL || rc == KVP_EIO || rc == KVP_EPROTO || rc == KVP_ETOOBIG ? 1 : 2;
  }
  fprintf(stderr, "kvplane-sim: %zu requests, %zu block references from %s\n",
          kvp__sim_requests(sim), kvp__sim_block_refs(sim), o.trace);
  kvp__sim_run(sim);

  uint64_t lookups = 0, hits = 0, g2hits = 0, g34hits = 0, events = 0, resent = 0, blocks = 0,
           corrupt = 0;
  for (int i = 0; i < o.workers; i++) {
    kvp__sim_worker_stats_t ws;
    kvp__sim_worker_stats(sim, i, &ws);
    lookups += ws.lookups;
    hits += ws.hits_g1;
    g2hits += ws.hits_g2;
    g34hits += ws.hits_g3 + ws.hits_g4;
    events += ws.events_sent;
    resent += ws.events_resent;
    blocks += ws.blocks_sent;
    corrupt += ws.corrupt;
    if (ws.rc != 0) {
      fprintf(stderr, "kvplane-sim: worker sim-%d: %s\n", i, kvp_strerror(ws.rc));
      status = 2;
    }
    printf("sim-%d: %zu requests (%" PRIu64 " larger than G1, skipped), G1 %" PRIu64
           " blocks cached, G2 %" PRIu64 ", G3 %" PRIu64 ", %" PRIu64 " G1 evictions, %" PRIu64
           " offloads, %" PRIu64 " onboards, %" PRIu64 " to G3 (%" PRIu64 " lost), %" PRIu64
           " read from G3, %" PRIu64 " from G4, %" PRIu64 " events sent, %" PRIu64
           " resent, %" PRIu64 " dropped\n",
           i, ws.requests, ws.skipped, ws.g1_cached, ws.g2_cached, ws.g3_cached, ws.g1_evictions,
           ws.offloads, ws.onboards, ws.offloads_g3, ws.offloads_g3_lost, ws.hits_g3, ws.hits_g4,
           ws.events_sent, ws.events_resent, ws.events_dropped);
  }
  printf("replay: %.2f s, %" PRIu64 " prompt blocks looked up, G1 hit rate %.1f%%, G2 (onboarded) "
         "%.1f%%, G3/G4 (read back) %.1f%%, %" PRIu64 " distinct events carrying %" PRIu64
         " block hashes (%" PRIu64 " JetStream resends apart), %" PRIu64
         " reused blocks with wrong bytes\n",
         kvp__sim_seconds(sim), lookups, lookups ? 100.0 * (double)hits / (double)lookups : 0.0,
         lookups ? 100.0 * (double)g2hits / (double)lookups : 0.0,
         lookups ? 100.0 * (double)g34hits / (double)lookups : 0.0, events, blocks, resent,
         corrupt);
  if (corrupt > 0)
    status = 2;
  if (expect != NULL && kvp__sim_write_expect(sim, expect, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane-sim: --expect: %s\n", err);
    status = 2;
  }
  kvp__sim_destroy(sim);
  return status;
}
