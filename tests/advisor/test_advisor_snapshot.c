/* The index snapshot (store/store_snapshot.c): read only while current.
 * Real SQLite files; the last case runs the real kvplane-advisor under
 * JetStream, stops it cleanly (the snapshot is written), restarts it,
 * changes the index and kills it with -9: the next load must equal the
 * rows, not the stale snapshot.
 *
 * Why this file is long: the index comparison the four cases share, and
 * the daemon case's setup (stream, workers, spawn, wait). */
#include <fcntl.h>
#include <math.h>
#include <nats/nats.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "index/index.h"
#include "index/walk.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "natsd.h"
#include "store/store.h"
#include "testworker.h"

#define NOW 1800000000000ull

/* --- equality of two indexes, by names (ids may differ) ------------------ */

typedef struct cmp_s {
  const kvp__index_t *a, *b;
  char why[256];
  size_t blocks, locations;
} cmp_t;

static int loc_key(const kvp__index_t *ix, const kvp__index_loc_t *l, char *out, size_t n) {
  uint32_t dp = 0;
  const char *w = kvp__index_worker_name(ix, l->worker, &dp);
  const char *v = kvp__index_volume_name(ix, l->volume);
  return snprintf(out, n, "%s/%u/G%u/%s", w ? w : "?", dp, l->tier, v ? v : "?");
}

static int cmp_key(const void *x, const void *y) {
  return strcmp(x, y);
}

static int same_block(void *ctx, const kvp__index_block_t *b, const kvp__index_loc_t *locs,
                      size_t n) {
  cmp_t *c = ctx;
  kvp__index_block_t o;
  kvp__index_loc_t ol[64];
  size_t on = 0;
  char ka[64][96], kb[64][96];
  c->blocks++;
  c->locations += n;
  if (kvp__index_get(c->b, b->hash, &o, ol, 64, &on) != 0) {
    snprintf(c->why, sizeof c->why, "block %016llx missing", (unsigned long long)b->hash);
    return -1;
  }
  if (o.parent != b->parent || o.tokens != b->tokens || o.bytes != b->bytes || o.hits != b->hits ||
      o.last_access_ms != b->last_access_ms || fabs(o.freq - b->freq) > 1e-9 || on != n || n > 64) {
    snprintf(c->why, sizeof c->why, "block %016llx differs (%zu vs %zu locations)",
             (unsigned long long)b->hash, n, on);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    loc_key(c->a, &locs[i], ka[i], sizeof ka[i]);
    loc_key(c->b, &ol[i], kb[i], sizeof kb[i]);
  }
  qsort(ka, n, sizeof ka[0], cmp_key);
  qsort(kb, n, sizeof kb[0], cmp_key);
  for (size_t i = 0; i < n; i++)
    if (strcmp(ka[i], kb[i]) != 0) {
      snprintf(c->why, sizeof c->why, "block %016llx: location %s vs %s",
               (unsigned long long)b->hash, ka[i], kb[i]);
      return -1;
    }
  return 0;
}

static void assert_same_index(const kvp__index_t *a, const kvp__index_t *b) {
  cmp_t c = {.a = a, .b = b};
  kvp__index_stats_t sb;
  if (kvp__index_each(a, same_block, &c) != 0)
    fail_msg("%s", c.why);
  kvp__index_stats(b, &sb);
  assert_int_equal(c.blocks, sb.blocks);
  assert_int_equal(c.locations, sb.locations);
}

/* Loads path into *ix; snapshot 0: the rows only. Returns whether the
 * snapshot was read. */
static int load(const char *path, int snapshot, kvp__index_t **ix) {
  kvp__store_t *st = NULL;
  char err[256];
  uint64_t seq;
  assert_int_equal(kvp__index_create(16, 3600, ix), 0);
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  kvp__store_use_snapshot(st, snapshot);
  int rc = kvp__store_load(st, *ix, NULL, NULL, &seq);
  if (rc != 0)
    fail_msg("load: %s", kvp_strerror(rc));
  int used = kvp__store_loaded_snapshot(st);
  kvp__store_close(st);
  return used;
}

/* The default load (snapshot allowed) equals the rows; returns whether it
 * read the snapshot. */
static int reload_equals_rows(const char *path) {
  kvp__index_t *rows = NULL, *def = NULL;
  assert_int_equal(load(path, 0, &rows), 0);
  int used = load(path, 1, &def);
  assert_same_index(def, rows);
  assert_same_index(rows, def);
  kvp__index_destroy(rows);
  kvp__index_destroy(def);
  return used;
}

