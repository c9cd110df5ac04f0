/* Why this file is long: the processes of a partitioned deployment (a
 * server, advisors, workers) set up once per case, and the exactness checks
 * each fault is followed by.
 *
 * Scale-out under layouts and faults the other scale tests do not use, on
 * one nats-server (JetStream, the partition mapping of the case) with
 * kvplane-advisor processes and simulated workers (testworker.c):
 * - a [partitions] count that disagrees with the servers' mapping is named
 *   by the advisor, and the messages it would misfile are not applied;
 * - 8 partitions over three advisors owning uneven sets (0-4, 5,6 and 7)
 *   and a standby of 0 and 7: the databases stay exact through a kill -9
 *   of an advisor and of the server mid-run; the gathered match ignores a
 *   responder that answers garbage, takes partition 7 from the standby
 *   while its owner is frozen (SIGSTOP) and reports it missing within the
 *   deadline when both are; `kvplane status` counts no partition twice;
 *   an unpartitioned advisor answering beside them is not the answer;
 * - the routers' HTTP API of an advisor catching up with a backlog answers
 *   "not ready", never from the index as loaded.
 * Loopback only; every wait is bounded.
 *
 * Why this file is long: the cases share one fixture (server,
 * advisor processes, publishing, the database and gather checks), which
 * is most of it. */
#define _GNU_SOURCE
#include <jansson.h>
#include <nats/nats.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "natsd.h"
#include "../advisor/testworker.h"

#define NS "cx"
#define MAXW 8
#define MAXADV 5

typedef struct adv_s {
  pid_t pid;
  char name[16], owned[32], db[320], log[320];
  uint32_t count;
} adv_t;

typedef struct fx_s {
  kvp_natsd_t d;
  char dir[256], conf[320]; /* conf: the server's, read again at its restart */
  tw_t *w[MAXW];
  int nw;
  uint32_t parts; /* the advisors' [partitions] count */
  adv_t adv[MAXADV];
  int nadv;
  natsConnection *nc;
  jsCtx *js;
  kvp_client_t *client;
} fx_t;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether a owns p: its owned list of numbers and ranges a-b. */
static int owns(const adv_t *a, uint32_t p) {
  char buf[32];
  snprintf(buf, sizeof buf, "%s", a->owned);
  for (char *sp = NULL, *t = strtok_r(buf, ",", &sp); t; t = strtok_r(NULL, ",", &sp)) {
    unsigned lo = 0, hi = 0;
    int n = sscanf(t, "%u-%u", &lo, &hi);
    if ((n == 1 && lo == p) || (n == 2 && lo <= p && p <= hi))
      return 1;
  }
  return 0;
}

static void adv_spawn(fx_t *f, adv_t *a) {
  char bin[512], servers[128], db[400], owned[64], cons[64], count[48];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(servers, sizeof servers, "nats.servers=%s", f->d.url);
  snprintf(db, sizeof db, "store.path=%s", a->db);
  snprintf(owned, sizeof owned, "partitions.owned=%s", a->owned);
  snprintf(cons, sizeof cons, "jetstream.consumer=%s", a->name);
  snprintf(count, sizeof count, "partitions.count=%u", a->count);
  char *argv[] = {bin,
                  "-o",
                  servers,
                  "-o",
                  db,
                  "-o",
                  owned,
                  "-o",
                  cons,
                  "-o",
                  count,
                  "-o",
                  "advisor.namespace=" NS,
                  "-o",
                  "nats.mode=jetstream",
                  "-o",
                  "workers.heartbeat_timeout=0",
                  "-o",
                  "store.flush_interval=50ms",
                  "-o",
                  "nats.connect_timeout=10s",
                  NULL};
  a->pid = kvp_test_spawn_child(argv, a->log);
  assert_true(a->pid > 0);
}

