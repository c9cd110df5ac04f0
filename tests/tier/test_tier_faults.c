/* The real kvplane-advisor moving blocks from G3 to G4 while storage
 * fails under it, on real mounts: a tmpfs holds the volumes, and in the
 * first case G4 is a bind mount of a directory on it. Cases:
 *   - the G4 bind mount dropped (umount -l) mid-run, then mounted again;
 *   - the G4 directory deleted and re-created empty mid-run, then the
 *     advisor restarted (it makes the empty directory a new volume, and
 *     its scrub drops the locations whose objects went with the old one);
 *   - the G4 directory renamed away mid-run, then back;
 *   - a flipped byte in a G3 copy and in a G4 copy (verifying scrub).
 * Each ends with the advisor stopped cleanly and checks: no block lost
 * but the ones the fault destroyed, none in two volumes, every frame
 * valid, the database's G3/G4 locations equal to the volumes' files, and
 * a bounded log.
 *
 * The mounts are made in a mount namespace of this process's own
 * (unshare), which the advisor it forks shares: they go with the process
 * however it ends, a crash or a timeout's kill included; teardown also
 * unmounts them. Not root, or no mounts allowed: exit 77 (skipped). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "index/index.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "natsd.h"
#include "store/store.h"

#define NG3 120 /* blocks 1..NG3 start in G3 (3x its capacity) */
#define NG4 10  /* blocks NG3+1..NG3+NG4 start in G4 */
#define NBLOCKS (NG3 + NG4)
#define PAYLOAD 4000
#define FRAME (PAYLOAD + KVP_FRAME_HEADER)
#define MAX_LOG_LINES 30

typedef struct fx_s {
  kvp_natsd_t natsd;
  char dir[256], mnt[300], db[320], log[320], conf[320], p3[320], p4[320], g4data[320];
  int bind;                  /* G4 is a bind mount of g4data */
  int mounted;               /* the tmpfs at mnt */
  int bound;                 /* the bind mount at p4 */
  uint8_t lost[NBLOCKS + 1]; /* blocks the fault destroyed */
} fx_t;

static kvp_volume_t *open_posix(const char *name, const char *path) {
  kvp_volume_t *v = NULL;
  char err[256];
  kvp_volume_param_t p[2] = {{"path", path}, {"fsync", "off"}};
  if (kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", name, "k", p, 2, &v, err, sizeof err) != 0)
    fail_msg("%s", err);
  return v;
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

static int db_has(const char *db, uint64_t h, const char *vol) {
  char sql[200];
  snprintf(sql, sizeof sql,
           "SELECT count(*) FROM block_locations WHERE hash = %lld AND volume = '%s'", (long long)h,
           vol);
  return q1(db, sql) > 0;
}

/* Flips one payload byte of block h in the posix volume at root. */
static void flip(const char *root, uint64_t h) {
  char path[512];
  uint8_t c;
  snprintf(path, sizeof path, "%s/k/%02x/%016llx", root, (unsigned)(h >> 56),
           (unsigned long long)h);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, &c, 1, KVP_FRAME_HEADER + 100), 1);
  c ^= 0x01;
  assert_int_equal(pwrite(fd, &c, 1, KVP_FRAME_HEADER + 100), 1);
  close(fd);
}