/* --- store-level cases ---------------------------------------------------- */

typedef struct fx_s {
  char dir[256], path[300];
  kvp__index_t *ix;
  kvp__store_t *st;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char err[256];
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->path, sizeof f->path, "%s/advisor.db", f->dir);
  if (kvp__index_create(16, 3600, &f->ix) != 0 ||
      kvp__store_open(f->path, &f->st, err, sizeof err) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp__store_close(f->st);
  kvp__index_destroy(f->ix);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* nblocks blocks in chains of 8 over 5 workers (one with a dp rank), G1
 * to G4, volumes for G3/G4, a few blocks with 5 locations, hits. */
static void fill(kvp__index_t *ix, size_t nblocks, uint64_t salt) {
  uint16_t w[5], v[3];
  char name[32];
  for (int i = 0; i < 5; i++) {
    snprintf(name, sizeof name, "gpu%d", i);
    assert_int_equal(kvp__index_worker(ix, name, i == 4 ? 3 : 0, &w[i]), 0);
  }
  assert_int_equal(kvp__index_volume(ix, "ssd0", &v[1]), 0);
  assert_int_equal(kvp__index_volume(ix, "s3-bucket", &v[2]), 0);
  v[0] = 0;
  uint64_t prev = 0;
  for (size_t i = 0; i < nblocks; i++) {
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ salt;
    int tier = 1 + (int)(i % 4), nloc = i % 97 == 0 ? 5 : 1 + (int)(i % 2);
    for (int k = 0; k < nloc; k++) {
      int t = k == 0 ? tier : 1 + (tier + k) % 4;
      assert_int_equal(kvp__index_store(ix, h, i % 8 != 0, prev, w[(i + (size_t)k) % 5], t,
                                        t >= 3 ? v[1 + (i + (size_t)k) % 2] : 0, 16,
                                        (uint64_t)(1 + i % 3) << 20, NOW + i * 1000),
                       0);
    }
    if (i % 5 == 0)
      assert_int_equal(kvp__index_access(ix, h, tier, 3, NOW + i * 1000 + 500), 0);
    prev = h;
  }
}

static void flush(fx_t *f, uint64_t seq) {
  assert_int_equal(kvp__store_flush(f->st, f->ix, NULL, 0, seq, NULL), 0);
}

static void snapshot_is_read_while_current(void **state) {
  fx_t *f = *state;
  uint64_t bytes = 0;
  fill(f->ix, 5000, 0);
  /* Not with changes the rows do not hold yet. */
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, &bytes), KVP_EBUSY);
  flush(f, 10);
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, &bytes), 0);
  assert_true(bytes > 5000 * 40);
  /* A flush that changes no block keeps it current. */
  flush(f, 11);
  assert_true(reload_equals_rows(f->path));
  kvp__index_t *snap = NULL;
  assert_true(load(f->path, 1, &snap));
  assert_same_index(snap, f->ix); /* the index as it was, too */
  assert_same_index(f->ix, snap);
  kvp__index_destroy(snap);
}

typedef struct progress_s {
  size_t calls;
  uint64_t last_done, last_total;
  int backwards;
} progress_t;

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
  progress_t *p = ctx;
  p->backwards |= done < p->last_done || done > total;
  p->calls++;
  p->last_done = done;
  p->last_total = total;
}

/* The advisor extends systemd's stop timeout from this hook while a large
 * snapshot goes out: one call per chunk (cut at 256 KiB here, about 6k
 * blocks; 8 MiB in the advisor), the last with every block written. */
static void snapshot_write_reports_progress_per_chunk(void **state) {
  fx_t *f = *state;
  progress_t p = {0};
  kvp__index_stats_t st;
  fill(f->ix, 20000, 0);
  flush(f, 10);
  kvp__index_stats(f->ix, &st);
  kvp__store_snapshot_chunk_bytes(f->st, 256 << 10);
  kvp__store_on_progress(f->st, on_progress, &p);
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, NULL), 0);
  kvp__store_on_progress(f->st, NULL, NULL);
  assert_true(p.calls >= 2);
  assert_false(p.backwards);
  assert_int_equal(p.last_total, st.blocks);
  assert_int_equal(p.last_done, st.blocks);
}

