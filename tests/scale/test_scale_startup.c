/* Startup at size: kvplane-advisor restarts on a database of 1.25 million
 * locations with a backlog of 2,000 batches in its stream. It must say it
 * is not ready (/readyz 503, stats "ready": false, match answered with a
 * "not ready" error) until it has loaded and caught up, then answer within
 * a bound, and its first answer already holds the whole backlog: it never
 * answers stale. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <jansson.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "index/index.h"
#include "kvplane/client.h"
#include "kvplane/status.h"
#include "natsd.h"
#include "store/store.h"
#include "../advisor/testworker.h"

#define NBLOCKS 1000000
#define NBATCH 2000
#define BOUND_MS 90000

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The status of GET path on 127.0.0.1:port, or -1 when nothing answers. */
static int http_status(int port, const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), code = -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  char req[128], buf[512];
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0)
    return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
    if (write(fd, req, (size_t)n) == n) {
      ssize_t r = read(fd, buf, sizeof buf - 1);
      if (r > 0) {
        buf[r] = '\0';
        if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
          code = -1;
      }
    }
  }
  close(fd);
  return code;
}

/* A database of NBLOCKS blocks in chains of 16 over 8 workers, a quarter
 * also in G2 (1.25 locations per block), at stream sequence 0. */
static void make_db(const char *path) {
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  char err[256];
  uint16_t w[8];
  assert_int_equal(kvp__index_create(NBLOCKS, 3600, &ix), 0);
  assert_int_equal(kvp__store_open(path, &st, err, sizeof err), 0);
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "big%d", i);
    assert_int_equal(kvp__index_worker(ix, name, 0, &w[i]), 0);
  }
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < NBLOCKS; i++) {
    uint64_t parent = h;
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    kvp__index_store(ix, h, i % 16 != 0, parent, w[(i / 16) % 8], 1, 0, 16, 1 << 20, 1000);
    if (i % 4 == 0)
      kvp__index_store(ix, h, i % 16 != 0, parent, w[(i / 16) % 8], 2, 0, 16, 1 << 20, 1000);
  }
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  kvp__store_close(st);
  kvp__index_destroy(ix);
}

static void restart_at_size_answers_only_when_caught_up(void **state) {
  (void)state;
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {.jetstream = 1};
  char dir[256], db[320], log[320];
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(db, sizeof db, "%s/a.db", dir);
  snprintf(log, sizeof log, "%s/a.log", dir);
  assert_int_equal(kvp_natsd_start(&d, &no), 0);
  make_db(db);

  /* The backlog: a worker's 2,000 batches in the stream before the advisor
   * starts (the stream made as the advisor makes it). */
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  jsStreamConfig sc;
  jsStreamInfo *si = NULL;
  const char *subj[] = {"kvplane.ev.>"};
  jsStreamConfig_Init(&sc);
  sc.Name = "KVPLANE_EVENTS";
  sc.Subjects = subj;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  assert_int_equal(js_AddStream(&si, js, &sc, NULL, NULL), NATS_OK);
  jsStreamInfo_Destroy(si);
  tw_t *w = tw_create("z", "w0", 0, 7, 42);
  for (int i = 0; i < NBATCH; i++) {
    const uint8_t *buf;
    size_t len;
    assert_int_equal(tw_batch(w, 16, &buf, &len), 0);
    assert_int_equal(tw_publish(w, nc, js, buf, len), 0);
  }
  static uint64_t q[64];
  size_t nq = tw_hashes(w, 1, q, 64);
  nq = nq > 64 ? 64 : nq;
  assert_true(nq >= 8);

  int mport = kvp_test_free_port();
  char bin[512], servers[128], dbo[400], metrics[64];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", getenv("KVP_TEST_BINDIR"));
  snprintf(servers, sizeof servers, "nats.servers=%s", d.url);
  snprintf(dbo, sizeof dbo, "store.path=%s", db);
  snprintf(metrics, sizeof metrics, "metrics.listen=127.0.0.1:%d", mport);
  char *argv[] = {bin,
                  "-o",
                  servers,
                  "-o",
                  dbo,
                  "-o",
                  metrics,
                  "-o",
                  "nats.mode=jetstream",
                  "-o",
                  "advisor.namespace=z",
                  "-o",
                  "workers.heartbeat_timeout=0",
                  "-o",
                  "store.flush_interval=200ms",
                  NULL};
  uint64_t t0 = now_ms();
  pid_t pid = kvp_test_spawn_child(argv, log);
  assert_true(pid >= 0);

  kvp_nats_opts_t o;
  kvp_nats_opts_init(&o);
  snprintf(o.servers, sizeof o.servers, "%s", d.url);
  kvp_client_t *c = NULL;
  char err[256];
  assert_int_equal(kvp_client_open(&o, "z", &c, err, sizeof err), 0);
  int saw_not_ready = 0, readyz = -1, answered = 0;
  uint64_t ready_at = 0;
  while (now_ms() - t0 < BOUND_MS && !answered) {
    kvp_match_t m[16];
    kvp_gather_info_t info;
    size_t nm = 0;
    readyz = http_status(mport, "/readyz");
    int rc = kvp_client_match_all(c, q, nq, 300, m, 16, &nm, &info, err, sizeof err);
    if (rc == 0 && info.used > 0) {
      /* The first answer: the whole backlog is in it. */
      int found = 0;
      for (size_t i = 0; i < nm && i < 16; i++)
        found |= strcmp(m[i].worker, "w0") == 0 && m[i].tier == 1 && m[i].length == nq;
      if (!found)
        fail_msg("the first answer after %llu ms is stale: w0 does not hold its %zu G1 hashes",
                 (unsigned long long)(now_ms() - t0), nq);
      answered = 1;
      ready_at = now_ms() - t0;
      assert_int_equal(http_status(mport, "/readyz"), 200);
    } else if (rc == 0 && info.errors > 0) {
      saw_not_ready = 1; /* answered "not ready" */
      assert_int_equal(readyz, 503);
    }
    usleep(20000);
  }
  assert_true(answered);
  /* The stats say so too. */
  char *reply = NULL;
  assert_int_equal(kvp_client_request(c, "stats", "{}", 2000, &reply, err, sizeof err), 0);
  json_t *doc = json_loads(reply, 0, NULL);
  assert_true(json_is_true(json_object_get(doc, "ready")));
  long long ready_ms = json_integer_value(json_object_get(doc, "ready_ms"));
  assert_true(json_integer_value(json_object_get(doc, "locations")) >= 1250000);
  json_decref(doc);
  kvp_client_reply_free(reply);
  printf("startup at size: answering %llu ms after the start (advisor: ready %lld ms after "
         "open); a \"not ready\" answer seen before: %s\n",
         (unsigned long long)ready_at, ready_ms, saw_not_ready ? "yes" : "no");

  kvp_client_close(c);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  tw_destroy(w);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(restart_at_size_answers_only_when_caught_up),
  };
  return kvp_test_run("scale_startup", tests, sizeof tests / sizeof tests[0], argc, argv);
}