static void unmount_all(fx_t *f) {
  if (f->bound)
    umount2(f->p4, MNT_DETACH);
  if (f->mounted)
    umount2(f->mnt, MNT_DETACH);
  f->bound = f->mounted = 0;
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  if (geteuid() != 0) {
    print_message("not root: the mount tests are skipped\n");
    exit(77);
  }
  /* A mount namespace of our own, private from /: nothing mounted here
   * outlives the process. */
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    print_message("no mount namespace (%s): the mount tests are skipped\n", strerror(errno));
    exit(77);
  }
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->mnt, sizeof f->mnt, "%s/m", f->dir);
  snprintf(f->db, sizeof f->db, "%s/advisor.db", f->dir);
  snprintf(f->log, sizeof f->log, "%s/advisor.log", f->dir);
  snprintf(f->conf, sizeof f->conf, "%s/advisor.conf", f->dir);
  snprintf(f->p3, sizeof f->p3, "%s/g3", f->mnt);
  snprintf(f->g4data, sizeof f->g4data, "%s/g4data", f->mnt);
  if (mkdir(f->mnt, 0700) != 0 || mount("tmpfs", f->mnt, "tmpfs", 0, "size=64m") != 0) {
    print_message("mount -t tmpfs failed (%s): the mount tests are skipped\n", strerror(errno));
    kvp_test_rmtree(f->dir);
    exit(77);
  }
  f->mounted = 1;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  unmount_all(f);
  if (getenv("KVP_TEST_KEEP") == NULL)
    kvp_test_rmtree(f->dir);
  else
    print_message("kept %s\n", f->dir);
  free(f);
  return 0;
}

/* G4 at p4: a bind mount of g4data (bind), else g4data itself. */
static void g4_bind(fx_t *f) {
  if (!f->bind) {
    snprintf(f->p4, sizeof f->p4, "%s", f->g4data);
    return;
  }
  snprintf(f->p4, sizeof f->p4, "%s/g4", f->dir);
  assert_int_equal(mkdir(f->g4data, 0700), 0);
  mkdir(f->p4, 0700);
  assert_int_equal(mount(f->g4data, f->p4, NULL, MS_BIND, NULL), 0);
  f->bound = 1;
}

/* Blocks 1..NG3 in G3 and NG3+1..NBLOCKS in G4 (chains of four), and a
 * database that places them there, as the advisor would have. */