/* An advisor of count partitions (0: unpartitioned) owning owned. */
static adv_t *adv_add_of(fx_t *f, const char *name, const char *owned, uint32_t count) {
  adv_t *a = &f->adv[f->nadv++];
  snprintf(a->name, sizeof a->name, "%s", name);
  snprintf(a->owned, sizeof a->owned, "%s", owned);
  snprintf(a->db, sizeof a->db, "%s/%s.db", f->dir, name);
  snprintf(a->log, sizeof a->log, "%s/%s.log", f->dir, name);
  a->count = count;
  adv_spawn(f, a);
  return a;
}

static adv_t *adv_add(fx_t *f, const char *name, const char *owned) {
  return adv_add_of(f, name, owned, f->parts);
}

static void adv_kill9(adv_t *a) {
  if (a->pid > 0) {
    kill(a->pid, SIGCONT);
    kill(a->pid, SIGKILL);
    waitpid(a->pid, NULL, 0);
    a->pid = 0;
  }
}

static void show_log(const char *path) {
  FILE *in = fopen(path, "r");
  char line[512];
  if (in == NULL)
    return;
  fseek(in, 0, SEEK_END);
  long keep = ftell(in) > 4000 ? ftell(in) - 4000 : 0;
  fseek(in, keep, SEEK_SET);
  fprintf(stderr, "--- %s (end)\n", path);
  while (fgets(line, sizeof line, in))
    fputs(line, stderr);
  fclose(in);
}

/* The stats reply of advisor name gathered now (NULL when it did not
 * answer); the caller decrefs. */
static json_t *stats_of(fx_t *f, const char *name) {
  char *reply = NULL, err[256];
  json_t *found = NULL;
  kvp_client_set_grace(f->client, 200);
  int rc = kvp_client_request_all(f->client, KVP_API_STATS, "{}", 1000, &reply, err, sizeof err);
  kvp_client_set_grace(f->client, 0);
  if (rc != 0)
    return NULL;
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  kvp_client_reply_free(reply);
  for (size_t i = 0; i < json_array_size(reps) && found == NULL; i++) {
    json_t *r = json_array_get(reps, i);
    const char *n = json_string_value(json_object_get(r, "advisor"));
    if (n && strcmp(n, name) == 0 && json_object_get(r, "error") == NULL)
      found = json_incref(r);
  }
  json_decref(doc);
  return found;
}

static void wait_answering(fx_t *f, adv_t *a, int timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (now_ms() < end) {
    json_t *r = stats_of(f, a->name);
    if (r != NULL) {
      json_decref(r);
      return;
    }
    int st;
    if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
      a->pid = 0;
      show_log(a->log);
      fail_msg("advisor %s exited at start, status %d (log: %s)", a->name, st, a->log);
    }
    sleep_ms(100);
  }
  show_log(a->log);
  fail_msg("advisor %s does not answer after %d ms", a->name, timeout_ms);
}

/* A worker name in partition p of n (and, when m > 0, in partition q of m). */
static void worker_name(char *buf, size_t len, uint32_t p, uint32_t n, uint32_t q, uint32_t m) {
  for (int i = 0;; i++) {
    snprintf(buf, len, "w%d", i);
    if (kvp_partition_of(buf, n) == p && (m == 0 || kvp_partition_of(buf, m) == q))
      return;
  }
}

