/* kvp-bench migrate: the tiering engine moving blocks G3 -> G4 between two
 * posix volumes (each copy read and verified at the source, written, read
 * back and verified at the destination, journaled in SQLite), beside a plain
 * loop that reads each block's file and writes it to another directory
 * (read() + write(), the same bytes, no checks). Both in the page cache
 * (fsync off on both sides): the engine's own cost, not the device's.
 *
 *   kvp-bench migrate [--blocks N]
 *
 * Prints MB/s and moves/s at 64 KiB and 2 MiB blocks with the ratio to the
 * plain loop, and the journal's share of the engine's time (the same
 * journal writes, three transactions per round, timed alone). */
#include <fcntl.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "advisor/index.h"
#include "advisor/store.h"
#include "bench.h"
#include "common/clock.h"
#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "tier/engine.h"
#include "tier/journal.h"

static double plain_copy(const char *from, const char *to, size_t n, size_t bytes) {
  char a[1200], b[1200];
  uint8_t *buf = malloc(bytes + KVP_FRAME_HEADER);
  uint64_t t0 = kvp_bench_now_ns();
  mkdir(to, 0700);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = (uint64_t)i + 1;
    snprintf(a, sizeof a, "%s/b/%02x/%016" PRIx64, from, (unsigned)(h >> 56), h);
    snprintf(b, sizeof b, "%s/%016" PRIx64, to, h);
    int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0600);
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

/* The journal's writes for n moves (three transactions), timed alone. */
static double journal_alone(const char *db_path, size_t n) {
  sqlite3 *db = NULL;
  char err[256];
  int64_t *id = malloc(n * sizeof *id);
  if (kvp__tier_journal_open(db_path, &db, err, sizeof err) != 0)
    return 0;
  uint64_t t0 = kvp_bench_now_ns();
  kvp__tier_journal_begin(db);
  for (size_t i = 0; i < n; i++)
    id[i] = kvp__tier_journal_insert(db, i + 1, 3, "g3", 4, "g4", 1, kvp__unix_ms());
  kvp__tier_journal_commit(db);
  kvp__tier_journal_begin(db);
  for (size_t i = 0; i < n; i++)
    kvp__tier_journal_set(db, id[i], "copying", NULL);
  kvp__tier_journal_commit(db);
  kvp__tier_journal_begin(db);
  for (size_t i = 0; i < n; i++)
    kvp__tier_journal_set(db, id[i], "committed", NULL);
  kvp__tier_journal_commit(db);
  double t = (double)(kvp_bench_now_ns() - t0) / 1e9;
  sqlite3_close(db);
  free(id);
  return t;
}

static int run_size(size_t bytes, size_t n) {
  char dir[256], db[300], p3[300], p4[300], plain[300], err[512];
  kvp__adv_index_t *ix = NULL;
  kvp__adv_store_t *st = NULL;
  kvp_volume_t *g3 = NULL;
  kvp__tier_engine_t *e = NULL;
  uv_loop_t loop;
  uint16_t w, v3;
  kvp_advisor_config_t cfg;

  if (kvp_test_tmpdir(dir, sizeof dir) == NULL)
    return 1;
  snprintf(db, sizeof db, "%s/a.db", dir);
  snprintf(p3, sizeof p3, "%s/g3", dir);
  snprintf(p4, sizeof p4, "%s/g4", dir);
  snprintf(plain, sizeof plain, "%s/plain", dir);
  uv_loop_init(&loop);
  kvp__adv_index_create(&ix, n * 2, 3600);
  if (kvp__adv_store_open(&st, db, err, sizeof err) != 0)
    return 1;
  kvp_volume_param_t p[2] = {{"path", p3}, {"fsync", "off"}};
  if (kvp_volume_open(KVP_BINARY_DIR "/plugins", "posix", "g3", p, 2, &g3, err, sizeof err) != 0) {
    fprintf(stderr, "bench migrate: %s\n", err);
    return 1;
  }
  kvp__adv_index_worker(ix, "w", 0, &w);
  kvp__adv_index_volume(ix, "g3", &v3);
  uint8_t *payload = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(i * 31);
  for (size_t i = 0; i < n; i++) {
    kvp_frame_t m = {.hash = (uint64_t)i + 1, .payload_len = bytes};
    payload[0] = (uint8_t)i;
    if (kvp_volume_put_block(g3, "b", &m, payload, err, sizeof err) != 0 ||
        kvp__adv_index_store(ix, (uint64_t)i + 1, 0, 0, w, 3, v3, 16, bytes, 1600000000000ull) != 0)
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
  snprintf(b->plugin, sizeof b->plugin, "posix");
  snprintf(b->params, sizeof b->params, "path=%s\nfsync=off\n", p4);
  if (kvp__tier_engine_open(&cfg, &loop, ix, &e, err, sizeof err) != 0) {
    fprintf(stderr, "bench migrate: %s\n", err);
    return 1;
  }
  double tb = plain_copy(p3, plain, n, bytes);
  uint64_t t0 = kvp_bench_now_ns();
  kvp__tier_stats_t ts = {0};
  while (ts.demoted + ts.failed < n) {
    kvp__tier_engine_round(e);
    while (kvp__tier_engine_busy(e))
      uv_run(&loop, UV_RUN_ONCE);
    kvp__tier_engine_stats(e, &ts);
    if (ts.rounds > n + 10)
      break;
  }
  double te = (double)(kvp_bench_now_ns() - t0) / 1e9;
  double tj = journal_alone(db, n);
  char label[96];
  double mb = (double)(n * bytes) / 1e6;
  snprintf(label, sizeof label, "migrate.posix.%zuKiB.MBps", bytes >> 10);
  kvp_bench_report(label, mb / te, "MB/s", "plain-read-write-copy", mb / tb);
  snprintf(label, sizeof label, "migrate.posix.%zuKiB.moves", bytes >> 10);
  kvp_bench_report(label, (double)ts.demoted / te, "moves/s", "plain-read-write-copy",
                   (double)n / tb);
  snprintf(label, sizeof label, "migrate.posix.%zuKiB.journal_share", bytes >> 10);
  kvp_bench_report(label, 100.0 * tj / te, "%", NULL, 0);
  if (ts.failed)
    printf("# %" PRIu64 " moves failed\n", ts.failed);
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  kvp_volume_close(g3);
  kvp__adv_store_close(st);
  kvp__adv_index_destroy(ix);
  kvp_test_rmtree(dir);
  return ts.demoted == n ? 0 : 1;
}

KVP_BENCH_SUITE(migrate, "tiering: G3 -> G4 moves (verified, journaled) vs a plain read/write "
                         "copy; journal share") {
  size_t n64 = 4096, n2m = 256;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
      n64 = strtoull(argv[++i], NULL, 10);
      n2m = n64 / 16 ? n64 / 16 : 1;
    } else {
      fprintf(stderr, "usage: kvp-bench migrate [--blocks N]\n");
      return 2;
    }
  }
  printf(
      "# posix -> posix in the page cache (fsync off on both sides); the engine reads and\n"
      "# verifies the source, writes, reads back and verifies the copy, and journals each move\n");
  if (run_size(64u << 10, n64) != 0 || run_size(2u << 20, n2m) != 0)
    return 1;
  return 0;
}
