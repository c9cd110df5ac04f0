/* kvp-bench pipeline: the whole path, end to end on one machine.
 *
 *   kvplane-sim (a child process: N workers, each a block manager and a
 *   publisher, replaying the bundled trace paced or flat out)
 *     -> a real nats-server on loopback (core or JetStream)
 *     -> the advisor (in this process, its real code: consumer, inbox, ingest,
 *        index, write-behind to a real SQLite file)
 *
 * The workers run in another process so that this process's CPU time is the
 * advisor's (plus the few microseconds per batch of the observer). Through
 * kvp__advisor_observe the bench learns, for every batch, its timestamp (set
 * by the worker's publisher when it emitted the batch), when the advisor
 * applied it (answerable by match from then on) and when the flush holding
 * it committed in SQLite. Clocks are one machine's wall clock, ms.
 *
 * Per mode and offered rate it prints the block-events/s offered (first to
 * last emit) and sustained by the advisor (first emit to last apply), freshness to the index and to
 * SQLite (p50/p99/max over batches), the advisor's CPU seconds per million
 * block-events, and the loss check: the database's G1/G2 locations against
 * the workers' final registered sets (kvplane-sim --expect), which must be
 * equal. Baseline in the same run: the same simulated workers flat out,
 * through the same server, to a plain subscriber that only decodes
 * (kvp_wire_decode) and counts.
 *
 *   kvp-bench pipeline [--workers N] [--rates R,R,...] [--modes core,jetstream]
 *                      [--flush-ms MS] [--limit REQUESTS]
 * A rate is block-events/s offered; 0 is flat out. */
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "advisor/freshness.h"
#include "bench.h"
#include "common/clock.h"
#include "harness.h"
#include "advisor/advisor.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "natsd.h"
#include "sim/trace.h"

typedef struct sample_s {
  uint64_t batch_ms, applied_ms, blocks;
} sample_t;

typedef struct commit_s {
  uint64_t mark, ms;
} commit_t;

/* Written by the advisor's loop thread; the arrays are read after it
 * stopped, the atomics while it runs. */
typedef struct obs_s {
  sample_t *s;
  size_t n, cap;
  commit_t *c;
  size_t nc, ccap;
  _Atomic uint64_t blocks, batches, committed;
  uint64_t last_applied_ms;
} obs_t;

static void on_applied(void *ctx, uint64_t n, uint64_t batch_ms, uint64_t now_ms, uint64_t blocks) {
  obs_t *o = ctx;
  if (o->n == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 4096;
    o->s = realloc(o->s, o->cap * sizeof *o->s);
  }
  (void)n; /* == o->n + 1 */
  o->s[o->n++] = (sample_t){batch_ms, now_ms, blocks};
  if (blocks > 0)
    o->last_applied_ms = now_ms;
  atomic_fetch_add(&o->blocks, blocks);
  atomic_store(&o->batches, o->n);
}

