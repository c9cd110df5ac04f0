/* kvp-bench migrate: the tiering engine moving blocks G3 -> G4 between two
 * posix volumes (each copy read and verified at the source, written, read
 * back and verified at the destination, journaled in SQLite), beside a plain
 * loop that reads each block's file and writes it to another directory
 * (read() + write(), the same bytes, no checks) into the plugin's layout:
 * the same fan-out directories (<hh>/<hash>, hashes spread over the top
 * byte as sequence hashes are). Both in the page cache (fsync off on both
 * sides): the engine's own cost, not the device's. Each size runs four
 * times on fresh volumes, the plain copy first, then the engine first,
 * then the engine first, then the plain copy first (ABBA), and the figures
 * are over the four: neither side gets the warm cache.
 *
 *   kvp-bench migrate [--blocks N] [--no-s3]
 *
 * Prints MB/s and moves/s at 64 KiB and 2 MiB blocks with the ratio to the
 * plain loop, and the journal's share of the engine's time (the same
 * journal writes, three transactions per round, timed alone). Then the same
 * with G4 on the verifying S3 server (tests/tools/s3_verify.py, the s3 plugin; fewer
 * blocks), beside a loop that reads each block's file and PUTs it through
 * the s3 plugin (framed and checksummed, no read-back, no journal). */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "index/index.h"
#include "store/store.h"
#include "bench.h"
#include "common/clock.h"
#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3v.h"
#include "tier/engine.h"
#include "store/journal.h"

/* Block i's hash: spread over the top byte (the posix fan-out's), never 0. */
static uint64_t hash_of(size_t i) {
  return ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull | 1;
}

static double plain_copy(const char *from, const char *to, size_t n, size_t bytes) {
  char a[1200], b[1300], d[1200];
  uint8_t *buf = malloc(bytes + KVP_FRAME_HEADER);
  uint64_t t0 = kvp_bench_now_ns();
  mkdir(to, 0700);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = hash_of(i);
    snprintf(a, sizeof a, "%s/b/%02x/%016" PRIx64, from, (unsigned)(h >> 56), h);
    snprintf(d, sizeof d, "%s/%02x", to, (unsigned)(h >> 56));
    snprintf(b, sizeof b, "%s/%016" PRIx64, d, h);
    int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 && mkdir(d, 0700) == 0) /* the fan-out directory, once */
      out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ssize_t r = in >= 0 ? read(in, buf, bytes + KVP_FRAME_HEADER) : -1;
    if (out < 0 || r <= 0 || write(out, buf, (size_t)r) != r) {
      fprintf(stderr, "bench migrate: plain copy of %s failed\n", a);
      exit(1);
    }
    close(in);
    close(out);
  }
  free(buf);
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

/* The s3 baseline: each block's frame read from the G3 directory and its
 * payload PUT through the s3 plugin to a volume of its own prefix. */
static double plain_put(const char *from, kvp_volume_t *to, size_t n, size_t bytes) {
  char a[1200], err[512];
  uint8_t *buf = malloc(bytes + KVP_FRAME_HEADER);
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t i = 0; i < n; i++) {
    uint64_t h = hash_of(i);
    snprintf(a, sizeof a, "%s/b/%02x/%016" PRIx64, from, (unsigned)(h >> 56), h);
    int in = open(a, O_RDONLY);
    ssize_t r = in >= 0 ? read(in, buf, bytes + KVP_FRAME_HEADER) : -1;
    kvp_frame_t m = {.hash = h, .payload_len = bytes};
    if (r != (ssize_t)(bytes + KVP_FRAME_HEADER) ||
        kvp_volume_put_block(to, "p", &m, buf + KVP_FRAME_HEADER, err, sizeof err) != 0) {
      fprintf(stderr, "bench migrate: plain put of %s failed: %s\n", a, r < 0 ? "read" : err);
      exit(1);
    }
    close(in);
  }
  free(buf);
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

/* The journal's writes for n moves (three transactions), timed alone. */
static double journal_alone(const char *db_path, size_t n) {
  kvp__journal_t *db = NULL;
  char err[256];
  int64_t *id = malloc(n * sizeof *id);
  if (kvp__journal_open(db_path, &db, err, sizeof err) != 0)
    return 0;
  uint64_t t0 = kvp_bench_now_ns();
  kvp__journal_begin(db);
  for (size_t i = 0; i < n; i++)
    id[i] = kvp__journal_insert(db, i + 1, 3, "g3", 4, "g4", "bench", 1, kvp__unix_ms());
  kvp__journal_commit(db);
  kvp__journal_begin(db);
  for (size_t i = 0; i < n; i++)
    kvp__journal_set(db, id[i], "copying", NULL);
  kvp__journal_commit(db);
  kvp__journal_begin(db);
  for (size_t i = 0; i < n; i++)
    kvp__journal_set(db, id[i], "committed", NULL);
  kvp__journal_commit(db);
  double t = (double)(kvp_bench_now_ns() - t0) / 1e9;
  kvp__journal_close(db);
  free(id);
  return t;
}