static int setup_with(void **state, uint32_t map_parts, uint32_t parts) {
  fx_t *f = calloc(1, sizeof *f);
  char map[1024], err[256];
  *state = f;
  if (f == NULL || kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  f->parts = parts;
  snprintf(f->conf, sizeof f->conf, "%s/map.conf", f->dir);
  FILE *c = fopen(f->conf, "w");
  if (c == NULL || kvp_partition_mapping_conf(map, sizeof map, map_parts) != 0)
    return -1;
  fputs(map, c);
  fclose(c);
  kvp_natsd_opts_t o = {.jetstream = 1, .config = f->conf};
  if (kvp_natsd_start(&f->d, &o) != 0)
    return -1;
  natsOptions *no = NULL;
  if (natsOptions_Create(&no) != NATS_OK || natsOptions_SetURL(no, f->d.url) != NATS_OK ||
      natsOptions_SetMaxReconnect(no, -1) != NATS_OK ||
      natsOptions_SetReconnectWait(no, 100) != NATS_OK ||
      natsConnection_Connect(&f->nc, no) != NATS_OK ||
      natsConnection_JetStream(&f->js, f->nc, NULL) != NATS_OK) {
    natsOptions_Destroy(no);
    return -1;
  }
  natsOptions_Destroy(no);
  kvp_nats_opts_t ko;
  kvp_nats_opts_init(&ko);
  snprintf(ko.servers, sizeof ko.servers, "%s", f->d.url);
  return kvp_client_open(&ko, NS, &f->client, err, sizeof err) == 0 ? 0 : -1;
}

static int setup_2_4(void **state) {
  return setup_with(state, 2, 4);
}

static int setup_4_4(void **state) {
  return setup_with(state, 4, 4);
}

static int setup_8_8(void **state) {
  return setup_with(state, 8, 8);
}

static int teardown(void **state) {
  fx_t *f = *state;
  for (int i = 0; i < f->nadv; i++)
    adv_kill9(&f->adv[i]);
  kvp_client_close(f->client);
  jsCtx_Destroy(f->js);
  natsConnection_Destroy(f->nc);
  for (int i = 0; i < f->nw; i++)
    tw_destroy(f->w[i]);
  kvp_natsd_stop(&f->d);
  if (f->dir[0])
    kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Publishes n batches of worker w, retrying through a server restart (a
 * publish that timed out may have been stored: the advisor drops the
 * duplicate by its event id). */
static void publish(fx_t *f, tw_t *w, int n) {
  for (int k = 0; k < n; k++) {
    const uint8_t *buf;
    size_t len;
    assert_int_equal(tw_batch(w, 8, &buf, &len), 0);
    int i = 0;
    while (tw_publish(w, f->nc, f->js, buf, len) != 0 && i++ < 600)
      sleep_ms(50);
    if (i > 600)
      fail_msg("worker %s: batch %d not acked in 30 s", tw_name(w), k);
  }
}

static long long rows_of(sqlite3 *db, const char *worker) {
  sqlite3_stmt *s = NULL;
  long long n = -1;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM block_locations WHERE worker = ?1", -1, &s,
                         NULL) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, worker, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW)
      n = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  return n;
}

/* Every advisor's database holds exactly the workers of its partitions,
 * each equal to the worker's registered set. */