static void seed(fx_t *f) {
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  uint8_t payload[PAYLOAD];
  uint16_t w, v3, v4;
  char err[256];

  kvp_volume_t *g3 = open_posix("g3", f->p3), *g4 = open_posix("g4", f->p4);
  assert_int_equal(kvp__index_create(1024, 3600, &ix), 0);
  assert_int_equal(kvp__index_worker(ix, "w", 0, &w), 0);
  assert_int_equal(kvp__index_volume(ix, "g3", &v3), 0);
  assert_int_equal(kvp__index_volume(ix, "g4", &v4), 0);
  for (int i = 1; i <= NBLOCKS; i++) {
    int root = (i - 1) % 4 == 0, in4 = i > NG3;
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = !root,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(in4 ? g4 : g3, "k", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(ix, (uint64_t)i, !root, (uint64_t)i - 1, w, in4 ? 4 : 3,
                                      in4 ? v4 : v3, 16, FRAME,
                                      1700000000000ull + (uint64_t)i * 1000),
                     0);
  }
  assert_int_equal(kvp__store_open(f->db, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp_volume_close(g3);
  kvp_volume_close(g4);
}

static void write_conf(fx_t *f, int verify) {
  FILE *c = fopen(f->conf, "w");
  assert_non_null(c);
  fprintf(c,
          "[nats]\nmode = core\n[advisor]\nnamespace = k\n[store]\npath = %s\n"
          "flush_interval = 30ms\nhistory_interval = 0\n[workers]\nheartbeat_timeout = 0\n"
          "[log]\nlevel = warn\n"
          "[tiering]\nenabled = true\nplugin_dir = %s\ninterval = 100ms\ngrace = 150ms\n"
          "min_residence = 0s\nmax_moves = 8\nhigh_watermark = 0.3\nlow_watermark = 0.1\n"
          "scrub_interval = 300ms\nscrub_files_per_s = 5000\nscrub_verify = %s\n"
          "[volume g3]\ntier = 3\nplugin = posix\ncapacity = %d\npath = %s\nfsync = off\n"
          "[volume g4]\ntier = 4\nplugin = posix\npath = %s\nfsync = off\n",
          f->db, KVP_BUILD_PLUGIN_DIR, verify ? "true" : "false", 40 * FRAME, f->p3, f->p4);
  fclose(c);
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

/* Waits (at most 30 s) until no move is open and G3 is at or below its
 * high watermark for 5 polls in a row, then stops the advisor with
 * SIGTERM; it must exit 0. */
static void settle_and_stop(fx_t *f, pid_t pid) {
  int settled = 0, st;
  for (int t = 0; t < 300 && settled < 5; t++) {
    usleep(100000);
    int64_t open = q1(f->db, "SELECT count(*) FROM migrations"
                             " WHERE state IN ('queued', 'copying', 'committed')");
    int64_t in_g3 = q1(f->db, "SELECT count(*) FROM block_locations WHERE volume = 'g3'");
    settled = open == 0 && in_g3 >= 0 && in_g3 <= 12 ? settled + 1 : 0;
  }
  kill(pid, SIGTERM);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  if (settled < 5)
    fail_msg("the advisor did not settle in 30 s; its log: %s", f->log);
}

static int log_lines(const fx_t *f, const char *containing) {
  char line[2048];
  int n = 0;
  FILE *fp = fopen(f->log, "r");
  if (fp == NULL)
    return 0;
  while (fgets(line, sizeof line, fp))
    n += containing == NULL || strstr(line, containing) != NULL;
  fclose(fp);
  return n;
}

/* The checks every case ends with. */
static void check_all(fx_t *f) {
  uint8_t out[PAYLOAD];
  char err[256];
  int n3 = 0, n4 = 0, nlost = 0;
  kvp_volume_t *g3 = open_posix("g3", f->p3), *g4 = open_posix("g4", f->p4);

  for (uint64_t h = 1; h <= NBLOCKS; h++) {
    int a = kvp_volume_exists(g3, "k", h), b = kvp_volume_exists(g4, "k", h);
    if (f->lost[h]) {
      if (a + b != 0)
        fail_msg("block %llu, destroyed by the fault, is in g3 %d, g4 %d", (unsigned long long)h, a,
                 b);
      nlost++;
    } else if (a + b != 1) {
      fail_msg("block %llu is in %d volumes (g3 %d, g4 %d)", (unsigned long long)h, a + b, a, b);
    }
    if (a + b == 1) {
      kvp_frame_t m;
      assert_int_equal(
          kvp_volume_get_block(a ? g3 : g4, "k", h, &m, out, sizeof out, err, sizeof err), 0);
      assert_int_equal(out[0], (uint8_t)h);
    }
    if (db_has(f->db, h, "g3") != a || db_has(f->db, h, "g4") != b)
      fail_msg("block %llu: in g3 %d (database %d), in g4 %d (database %d)", (unsigned long long)h,
               a, db_has(f->db, h, "g3"), b, db_has(f->db, h, "g4"));
    n3 += a;
    n4 += b;
  }
  int lines = log_lines(f, NULL);
  print_message("%d blocks in g3, %d in g4, %d destroyed by the fault; %lld moves failed; %d log "
                "lines\n",
                n3, n4, nlost,
                (long long)q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed'"),
                lines);
  if (lines > MAX_LOG_LINES)
    fail_msg("%d log lines (at most %d): %s", lines, MAX_LOG_LINES, f->log);
  kvp_volume_close(g3);
  kvp_volume_close(g4);
}

static void start(fx_t *f, int verify) {
  g4_bind(f);
  seed(f);
  write_conf(f, verify);
  assert_int_equal(kvp_natsd_start(&f->natsd, NULL), 0);
}

static void stop(fx_t *f) {
  kvp_natsd_stop(&f->natsd);
}

static void g4_mount_dropped_mid_run_and_remounted(void **state) {
  fx_t *f = *state;
  f->bind = 1;
  start(f, 0);
  pid_t pid = spawn_advisor(f);
  usleep(400000);
  /* The mount goes: p4 is the bare mountpoint, an empty directory. */
  assert_int_equal(umount2(f->p4, MNT_DETACH), 0);
  f->bound = 0;
  usleep(2000000);
  DIR *d = opendir(f->p4);
  assert_non_null(d);
  int entries = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    entries += e->d_name[0] != '.';
  closedir(d);
  assert_int_equal(entries, 0); /* nothing written under the bare mountpoint */
  assert_int_equal(mount(f->g4data, f->p4, NULL, MS_BIND, NULL), 0);
  f->bound = 1;
  settle_and_stop(f, pid);
  check_all(f);
  assert_true(log_lines(f, "is offline") >= 1);
  stop(f);
}

static void g4_directory_deleted_and_recreated(void **state) {
  fx_t *f = *state;
  char gone[400], cmd[600];
  start(f, 0);
  pid_t pid = spawn_advisor(f);
  usleep(500000);
  /* What was in G4 at that moment is destroyed. */
  kvp_volume_t *g4 = open_posix("g4", f->p4);
  for (uint64_t h = 1; h <= NBLOCKS; h++)
    f->lost[h] = kvp_volume_exists(g4, "k", h) == 1;
  snprintf(gone, sizeof gone, "%s.gone", f->p4);
  assert_int_equal(rename(f->p4, gone), 0);
  assert_int_equal(mkdir(f->p4, 0700), 0);
  kvp_volume_close(g4);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", gone);
  assert_int_equal(system(cmd), 0);
  /* A copy into G4 that was under way may have landed before the rename:
   * lost with the rest, or still in G3 (the move failed). */
  usleep(1000000);
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* A moved block's G3 source deleted after the directory went is
   * destroyed too: it was in the old G4 only. */
  kvp_volume_t *g3 = open_posix("g3", f->p3);
  for (uint64_t h = 1; h <= NBLOCKS; h++)
    if (kvp_volume_exists(g3, "k", h) == 0)
      f->lost[h] = 1;
  kvp_volume_close(g3);
  /* The restart makes the empty directory a new volume; its scrub drops
   * the locations the old one took with it. */
  pid = spawn_advisor(f);
  usleep(1500000);
  settle_and_stop(f, pid);
  check_all(f);
  stop(f);
}

static void g4_directory_renamed_away_and_back(void **state) {
  fx_t *f = *state;
  char away[400];
  start(f, 0);
  pid_t pid = spawn_advisor(f);
  usleep(400000);
  snprintf(away, sizeof away, "%s.away", f->p4);
  assert_int_equal(rename(f->p4, away), 0);
  usleep(2000000);
  assert_int_not_equal(access(f->p4, F_OK), 0); /* never re-created */
  assert_int_equal(rename(away, f->p4), 0);
  settle_and_stop(f, pid);
  check_all(f);
  /* One failure per outage, not one per move and round. */
  assert_true(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed' AND"
                        " error NOT LIKE 'skipped:%'") <= 3);
  stop(f);
}

static void a_flipped_byte_in_g3_and_in_g4(void **state) {
  fx_t *f = *state;
  start(f, 1);
  flip(f->p3, 7);
  flip(f->p4, NG3 + 5);
  f->lost[7] = f->lost[NG3 + 5] = 1; /* each the block's only copy */
  pid_t pid = spawn_advisor(f);
  usleep(1500000); /* scrub passes of g3 and g4, verifying, and a move's read */
  settle_and_stop(f, pid);
  check_all(f);
  /* Quarantined once each: one journal row and one log line per copy. */
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE error LIKE 'quarantined:%'"),
                   2);
  assert_int_equal(log_lines(f, "is quarantined"), 2);
  stop(f);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(g4_mount_dropped_mid_run_and_remounted, setup, teardown),
    cmocka_unit_test_setup_teardown(g4_directory_deleted_and_recreated, setup, teardown),
    cmocka_unit_test_setup_teardown(g4_directory_renamed_away_and_back, setup, teardown),
    cmocka_unit_test_setup_teardown(a_flipped_byte_in_g3_and_in_g4, setup, teardown),
};

KVP_TEST_MAIN("tier_faults", tests)