/* One run on fresh volumes: the plain side and the engine in the order
 * given (engine_first), their times added to *tb and *te, the journal's
 * alone to *tj. Returns 0, or 1 when a move failed. */
static int run_once(size_t bytes, size_t n, const kvp_s3v_t *s3, int engine_first, double *tb,
                    double *te, double *tj) {
  char dir[256], db[300], p3[300], p4[300], plain[300], err[512];
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  kvp_volume_t *g3 = NULL;
  kvp__tier_engine_t *e = NULL;
  uv_loop_t loop;
  uint16_t w, v3;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;

  if (kvp_test_tmpdir(dir, sizeof dir) == NULL)
    return 1;
  snprintf(db, sizeof db, "%s/a.db", dir);
  snprintf(p3, sizeof p3, "%s/g3", dir);
  snprintf(p4, sizeof p4, "%s/g4", dir);
  snprintf(plain, sizeof plain, "%s/plain", dir);
  uv_loop_init(&loop);
  kvp__index_create(n * 2, 3600, &ix);
  if (kvp__store_open(db, &st, err, sizeof err) != 0)
    return 1;
  kvp_volume_param_t p[2] = {{"path", p3}, {"fsync", "off"}};
  if (kvp_volume_open(KVP_BINARY_DIR "/plugins", "posix", "g3", p, 2, &g3, err, sizeof err) != 0) {
    fprintf(stderr, "bench migrate: %s\n", err);
    return 1;
  }
  kvp__index_worker(ix, "w", 0, &w);
  kvp__index_volume(ix, "g3", &v3);
  uint8_t *payload = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(i * 31);
  for (size_t i = 0; i < n; i++) {
    kvp_frame_t m = {.hash = hash_of(i), .payload_len = bytes};
    payload[0] = (uint8_t)i;
    if (kvp_volume_put_block(g3, "b", &m, payload, err, sizeof err) != 0 ||
        kvp__index_store(ix, hash_of(i), 0, 0, w, 3, v3, 16, bytes, 1600000000000ull) != 0)
      return 1;
  }
  free(payload);

  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.ns, sizeof cfg.ns, "b");
  snprintf(cfg.db_path, sizeof cfg.db_path, "%s", db);
  snprintf(cfg.plugin_dir, sizeof cfg.plugin_dir, "%s", KVP_BINARY_DIR "/plugins");
  cfg.nats.servers[0] = '\0';
  cfg.tiering = 1;
  cfg.tier_residence_ms = 0;
  cfg.tier_grace_ms = 3600000; /* sources stay: the copies alone are timed */
  cfg.tier_max_moves = (int64_t)n;
  cfg.nvolumes = 2;
  kvp_advisor_volume_t *a = &cfg.volumes[0], *b = &cfg.volumes[1];
  snprintf(a->name, sizeof a->name, "g3");
  a->tier = 3;
  snprintf(a->plugin, sizeof a->plugin, "posix");
  a->capacity = 1; /* far over its watermark: every block moves */
  snprintf(a->params, sizeof a->params, "path=%s\nfsync=off\n", p3);
  snprintf(b->name, sizeof b->name, "g4");
  b->tier = 4;
  if (s3 != NULL) {
    snprintf(b->plugin, sizeof b->plugin, "s3");
    snprintf(b->params, sizeof b->params,
             "endpoint=%s\nbucket=%s\naccess_key=%s\nsecret_key=%s\nprefix=g4/\n"
             "timeout_ms=30000\n",
             s3->endpoint, s3->bucket, KVP_S3V_ACCESS, KVP_S3V_SECRET);
  } else {
    snprintf(b->plugin, sizeof b->plugin, "posix");
    snprintf(b->params, sizeof b->params, "path=%s\nfsync=off\n", p4);
  }
  if (kvp__tier_engine_open(kvp__adv_tier_opts(&cfg, &topts), &loop, ix, &e, err, sizeof err) !=
      0) {
    fprintf(stderr, "bench migrate: %s\n", err);
    return 1;
  }
  kvp__tier_stats_t ts = {0};
  for (int side = 0; side < 2; side++) {
    if (side == engine_first) {
      uint64_t t0 = kvp_bench_now_ns();
      if (s3 != NULL) {
        kvp_volume_t *pv = NULL;
        kvp_volume_param_t q[6] = {{"endpoint", s3->endpoint},     {"bucket", s3->bucket},
                                   {"access_key", KVP_S3V_ACCESS}, {"secret_key", KVP_S3V_SECRET},
                                   {"prefix", "plain/"},           {"timeout_ms", "30000"}};
        if (kvp_volume_open(KVP_BINARY_DIR "/plugins", "s3", "plain", q, 6, &pv, err, sizeof err) !=
            0) {
          fprintf(stderr, "bench migrate: %s\n", err);
          return 1;
        }
        t0 = kvp_bench_now_ns(); /* the open is not a copy */
        plain_put(p3, pv, n, bytes);
        kvp_volume_close(pv);
      } else {
        plain_copy(p3, plain, n, bytes);
      }
      *tb += (double)(kvp_bench_now_ns() - t0) / 1e9;
      continue;
    }
    uint64_t t0 = kvp_bench_now_ns();
    while (ts.demoted + ts.failed < n) {
      kvp__tier_engine_round(e);
      while (kvp__tier_engine_busy(e))
        uv_run(&loop, UV_RUN_ONCE);
      kvp__tier_engine_stats(e, &ts);
      if (ts.rounds > n + 10)
        break;
    }
    *te += (double)(kvp_bench_now_ns() - t0) / 1e9;
  }
  *tj += journal_alone(db, n);
  if (ts.failed)
    printf("# %" PRIu64 " moves failed\n", ts.failed);
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  kvp_volume_close(g3);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp_test_rmtree(dir);
  return ts.demoted == n ? 0 : 1;
}