static int check_once(fx_t *f, char *why, size_t whylen) {
  for (int i = 0; i < f->nadv; i++) {
    sqlite3 *db = NULL;
    int rc = 0;
    if (sqlite3_open_v2(f->adv[i].db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
      snprintf(why, whylen, "%s: cannot open %s", f->adv[i].name, f->adv[i].db);
      sqlite3_close(db);
      return -1;
    }
    sqlite3_busy_timeout(db, 2000);
    for (int k = 0; k < f->nw && rc == 0; k++) {
      uint32_t p = kvp_partition_of(tw_name(f->w[k]), f->parts);
      char sub[400];
      if (owns(&f->adv[i], p) && tw_check_db(f->w[k], db, sub, sizeof sub) != 0) {
        snprintf(why, whylen, "advisor %s: %s", f->adv[i].name, sub);
        rc = -1;
      } else if (!owns(&f->adv[i], p) && rows_of(db, tw_name(f->w[k])) != 0) {
        snprintf(why, whylen, "advisor %s holds rows of %s (partition %u, not owned)",
                 f->adv[i].name, tw_name(f->w[k]), p);
        rc = -1;
      }
    }
    sqlite3_close(db);
    if (rc != 0)
      return rc;
  }
  return 0;
}

static void wait_equal(fx_t *f, int timeout_ms, const char *when) {
  char why[512] = "";
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (now_ms() < end) {
    if (check_once(f, why, sizeof why) == 0)
      return;
    sleep_ms(100);
  }
  for (int i = 0; i < f->nadv; i++)
    show_log(f->adv[i].log);
  fail_msg("%s: not equal after %d ms: %s (logs under %s)", when, timeout_ms, why, f->dir);
}

static int log_has(const char *path, const char *what) {
  FILE *in = fopen(path, "r");
  char line[1024];
  int found = 0;
  while (in && !found && fgets(line, sizeof line, in))
    found = strstr(line, what) != NULL;
  if (in)
    fclose(in);
  return found;
}

/* The servers map 2 partitions, the advisors count 4. Worker w is in
 * partition 2 of 4 but the mapping puts it in 0 (stream P0, advisor a's):
 * applied there, a answered for it as if it owned it, the merge dropped
 * its rows (partition 2 is b's) and a's next restart dropped them from its
 * database for good, its position past them. The advisor names the
 * disagreement instead and applies none of w's messages. */
static void a_count_the_mapping_disagrees_with_is_named(void **state) {
  fx_t *f = *state;
  char wn[16], vn[16], want[256];
  adv_t *a = adv_add(f, "a", "0,1"), *b = adv_add(f, "b", "2,3");
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  worker_name(wn, sizeof wn, 2, 4, 0, 2);
  worker_name(vn, sizeof vn, 0, 4, 0, 0);
  f->w[f->nw++] = tw_create(NS, wn, 0, 1000, 11);
  f->w[f->nw++] = tw_create(NS, vn, 0, 1000, 12);
  publish(f, f->w[0], 20); /* w first: once v is applied, so are w's (same stream) */
  publish(f, f->w[1], 20);
  uint64_t end = now_ms() + 30000;
  char why[400] = "";
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(a->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 2000);
  while (tw_check_db(f->w[1], db, why, sizeof why) != 0 && now_ms() < end)
    sleep_ms(100);
  if (tw_check_db(f->w[1], db, why, sizeof why) != 0) {
    show_log(a->log);
    fail_msg("advisor a: worker %s: %s", vn, why);
  }
  long long wrows = rows_of(db, wn);
  sqlite3_close(db);
  json_t *st = stats_of(f, "a");
  assert_non_null(st);
  json_int_t mis =
      json_integer_value(json_object_get(json_object_get(st, "ingest"), "mispartitioned"));
  json_decref(st);
  snprintf(want, sizeof want,
           "the servers' mapping put worker %s in partition 0, [partitions] count = 4 puts it in 2",
           wn);
  if (wrows != 0 || mis != 20 || !log_has(a->log, want)) {
    show_log(a->log);
    fail_msg("worker %s (partition 2 of 4, 0 of the servers' 2): %lld rows in a's database "
             "(want 0), ingest.mispartitioned %lld (want 20), the error %s in a's log",
             wn, wrows, (long long)mis, log_has(a->log, want) ? "found" : "not found");
  }
}

/* The rows of a gathered match as text, one per line. */
static void rows_text(const kvp_match_t *m, size_t n, char *out, size_t outlen) {
  out[0] = '\0';
  for (size_t i = 0; i < n; i++)
    snprintf(out + strlen(out), outlen - strlen(out), "%s/%u/G%d/%llu\n", m[i].worker, m[i].dp_rank,
             m[i].tier, (unsigned long long)m[i].length);
}

/* A responder on the match subject that answers every request with
 * garbage (not JSON), as a stray or broken process might. */
static void on_garbage(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)sub;
  (void)closure;
  if (natsMsg_GetReply(msg) != NULL)
    natsConnection_PublishString(nc, natsMsg_GetReply(msg), "garbage");
  natsMsg_Destroy(msg);
}

/* Runs `kvplane status --json` against the server; the summed locations
 * (-1 when it failed). */
