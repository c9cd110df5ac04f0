/* Scale-out on a real 3-node nats-server cluster (JetStream, streams R3,
 * 4 partitions by subject mapping) with real kvplane-advisor processes:
 * partitioned advisors stay exact through the loss of a server and a kill
 * -9 of an advisor, a partition moves between advisors mid-run, the
 * scatter-gather answer equals one advisor's over the same events and names
 * a partition whose advisor is down, and a hot standby answers within the
 * deadline after the other is killed. Loopback only; each case is bounded
 * (the cluster start 30 s, every wait below its own timeout).
 *
 * Why this file is long: the four cases share one fixture (cluster,
 * advisor processes, a publishing thread, the database checks), and the
 * fixture is most of it; split, the halves would need a header of their
 * own for nothing else. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "natscluster.h"
#include "../advisor/testworker.h"

#define NPART 4
#define NW 4
#define MAXADV 3
#define NS "s"

typedef struct adv_s {
  pid_t pid;
  char name[32], owned[32], db[320], log[320];
} adv_t;

typedef struct fx_s {
  kvp_cluster_t cl;
  char dir[256];
  tw_t *w[NW];
  adv_t adv[MAXADV];
  int nadv;
  natsConnection *nc;
  jsCtx *js;
  kvp_client_t *client;
  /* the publishing thread */
  pthread_t pub;
  int pub_running;
  int pub_target;
  atomic_int published, pub_failed;
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

/* Whether adv a owns partition p ("" owns all). */
static int owns(const adv_t *a, uint32_t p) {
  if (a->owned[0] == '\0')
    return 1;
  char buf[32];
  snprintf(buf, sizeof buf, "%s", a->owned);
  for (char *sp = NULL, *t = strtok_r(buf, ",", &sp); t; t = strtok_r(NULL, ",", &sp))
    if ((uint32_t)atoi(t) == p)
      return 1;
  return 0;
}

static void adv_spawn(fx_t *f, adv_t *a) {
  char bin[512], servers[300], db[400], owned[64], consumer[64];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(servers, sizeof servers, "nats.servers=%s", f->cl.urls);
  snprintf(db, sizeof db, "store.path=%s", a->db);
  snprintf(owned, sizeof owned, "partitions.owned=%s", a->owned);
  snprintf(consumer, sizeof consumer, "jetstream.consumer=%s", a->name);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(a->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(bin, bin, "-o", servers, "-o", db, "-o", owned, "-o", consumer, "-o",
          "nats.mode=jetstream", "-o", "advisor.namespace=" NS, "-o", "partitions.count=4", "-o",
          "jetstream.replicas=3", "-o", "store.flush_interval=50ms", "-o",
          "workers.heartbeat_timeout=0", "-o", "nats.connect_timeout=10s", "-o", "log.level=info",
          (char *)NULL);
    _exit(127);
  }
  a->pid = pid;
}

static adv_t *adv_add(fx_t *f, const char *name, const char *owned) {
  adv_t *a = &f->adv[f->nadv++];
  snprintf(a->name, sizeof a->name, "%s", name);
  snprintf(a->owned, sizeof a->owned, "%s", owned);
  snprintf(a->db, sizeof a->db, "%s/%s.db", f->dir, name);
  snprintf(a->log, sizeof a->log, "%s/%s.log", f->dir, name);
  adv_spawn(f, a);
  return a;
}

static void adv_kill9(adv_t *a) {
  if (a->pid > 0) {
    kill(a->pid, SIGKILL);
    waitpid(a->pid, NULL, 0);
    a->pid = 0;
  }
}

/* SIGTERM: the advisor flushes and exits 0. */
static void adv_stop(adv_t *a) {
  int st = 0;
  if (a->pid <= 0)
    return;
  kill(a->pid, SIGTERM);
  for (int i = 0; i < 200 && waitpid(a->pid, &st, WNOHANG) == 0; i++)
    sleep_ms(50);
  if (waitpid(a->pid, &st, WNOHANG) == 0)
    adv_kill9(a);
  a->pid = 0;
}