static void a_change_after_the_snapshot_makes_it_stale(void **state) {
  fx_t *f = *state;
  uint64_t g0, g1;
  fill(f->ix, 3000, 0);
  flush(f, 10);
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, NULL), 0);
  assert_int_equal(kvp__store_generation(f->st, &g0), 0);
  /* One location less: one block row changes. */
  uint64_t h = 7 * 0x9e3779b97f4a7c15ull;
  kvp__index_loc_t loc;
  size_t n;
  assert_int_equal(kvp__index_get(f->ix, h, NULL, &loc, 1, &n), 0);
  assert_int_equal(kvp__index_remove(f->ix, h, loc.worker, loc.tier, KVP__INDEX_NO_VOLUME), 0);
  flush(f, 11);
  assert_int_equal(kvp__store_generation(f->st, &g1), 0);
  assert_int_equal(g1, g0 + 1);
  assert_false(reload_equals_rows(f->path));
  /* A new snapshot is current again. */
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, NULL), 0);
  assert_true(reload_equals_rows(f->path));
}

static void corrupt(const char *path, int chunk, int at) {
  sqlite3 *db = NULL;
  char sql[200];
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  /* One byte flipped: the chunk's checksum no longer matches. */
  snprintf(sql, sizeof sql,
           "UPDATE index_snapshot SET data = substr(data, 1, %d) || x'ff' || substr(data, %d)"
           " WHERE chunk = %d",
           at, at + 2, chunk);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_changes(db), 1);
  sqlite3_close(db);
}

static void corrupt_snapshot_is_never_used(void **state) {
  fx_t *f = *state;
  char err[256];
  uint64_t seq;
  /* More than one chunk (cut at 256 KiB here: the advisor's 8 MiB would
   * take 250,000 blocks, minutes under ThreadSanitizer). */
  fill(f->ix, 20000, 1);
  flush(f, 10);
  kvp__store_snapshot_chunk_bytes(f->st, 256 << 10);
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, NULL), 0);
  assert_true(reload_equals_rows(f->path));
  /* The first data chunk bad: nothing went in, the rows are read. */
  corrupt(f->path, 1, 100);
  assert_false(reload_equals_rows(f->path));
  /* The second one bad: the first went in; the load fails, the snapshot
   * is deleted, and the next load reads the rows. */
  assert_int_equal(kvp__store_snapshot_write(f->st, f->ix, NULL), 0);
  corrupt(f->path, 2, 1000);
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_load(st, ix, NULL, NULL, &seq), KVP_ECORRUPT);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  assert_false(reload_equals_rows(f->path));
}

/* --- the daemon: snapshot, more flushes, kill -9 --------------------------- */

#define NWORKERS 3