static long long status_locations(fx_t *f) {
  char cmd[1024], out[1 << 16];
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane status --json --db %s -s %s -n " NS " 2>/dev/null",
           getenv("KVP_TEST_BINDIR"), f->adv[0].db, f->d.url);
  FILE *p = popen(cmd, "r");
  if (p == NULL)
    return -1;
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  pclose(p);
  json_t *doc = json_loads(out, 0, NULL);
  json_t *loc = json_object_get(json_object_get(doc, "advisor"), "locations");
  long long v = json_is_integer(loc) ? (long long)json_integer_value(loc) : -1;
  json_decref(doc);
  return v;
}

static void eight_partitions_uneven_advisors_and_faults(void **state) {
  fx_t *f = *state;
  char name[16], err[256];
  adv_t *a = adv_add(f, "a", "0-4");
  adv_add(f, "b", "5,6");
  adv_t *c = adv_add(f, "c", "7"), *s = adv_add(f, "s", "0,7");
  for (int i = 0; i < f->nadv; i++)
    wait_answering(f, &f->adv[i], 30000);
  for (uint32_t p = 0; p < 8; p++) {
    worker_name(name, sizeof name, p, 8, 0, 0);
    f->w[f->nw++] = tw_create(NS, name, 0, 2000 + p, 31 + p);
  }
  for (int k = 0; k < f->nw; k++)
    publish(f, f->w[k], 10);
  wait_equal(f, 30000, "8 partitions, first batches");

  /* kill -9 of the advisor of five partitions mid-run, restarted; then of
   * the server, restarted on its store. */
  for (int k = 0; k < f->nw; k++)
    publish(f, f->w[k], 5);
  adv_kill9(a);
  for (int k = 0; k < f->nw; k++)
    publish(f, f->w[k], 5);
  adv_spawn(f, a);
  for (int k = 0; k < f->nw; k++)
    publish(f, f->w[k], 5);
  wait_answering(f, a, 30000); /* connected: an advisor that finds no server at start exits */
  kvp_natsd_kill(&f->d);
  assert_int_equal(kvp_natsd_restart(&f->d), 0);
  for (int k = 0; k < f->nw; k++)
    publish(f, f->w[k], 5);
  wait_equal(f, 60000, "after kill -9 of advisor a and of the server");
  /* The client and the advisors' query connections reconnect (the
   * client's after its reconnect wait, about 1.5 s here). */
  for (int i = 0; i < f->nadv; i++)
    wait_answering(f, &f->adv[i], 30000);

  /* The gathered match of each worker's G1 hashes holds that worker. */
  kvp_match_t m[64];
  size_t nm;
  kvp_gather_info_t info;
  uint64_t q[MAXW][8];
  size_t qn[MAXW];
  char before[MAXW][2048], got[2048];
  for (int k = 0; k < f->nw; k++) {
    qn[k] = tw_hashes(f->w[k], 1, q[k], 8);
    if (qn[k] > 8)
      qn[k] = 8;
    assert_true(qn[k] > 0);
    assert_int_equal(
        kvp_client_match_all(f->client, q[k], qn[k], 2000, m, 64, &nm, &info, err, sizeof err), 0);
    assert_int_equal(info.partitions, 8);
    assert_int_equal(info.nmissing, 0);
    rows_text(m, nm, before[k], sizeof before[k]);
    assert_non_null(strstr(before[k], tw_name(f->w[k])));
  }

  /* A responder answering garbage beside them: counted, not the answer's
   * failure (the grace makes the gather wait for its reply). */
  natsSubscription *rogue = NULL;
  assert_int_equal(
      natsConnection_Subscribe(&rogue, f->nc, "kvplane.api." NS ".match", on_garbage, NULL),
      NATS_OK);
  assert_int_equal(natsConnection_Flush(f->nc), NATS_OK);
  kvp_client_set_grace(f->client, 300);
  for (int k = 0; k < f->nw; k++) {
    assert_int_equal(
        kvp_client_match_all(f->client, q[k], qn[k], 2000, m, 64, &nm, &info, err, sizeof err), 0);
    assert_int_equal(info.errors, 1);
    assert_int_equal(info.nmissing, 0);
    rows_text(m, nm, got, sizeof got);
    assert_string_equal(got, before[k]);
  }
  kvp_client_set_grace(f->client, 0);
  natsSubscription_Unsubscribe(rogue);
  natsSubscription_Destroy(rogue);

  /* Partition 7's owner frozen: the standby answers for it. Both frozen:
   * 7 is reported missing within the deadline, the rest answered. */
  int k7 = 7; /* the workers were made in partition order */
  kill(c->pid, SIGSTOP);
  assert_int_equal(
      kvp_client_match_all(f->client, q[k7], qn[k7], 2000, m, 64, &nm, &info, err, sizeof err), 0);
  assert_int_equal(info.nmissing, 0);
  rows_text(m, nm, got, sizeof got);
  assert_string_equal(got, before[k7]);
  kill(s->pid, SIGSTOP);
  uint64_t t0 = now_ms();
  assert_int_equal(
      kvp_client_match_all(f->client, q[k7], qn[k7], 800, m, 64, &nm, &info, err, sizeof err), 0);
  uint64_t took = now_ms() - t0;
  kill(s->pid, SIGCONT);
  kill(c->pid, SIGCONT);
  assert_true(took >= 700 && took < 800 + 500);
  assert_int_equal(info.nmissing, 1);
  assert_int_equal(info.missing[0], 7);
  for (size_t j = 0; j < nm; j++)
    assert_int_not_equal(kvp_partition_of(m[j].worker, 8), 7);

  /* status sums a cover without overlap: every location once. */
  long long total = 0;
  for (int k = 0; k < f->nw; k++)
    total += (long long)tw_size(f->w[k]);
  for (int i = 0; i < 5; i++)
    assert_int_equal(status_locations(f), total);

  /* An unpartitioned advisor still running beside them (the switch to
   * partitions, docs/SCALE.md): its stream takes nothing, its answers are
   * skipped. Whichever answered first, the gathered match failed ("the
   * advisors disagree on the partition count (8 and 0)") or was its empty
   * answer alone. */
  adv_t *u = adv_add_of(f, "u", "", 0);
  wait_answering(f, u, 30000);
  for (int i = 0; i < 16; i++) {
    int k = i % f->nw;
    assert_int_equal(
        kvp_client_match_all(f->client, q[k], qn[k], 2000, m, 64, &nm, &info, err, sizeof err), 0);
    assert_int_equal(info.partitions, 8);
    assert_int_equal(info.nmissing, 0);
    rows_text(m, nm, got, sizeof got);
    assert_string_equal(got, before[k]);
  }
  /* (kvplane status is a new client each time: its gather may still end
   * on the unpartitioned reply when the others take longer than its 100 ms
   * grace, docs/SCALE.md; not asserted here.) */
}