/* Four runs of one size, ABBA, and the figures over them. */
static int run_size(size_t bytes, size_t n, const kvp_s3v_t *s3) {
  double tb = 0, te = 0, tj = 0;
  static const int engine_first[4] = {0, 1, 1, 0};
  for (int r = 0; r < 4; r++)
    if (run_once(bytes, n, s3, engine_first[r], &tb, &te, &tj) != 0)
      return 1;
  const char *kind = s3 ? "s3" : "posix", *base = s3 ? "s3-plugin-put" : "plain-read-write-copy";
  char label[96];
  double mb = 4.0 * (double)(n * bytes) / 1e6;
  snprintf(label, sizeof label, "migrate.%s.%zuKiB.MBps", kind, bytes >> 10);
  kvp_bench_report(label, mb / te, "MB/s", base, mb / tb);
  snprintf(label, sizeof label, "migrate.%s.%zuKiB.moves", kind, bytes >> 10);
  kvp_bench_report(label, 4.0 * (double)n / te, "moves/s", base, 4.0 * (double)n / tb);
  snprintf(label, sizeof label, "migrate.%s.%zuKiB.journal_share", kind, bytes >> 10);
  kvp_bench_report(label, 100.0 * tj / te, "%", NULL, 0);
  return 0;
}

KVP_BENCH_SUITE(migrate, "tiering: G3 -> G4 moves (verified, journaled) vs a plain read/write "
                         "copy; journal share") {
  size_t n64 = 4096, n2m = 256;
  int with_s3 = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
      n64 = strtoull(argv[++i], NULL, 10);
      n2m = n64 / 16 ? n64 / 16 : 1;
    } else if (strcmp(argv[i], "--no-s3") == 0) {
      with_s3 = 0;
    } else {
      fprintf(stderr, "usage: kvp-bench migrate [--blocks N] [--no-s3]\n");
      return 2;
    }
  }
  printf(
      "# posix -> posix in the page cache (fsync off on both sides); the engine reads and\n"
      "# verifies the source, writes, reads back and verifies the copy, and journals each move\n");
  if (run_size(64u << 10, n64, NULL) != 0 || run_size(2u << 20, n2m, NULL) != 0)
    return 1;
  if (!with_s3)
    return 0;
  kvp_s3v_t s3 = {0};
  if (kvp_s3v_start(&s3, NULL) != 0) {
    fprintf(stderr, "bench migrate: the verifying S3 server did not start (scripts/setup.sh "
                    "installs it; --no-s3 skips this part)\n");
    return 1;
  }
  printf("# posix -> s3 on the local verifying S3 server (%s): the same engine, G4 through the s3 "
         "plugin\n",
         s3.endpoint);
  size_t s64 = n64 / 16 ? n64 / 16 : 1, s2m = n2m / 8 ? n2m / 8 : 1;
  int rc = run_size(64u << 10, s64, &s3) != 0 || run_size(2u << 20, s2m, &s3) != 0;
  kvp_s3v_stop(&s3);
  return rc;
}