/* The stats replies gathered now, by advisor name: 1 when name answered. */
static int answers(fx_t *f, const char *name) {
  char *reply = NULL, err[256];
  int found = 0;
  if (kvp_client_request_all(f->client, KVP_API_STATS, "{}", 500, &reply, err, sizeof err) != 0)
    return 0;
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  for (size_t i = 0; i < json_array_size(reps); i++) {
    const char *n = json_string_value(json_object_get(json_array_get(reps, i), "advisor"));
    found |= n && strcmp(n, name) == 0;
  }
  json_decref(doc);
  kvp_client_reply_free(reply);
  return found;
}

/* The last lines of a log on stderr, for a failure's reader (the
 * directory goes at teardown). */
static void show_log(const char *path) {
  FILE *in = fopen(path, "r");
  char line[512];
  long keep = 0;
  if (in == NULL)
    return;
  fseek(in, 0, SEEK_END);
  keep = ftell(in) > 6000 ? ftell(in) - 6000 : 0;
  fseek(in, keep, SEEK_SET);
  fprintf(stderr, "--- %s (end)\n", path);
  while (fgets(line, sizeof line, in))
    fputs(line, stderr);
  fclose(in);
}

static void wait_answering(fx_t *f, adv_t *a, int timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (now_ms() < end) {
    if (answers(f, a->name))
      return;
    int st;
    if (a->pid > 0 && waitpid(a->pid, &st, WNOHANG) == a->pid) {
      a->pid = 0;
      show_log(a->log);
      fail_msg("advisor %s exited at start (log: %s)", a->name, a->log);
    }
    sleep_ms(100);
  }
  show_log(a->log);
  fail_msg("advisor %s does not answer after %d ms (log: %s)", a->name, timeout_ms, a->log);
}

/* Publishes one buffer, retrying through a lost server (a publish that
 * timed out may have been stored: the advisor drops the duplicate by its
 * event id). */
static int publish(fx_t *f, tw_t *w, const uint8_t *buf, size_t len) {
  for (int i = 0; i < 600; i++) {
    if (tw_publish(w, f->nc, f->js, buf, len) == 0)
      return 0;
    sleep_ms(50);
  }
  return -1;
}

static void *pub_main(void *arg) {
  fx_t *f = arg;
  for (int i = atomic_load(&f->published); i < f->pub_target; i++) {
    tw_t *w = f->w[i % NW];
    const uint8_t *buf;
    size_t len;
    if (tw_batch(w, 8, &buf, &len) != 0 || publish(f, w, buf, len) != 0) {
      atomic_store(&f->pub_failed, 1);
      break;
    }
    atomic_store(&f->published, i + 1);
    if (i % 4 == 3)
      sleep_ms(2);
  }
  return NULL;
}

static void pub_start(fx_t *f, int more) {
  f->pub_target = atomic_load(&f->published) + more;
  assert_int_equal(pthread_create(&f->pub, NULL, pub_main, f), 0);
  f->pub_running = 1;
}

static void pub_join(fx_t *f) {
  if (f->pub_running)
    pthread_join(f->pub, NULL);
  f->pub_running = 0;
  assert_int_equal(atomic_load(&f->pub_failed), 0);
}

static void pub_wait(fx_t *f, int count) {
  uint64_t end = now_ms() + 60000;
  while (atomic_load(&f->published) < count && now_ms() < end && !atomic_load(&f->pub_failed))
    sleep_ms(10);
}

/* Rows of worker in db (-1 on error). */
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

