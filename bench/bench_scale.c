/* Why this file is long: the CPU rounds, the gathered match and the restart at size share one
 * nats-server and its scratch files.
 *
 * kvp-bench scale: partitioned advisors through one nats-server with the
 * partition mapping (4 partitions). Two figures, as issue 26 asks:
 *
 * - advisor CPU-seconds per million block-events with 1, 2 and 4
 *   advisors, each owning its share of the partitions: the same events
 *   (16 simulated workers, spread over the partitions) are stored in the
 *   partition streams first, then the advisor processes (kvplane-advisor)
 *   start and consume; their utime + stime from start to done (every
 *   event applied and written to SQLite, the CPU no longer moving; the
 *   idle seconds that tell it are not counted), over the block-events
 *   they applied. Per-advisor cost, not wall-clock
 *   speedup (this machine has 2 cores): flat means partitioning scales.
 *   Baseline: 1 advisor. --rounds (3) rounds, each phase on a namespace
 *   of its own and in another order per round; the medians are reported
 *   (one round's figures moved by 10-30% from run to run here).
 * - scatter-gather match latency p50/p99 over the 4 advisors against one
 *   advisor owning every partition, in the same run, the queries
 *   alternating between the two (kvp_client_match_all for both; the same
 *   queries, the same count, the first --warmup of each side not counted).
 *   The machine's load average is printed with them: on a shared machine it
 *   says how much of the figure is other people's work. Then the floor
 *   (bench_natsfloor.c) on the same server: the ratio of 4 answering
 *   processes to 1 when they do nothing but the protocol. */
#define _GNU_SOURCE
#include <jansson.h>
#include <nats/nats.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>
#include <sys/stat.h>

#include "bench.h"
#include "bench_natsfloor.h"
#include "index/index.h"
#include "store/store.h"
#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/subjects.h"
#include "natsd.h"
#include "../tests/advisor/testworker.h"

#define NPART 4
#define NWORK 16
#define MAXADV 4
#define MAXROUNDS 9

typedef struct badv_s {
  pid_t pid;
  char name[32];
} badv_t;

static struct {
  kvp_natsd_t d;
  char dir[64];
  int batches, events;
} g;

/* Interrupted (Ctrl-C, a timeout's SIGTERM): the scratch directory goes
 * too (databases of up to a few hundred MB with --restart-blocks); the
 * advisors and nats-server die with us (PR_SET_PDEATHSIG). Not
 * async-signal-safe, and the process ends right after. */
static void on_interrupt(int sig) {
  if (g.dir[0])
    kvp_test_rmtree(g.dir);
  _exit(128 + sig);
}

static pid_t spawn_advisor(const char *ns, const char *name, const char *owned) {
  char bin[600], servers[128], db[300], o_owned[64], cons[64], nsopt[64], log[300];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", KVP_BINARY_DIR);
  snprintf(servers, sizeof servers, "nats.servers=%s", g.d.url);
  snprintf(db, sizeof db, "store.path=%s/%s-%s.db", g.dir, ns, name);
  snprintf(log, sizeof log, "%s/%s-%s.log", g.dir, ns, name);
  snprintf(o_owned, sizeof o_owned, "partitions.owned=%s", owned);
  snprintf(cons, sizeof cons, "jetstream.consumer=%s-%s", ns, name);
  snprintf(nsopt, sizeof nsopt, "advisor.namespace=%s", ns);
  char *argv[] = {bin,
                  "-o",
                  servers,
                  "-o",
                  db,
                  "-o",
                  o_owned,
                  "-o",
                  cons,
                  "-o",
                  nsopt,
                  "-o",
                  "nats.mode=jetstream",
                  "-o",
                  "partitions.count=4",
                  "-o",
                  "workers.heartbeat_timeout=0",
                  "-o",
                  "store.flush_interval=200ms",
                  "-o",
                  "log.level=warn",
                  NULL};
  return kvp_test_spawn_child(argv, log);
}

