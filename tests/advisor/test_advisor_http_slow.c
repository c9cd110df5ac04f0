/* Slow and greedy clients of the advisor's two HTTP servers (the routers'
 * API, [http], and /metrics, [metrics]; src/metrics/httpguard.c), with an
 * in-process advisor against a real nats-server and real sockets on
 * loopback: clients trickling a byte every 100 ms (a slowloris) are cut at
 * request_timeout, one address holds max_connections_per_client
 * connections at most, and a router's query and Prometheus' scrape from
 * another address (127.0.0.2) are answered while the slow clients are
 * connected. Before the guard, trickling reset libmicrohttpd's idle
 * timeout: the slow clients held their connections, 256 of them held
 * every slot of the API and the router was refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "advfix.h"
#include "harness.h"
#include "kvplane/status.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A TCP connection from src (a loopback address) to 127.0.0.1:port, or -1. */
static int connect_from(const char *src, int port) {
  struct sockaddr_in me = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  inet_pton(AF_INET, src, &me.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons((uint16_t)port);
  if (fd < 0)
    return -1;
  if (bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
      connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the server closed fd (end of stream or reset), else 0. Reads and
 * drops what it sent. */
static int closed(int fd) {
  char b[4096];
  for (;;) {
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (r > 0 || (r < 0 && errno == EINTR))
      continue;
    return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

/* Sends raw (with Connection: close in it) from src and reads the answer
 * until the server closes. Returns the status (0: none) and the answer in
 * out (NUL-terminated, truncated to len). */
static int ask(const char *src, int port, const char *raw, char *out, size_t len) {
  int fd = connect_from(src, port), status = 0;
  size_t n = 0;
  if (fd < 0)
    return 0;
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send(fd, raw, strlen(raw), MSG_NOSIGNAL) == (ssize_t)strlen(raw)) {
    ssize_t r;
    while (n + 1 < len && (r = recv(fd, out + n, len - n - 1, 0)) > 0)
      n += (size_t)r;
  }
  out[n] = '\0';
  close(fd);
  if (sscanf(out, "HTTP/1.%*d %d", &status) != 1)
    status = 0;
  return status;
}

static const char QUERY[] = "POST /query_by_hash HTTP/1.1\r\nHost: a\r\nContent-Length: 36\r\n"
                            "Connection: close\r\n\r\n{\"seq_hashes\": [1], \"block_size\": 1}";
static const char SCRAPE[] = "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

/* The value of the sample line `series` (name{labels}) in an exposition;
 * -1 when absent. */
static double sample(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (strncmp(p, series, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  return -1;
}

static double scrape(int mport, const char *series) {
  static char text[1 << 17];
  assert_int_equal(ask("127.0.0.2", mport, SCRAPE, text, sizeof text), 200);
  return sample(text, series);
}

/* 1 when this host routes 127.0.0.2 to loopback (Linux does: 127/8). */
static int have_second_address(void) {
  struct sockaddr_in me = {.sin_family = AF_INET};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
  inet_pton(AF_INET, "127.0.0.2", &me.sin_addr);
  ok = fd >= 0 && bind(fd, (struct sockaddr *)&me, sizeof me) == 0;
  if (fd >= 0)
    close(fd);
  return ok;
}

static void start(advfix_t *f, int port, int mport, const char *timeout, const char *per_client) {
  char kv[128], err[512];
  f->cfg.http_enabled = 1;
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "127.0.0.1:%d", port);
  snprintf(f->cfg.metrics_listen, sizeof f->cfg.metrics_listen, "127.0.0.1:%d", mport);
  const char *sec[] = {"http", "metrics"};
  for (int i = 0; i < 2; i++) {
    snprintf(kv, sizeof kv, "%s.request_timeout=%s", sec[i], timeout);
    assert_int_equal(kvp_advisor_config_set(&f->cfg, kv, err, sizeof err), 0);
    snprintf(kv, sizeof kv, "%s.max_connections_per_client=%s", sec[i], per_client);
    assert_int_equal(kvp_advisor_config_set(&f->cfg, kv, err, sizeof err), 0);
  }
  assert_int_equal(advfix_start(f), 0);
}

#define NAPI 260 /* more than the API's 256 slots */
#define NMET 70  /* more than /metrics' 64 */
#define PER 8
#define DEADLINE 2.0

typedef struct slow_s {
  int fd;
  double t0, cut; /* opened; when seen closed (0: open) */
} slow_t;

/* Opens n connections from 127.0.0.1 that send the start of a request and
 * nothing more yet, a few at a time (the listen backlog is 64). */
static void open_slow(slow_t *s, int n, int port, const char *line) {
  for (int i = 0; i < n; i++) {
    s[i] = (slow_t){.fd = connect_from("127.0.0.1", port), .t0 = now_s()};
    assert_true(s[i].fd >= 0);
    send(s[i].fd, line, strlen(line), MSG_NOSIGNAL);
    if (i % 32 == 31)
      usleep(20000);
  }
}

/* One byte more on every open one; notes those closed. Returns how many
 * are open. */
static int trickle(slow_t *s, int n) {
  int open = 0;
  for (int i = 0; i < n; i++) {
    if (s[i].cut != 0)
      continue;
    if (closed(s[i].fd) || send(s[i].fd, "X", 1, MSG_NOSIGNAL) != 1) {
      s[i].cut = now_s();
      continue;
    }
    open++;
  }
  return open;
}

/* Trickles on the slow connections every 100 ms until stop. */
typedef struct trickler_s {
  slow_t *api, *met;
  atomic_int stop;
} trickler_t;

static void *trickle_on(void *arg) {
  trickler_t *t = arg;
  while (!atomic_load(&t->stop)) {
    trickle(t->api, NAPI);
    trickle(t->met, NMET);
    usleep(100000);
  }
  return NULL;
}

/* 260 slow clients of the API and 70 of /metrics from one address: 8 of
 * each are let in, the rest refused at once (and counted); a router's
 * query and a scrape from another address are answered meanwhile; the 8
 * are cut 2 s (request_timeout) after they connected, and counted. */
static void slow_clients_are_cut(void **state) {
  advfix_t *f = *state;
  static slow_t api[NAPI], met[NMET];
  static char text[1 << 16];
  int port = kvp_test_free_port(), mport = kvp_test_free_port();

  if (!kvp_test_nofile_at_least(2 * (NAPI + NMET) + 200) || !have_second_address())
    skip();
  start(f, port, mport, "2s", "8");
  open_slow(api, NAPI, port, "POST /query_by_hash HTTP/1.1\r\nHost: a\r\n");
  open_slow(met, NMET, mport, "GET /metrics HTTP/1.1\r\n");
  double opened = now_s();
  usleep(200000);
  /* The per-address limit: the refused ones are closed at once; and
   * another address is served while the 8 hold their connections, still
   * trickling. */
  int api_open = trickle(api, NAPI), met_open = trickle(met, NMET);
  trickler_t tr = {.api = api, .met = met};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, trickle_on, &tr), 0);
  int query = ask("127.0.0.2", port, QUERY, text, sizeof text);
  int answer = strstr(text, "{\"default\":{}}") != NULL;
  int scraped = ask("127.0.0.2", mport, SCRAPE, text, sizeof text);
  double asked = now_s() - opened;
  atomic_store(&tr.stop, 1);
  pthread_join(th, NULL);
  if (api_open != PER || met_open != PER || query != 200 || !answer || scraped != 200)
    fail_msg("slow clients let in: API %d, /metrics %d (max_connections_per_client %d); from "
             "127.0.0.2 meanwhile: POST /query_by_hash %d%s, GET /metrics %d (0: no answer in "
             "5 s)",
             api_open, met_open, PER, query, answer ? "" : " (not the answer)", scraped);
  assert_true(asked < DEADLINE - 0.3); /* ... while they were still open */
  assert_int_equal(trickle(api, NAPI), PER);
  assert_int_equal(trickle(met, NMET), PER);
  /* The deadline: each of the 8 is cut about 2 s after it connected,
   * though it sent a byte every 100 ms. */
  while ((trickle(api, NAPI) || trickle(met, NMET)) && now_s() - opened < DEADLINE + 3)
    usleep(100000);
  int cut = 0;
  slow_t *all[] = {api, met};
  int sizes[] = {NAPI, NMET};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < sizes[k]; i++) {
      slow_t *s = &all[k][i];
      assert_true(s->cut != 0);
      if (s->cut - s->t0 > 1.0) { /* one of the 8 (the refused ones closed at once) */
        cut++;
        if (s->cut - s->t0 < DEADLINE - 0.05 || s->cut - s->t0 > DEADLINE + 1.5)
          fail_msg("a slow client was cut %.2f s after it connected (request_timeout 2 s)",
                   s->cut - s->t0);
      }
      close(s->fd);
    }
  assert_int_equal(cut, 2 * PER);
  assert_int_equal(scrape(mport, "kvplane_http_requests_timed_out_total{server=\"http\"}"), PER);
  assert_int_equal(scrape(mport, "kvplane_http_requests_timed_out_total{server=\"metrics\"}"), PER);
  assert_int_equal(scrape(mport, "kvplane_http_connections_refused_total{server=\"http\"}"),
                   NAPI - PER);
  assert_int_equal(scrape(mport, "kvplane_http_connections_refused_total{server=\"metrics\"}"),
                   NMET - PER);
  assert_int_equal(advfix_stop(f), 0);
}

/* Reads one answer with a Content-Length from fd (kept alive). Returns its
 * status, 0 when the connection ended first. */
static int read_answer(int fd) {
  char b[8192];
  size_t n = 0;
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (;;) {
    ssize_t r = recv(fd, b + n, sizeof b - n - 1, 0);
    if (r <= 0)
      return 0;
    n += (size_t)r;
    b[n] = '\0';
    char *end = strstr(b, "\r\n\r\n");
    const char *cl = strstr(b, "Content-Length: ");
    int status = 0;
    if (end != NULL && cl != NULL && (size_t)(end + 4 - b) + (size_t)atoi(cl + 16) <= n)
      return sscanf(b, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
  }
}

static const char KEPT[] = "POST /query_by_hash HTTP/1.1\r\nHost: a\r\nContent-Length: 36\r\n\r\n"
                           "{\"seq_hashes\": [1], \"block_size\": 1}";

/* The deadline covers the body, and on a kept-alive connection the next
 * request from its first byte; an idle kept-alive connection is not cut
 * (the idle timeout, 30 s, closes it), nor a slow request that completes
 * in time. */
static void a_slow_body_or_next_request_is_cut(void **state) {
  advfix_t *f = *state;
  int port = kvp_test_free_port(), mport = kvp_test_free_port();

  if (!have_second_address()) /* the scrape comes from 127.0.0.2 */
    skip();
  start(f, port, mport, "1s", "0");
  /* body: headers at once, then the body a byte per 100 ms. */
  int body = connect_from("127.0.0.1", port);
  static const char head[] =
      "POST /query_by_hash HTTP/1.1\r\nHost: a\r\nContent-Length: 200\r\n\r\n";
  assert_int_equal(send(body, head, sizeof head - 1, MSG_NOSIGNAL), (ssize_t)sizeof head - 1);
  /* next: one answered request, 1.5 s idle, then the next trickled. */
  int next = connect_from("127.0.0.1", port), idle = connect_from("127.0.0.1", port);
  assert_int_equal(send(next, KEPT, sizeof KEPT - 1, MSG_NOSIGNAL), (ssize_t)sizeof KEPT - 1);
  assert_int_equal(read_answer(next), 200);
  assert_int_equal(send(idle, KEPT, sizeof KEPT - 1, MSG_NOSIGNAL), (ssize_t)sizeof KEPT - 1);
  assert_int_equal(read_answer(idle), 200);
  /* in_time: a request sent in pieces over 0.6 s is answered. */
  int in_time = connect_from("127.0.0.1", port);
  double t0 = now_s(), body_cut = 0, next_cut = 0, next_began = 0;
  int sent = 0;
  while (now_s() - t0 < 4.0 && (body_cut == 0 || next_cut == 0)) {
    double t = now_s() - t0;
    if (body_cut == 0 && (closed(body) || send(body, "x", 1, MSG_NOSIGNAL) != 1))
      body_cut = t;
    if (t >= 1.5 && next_cut == 0) {
      if (next_began == 0)
        next_began = t;
      if (closed(next) || send(next, "P", 1, MSG_NOSIGNAL) != 1)
        next_cut = t;
    } else if (next_cut == 0 && closed(next)) {
      fail_msg("an idle kept-alive connection was closed after %.2f s", t);
    }
    size_t piece = sizeof KEPT / 6 + 1, off = (size_t)sent * piece;
    if (sent < 6 && t >= sent * 0.1 && off < sizeof KEPT - 1) {
      size_t len = sizeof KEPT - 1 - off < piece ? sizeof KEPT - 1 - off : piece;
      assert_int_equal(send(in_time, KEPT + off, len, MSG_NOSIGNAL), (ssize_t)len);
      sent++;
    }
    usleep(100000);
  }
  assert_int_equal(read_answer(in_time), 200);
  if (body_cut == 0 || next_cut == 0)
    fail_msg("not cut in 4 s (request_timeout 1 s):%s%s", body_cut == 0 ? " a slow body" : "",
             next_cut == 0 ? " a slow second request on a kept-alive connection" : "");
  if (body_cut < 0.95 || body_cut > 2.5)
    fail_msg("a slow body was cut after %.2f s (request_timeout 1 s)", body_cut);
  if (next_cut - next_began < 0.85 || next_cut - next_began > 2.5)
    fail_msg("a slow second request was cut %.2f s after its first byte (request_timeout 1 s)",
             next_cut - next_began);
  assert_false(closed(idle)); /* still kept alive: not a request */
  assert_int_equal(scrape(mport, "kvplane_http_requests_timed_out_total{server=\"http\"}"), 2);
  close(body);
  close(next);
  close(idle);
  close(in_time);
  assert_int_equal(advfix_stop(f), 0);
}

/* The new keys are checked like the others: a duration from 100 ms, a
 * per-client count within the server's connection limit. */
static void limits_are_checked(void **state) {
  static const char *const bad[] = {
      "http.request_timeout=50ms", "http.request_timeout=2h",
      "http.request_timeout=ten",  "http.max_connections_per_client=257",
      "metrics.request_timeout=0", "metrics.max_connections_per_client=65"};
  kvp_advisor_config_t cfg;
  char err[512];
  (void)state;
  kvp_advisor_config_defaults(&cfg);
  assert_int_equal(cfg.http_request_timeout_ms, 10000);
  assert_int_equal(cfg.http_per_client, 64);
  assert_int_equal(cfg.metrics_request_timeout_ms, 10000);
  assert_int_equal(cfg.metrics_per_client, 16);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)strcspn(strchr(bad[i], '.') + 1, "="),
             strchr(bad[i], '.') + 1);
    assert_int_equal(kvp_advisor_config_set(&cfg, bad[i], err, sizeof err), KVP_ECONFIG);
    if (strstr(err, key) == NULL)
      fail_msg("%s: the error does not name %s: %s", bad[i], key, err);
  }
  assert_int_equal(kvp_advisor_config_set(&cfg, "http.request_timeout=250ms", err, sizeof err), 0);
  assert_int_equal(cfg.http_request_timeout_ms, 250);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(limits_are_checked),
    cmocka_unit_test_setup_teardown(slow_clients_are_cut, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(a_slow_body_or_next_request_is_cut, advfix_cm_setup_core,
                                    advfix_cm_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_http_slow", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