/* POST body to path on 127.0.0.1:port (HTTP/1.0); the status, the reply
 * in out; -1 when nothing answers. */
static int http_post(int port, const char *path, const char *body, char *out, size_t outlen) {
  int fd = kvp_test_connect(port), code = -1;
  char req[4096];
  size_t got = 0;
  out[0] = '\0';
  if (fd < 0)
    return -1;
  int n = snprintf(req, sizeof req,
                   "POST %s HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   path, strlen(body), body);
  if (write(fd, req, (size_t)n) == n) {
    ssize_t r;
    while (got < outlen - 1 && (r = read(fd, out + got, outlen - 1 - got)) > 0)
      got += (size_t)r;
    out[got] = '\0';
    if (sscanf(out, "HTTP/1.%*d %d", &code) != 1)
      code = -1;
  }
  close(fd);
  return code;
}

/* The routers' HTTP indexer API ([http]) of an advisor restarting with a
 * backlog of 2,000 batches in its stream (fetched 4 at a time): it answers 503 "not ready" until
 * caught up, and its first answer holds the whole backlog. It answered
 * from the index as loaded, before the backlog was applied (the NATS match
 * request said "not ready" meanwhile; the HTTP API had no such check). */
static void the_http_api_answers_only_when_caught_up(void **state) {
  fx_t *f = *state;
  char name[16], hp[64], body[4096], out[8192];
  adv_t *a = adv_add(f, "a", "0-3");
  wait_answering(f, a, 30000); /* its streams made */
  kill(a->pid, SIGTERM);
  waitpid(a->pid, NULL, 0);
  a->pid = 0;
  worker_name(name, sizeof name, 1, 4, 0, 0);
  f->w[f->nw++] = tw_create(NS, name, 0, 3000, 99);
  publish(f, f->w[0], 2000);
  uint64_t q[16];
  size_t nq = tw_hashes(f->w[0], 1, q, 16);
  nq = nq > 16 ? 16 : nq;
  assert_true(nq >= 4);
  int n = snprintf(body, sizeof body, "{\"block_size\": 16, \"seq_hashes\": [");
  for (size_t i = 0; i < nq; i++)
    n += snprintf(body + n, sizeof body - (size_t)n, "%s%llu", i ? ", " : "",
                  (unsigned long long)q[i]);
  snprintf(body + n, sizeof body - (size_t)n, "]}");
  char want[64];
  snprintf(want, sizeof want, "\"longest_matched\":%zu", nq * 16);

  int port = kvp_test_free_port();
  char bin[512], servers[128], db[400], listen[64];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(servers, sizeof servers, "nats.servers=%s", f->d.url);
  snprintf(db, sizeof db, "store.path=%s", a->db);
  snprintf(listen, sizeof listen, "http.listen=127.0.0.1:%d", port);
  snprintf(hp, sizeof hp, "partitions.owned=%s", a->owned);
  char *argv[] = {bin,
                  "-o",
                  servers,
                  "-o",
                  db,
                  "-o",
                  hp,
                  "-o",
                  "jetstream.consumer=a",
                  "-o",
                  "partitions.count=4",
                  "-o",
                  "advisor.namespace=" NS,
                  "-o",
                  "nats.mode=jetstream",
                  "-o",
                  "workers.heartbeat_timeout=0",
                  "-o",
                  "http.enabled=true",
                  "-o",
                  listen,
                  "-o",
                  "jetstream.fetch_batch=4", /* a catch-up long enough to be seen */
                  NULL};
  a->pid = kvp_test_spawn_child(argv, a->log);
  assert_true(a->pid > 0);
  uint64_t t0 = now_ms();
  int not_ready = 0, code = -1;
  while (now_ms() - t0 < 60000) {
    code = http_post(port, "/query_by_hash", body, out, sizeof out);
    if (code == 200)
      break;
    if (code == 503) {
      assert_non_null(strstr(out, "not ready: catching up with the stream"));
      not_ready++;
    }
    usleep(2000);
  }
  if (code != 200 || strstr(out, name) == NULL || strstr(out, want) == NULL) {
    show_log(a->log);
    fail_msg("the HTTP API's first answer, %llu ms after the start (%d 'not ready' before), does "
             "not hold %s's %zu blocks (%s): %s",
             (unsigned long long)(now_ms() - t0), not_ready, name, nq, want, out);
  }
  printf("HTTP API: %d 'not ready' answers, then the whole backlog after %llu ms\n", not_ready,
         (unsigned long long)(now_ms() - t0));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_count_the_mapping_disagrees_with_is_named, setup_2_4,
                                      teardown),
      cmocka_unit_test_setup_teardown(eight_partitions_uneven_advisors_and_faults, setup_8_8,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_http_api_answers_only_when_caught_up, setup_4_4,
                                      teardown),
  };
  return kvp_test_run("scale_chaos", tests, sizeof tests / sizeof tests[0], argc, argv);
}