/* One pass: every advisor's database holds exactly the workers of the
 * partitions it owns, each equal to the worker's registered set. */
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
    for (int k = 0; k < NW && rc == 0; k++) {
      uint32_t p = kvp_partition_of(tw_name(f->w[k]), NPART);
      if (owns(&f->adv[i], p)) {
        char sub[400];
        if (tw_check_db(f->w[k], db, sub, sizeof sub) != 0) {
          snprintf(why, whylen, "advisor %s: %s", f->adv[i].name, sub);
          rc = -1;
        }
      } else if (rows_of(db, tw_name(f->w[k])) != 0) {
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

/* 4 workers, one per partition; the cluster with the mapping; a
 * publishing connection to every server; a gathering client. */
static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char name[16], err[256];
  *state = f;
  if (kvp_cluster_start(&f->cl, NPART) != 0 || kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  for (uint32_t p = 0, i = 0; p < NPART; i++) {
    snprintf(name, sizeof name, "w%u", i);
    if (kvp_partition_of(name, NPART) == p) {
      f->w[p] = tw_create(NS, name, 0, 1000 + p, 77 + p);
      p++;
    }
  }
  natsOptions *o = NULL;
  const char *urls[KVP_CLUSTER_NODES];
  for (int i = 0; i < KVP_CLUSTER_NODES; i++)
    urls[i] = f->cl.node[i].url;
  if (natsOptions_Create(&o) != NATS_OK ||
      natsOptions_SetServers(o, urls, KVP_CLUSTER_NODES) != 0 ||
      natsOptions_SetMaxReconnect(o, -1) != NATS_OK ||
      natsOptions_SetReconnectWait(o, 100) != NATS_OK ||
      natsConnection_Connect(&f->nc, o) != NATS_OK ||
      natsConnection_JetStream(&f->js, f->nc, NULL) != NATS_OK) {
    natsOptions_Destroy(o);
    return -1;
  }
  natsOptions_Destroy(o);
  kvp_nats_opts_t no;
  kvp_nats_opts_init(&no);
  snprintf(no.servers, sizeof no.servers, "%s", f->cl.urls);
  return kvp_client_open(&no, NS, &f->client, err, sizeof err) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  fx_t *f = *state;
  if (f->pub_running)
    pthread_join(f->pub, NULL);
  for (int i = 0; i < f->nadv; i++)
    adv_kill9(&f->adv[i]);
  kvp_client_close(f->client);
  jsCtx_Destroy(f->js);
  natsConnection_Destroy(f->nc);
  for (int i = 0; i < NW; i++)
    tw_destroy(f->w[i]);
  kvp_cluster_stop(&f->cl);
  if (f->dir[0])
    kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

static void wait_streams(fx_t *f) {
  for (int p = 0; p < NPART; p++) {
    char s[64];
    snprintf(s, sizeof s, "KVPLANE_EVENTS_P%d", p);
    if (kvp_cluster_wait_stream(&f->cl, s, 20000) != 0)
      fail_msg("stream %s has no leader with every replica current after 20 s", s);
  }
}

static void partitioned_advisors_survive_server_and_advisor_loss(void **state) {
  fx_t *f = *state;
  adv_t *a = adv_add(f, "a", "0,1"), *b = adv_add(f, "b", "2,3");
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  wait_streams(f);
  pub_start(f, 200);
  pub_join(f);
  wait_equal(f, 30000, "first 200 batches");

  /* A server is killed while the workers publish, and comes back. */
  pub_start(f, 600);
  pub_wait(f, 350);
  kvp_cluster_kill(&f->cl, 0);
  pub_wait(f, 550);
  assert_int_equal(kvp_cluster_restart(&f->cl, 0), 0);
  pub_join(f);
  wait_equal(f, 60000, "after a server was killed and restarted");

  /* kill -9 of an advisor while the workers publish; it restarts from its
   * database's positions on whichever servers lead its streams. */
  pub_start(f, 400);
  pub_wait(f, 1000);
  adv_kill9(a);
  pub_wait(f, 1100);
  adv_spawn(f, a);
  pub_join(f);
  wait_answering(f, a, 30000);
  wait_equal(f, 60000, "after kill -9 of advisor a");
}

static void partition_moves_to_the_other_advisor(void **state) {
  fx_t *f = *state;
  adv_t *a = adv_add(f, "a", "0,1,2"), *b = adv_add(f, "b", "3");
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  wait_streams(f);
  pub_start(f, 300);
  pub_join(f);
  wait_equal(f, 30000, "before the move");
  /* The procedure (docs/SCALE.md): stop the old owner, start it without
   * the partition (it drops that partition's rows), start the new owner
   * with it (its consumer starts from the partition stream's start). The
   * workers go on publishing throughout. */
  pub_start(f, 400);
  pub_wait(f, 400);
  adv_stop(a);
  snprintf(a->owned, sizeof a->owned, "0,1");
  adv_spawn(f, a);
  adv_stop(b);
  snprintf(b->owned, sizeof b->owned, "2,3");
  adv_spawn(f, b);
  pub_join(f);
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  wait_equal(f, 60000, "after partition 2 moved from a to b");
}

/* Runs `kvplane partitions ARGS` against the cluster; the reply's JSON
 * (or NULL) and the exit status in *status. */
static json_t *cli_partitions(fx_t *f, const char *args, int *status) {
  char cmd[1024], out[4096] = "";
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane partitions -s '%s' -n " NS " -w 60000 %s",
           getenv("KVP_TEST_BINDIR"), f->cl.urls, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return json_loads(out, 0, NULL);
}

static int in_list(json_t *a, uint32_t p) {
  for (size_t i = 0; i < json_array_size(a); i++)
    if (json_integer_value(json_array_get(a, i)) == (json_int_t)p)
      return (int)i;
  return -1;
}

/* One gathered stats round during a live move of partition p to advisor
 * to: p is answered for (or reported missing), and an answer of to's for
 * p is never from before min_pos (it caught up first). Returns 1 when to
 * answers for p. */
static int move_check(fx_t *f, uint32_t p, const char *to, uint64_t min_pos, int *missing) {
  char *reply = NULL, err[256];
  int covered = 0, to_answers = 0;
  if (kvp_client_request_all(f->client, KVP_API_STATS, "{}", 1000, &reply, err, sizeof err) != 0)
    fail_msg("stats gather: %s", err);
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  kvp_client_reply_free(reply);
  *missing += in_list(json_object_get(doc, "missing"), p) >= 0;
  for (size_t i = 0; i < json_array_size(reps); i++) {
    json_t *r = json_array_get(reps, i), *parts = json_object_get(r, "partitions");
    const char *who = json_string_value(json_object_get(r, "advisor"));
    int k = in_list(json_object_get(parts, "owned"), p);
    if (k < 0)
      continue;
    covered = 1;
    uint64_t pos =
        (uint64_t)json_integer_value(json_array_get(json_object_get(parts, "positions"), k));
    if (who && strcmp(who, to) == 0) {
      to_answers = 1;
      if (pos < min_pos)
        fail_msg("%s answered for partition %u at position %llu, before it caught up with %llu", to,
                 p, (unsigned long long)pos, (unsigned long long)min_pos);
    }
  }
  if (!covered && in_list(json_object_get(doc, "missing"), p) < 0)
    fail_msg("partition %u is neither answered for nor reported missing", p);
  json_decref(doc);
  return to_answers;
}

/* Live rebalancing: partition 2 moves from a to b while both run and the
 * workers publish: b adds it (kvplane partitions b add 2), answers for it
 * only once caught up with its stream, then a drops it (its rows leave
 * a's database); no gathered answer in between misses it silently. */
static void partition_moves_live_between_running_advisors(void **state) {
  fx_t *f = *state;
  adv_t *a = adv_add(f, "a", "0,1,2"), *b = adv_add(f, "b", "3");
  int status = 0, missing = 0, rounds = 0;
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  wait_streams(f);
  pub_start(f, 300);
  pub_join(f);
  wait_equal(f, 30000, "before the move");

  pub_start(f, 600);
  pub_wait(f, 350);
  jsStreamInfo *si = NULL;
  assert_int_equal(js_GetStreamInfo(&si, f->js, "KVPLANE_EVENTS_P2", NULL, NULL), NATS_OK);
  uint64_t before = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  json_t *r = cli_partitions(f, "b add 2", &status);
  assert_int_equal(status, 0);
  assert_non_null(r);
  assert_true(in_list(json_object_get(r, "owned"), 2) >= 0);
  /* Its reply comes before the first fetch: 2 is catching up, not ready. */
  assert_int_equal(in_list(json_object_get(r, "ready"), 2), -1);
  json_t *cu = json_array_get(json_object_get(r, "catching_up"), 0);
  assert_int_equal(json_integer_value(json_object_get(cu, "partition")), 2);
  assert_true(json_integer_value(json_object_get(cu, "behind")) > 0);
  json_decref(r);
  /* Until b caught up, a answers for 2; b never answers from before. */
  uint64_t end = now_ms() + 60000;
  int b_ready = 0;
  while (!b_ready && now_ms() < end) {
    b_ready = move_check(f, 2, "b", before, &missing);
    rounds++;
    sleep_ms(10);
  }
  assert_true(b_ready);
  r = cli_partitions(f, "a drop 2", &status);
  assert_int_equal(status, 0);
  assert_non_null(r);
  assert_int_equal(in_list(json_object_get(r, "owned"), 2), -1);
  json_decref(r);
  for (int i = 0; i < 20; i++, rounds++)
    assert_true(move_check(f, 2, "b", before, &missing));
  printf("live move: %d gathered rounds, partition 2 reported missing in %d\n", rounds, missing);
  assert_int_equal(missing, 0); /* added before it was dropped: always covered */
  pub_join(f);
  snprintf(a->owned, sizeof a->owned, "0,1");
  snprintf(b->owned, sizeof b->owned, "2,3");
  wait_equal(f, 60000, "after partition 2 moved live from a to b");
  /* The state only, and a request the advisor refuses. */
  r = cli_partitions(f, "b wait", &status);
  assert_int_equal(status, 0);
  assert_int_equal(json_array_size(json_object_get(r, "catching_up")), 0);
  assert_int_equal(json_array_size(json_object_get(r, "ready")), 2);
  json_decref(r);
  r = cli_partitions(f, "a drop 0,1", &status);
  assert_int_equal(status, 3);
  assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "1.."));
  json_decref(r);
}

/* match queries: for each worker, the first hashes of each tier. */
static size_t queries(fx_t *f, uint64_t q[][8], size_t *qn) {
  size_t n = 0;
  for (int k = 0; k < NW; k++)
    for (int t = 1; t <= 4; t++) {
      qn[n] = tw_hashes(f->w[k], t, q[n], 8);
      if (qn[n] > 8)
        qn[n] = 8;
      if (qn[n] > 0)
        n++;
    }
  return n;
}

/* The match of q gathered raw: every reply, then the merge of those whose
 * advisor is in names ("a,b"), as rows printed one per line into out. */
static void merged_of(fx_t *f, const uint64_t *q, size_t n, const char *names, char *out,
                      size_t outlen, kvp_gather_info_t *info) {
  json_t *req = json_pack("{s:[]}", "hashes");
  for (size_t i = 0; i < n; i++) {
    char hex[24];
    snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)q[i]);
    json_array_append_new(json_object_get(req, "hashes"), json_string(hex));
  }
  char *body = json_dumps(req, JSON_COMPACT), *reply = NULL, err[256];
  json_decref(req);
  kvp_client_set_grace(f->client, 300); /* every advisor's reply, not the first to cover */
  assert_int_equal(
      kvp_client_request_all(f->client, KVP_API_MATCH, body, 2000, &reply, err, sizeof err), 0);
  free(body);
  kvp_client_set_grace(f->client, 0);
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  kvp_client_reply_free(reply);
  char *texts[MAXADV];
  const char *ptrs[MAXADV];
  size_t lens[MAXADV], k = 0;
  for (size_t i = 0; i < json_array_size(reps); i++) {
    json_t *r = json_array_get(reps, i);
    const char *who = json_string_value(json_object_get(r, "advisor"));
    char pat[40];
    snprintf(pat, sizeof pat, ",%s,", who ? who : "?");
    char list[64];
    snprintf(list, sizeof list, ",%s,", names);
    if (strstr(list, pat) == NULL || k == MAXADV)
      continue;
    texts[k] = json_dumps(r, JSON_COMPACT);
    ptrs[k] = texts[k];
    lens[k] = strlen(texts[k]);
    k++;
  }
  json_decref(doc);
  kvp_match_t m[64];
  size_t nm = 0;
  assert_int_equal(kvp_match_merge(ptrs, lens, k, m, 64, &nm, info, err, sizeof err), 0);
  out[0] = '\0';
  for (size_t i = 0; i < nm && i < 64; i++)
    snprintf(out + strlen(out), outlen - strlen(out), "%s/%u/G%d/%llu\n", m[i].worker, m[i].dp_rank,
             m[i].tier, (unsigned long long)m[i].length);
  for (size_t i = 0; i < k; i++)
    free(texts[i]);
}