/* notify: the $NOTIFY_SOCKET the advisor gets, or NULL for none. */
static pid_t spawn_advisor(const char *url, const char *dbpath, const char *log,
                           const char *notify) {
  char bin[512], u[160], d[400];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(u, sizeof u, "nats.servers=%s", url);
  snprintf(d, sizeof d, "store.path=%s", dbpath);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no advisor outlives a failed test */
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    if (notify != NULL)
      setenv("NOTIFY_SOCKET", notify, 1);
    execl(bin, bin, "-o", u, "-o", d, "-o", "nats.mode=jetstream", "-o", "advisor.namespace=k",
          "-o", "store.flush_interval=20ms", "-o", "workers.heartbeat_timeout=0", "-o",
          "log.level=info", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int64_t meta_int(const char *path, const char *key) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &s, NULL) ==
        SQLITE_OK) {
      sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
      if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

/* The generation the snapshot's header carries (bytes 8..16, LE), or -1. */
static int64_t snapshot_generation(const char *path) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT data FROM index_snapshot WHERE chunk = 0", -1, &s, NULL) ==
          SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW && sqlite3_column_bytes(s, 0) >= 16) {
    const uint8_t *p = sqlite3_column_blob(s, 0);
    v = 0;
    for (int i = 0; i < 8; i++)
      v |= (int64_t)p[8 + i] << (8 * i);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static int file_has(const char *path, const char *needle) {
  static char buf[1 << 16];
  FILE *fp = fopen(path, "r");
  if (fp == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  buf[n] = 0;
  fclose(fp);
  return strstr(buf, needle) != NULL;
}

/* Publishes n batches round-robin and waits until the advisor committed
 * stream sequence want. */
static void publish_and_wait(tw_t **w, natsConnection *nc, jsCtx *js, int n, const char *db,
                             int64_t want) {
  for (int i = 0; i < n; i++) {
    const uint8_t *buf;
    size_t len;
    assert_int_equal(tw_batch(w[i % NWORKERS], 16, &buf, &len), 0);
    assert_int_equal(tw_publish(w[i % NWORKERS], nc, js, buf, len), 0);
  }
  for (int t = 0; t < 600 && meta_int(db, "stream_seq") != want; t++)
    nats_Sleep(50);
  assert_int_equal(meta_int(db, "stream_seq"), want);
}

static void stop(pid_t pid, int sig) {
  int st;
  kill(pid, sig);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (sig == SIGKILL)
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  else
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void kill9_after_a_snapshot_reloads_the_rows(void **state) {
  (void)state;
  kvp_natsd_t d;
  kvp_natsd_opts_t o = {.jetstream = 1};
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  tw_t *w[NWORKERS];
  char dir[256], db[320], log[320], why[512];

  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(db, sizeof db, "%s/advisor.db", dir);
  snprintf(log, sizeof log, "%s/advisor.log", dir);
  assert_int_equal(kvp_natsd_start(&d, &o), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  const char *subjects[] = {KVP_SUBJECT_EVENTS_ALL};
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = "KVPLANE_EVENTS";
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  assert_int_equal(js_AddStream(&si, js, &sc, NULL, &jerr), NATS_OK);
  jsStreamInfo_Destroy(si);
  for (int i = 0; i < NWORKERS; i++) {
    char name[16];
    snprintf(name, sizeof name, "gpu%d", i);
    w[i] = tw_create("k", name, 0, 1000 + (uint64_t)i, 300 + (uint64_t)i);
  }

  /* 1: events, a clean stop: the snapshot is written and current. The
   * service manager's socket (sdnotify.h) hears the stop and the
   * extensions of its timeout. */
  char notify[400], got[4096] = "";
  snprintf(notify, sizeof notify, "%s/notify.sock", dir);
  int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  assert_true(nfd >= 0 && strlen(notify) < sizeof sa.sun_path);
  strcpy(sa.sun_path, notify);
  assert_int_equal(bind(nfd, (struct sockaddr *)&sa, sizeof sa), 0);
  pid_t pid = spawn_advisor(d.url, db, log, notify);
  publish_and_wait(w, nc, js, 150, db, 150);
  stop(pid, SIGTERM);
  for (ssize_t n; (n = recv(nfd, got + strlen(got), sizeof got - strlen(got) - 2, 0)) > 0;)
    strcat(got, "\n");
  close(nfd);
  assert_non_null(strstr(got, "STOPPING=1\n"));
  assert_non_null(strstr(got, "EXTEND_TIMEOUT_USEC=30000000\n"));
  assert_true(file_has(log, "index snapshot written"));
  int64_t g_snap = snapshot_generation(db);
  assert_true(g_snap > 0);
  assert_int_equal(meta_int(db, "generation"), g_snap);
  assert_true(reload_equals_rows(db));

  /* 2: the restart reads it; more events change blocks, kill -9. */
  pid = spawn_advisor(d.url, db, log, NULL);
  publish_and_wait(w, nc, js, 150, db, 300);
  stop(pid, SIGKILL);
  assert_true(file_has(log, "loaded from the index snapshot"));
  assert_true(meta_int(db, "generation") > g_snap);
  assert_int_equal(snapshot_generation(db), g_snap); /* stale, still there */

  /* 3: the load reads the rows, and the rows are the workers' sets. */
  assert_false(reload_equals_rows(db));
  sqlite3 *sdb = NULL;
  assert_int_equal(sqlite3_open_v2(db, &sdb, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  for (int i = 0; i < NWORKERS; i++)
    if (tw_check_db(w[i], sdb, why, sizeof why) != 0)
      fail_msg("%s", why);
  sqlite3_close(sdb);

  for (int i = 0; i < NWORKERS; i++)
    tw_destroy(w[i]);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(snapshot_is_read_while_current, setup, teardown),
    cmocka_unit_test_setup_teardown(snapshot_write_reports_progress_per_chunk, setup, teardown),
    cmocka_unit_test_setup_teardown(a_change_after_the_snapshot_makes_it_stale, setup, teardown),
    cmocka_unit_test_setup_teardown(corrupt_snapshot_is_never_used, setup, teardown),
    cmocka_unit_test(kill9_after_a_snapshot_reloads_the_rows),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_snapshot", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