/* utime + stime of pid in seconds. */
static double cpu_seconds(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  if (p == NULL ||
      sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Block-events applied so far by each advisor answering on ns (by name
 * order of replies); returns their sum, or -1. *dirty: the blocks they
 * applied and have not written to SQLite yet, summed. */
static long long applied(kvp_client_t *c, int want, int *answered, long long *dirty) {
  char *reply = NULL, err[256];
  long long sum = 0;
  *answered = 0;
  *dirty = 0;
  kvp_client_set_grace(c, 100);
  if (kvp_client_request_all(c, KVP_API_STATS, "{}", 1000, &reply, err, sizeof err) != 0)
    return -1;
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  kvp_client_reply_free(reply);
  for (size_t i = 0; i < json_array_size(reps); i++) {
    json_t *in = json_object_get(json_array_get(reps, i), "ingest");
    sum += json_integer_value(json_object_get(in, "block_events"));
    *dirty += json_integer_value(
        json_object_get(json_object_get(json_array_get(reps, i), "store"), "dirty"));
    (*answered)++;
  }
  json_decref(doc);
  (void)want;
  return sum;
}

/* Publishes the same events (seeded) for namespace ns through JetStream.
 * Returns the block-events a single advisor counts for them, measured by
 * the caller; here the batches published. */
static int publish_events(const char *ns, uint64_t *hashes_out, size_t *nhash) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  tw_t *w[NWORK];
  int rc = 0;
  if (natsConnection_ConnectTo(&nc, g.d.url) != NATS_OK ||
      natsConnection_JetStream(&js, nc, NULL) != NATS_OK)
    return -1;
  for (int i = 0; i < NWORK; i++) {
    char name[16];
    snprintf(name, sizeof name, "bw%d", i);
    w[i] = tw_create(ns, name, 0, 500 + (uint64_t)i, 99 + (uint64_t)i);
  }
  for (int b = 0; b < g.batches && rc == 0; b++) {
    const uint8_t *buf;
    size_t len;
    tw_t *t = w[b % NWORK];
    if (tw_batch(t, g.events, &buf, &len) != 0 || tw_publish(t, nc, js, buf, len) != 0)
      rc = -1;
  }
  /* Queries: leading hashes of each worker's G1 and G2 sets. */
  *nhash = 0;
  for (int i = 0; i < NWORK && hashes_out; i++)
    for (int t = 1; t <= 2; t++) {
      size_t n = tw_hashes(w[i], t, hashes_out + *nhash * 8, 8);
      if (n >= 8)
        (*nhash)++;
    }
  for (int i = 0; i < NWORK; i++)
    tw_destroy(w[i]);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return rc;
}

static const char *const owned_for[MAXADV + 1][MAXADV] = {
    {0}, {"0-3"}, {"0,1", "2,3"}, {0}, {"0", "1", "2", "3"}};

/* k advisors on ns consume everything; returns CPU seconds per million
 * block-events per advisor (the mean), or -1. */
static double phase(const char *ns, int k, badv_t *adv, kvp_client_t **client) {
  kvp_nats_opts_t no;
  char err[256];
  kvp_nats_opts_init(&no);
  snprintf(no.servers, sizeof no.servers, "%s", g.d.url);
  if (kvp_client_open(&no, ns, client, err, sizeof err) != 0)
    return -1;
  for (int i = 0; i < k; i++) {
    snprintf(adv[i].name, sizeof adv[i].name, "a%d", i);
    adv[i].pid = spawn_advisor(ns, adv[i].name, owned_for[k][i]);
  }
  /* Done: every event applied and written to SQLite, and the advisors
   * idle: for 2 s the block-events total does not move, nothing is dirty
   * and the advisors' CPU grows by less than 10 ms each per 250 ms poll
   * (the write-behind's last transactions run after the total stopped
   * moving). The CPU counted is the advisors' when that began: the idle
   * seconds after it (timers, fetches that find nothing, these stats
   * requests) are k advisors idling, not work on the events. */
  long long last = -1, now, dirty = 0;
  int answered, still = 0;
  double cpu = 0, cpu_now, cpu_prev = 0;
  uint64_t t0 = kvp_bench_now_ns();
  while (kvp_bench_now_ns() - t0 < 300ull * 1000000000ull) {
    usleep(250000);
    now = applied(*client, k, &answered, &dirty);
    cpu_now = 0;
    for (int i = 0; i < k; i++)
      cpu_now += cpu_seconds(adv[i].pid);
    if (answered == k && now > 0 && now == last && dirty == 0 && cpu_now - cpu_prev < 0.01 * k) {
      if (still++ == 0)
        cpu = cpu_prev;
      if (still >= 8)
        break;
    } else {
      still = 0;
    }
    last = now;
    cpu_prev = cpu_now;
  }
  printf("# %d advisor(s) on %s: %lld block-events applied, %.2f CPU-s in all (process start to "
         "applied and written)\n",
         k, ns, last, cpu);
  return last > 0 ? cpu / (double)last * 1e6 : -1;
}

static void stop_all(badv_t *adv, int k) {
  for (int i = 0; i < k; i++)
    if (adv[i].pid > 0) {
      kill(adv[i].pid, SIGKILL);
      waitpid(adv[i].pid, NULL, 0);
      adv[i].pid = 0;
    }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static long long file_bytes(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

/* Restart at size: an index of nblocks blocks (chains of 16 over 8
 * workers, a quarter also in G2) flushed to a database, then loaded into a
 * fresh index as an advisor's restart does. Baseline: the same rows read
 * by a plain SELECT loop (SQLite's part of the load). */
static int restart_at_size(size_t nblocks) {
  char path[128], err[256];
  kvp__index_t *ix = NULL, *ix2 = NULL;
  kvp__store_t *st = NULL;
  uint16_t w[8];
  uint64_t seq = 0;
  snprintf(path, sizeof path, "%s/restart.db", g.dir);
  if (kvp__index_create(nblocks, 3600, &ix) != 0 ||
      kvp__store_open(path, &st, err, sizeof err) != 0)
    return -1;
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%d", i);
    kvp__index_worker(ix, name, 0, &w[i]);
  }
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < nblocks; i++) {
    uint64_t parent = h;
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    int first = i % 16 == 0;
    kvp__index_store(ix, h, !first, parent, w[(i / 16) % 8], 1, 0, 16, 1 << 20, 1000);
    if (i % 4 == 0)
      kvp__index_store(ix, h, !first, parent, w[(i / 16) % 8], 2, 0, 16, 1 << 20, 1000);
  }
  kvp__index_stats_t s0;
  kvp__index_stats(ix, &s0);
  if (kvp__store_flush(st, ix, NULL, 0, 1, NULL) != 0)
    return -1;
  kvp__store_close(st);
  kvp__index_destroy(ix);
  long long bytes = file_bytes(path);
  /* The advisor's load, timed as it runs at start. */
  size_t rss0 = kvp_bench_rss_bytes();
  uint64_t t0 = kvp_bench_now_ns();
  if (kvp__index_create(1 << 16, 3600, &ix2) != 0 ||
      kvp__store_open(path, &st, err, sizeof err) != 0 ||
      kvp__store_load(st, ix2, NULL, NULL, &seq) != 0)
    return -1;
  double t_load = (double)(kvp_bench_now_ns() - t0) / 1e9;
  size_t rss1 = kvp_bench_rss_bytes();
  kvp__index_stats_t s1;
  kvp__index_stats(ix2, &s1);
  kvp__store_close(st);
  kvp__index_destroy(ix2);
  /* The baseline: the same rows stepped through, nothing built. */
  sqlite3 *db = NULL;
  sqlite3_stmt *q = NULL;
  long long sink = 0;
  t0 = kvp_bench_now_ns();
  sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
  const char *sql[] = {"SELECT hash, parent, tokens, bytes, first_seen, last_access, hits, freq "
                       "FROM blocks",
                       "SELECT hash, worker, dp_rank, tier, volume FROM block_locations"};
  for (int i = 0; i < 2; i++) {
    sqlite3_prepare_v2(db, sql[i], -1, &q, NULL);
    while (sqlite3_step(q) == SQLITE_ROW)
      sink += sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  double t_scan = (double)(kvp_bench_now_ns() - t0) / 1e9;
  kvp_bench_sink((uint64_t)sink);
  printf("# restart at size: %zu blocks, %zu locations (%zu loaded); database %lld bytes\n",
         s0.blocks, s0.locations, s1.locations, bytes);
  kvp_bench_report("scale.restart_load_s", t_load, "s", "plain-select-of-the-rows", t_scan);
  kvp_bench_report("scale.restart_locations_per_s", (double)s1.locations / t_load, "loc/s", NULL,
                   0);
  kvp_bench_report("scale.db_bytes_per_location", (double)bytes / (double)s0.locations, "B", NULL,
                   0);
  kvp_bench_report("scale.loaded_rss_bytes_per_location",
                   (double)(rss1 - rss0) / (double)s1.locations, "B", NULL, 0);
  return s1.locations == s0.locations ? 0 : -1;
}

KVP_BENCH_SUITE(scale, "partitioned advisors: CPU-s per million block-events with 1, 2, 4 "
                       "advisors; scatter-gather match p50/p99 over 4 advisors vs 1") {
  char conf[128], map[1024];
  int queries = 5000, warmup = 200, rounds = 3, rc = 0;
  long restart_blocks = 2000000;
  g.batches = 8000;
  g.events = 16;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
      g.batches = atoi(argv[++i]);
    else if (strcmp(argv[i], "--queries") == 0 && i + 1 < argc)
      queries = atoi(argv[++i]);
    else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else if (strcmp(argv[i], "--restart-blocks") == 0 && i + 1 < argc)
      restart_blocks = atol(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else {
      fprintf(stderr,
              "usage: kvp-bench scale [--batches N] [--queries N] [--warmup N] "
              "[--rounds N (1..%d)] [--restart-blocks N (0: skip)]\n",
              MAXROUNDS);
      return 2;
    }
  }
  if (queries < 1 || warmup < 0 || rounds < 1 || rounds > MAXROUNDS) {
    fprintf(stderr,
            "kvp-bench scale: --queries is at least 1, --warmup at least 0, --rounds "
            "1..%d\n",
            MAXROUNDS);
    return 2;
  }
  snprintf(g.dir, sizeof g.dir, "/tmp/kvp-bench-scale-XXXXXX");
  if (mkdtemp(g.dir) == NULL)
    return 1;
  signal(SIGINT, on_interrupt);
  signal(SIGTERM, on_interrupt);
  snprintf(conf, sizeof conf, "%s/map.conf", g.dir);
  kvp_partition_mapping_conf(map, sizeof map, NPART);
  FILE *f = fopen(conf, "w");
  if (f != NULL) {
    fputs(map, f);
    fclose(f);
  }
  kvp_natsd_opts_t no = {.jetstream = 1, .config = conf};
  if (f == NULL || kvp_natsd_start(&g.d, &no) != 0) {
    fprintf(stderr, "bench scale: cannot start nats-server\n");
    kvp_test_rmtree(g.dir);
    return 1;
  }
  printf("# one nats-server (JetStream, %d partitions by subject mapping); %d workers, %d batches "
         "of %d events per namespace; advisors are kvplane-advisor processes\n",
         NPART, NWORK, g.batches, g.events);
  static uint64_t qh[NWORK * 2 * 8];
  size_t nq = 0;
  static const int ks[] = {1, 2, 4};
  badv_t adv[3][MAXADV] = {{{0}}};
  kvp_client_t *cl[3] = {0};
  double per[MAXROUNDS][3] = {{0}}, med[3];
  /* Each round runs the three phases in another order (1 2 4, 2 4 1, 4 1
   * 2, ...), each on a namespace of its own: what a phase pays for going
   * first or last (the server's state, the page cache) is spread over all
   * three. The advisors of the last round stay for the match. */
  for (int r = 0; r < rounds && rc == 0; r++) {
    for (int j = 0; j < 3 && rc == 0; j++) {
      int i = (j + r) % 3;
      char ns[16];
      snprintf(ns, sizeof ns, "b%dr%d", ks[i], r);
      /* The streams exist once an advisor made them: an advisor starts
       * before anything is published, later phases publish into them
       * first. */
      if (r == 0 && j == 0) {
        adv[0][0].pid = spawn_advisor("b0", "probe", "0-3");
        usleep(1500000);
        kill(adv[0][0].pid, SIGKILL);
        waitpid(adv[0][0].pid, NULL, 0);
        adv[0][0].pid = 0;
      }
      if (publish_events(ns, qh, &nq) != 0) {
        fprintf(stderr, "bench scale: publishing failed\n");
        rc = 1;
        break;
      }
      if (r > 0) { /* the last round's processes and clients are kept */
        stop_all(adv[i], MAXADV);
        kvp_client_close(cl[i]);
        cl[i] = NULL;
      }
      per[r][i] = phase(ns, ks[i], adv[i], &cl[i]);
      if (per[r][i] <= 0)
        rc = 1;
    }
  }
  if (rc == 0) {
    for (int i = 0; i < 3; i++) {
      double v[MAXROUNDS];
      for (int r = 0; r < rounds; r++)
        v[r] = per[r][i];
      qsort(v, (size_t)rounds, sizeof *v, cmp_double);
      med[i] = rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2;
    }
    for (int r = 0; r < rounds && rounds > 1; r++)
      printf("# round %d: 1 advisor %.3f, 2 advisors %.3f (%.3fx), 4 advisors %.3f (%.3fx) "
             "CPU-s per million\n",
             r, per[r][0], per[r][1], per[r][1] / per[r][0], per[r][2], per[r][2] / per[r][0]);
    if (rounds > 1)
      printf("# the medians of %d rounds:\n", rounds);
    kvp_bench_report("scale.cpu_s_per_mevents_1", med[0], "CPU-s", NULL, 0);
    kvp_bench_report("scale.cpu_s_per_mevents_2", med[1], "CPU-s", "1-advisor", med[0]);
    kvp_bench_report("scale.cpu_s_per_mevents_4", med[2], "CPU-s", "1-advisor", med[0]);
    /* Scatter-gather over 4 (ns b4) against 1 (ns b1), alternating; the
     * 2-advisor phase's processes go first (idle, but 2 cores). */
    stop_all(adv[1], MAXADV);
    uint64_t *lat1 = calloc((size_t)queries, sizeof *lat1),
             *lat4 = calloc((size_t)queries, sizeof *lat4);
    kvp_match_t m[256];
    kvp_gather_info_t info;
    size_t nm;
    char err[256];
    int incomplete = 0;
    kvp_client_set_grace(cl[0], 0);
    kvp_client_set_grace(cl[2], 0);
    double load0[3] = {0}, load1[3] = {0};
    getloadavg(load0, 3);
    for (int q = -warmup; q < queries && nq > 0; q++) {
      const uint64_t *h = qh + (size_t)((q + warmup) % (int)nq) * 8;
      for (int side = 0; side < 2; side++) {
        int which = (q + side) % 2 ? 2 : 0;
        uint64_t t0 = kvp_bench_now_ns();
        if (kvp_client_match_all(cl[which], h, 8, 2000, m, 256, &nm, &info, err, sizeof err) != 0 ||
            info.nmissing)
          incomplete += q >= 0;
        if (q >= 0)
          (which ? lat4 : lat1)[q] = kvp_bench_now_ns() - t0;
      }
    }
    getloadavg(load1, 3);
    printf("# match: %d queries per side after %d of warm-up each, alternating; load average "
           "%.2f before, %.2f after (1 min; 2 cores)\n",
           queries, warmup, load0[0], load1[0]);
    qsort(lat1, (size_t)queries, sizeof *lat1, cmp_u64);
    qsort(lat4, (size_t)queries, sizeof *lat4, cmp_u64);
    kvp_bench_report("scale.match_p50_us_4", (double)lat4[queries / 2] / 1e3, "us", "1-advisor",
                     (double)lat1[queries / 2] / 1e3);
    kvp_bench_report("scale.match_p99_us_4", (double)lat4[queries * 99 / 100] / 1e3, "us",
                     "1-advisor", (double)lat1[queries * 99 / 100] / 1e3);
    if (incomplete)
      printf("# %d gathered answers were incomplete or failed\n", incomplete);
    /* The floor in the same run: the same nats-server, the same counts,
     * answered by processes that do nothing but the protocol. */
    double r50 = (double)lat4[queries / 2] / (double)lat1[queries / 2],
           r99 = (double)lat4[queries * 99 / 100] / (double)lat1[queries * 99 / 100];
    if (kvp_bench_nats_floor(g.d.port, queries, warmup, 512, lat1, lat4) == 0) {
      qsort(lat1, (size_t)queries, sizeof *lat1, cmp_u64);
      qsort(lat4, (size_t)queries, sizeof *lat4, cmp_u64);
      printf("# the floor (kvp-bench natsfloor): 5 processes that speak only the NATS protocol "
             "(blocking sockets, 512-byte answers), 4 answering one request against 1\n");
      kvp_bench_report("scale.floor_p50_us_4", (double)lat4[queries / 2] / 1e3, "us", "1-responder",
                       (double)lat1[queries / 2] / 1e3);
      kvp_bench_report("scale.floor_p99_us_4", (double)lat4[queries * 99 / 100] / 1e3, "us",
                       "1-responder", (double)lat1[queries * 99 / 100] / 1e3);
      printf("# gathered match ratio over the floor's ratio: p50 %.3f, p99 %.3f\n",
             r50 / ((double)lat4[queries / 2] / (double)lat1[queries / 2]),
             r99 / ((double)lat4[queries * 99 / 100] / (double)lat1[queries * 99 / 100]));
    }
    free(lat1);
    free(lat4);
  }
  for (int i = 0; i < 3; i++) {
    stop_all(adv[i], MAXADV);
    kvp_client_close(cl[i]);
  }
  if (rc == 0 && restart_blocks > 0 && restart_at_size((size_t)restart_blocks) != 0) {
    fprintf(stderr, "bench scale: the restart at size failed\n");
    rc = 1;
  }
  kvp_natsd_stop(&g.d);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  kvp_test_rmtree(g.dir);
  g.dir[0] = '\0';
  return rc;
}