static void rows_text(const kvp_match_t *m, size_t n, char *out, size_t outlen) {
  out[0] = '\0';
  for (size_t i = 0; i < n; i++)
    snprintf(out + strlen(out), outlen - strlen(out), "%s/%u/G%d/%llu\n", m[i].worker, m[i].dp_rank,
             m[i].tier, (unsigned long long)m[i].length);
}

static void gather_equals_one_advisor_names_down_parts(void **state) {
  fx_t *f = *state;
  adv_t *a = adv_add(f, "a", "0,1"), *b = adv_add(f, "b", "2,3"), *c = adv_add(f, "c", "");
  wait_answering(f, a, 30000);
  wait_answering(f, b, 30000);
  wait_answering(f, c, 30000);
  wait_streams(f);
  pub_start(f, 300);
  pub_join(f);
  wait_equal(f, 30000, "three advisors");
  static uint64_t q[NW * 4][8];
  size_t qn[NW * 4], nq = queries(f, q, qn), nonempty = 0;
  char two[4096], one[4096], got[4096], err[256];
  kvp_gather_info_t info;
  kvp_match_t m[64];
  size_t nm;
  assert_true(nq >= NW);
  for (size_t i = 0; i < nq; i++) {
    merged_of(f, q[i], qn[i], "a,b", two, sizeof two, &info);
    assert_int_equal(info.nmissing, 0);
    merged_of(f, q[i], qn[i], "c", one, sizeof one, &info);
    assert_int_equal(info.nmissing, 0);
    assert_string_equal(two, one);
    nonempty += one[0] != '\0';
    /* What the library's gathering call returns is the same answer. */
    assert_int_equal(
        kvp_client_match_all(f->client, q[i], qn[i], 2000, m, 64, &nm, &info, err, sizeof err), 0);
    rows_text(m, nm, got, sizeof got);
    assert_string_equal(got, one);
    assert_int_equal(info.nmissing, 0);
  }
  assert_true(nonempty >= NW);
  /* Partitions 2 and 3 lose their only advisor: the answer says so within
   * the deadline and holds partitions 0 and 1. */
  adv_kill9(c);
  adv_kill9(b);
  for (size_t i = 0; i < nq; i++) {
    uint64_t t0 = now_ms();
    assert_int_equal(
        kvp_client_match_all(f->client, q[i], qn[i], 800, m, 64, &nm, &info, err, sizeof err), 0);
    assert_true(now_ms() - t0 < 800 + 500);
    assert_int_equal(info.partitions, NPART);
    assert_int_equal(info.nmissing, 2);
    assert_int_equal(info.missing[0], 2);
    assert_int_equal(info.missing[1], 3);
    for (size_t j = 0; j < nm; j++)
      assert_true(kvp_partition_of(m[j].worker, NPART) < 2);
    rows_text(m, nm, got, sizeof got);
    merged_of(f, q[i], qn[i], "a", two, sizeof two, &info);
    assert_string_equal(got, two);
  }
}