static void on_committed(void *ctx, uint64_t mark, uint64_t now_ms) {
  obs_t *o = ctx;
  if (o->nc == o->ccap) {
    o->ccap = o->ccap ? o->ccap * 2 : 256;
    o->c = realloc(o->c, o->ccap * sizeof *o->c);
  }
  o->c[o->nc++] = (commit_t){mark, now_ms};
  atomic_store(&o->committed, mark);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, size_t n, double p) {
  if (n == 0)
    return 0;
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return (double)v[i];
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static struct {
  const char *url, *dir, *trace;
  int workers;
  uint64_t flush_ms;
  size_t limit;
  double trace_ms;          /* the replayed requests' last timestamp */
  double total_blocks_flat; /* block-events of one replay (from the first run) */
} g;

/* Runs kvplane-sim to its end; returns the block-events it sent (its
 * "distinct events carrying N block hashes"), 0 on failure. */
static uint64_t run_sim(const char *ns, const char *mode, double speedup, const char *expect) {
  char prog[512], out[600], workers[16], limit[32], sx[32], line[1024];
  uint64_t blocks = 0;

  snprintf(prog, sizeof prog, "%s/tools/kvplane-sim", KVP_BINARY_DIR);
  snprintf(out, sizeof out, "%s/sim-%s.out", g.dir, ns);
  snprintf(workers, sizeof workers, "%d", g.workers);
  snprintf(limit, sizeof limit, "%zu", g.limit);
  snprintf(sx, sizeof sx, "%.6f", speedup);
  char *argv[24] = {prog,       "-t", (char *)g.trace, "-s", (char *)g.url, "-n",
                    (char *)ns, "-w", workers,         "-m", (char *)mode,  "-x",
                    sx};
  int a = 13;
  if (g.limit) {
    argv[a++] = "-l";
    argv[a++] = limit;
  }
  if (expect) {
    argv[a++] = "-e";
    argv[a++] = (char *)expect;
  }
  argv[a] = NULL;
  int rc = kvp_test_spawn_wait(argv, NULL, out);
  FILE *f = fopen(out, "r");
  while (f && fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "distinct events carrying ");
    if (p)
      blocks = strtoull(p + strlen("distinct events carrying "), NULL, 10);
  }
  if (f)
    fclose(f);
  if (rc != 0 || blocks == 0) {
    fprintf(stderr, "bench pipeline: kvplane-sim exited %d (output in %s)\n", rc, out);
    return 0;
  }
  return blocks;
}

/* --- baseline: a plain subscriber that decodes ---------------------------- */

typedef struct plain_s {
  _Atomic uint64_t first_ms; /* the earliest batch timestamp seen */
  _Atomic uint64_t blocks;
  _Atomic uint64_t last_ms;
  uint64_t errors;
} plain_t;

static void plain_cb(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *ctx) {
  plain_t *p = ctx;
  kvp_wire_batch_t *wb = NULL;
  (void)nc;
  (void)sub;
  if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), NULL,
                      &wb) == 0) {
    const kvp_batch_t *b = kvp_wire_batch_view(wb);
    uint64_t n = 0;
    for (size_t i = 0; i < b->nevents; i++)
      n += b->events[i].nhashes;
    uint64_t first = atomic_load(&p->first_ms);
    while (n > 0 && b->timestamp_ms && (first == 0 || b->timestamp_ms < first) &&
           !atomic_compare_exchange_weak(&p->first_ms, &first, b->timestamp_ms))
      ;
    atomic_fetch_add(&p->blocks, n);
    atomic_store(&p->last_ms, kvp__unix_ms());
    kvp_wire_batch_free(wb);
  } else {
    p->errors++;
  }
  natsMsg_Destroy(m);
}

static double baseline(const char *mode, int row) {
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  plain_t p = {0};
  char ns[32], subject[KVP_SUBJECT_MAX];
  double rate = 0;

  snprintf(ns, sizeof ns, "plain%d", row);
  kvp_subject_events_ns(subject, sizeof subject, ns);
  if (natsConnection_ConnectTo(&nc, g.url) != NATS_OK ||
      natsConnection_Subscribe(&sub, nc, subject, plain_cb, &p) != NATS_OK ||
      natsSubscription_SetPendingLimits(sub, -1, -1) != NATS_OK) {
    fprintf(stderr, "bench pipeline: baseline subscriber: %s\n", nats_GetLastError(NULL));
    goto out;
  }
  natsConnection_Flush(nc);
  uint64_t want = run_sim(ns, mode, 0, NULL);
  uint64_t end = kvp__unix_ms() + 30000;
  while (want && atomic_load(&p.blocks) < want && kvp__unix_ms() < end)
    usleep(1000);
  if (want && atomic_load(&p.blocks) >= want) {
    rate =
        (double)want / ((double)(atomic_load(&p.last_ms) - atomic_load(&p.first_ms) + 1) / 1000.0);
    if (g.total_blocks_flat == 0)
      g.total_blocks_flat = (double)want;
  } else {
    fprintf(stderr, "bench pipeline: baseline got %" PRIu64 " of %" PRIu64 " block-events\n",
            atomic_load(&p.blocks), want);
  }
out:
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  return rate;
}

