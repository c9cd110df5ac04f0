/* kill -9 of the real kvplane-advisor while its tiering engine moves blocks
 * between two posix volumes, TIER_KILLS times at random moments, then a
 * clean run to the end: no block lost, none in two volumes, every stored
 * frame checksum-valid, and the database's G3/G4 locations equal to the
 * volumes' contents. The blocks start in G3, placed there by worker "w" in
 * the database the advisor loads; G3 holds 5x its capacity, so about 180
 * demotions are due, 4 per round every 100 ms, with a 150 ms grace period
 * before each source is deleted: kills land in copies, commits, grace
 * periods and source deletes alike. Seeded from the clock (printed). */
#include <fcntl.h>
#include <nats/nats.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "index/index.h"
#include "store/store.h"
#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "natsd.h"

#ifndef TIER_KILLS
#define TIER_KILLS 3
#endif
#define NBLOCKS 200
#define PAYLOAD 4000
#define FRAME (PAYLOAD + KVP_FRAME_HEADER)

typedef struct fx_s {
  kvp_natsd_t natsd;
  char dir[256], db[320], log[320], conf[320], p3[320], p4[320];
  kvp_volume_t *g3, *g4;
} fx_t;

static kvp_volume_t *open_posix(const char *name, const char *path) {
  kvp_volume_t *v = NULL;
  char err[256];
  kvp_volume_param_t p[2] = {{"path", path}, {"fsync", "off"}};
  if (kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", name, p, 2, &v, err, sizeof err) != 0)
    fail_msg("%s", err);
  return v;
}

/* Blocks 1..NBLOCKS in G3 (chains of four: each fourth block is a root),
 * and a database that places them there, as the advisor would have. */
static void seed(fx_t *f) {
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  uint8_t payload[PAYLOAD];
  uint16_t w, v3;
  char err[256];

  assert_int_equal(kvp__index_create(1024, 3600, &ix), 0);
  assert_int_equal(kvp__index_worker(ix, "w", 0, &w), 0);
  assert_int_equal(kvp__index_volume(ix, "g3", &v3), 0);
  for (int i = 1; i <= NBLOCKS; i++) {
    int root = (i - 1) % 4 == 0;
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = !root,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(f->g3, "k", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(ix, (uint64_t)i, !root, (uint64_t)i - 1, w, 3, v3, 16, FRAME,
                                      1700000000000ull + (uint64_t)i * 1000),
                     0);
  }
  assert_int_equal(kvp__store_open(f->db, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  kvp__store_close(st);
  kvp__index_destroy(ix);
}

static pid_t spawn_advisor(fx_t *f) {
  char bin[512], url[128];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(url, sizeof url, "nats.servers=%s", f->natsd.url);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no advisor outlives a failed test */
    int fd = open(f->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(bin, bin, "-c", f->conf, "-o", url, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int64_t q1(const char *db, const char *sql) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(h, 2000);
    if (sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

/* 1 when the database has block h in volume vol (any worker). */
static int db_has(const char *db, uint64_t h, const char *vol) {
  char sql[200];
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM block_locations WHERE hash = %lld AND volume = '%s'", (long long)h,
           vol);
  return q1(db, sql) > 0;
}

static void kill9_during_migrations_loses_nothing(void **state) {
  (void)state;
  fx_t *f = calloc(1, sizeof *f);
  unsigned seed_v = (unsigned)time(NULL);
  char err[256];

  print_message("kill points seeded with %u\n", seed_v);
  srand(seed_v);
  assert_non_null(kvp_test_tmpdir(f->dir, sizeof f->dir));
  snprintf(f->db, sizeof f->db, "%s/advisor.db", f->dir);
  snprintf(f->log, sizeof f->log, "%s/advisor.log", f->dir);
  snprintf(f->conf, sizeof f->conf, "%s/advisor.conf", f->dir);
  snprintf(f->p3, sizeof f->p3, "%s/g3", f->dir);
  snprintf(f->p4, sizeof f->p4, "%s/g4", f->dir);
  f->g3 = open_posix("g3", f->p3);
  f->g4 = open_posix("g4", f->p4);
  seed(f);
  FILE *c = fopen(f->conf, "w");
  assert_non_null(c);
  fprintf(c,
          "[nats]\nmode = core\n[advisor]\nnamespace = k\n[store]\npath = %s\n"
          "flush_interval = 30ms\nhistory_interval = 0\n[workers]\nheartbeat_timeout = 0\n"
          "[log]\nlevel = warn\n"
          "[tiering]\nenabled = true\nplugin_dir = %s\ninterval = 100ms\ngrace = 150ms\n"
          "min_residence = 0s\nmax_moves = 4\nhigh_watermark = 0.3\nlow_watermark = 0.1\n"
          "[volume g3]\ntier = 3\nplugin = posix\ncapacity = %d\npath = %s\nfsync = off\n"
          "[volume g4]\ntier = 4\nplugin = posix\npath = %s\nfsync = off\n",
          f->db, KVP_BUILD_PLUGIN_DIR, 40 * FRAME, f->p3, f->p4);
  fclose(c);
  assert_int_equal(kvp_natsd_start(&f->natsd, NULL), 0);

  for (int k = 0; k < TIER_KILLS; k++) {
    pid_t pid = spawn_advisor(f);
    assert_true(pid > 0);
    nats_Sleep(150 + rand() % 600);
    kill(pid, SIGKILL);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
      print_message("the advisor exited by itself (status %d); its log: %s\n", st, f->log);
      fail();
    }
    print_message("kill -9 #%d: %lld moves finished, %lld unfinished\n", k + 1,
                  (long long)q1(f->db, "SELECT count(*) FROM migrations"
                                       " WHERE state = 'source_deleted'"),
                  (long long)q1(f->db, "SELECT count(*) FROM migrations"
                                       " WHERE state IN ('queued', 'copying', 'committed')"));
  }

  /* A clean run: at or below the high watermark (0.3 x 40 blocks; rounds
   * of 4 moves re-plan from the fill, and demotion starts only above it),
   * every move settled, then SIGTERM. */
  pid_t pid = spawn_advisor(f);
  int settled = 0;
  for (int t = 0; t < 300 && settled < 5; t++) {
    nats_Sleep(100);
    int64_t open = q1(f->db, "SELECT count(*) FROM migrations"
                             " WHERE state IN ('queued', 'copying', 'committed')");
    int64_t in_g3 = q1(f->db, "SELECT count(*) FROM block_locations WHERE volume = 'g3'");
    settled = open == 0 && in_g3 >= 0 && in_g3 <= 12 ? settled + 1 : 0;
  }
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(settled, 5);

  /* Every block in exactly one volume, its frame valid, the database the
   * same, file for file. */
  uint8_t out[PAYLOAD];
  int n3 = 0, n4 = 0;
  for (uint64_t h = 1; h <= NBLOCKS; h++) {
    int a = kvp_volume_exists(f->g3, "k", h), b = kvp_volume_exists(f->g4, "k", h);
    if (a + b != 1)
      fail_msg("block %llu is in %d volumes (g3 %d, g4 %d)", (unsigned long long)h, a + b, a, b);
    kvp_frame_t m;
    assert_int_equal(
        kvp_volume_get_block(a ? f->g3 : f->g4, "k", h, &m, out, sizeof out, err, sizeof err), 0);
    assert_int_equal(out[0], (uint8_t)h);
    assert_int_equal(m.has_parent, (h - 1) % 4 != 0);
    if (m.has_parent)
      assert_int_equal(m.parent, h - 1);
    if (db_has(f->db, h, "g3") != a || db_has(f->db, h, "g4") != b)
      fail_msg("block %llu: in g3 %d (database %d), in g4 %d (database %d)", (unsigned long long)h,
               a, db_has(f->db, h, "g3"), b, db_has(f->db, h, "g4"));
    n3 += a;
    n4 += b;
  }
  assert_int_equal(q1(f->db, "SELECT count(*) FROM block_locations"), NBLOCKS);
  print_message("after %d kills: %d blocks in g3, %d in g4, %lld moves failed\n", TIER_KILLS, n3,
                n4, (long long)q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed'"));
  kvp_volume_close(f->g3);
  kvp_volume_close(f->g4);
  kvp_natsd_stop(&f->natsd);
  kvp_test_rmtree(f->dir);
  free(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(kill9_during_migrations_loses_nothing),
};

KVP_TEST_MAIN("tier_kill", tests)
