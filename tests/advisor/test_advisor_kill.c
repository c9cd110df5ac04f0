/* kill -9 of the real kvplane-advisor process at random points of a long
 * JetStream stream, several times, then a clean finish: the database must
 * equal the expected state exactly. Expected = the workers' registered sets
 * (locations) and an in-process reference advisor fed every published
 * message once (blocks, parents, hit counts), so both a lost and a doubly
 * applied message would show. */
#include <fcntl.h>
#include <nats/nats.h>
#include <pthread.h>
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
#include "advisor/ingest.h"
#include "harness.h"
#include "kvplane/subjects.h"
#include "kvplane/status.h"
#include "natsd.h"
#include "testworker.h"

#define NWORKERS 4
#define NBATCHES 3000
#define NKILLS 6

typedef struct fx_s {
  kvp_natsd_t natsd;
  char dir[256], db[320], log[320];
  tw_t *w[NWORKERS];
  uint8_t *msgs[NBATCHES];
  size_t lens[NBATCHES];
  int published;
  int failed;
} fx_t;

static void *publisher(void *arg) {
  fx_t *f = arg;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  if (natsConnection_ConnectTo(&nc, f->natsd.url) != NATS_OK ||
      natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
    f->failed = 1;
    goto done;
  }
  for (int i = 0; i < NBATCHES; i++) {
    tw_t *w = f->w[i % NWORKERS];
    const uint8_t *buf;
    size_t len;
    if (tw_batch(w, 16, &buf, &len) != 0) {
      f->failed = 1;
      break;
    }
    f->msgs[i] = malloc(len);
    memcpy(f->msgs[i], buf, len);
    f->lens[i] = len;
    if (tw_publish(w, nc, js, buf, len) != 0) {
      f->failed = 1;
      break;
    }
    __atomic_store_n(&f->published, i + 1, __ATOMIC_RELEASE);
    if (i % 10 == 9)
      nats_Sleep(2);
  }
done:
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return NULL;
}