static void standby_answers_after_the_other_is_killed(void **state) {
  fx_t *f = *state;
  adv_t *s1 = adv_add(f, "s1", ""), *s2 = adv_add(f, "s2", "");
  wait_answering(f, s1, 30000);
  wait_answering(f, s2, 30000);
  wait_streams(f);
  pub_start(f, 300);
  pub_join(f);
  wait_equal(f, 30000, "two standbys");
  static uint64_t q[NW * 4][8];
  size_t qn[NW * 4], nq = queries(f, q, qn), nm;
  kvp_match_t m[64];
  kvp_gather_info_t info;
  char before[4096], after[4096], err[256];
  assert_int_equal(
      kvp_client_match_all(f->client, q[0], qn[0], 2000, m, 64, &nm, &info, err, sizeof err), 0);
  rows_text(m, nm, before, sizeof before);
  /* The one that answered first goes (kill -9), while workers publish. */
  char *reply = NULL;
  assert_int_equal(
      kvp_client_request_all(f->client, KVP_API_STATS, "{}", 1000, &reply, err, sizeof err), 0);
  json_t *doc = json_loads(reply, 0, NULL);
  kvp_client_reply_free(reply);
  const char *first = json_string_value(
      json_object_get(json_array_get(json_object_get(doc, "replies"), 0), "advisor"));
  adv_t *gone = first && strcmp(first, "s2") == 0 ? s2 : s1;
  json_decref(doc);
  adv_kill9(gone);
  uint64_t t0 = now_ms();
  assert_int_equal(
      kvp_client_match_all(f->client, q[0], qn[0], 2000, m, 64, &nm, &info, err, sizeof err), 0);
  uint64_t took = now_ms() - t0;
  assert_int_equal(info.nmissing, 0);
  assert_true(took < 2000);
  rows_text(m, nm, after, sizeof after);
  assert_string_equal(after, before);
  for (size_t i = 1; i < nq; i++) {
    assert_int_equal(
        kvp_client_match_all(f->client, q[i], qn[i], 2000, m, 64, &nm, &info, err, sizeof err), 0);
    assert_int_equal(info.nmissing, 0);
  }
  printf("standby: answered %llu ms after kill -9 of %s\n", (unsigned long long)took, gone->name);
  /* The survivor stays exact while the workers go on. */
  pub_start(f, 200);
  pub_join(f);
  /* Only the survivor's database is checked now. */
  adv_t survivor = gone == s1 ? *s2 : *s1, dead = *gone;
  f->adv[0] = survivor;
  f->nadv = 1;
  wait_equal(f, 30000, "the standby alone");
  f->adv[1] = dead; /* pid 0: teardown kills the survivor only */
  f->nadv = 2;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(partitioned_advisors_survive_server_and_advisor_loss, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(partition_moves_to_the_other_advisor, setup, teardown),
      cmocka_unit_test_setup_teardown(partition_moves_live_between_running_advisors, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(gather_equals_one_advisor_names_down_parts, setup, teardown),
      cmocka_unit_test_setup_teardown(standby_answers_after_the_other_is_killed, setup, teardown),
  };
  return kvp_test_run("scale_cluster", tests, sizeof tests / sizeof tests[0], argc, argv);
}