/* --- the advisor ------------------------------------------------------------ */

static void *advisor_main(void *arg) {
  kvp_advisor_run(arg);
  return NULL;
}

/* Rows of the workers' expect file missing from the database plus rows of
 * the database's G1/G2 locations the workers do not hold. -1 on error. */
static long long compare_db(const char *db_path, const char *expect) {
  sqlite3 *db = NULL;
  sqlite3_stmt *ins = NULL, *q = NULL;
  long long diff = -1;
  char line[256];
  FILE *f = fopen(expect, "r");

  if (f == NULL || sqlite3_open(db_path, &db) != SQLITE_OK ||
      sqlite3_exec(db, "CREATE TEMP TABLE expect(worker TEXT, tier INTEGER, hash INTEGER)", NULL,
                   NULL, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "INSERT INTO expect VALUES(?1, ?2, ?3)", -1, &ins, NULL) != SQLITE_OK)
    goto out;
  sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
  while (fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (c2 == NULL)
      continue;
    *c1 = '\0';
    sqlite3_bind_text(ins, 1, line, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(ins, 2, atoi(c1 + 1));
    sqlite3_bind_int64(ins, 3, strtoll(c2 + 1, NULL, 10));
    sqlite3_step(ins);
    sqlite3_reset(ins);
  }
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  if (sqlite3_prepare_v2(
          db,
          "SELECT (SELECT count(*) FROM (SELECT worker, tier, hash FROM expect EXCEPT"
          "  SELECT worker, tier, hash FROM block_locations WHERE tier IN (1, 2)))"
          " + (SELECT count(*) FROM (SELECT worker, tier, hash FROM block_locations"
          "  WHERE tier IN (1, 2) EXCEPT SELECT worker, tier, hash FROM expect))",
          -1, &q, NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    diff = sqlite3_column_int64(q, 0);
out:
  if (f)
    fclose(f);
  sqlite3_finalize(ins);
  sqlite3_finalize(q);
  sqlite3_close(db);
  return diff;
}

/* One row: the advisor consumes a replay offered at rate (0: flat out).
 * Returns the sustained block-events/s, 0 on failure. */
static double advisor_row(const char *mode, int js, int row, double rate, double base) {
  kvp_advisor_config_t cfg;
  kvp_advisor_t *adv = NULL;
  obs_t o = {0};
  pthread_t th;
  char ns[32], err[512], expect[600];
  double sustained = 0;

  snprintf(ns, sizeof ns, "pipe%d", row);
  snprintf(expect, sizeof expect, "%s/expect-%s.csv", g.dir, ns);
  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.nats.servers, sizeof cfg.nats.servers, "%s", g.url);
  snprintf(cfg.ns, sizeof cfg.ns, "%s", ns);
  snprintf(cfg.db_path, sizeof cfg.db_path, "%s/%s.db", g.dir, ns);
  cfg.mode = js ? KVP_ADVISOR_JETSTREAM : KVP_ADVISOR_CORE;
  cfg.flush_interval_ms = (int64_t)g.flush_ms;
  cfg.initial_blocks = 1 << 20;
  cfg.queue_max = 1 << 20;
  cfg.heartbeat_timeout_ms = 0;
  cfg.log_level = 1; /* warn */
  cfg.handle_signals = 0;
  if (kvp_advisor_open(&cfg, &adv, err, sizeof err) != 0) {
    fprintf(stderr, "bench pipeline: advisor: %s\n", err);
    return 0;
  }
  kvp__advisor_observe(adv, &(kvp__adv_observer_t){on_applied, on_committed, &o});
  pthread_create(&th, NULL, advisor_main, adv);

  double speedup = 0;
  if (rate > 0) {
    /* The replay offers total_blocks_flat block-events over trace_ms / speedup. */
    speedup = rate * g.trace_ms / 1000.0 / g.total_blocks_flat;
  }
  double cpu0 = cpu_seconds();
  uint64_t want = run_sim(ns, mode, speedup, expect);
  uint64_t end = kvp__unix_ms() + 60000;
  while (want && atomic_load(&o.blocks) < want && kvp__unix_ms() < end)
    usleep(1000);
  uint64_t applied_all = atomic_load(&o.blocks) >= want && want > 0;
  end = kvp__unix_ms() + 10000;
  while (atomic_load(&o.committed) < atomic_load(&o.batches) && kvp__unix_ms() < end)
    usleep(1000);
  double cpu = cpu_seconds() - cpu0;
  kvp_advisor_stop(adv);
  pthread_join(th, NULL);
  kvp_advisor_close(adv);

  if (!applied_all) {
    fprintf(stderr,
            "bench pipeline: %s rate %.0f: the advisor applied %" PRIu64 " of %" PRIu64
            " block-events\n",
            mode, rate, atomic_load(&o.blocks), want);
    goto out;
  }
  /* Freshness per batch (those with events and a timestamp). */
  uint64_t *la = malloc(o.n * sizeof *la), *lc = malloc(o.n * sizeof *lc);
  size_t n = 0, ci = 0;
  for (size_t i = 0; i < o.n; i++) {
    while (ci < o.nc && o.c[ci].mark < i + 1)
      ci++;
    if (o.s[i].blocks == 0 || o.s[i].batch_ms == 0)
      continue;
    uint64_t b = o.s[i].batch_ms;
    la[n] = o.s[i].applied_ms > b ? o.s[i].applied_ms - b : 0;
    lc[n] = ci < o.nc && o.c[ci].ms > b ? o.c[ci].ms - b : 0;
    n++;
  }
  qsort(la, n, sizeof *la, cmp_u64);
  qsort(lc, n, sizeof *lc, cmp_u64);
  char name[96];
  const char *r = rate > 0 ? "" : "flat";
  char rs[32];
  if (rate > 0)
    snprintf(rs, sizeof rs, "%.0fk", rate / 1000);
  else
    snprintf(rs, sizeof rs, "%s", r);
  /* Both from the first batch the workers emitted (the simulator's start-up,
   * loading the trace, is not the pipeline's time). */
  uint64_t first = UINT64_MAX, last_emit = 0;
  for (size_t i = 0; i < o.n; i++)
    if (o.s[i].blocks > 0 && o.s[i].batch_ms) {
      first = o.s[i].batch_ms < first ? o.s[i].batch_ms : first;
      last_emit = o.s[i].batch_ms > last_emit ? o.s[i].batch_ms : last_emit;
    }
  sustained = (double)want / ((double)(o.last_applied_ms - first + 1) / 1000.0);
  double offered = (double)want / ((double)(last_emit - first + 1) / 1000.0);
  long long diff = compare_db(cfg.db_path, expect);
#define FIG(label) (snprintf(name, sizeof name, "pipeline.%s.%s.%s", mode, rs, label), name)
  kvp_bench_report(FIG("offered"), offered, "blk-ev/s", NULL, 0);
  if (rate == 0)
    kvp_bench_report(FIG("sustained"), sustained, "blk-ev/s", "plain-decode-subscriber", base);
  else
    kvp_bench_report(FIG("sustained"), sustained, "blk-ev/s", "offered", offered);
  kvp_bench_report(FIG("index_ms_p50"), pct(la, n, 0.50), "ms", NULL, 0);
  kvp_bench_report(FIG("index_ms_p99"), pct(la, n, 0.99), "ms", NULL, 0);
  kvp_bench_report(FIG("index_ms_max"), n ? (double)la[n - 1] : 0, "ms", NULL, 0);
  kvp_bench_report(FIG("sqlite_ms_p50"), pct(lc, n, 0.50), "ms", NULL, 0);
  kvp_bench_report(FIG("sqlite_ms_p99"), pct(lc, n, 0.99), "ms", NULL, 0);
  kvp_bench_report(FIG("sqlite_ms_max"), n ? (double)lc[n - 1] : 0, "ms", NULL, 0);
  kvp_bench_report(FIG("advisor_cpu_s_per_M"), cpu / ((double)want / 1e6), "cpu-s", NULL, 0);
  kvp_bench_report(FIG("lost_or_extra_rows"), (double)diff, "rows", NULL, 0);
#undef FIG
  free(la);
  free(lc);
out:
  free(o.s);
  free(o.c);
  return sustained;
}

static double trace_span_ms(size_t limit) {
  kvp_trace_t *t;
  kvp_trace_req_t r;
  char err[256];
  uint64_t last = 0;
  size_t n = 0;
  if (kvp_trace_open(g.trace, &t, err, sizeof err) != 0)
    return 0;
  while ((limit == 0 || n < limit) && kvp_trace_next(t, &r, err, sizeof err) == 1) {
    if (r.nhash_ids == 0)
      continue;
    last = r.timestamp_ms > last ? r.timestamp_ms : last;
    n++;
  }
  kvp_trace_close(t);
  return (double)last;
}

KVP_BENCH_SUITE(pipeline, "end to end: simulated workers -> nats-server -> advisor -> SQLite; "
                          "freshness p50/p99/max at offered rates") {
  const char *rates = "0,100000,500000,1000000", *modes = "core,jetstream";
  char dir[] = "/tmp/kvp-bench-pipeline-XXXXXX";
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {.jetstream = 1};
  int row = 0;

  g.workers = 4;
  g.flush_ms = 200;
  g.limit = 0;
  g.trace = kvp_bench_trace_path();
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      g.workers = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rates") == 0 && i + 1 < argc)
      rates = argv[++i];
    else if (strcmp(argv[i], "--modes") == 0 && i + 1 < argc)
      modes = argv[++i];
    else if (strcmp(argv[i], "--flush-ms") == 0 && i + 1 < argc)
      g.flush_ms = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc)
      g.limit = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: kvp-bench pipeline [--workers N] [--rates R,R,...] "
                      "[--modes core,jetstream] [--flush-ms MS] [--limit REQUESTS]\n");
      return 2;
    }
  }
  if (g.workers < 1 || g.workers > 256 || g.flush_ms < 10) {
    fprintf(stderr, "bench pipeline: --workers 1..256, --flush-ms >= 10\n");
    return 2;
  }
  if (mkdtemp(dir) == NULL || kvp_natsd_start(&d, &no) != 0) {
    fprintf(stderr, "bench pipeline: cannot start nats-server\n");
    return 1;
  }
  g.dir = dir;
  g.url = d.url;
  g.trace_ms = trace_span_ms(g.limit);
  printf("# %d workers (kvplane-sim, 4 KiB..16 KiB blocks of 512 tokens), %s, flush every %" PRIu64
         " ms; freshness per batch: worker emit -> applied in the index / committed in SQLite\n",
         g.workers, g.limit ? "the first requests of the trace" : "the whole trace", g.flush_ms);

  int rc = 0;
  char mbuf[64];
  snprintf(mbuf, sizeof mbuf, "%s", modes);
  for (char *save = NULL, *m = strtok_r(mbuf, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
    int js = strcmp(m, "jetstream") == 0;
    if (!js && strcmp(m, "core") != 0) {
      fprintf(stderr, "bench pipeline: mode '%s' is not core or jetstream\n", m);
      rc = 2;
      break;
    }
    double base = baseline(m, row++);
    printf("# %s: baseline (same workers flat out -> plain decoding subscriber): %.0f blk-ev/s\n",
           m, base);
    if (g.total_blocks_flat == 0) {
      rc = 1;
      break;
    }
    char rbuf[256];
    snprintf(rbuf, sizeof rbuf, "%s", rates);
    for (char *s2 = NULL, *r = strtok_r(rbuf, ",", &s2); r; r = strtok_r(NULL, ",", &s2))
      if (advisor_row(m, js, row++, strtod(r, NULL), base) == 0)
        rc = 1;
  }
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
  return rc;
}