static pid_t spawn_advisor(fx_t *f) {
  char bin[512], url[128], db[400];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(url, sizeof url, "nats.servers=%s", f->natsd.url);
  snprintf(db, sizeof db, "store.path=%s", f->db);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no advisor outlives a failed test */
    int fd = open(f->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(bin, bin, "-o", url, "-o", db, "-o", "nats.mode=jetstream", "-o", "advisor.namespace=k",
          "-o", "store.flush_interval=20ms", "-o", "workers.heartbeat_timeout=0", "-o",
          "jetstream.fetch_batch=512", "-o", "log.level=warn", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int64_t committed_seq(fx_t *f) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'stream_seq'", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
      v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

/* Blocks in the database against the reference index, row by row. */
static void compare_blocks(fx_t *f, kvp__index_t *ref) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  size_t rows = 0;
  kvp__index_stats_t st;
  assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(
      sqlite3_prepare_v2(db, "SELECT hash, parent, hits, tokens, bytes FROM blocks", -1, &s, NULL),
      SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) {
    kvp__index_block_t b;
    uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
    if (kvp__index_get(ref, h, &b, NULL, 0, NULL) != 0)
      fail_msg("block %016llx in the database, not in the reference", (unsigned long long)h);
    uint64_t parent =
        sqlite3_column_type(s, 1) == SQLITE_NULL ? h : (uint64_t)sqlite3_column_int64(s, 1);
    if (parent != b.parent || (uint32_t)sqlite3_column_int64(s, 2) != b.hits ||
        (uint32_t)sqlite3_column_int64(s, 3) != b.tokens ||
        (uint64_t)sqlite3_column_int64(s, 4) != b.bytes)
      fail_msg("block %016llx: hits %lld (want %u), parent %016llx (want %016llx)",
               (unsigned long long)h, (long long)sqlite3_column_int64(s, 2), b.hits,
               (unsigned long long)parent, (unsigned long long)b.parent);
    rows++;
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  kvp__index_stats(ref, &st);
  assert_int_equal(rows, st.blocks);
}

static void kill9_at_random_points_loses_nothing(void **state) {
  (void)state;
  fx_t *f = calloc(1, sizeof *f);
  kvp_natsd_opts_t o = {.jetstream = 1};
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  pthread_t th;
  unsigned seed = (unsigned)time(NULL);
  char why[512];

  print_message("kill points seeded with %u\n", seed);
  srand(seed);
  assert_non_null(kvp_test_tmpdir(f->dir, sizeof f->dir));
  snprintf(f->db, sizeof f->db, "%s/advisor.db", f->dir);
  snprintf(f->log, sizeof f->log, "%s/advisor.log", f->dir);
  assert_int_equal(kvp_natsd_start(&f->natsd, &o), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, f->natsd.url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  {
    const char *subjects[] = {KVP_SUBJECT_EVENTS_ALL};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = "KVPLANE_EVENTS";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    assert_int_equal(js_AddStream(&si, js, &sc, NULL, &jerr), NATS_OK);
    jsStreamInfo_Destroy(si);
  }
  for (int i = 0; i < NWORKERS; i++) {
    char name[16];
    snprintf(name, sizeof name, "gpu%d", i);
    f->w[i] = tw_create("k", name, 0, 1000 + (uint64_t)i, 100 + (uint64_t)i);
  }
  assert_int_equal(pthread_create(&th, NULL, publisher, f), 0);
  int kills = 0, mid_stream = 0;
  for (int k = 0; k < NKILLS; k++) {
    pid_t pid = spawn_advisor(f);
    assert_true(pid > 0);
    nats_Sleep(120 + rand() % 400);
    int pub = __atomic_load_n(&f->published, __ATOMIC_ACQUIRE);
    int64_t seq = committed_seq(f);
    kill(pid, SIGKILL);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    kills++;
    mid_stream += pub < NBATCHES;
    print_message("kill -9 #%d: %d published, %lld committed\n", k + 1, pub, (long long)seq);
  }
  pthread_join(th, NULL);
  assert_false(f->failed);
  assert_true(mid_stream >= 2);

  /* Clean finish: catch up, then SIGTERM (final flush, exit 0). */
  int64_t from = committed_seq(f);
  uint64_t t0 = (uint64_t)nats_Now();
  pid_t pid = spawn_advisor(f);
  /* Running (signals handled) once it answers a stats request. */
  natsMsg *rep = NULL;
  /* "No responders" comes back at once while it starts: pace the tries. */
  for (int t = 0; t < 200 && rep == NULL; t++)
    if (natsConnection_RequestString(&rep, nc, "kvplane.api.k.stats", "{}", 500) != NATS_OK) {
      rep = NULL;
      nats_Sleep(50);
    }
  assert_non_null(rep);
  natsMsg_Destroy(rep);
  for (int t = 0; t < 600 && committed_seq(f) != NBATCHES; t++)
    nats_Sleep(50);
  assert_int_equal(committed_seq(f), NBATCHES);
  print_message("clean finish: %lld messages caught up in %llu ms\n", (long long)(NBATCHES - from),
                (unsigned long long)((uint64_t)nats_Now() - t0));
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);

  /* Locations: the workers' registered sets, exactly. */
  sqlite3 *db = NULL;
  size_t want = 0;
  assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  for (int i = 0; i < NWORKERS; i++) {
    if (tw_check_db(f->w[i], db, why, sizeof why) != 0)
      fail_msg("after %d kills: %s", kills, why);
    want += tw_size(f->w[i]);
  }
  sqlite3_stmt *s = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM block_locations", -1, &s, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  assert_int_equal((size_t)sqlite3_column_int64(s, 0), want);
  sqlite3_finalize(s);
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT sum(last_event_id) FROM workers", -1, &s, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int64(s, 0), (int64_t)NBATCHES * 16);
  sqlite3_finalize(s);
  sqlite3_close(db);

  /* Blocks and hit counts: every message applied exactly once. */
  kvp__index_t *ref = NULL;
  kvp__adv_ingest_t *ing = NULL;
  assert_int_equal(kvp__index_create(1024, 3600, &ref), 0);
  assert_int_equal(kvp__adv_ingest_create(ref, NULL, &ing), 0);
  uint64_t a0 = (uint64_t)nats_Now();
  for (int i = 0; i < NBATCHES; i++)
    assert_int_equal(kvp__adv_ingest_message(ing, f->msgs[i], f->lens[i], NULL, 1), 0);
  print_message("reference apply: %llu ms\n", (unsigned long long)((uint64_t)nats_Now() - a0));
  compare_blocks(f, ref);
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ref);

  for (int i = 0; i < NBATCHES; i++)
    free(f->msgs[i]);
  for (int i = 0; i < NWORKERS; i++)
    tw_destroy(f->w[i]);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&f->natsd);
  kvp_test_rmtree(f->dir);
  free(f);
}

/* Runs the binary with args, stdout and stderr to out; returns the exit
 * status, or -1 when it did not exit. */
static int run_binary(char *const args[], const char *out) {
  pid_t pid = fork();
  int st;
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execv(args[0], args);
    _exit(127);
  }
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

static int file_has(const char *path, const char *needle) {
  char buf[8192] = "";
  FILE *fp = fopen(path, "r");
  if (fp == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  buf[n] = 0;
  fclose(fp);
  return strstr(buf, needle) != NULL;
}

static int wait_file_has(const char *path, const char *needle, int ms) {
  for (int t = 0; t < ms; t += 20) {
    if (file_has(path, needle))
      return 1;
    nats_Sleep(20);
  }
  return 0;
}

/* --help tells the truth, a bad key is named, SIGHUP reopens the log file
 * (logrotate), SIGTERM flushes and exits 0. */
static void daemon_cli_and_signals(void **state) {
  (void)state;
  kvp_natsd_t d;
  char dir[256], bin[512], out[320], log[320], rotated[330], db[320], url[128], lf[400], dbo[400];
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(out, sizeof out, "%s/out.txt", dir);
  snprintf(log, sizeof log, "%s/advisor.log", dir);
  snprintf(rotated, sizeof rotated, "%s.1", log);
  snprintf(db, sizeof db, "%s/advisor.db", dir);

  char *help[] = {bin, "--help", NULL};
  assert_int_equal(run_binary(help, out), 0);
  assert_true(file_has(out, "--config FILE") && file_has(out, "SIGHUP"));
  char *bad[] = {bin, "-o", "store.flush_interval=soon", NULL};
  assert_int_equal(run_binary(bad, out), 1);
  assert_true(file_has(out, "[store] flush_interval"));
  char *missing[] = {bin, "--config", "/nonexistent/kvplane-advisor.conf", NULL};
  assert_int_equal(run_binary(missing, out), 1);
  assert_true(file_has(out, "/nonexistent/kvplane-advisor.conf"));

  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  snprintf(url, sizeof url, "nats.servers=%s", d.url);
  snprintf(lf, sizeof lf, "log.file=%s", log);
  snprintf(dbo, sizeof dbo, "store.path=%s", db);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no advisor outlives a failed test */
    execl(bin, bin, "-o", url, "-o", dbo, "-o", lf, "-o", "nats.mode=core", (char *)NULL);
    _exit(127);
  }
  assert_true(wait_file_has(log, "running", 10000));
  assert_int_equal(rename(log, rotated), 0);
  kill(pid, SIGHUP);
  assert_true(wait_file_has(log, "log reopened", 5000));
  kill(pid, SIGTERM);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_true(file_has(log, "stopped"));
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(kill9_at_random_points_loses_nothing),
    cmocka_unit_test(daemon_cli_and_signals),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_kill", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
