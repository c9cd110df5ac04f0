/* metrics: the Prometheus exposition writer (prom.h) and the HTTP server
 * (server.h), the latter on a real loopback socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "metrics/build_info.h"
#include "metrics/prom.h"
#include "metrics/server.h"

static void family_writes_help_and_type_and_escapes_help(void **state) {
  (void)state;
  kvp__prom_t p;
  kvp__prom_init(&p);
  kvp__prom_family(&p, "kvplane_x_total", "counter", "Line one\nback\\slash \"quoted\".");
  assert_int_equal(p.err, 0);
  assert_string_equal(p.buf, "# HELP kvplane_x_total Line one\\nback\\\\slash \"quoted\".\n"
                             "# TYPE kvplane_x_total counter\n");
  assert_int_equal(p.len, strlen(p.buf));
  kvp__prom_free(&p);
}

static void sample_escapes_label_values(void **state) {
  (void)state;
  kvp__prom_t p;
  kvp__prom_init(&p);
  kvp__prom_sample(&p, "m", (const char *[]){"a", "q\"uo\\te\nnl", "b", "plain", NULL}, 3);
  kvp__prom_sample(&p, "m", NULL, 0.5);
  kvp__prom_sample(&p, "m", (const char *[]){NULL}, 9007199254740992.0);
  assert_int_equal(p.err, 0);
  assert_string_equal(p.buf, "m{a=\"q\\\"uo\\\\te\\nnl\",b=\"plain\"} 3\n"
                             "m 0.5\n"
                             "m 9007199254740992\n");
  kvp__prom_free(&p);
}

static void sample_writes_special_values(void **state) {
  (void)state;
  kvp__prom_t p;
  kvp__prom_init(&p);
  kvp__prom_sample(&p, "a", NULL, 1.0 / 0.0);
  kvp__prom_sample(&p, "b", NULL, -1.0 / 0.0);
  kvp__prom_sample(&p, "c", NULL, 0.0 / 0.0);
  kvp__prom_sample(&p, "d", NULL, 0.1);
  assert_string_equal(p.buf, "a +Inf\nb -Inf\nc NaN\nd 0.10000000000000001\n");
  kvp__prom_reset(&p);
  assert_int_equal(p.len, 0);
  assert_string_equal(p.buf, "");
  kvp__prom_free(&p);
}

static void histogram_buckets_are_cumulative_with_inf_sum_count(void **state) {
  (void)state;
  static const double b[] = {0.01, 0.1, 1};
  kvp__prom_hist_t h;
  kvp__prom_t p;
  kvp__prom_hist_init(&h, b, 3);
  kvp__prom_hist_observe(&h, 0.005); /* le 0.01 */
  kvp__prom_hist_observe(&h, 0.01);  /* le 0.01: bounds are inclusive */
  kvp__prom_hist_observe(&h, 0.5);   /* le 1 */
  kvp__prom_hist_observe(&h, 4);     /* only +Inf */
  assert_int_equal(h.count, 4);
  kvp__prom_init(&p);
  kvp__prom_histogram(&p, "kvplane_f_seconds", "Flush time.", (const char *[]){"db", "x", NULL},
                      &h);
  assert_int_equal(p.err, 0);
  char want[1024];
  snprintf(want, sizeof want,
           "# HELP kvplane_f_seconds Flush time.\n"
           "# TYPE kvplane_f_seconds histogram\n"
           "kvplane_f_seconds_bucket{db=\"x\",le=\"0.01\"} 2\n"
           "kvplane_f_seconds_bucket{db=\"x\",le=\"0.1\"} 2\n"
           "kvplane_f_seconds_bucket{db=\"x\",le=\"1\"} 3\n"
           "kvplane_f_seconds_bucket{db=\"x\",le=\"+Inf\"} 4\n"
           "kvplane_f_seconds_sum{db=\"x\"} %.17g\n"
           "kvplane_f_seconds_count{db=\"x\"} 4\n",
           0.005 + 0.01 + 0.5 + 4.0);
  assert_string_equal(p.buf, want);
  kvp__prom_free(&p);
}

static void writer_grows_past_its_first_buffer(void **state) {
  (void)state;
  kvp__prom_t p;
  kvp__prom_init(&p);
  char v[16];
  for (int i = 0; i < 2000; i++) {
    snprintf(v, sizeof v, "%d", i);
    kvp__prom_sample(&p, "kvplane_volume_used_bytes", (const char *[]){"volume", v, NULL}, i);
  }
  assert_int_equal(p.err, 0);
  assert_true(p.len > 4096);
  assert_non_null(strstr(p.buf, "kvplane_volume_used_bytes{volume=\"1999\"} 1999\n"));
  assert_int_equal(p.len, strlen(p.buf));
  kvp__prom_free(&p);
}

/* kvplane_build_info: 1, labelled with what --version prints. */
static void build_info_is_one_gauge_with_the_version_labels(void **state) {
  (void)state;
  kvp__prom_t p;
  char want[512], line[512];
  kvp__prom_init(&p);
  kvp__build_info_metric(&p);
  assert_int_equal(p.err, 0);
  assert_non_null(strstr(p.buf, "# TYPE kvplane_build_info gauge\n"));
  snprintf(want, sizeof want,
           "kvplane_build_info{version=\"%s\",revision=\"%s\",build_type=\"%s\",plugin_abi=\"%d\"} "
           "1\n",
           kvp__build_version(), kvp__build_revision(), kvp__build_type(), KVP_VOLUME_ABI_VERSION);
  assert_non_null(strstr(p.buf, want));
  assert_string_not_equal(kvp__build_revision(), "");
  FILE *f = tmpfile();
  assert_non_null(f);
  kvp__build_print_version(f, "kvplane-x");
  rewind(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  snprintf(want, sizeof want, "kvplane-x %s (revision %s, build %s, volume plugin ABI %d)\n",
           kvp__build_version(), kvp__build_revision(), kvp__build_type(), KVP_VOLUME_ABI_VERSION);
  assert_string_equal(line, want);
  kvp__prom_free(&p);
}

static void parse_addr_accepts_ipv4_ipv6_localhost_and_names_bad_ones(void **state) {
  (void)state;
  struct sockaddr_storage sa;
  unsigned len;
  char err[256];
  assert_int_equal(kvp__metrics_parse_addr("k", "127.0.0.1:9464", &sa, &len, err, sizeof err), 0);
  assert_int_equal(sa.ss_family, AF_INET);
  assert_int_equal(ntohs(((struct sockaddr_in *)&sa)->sin_port), 9464);
  assert_int_equal(kvp__metrics_parse_addr("k", "[::1]:80", &sa, &len, err, sizeof err), 0);
  assert_int_equal(sa.ss_family, AF_INET6);
  assert_int_equal(kvp__metrics_parse_addr("k", "localhost:0", &sa, &len, err, sizeof err), 0);
  assert_int_equal(sa.ss_family, AF_INET);
  const char *bad[] = {"9464",    "127.0.0.1",       "127.0.0.1:", "127.0.0.1:70000", "1.2.3:80",
                       "[::1:80", "host.example:80", ":80",        "127.0.0.1:9x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(
        kvp__metrics_parse_addr("[metrics] listen", bad[i], &sa, &len, err, sizeof err),
        KVP_ECONFIG);
    assert_non_null(strstr(err, "[metrics] listen"));
    assert_non_null(strstr(err, bad[i]));
  }
}

/* --- the server ------------------------------------------------------------ */

typedef struct {
  atomic_int ready;
  atomic_int collects;
} fake_t;

static int fake_collect(void *ctx, kvp__prom_t *out) {
  fake_t *f = ctx;
  int n = atomic_fetch_add(&f->collects, 1) + 1;
  kvp__prom_family(out, "kvplane_test_scrapes_total", "counter", "Scrapes.");
  kvp__prom_sample(out, "kvplane_test_scrapes_total", NULL, n);
  return 0;
}

static int fake_ready(void *ctx, const char *partition, char *why, size_t len) {
  fake_t *f = ctx;
  if (partition != NULL) { /* the server hands the argument over as sent */
    snprintf(why, len, "partition '%s'", partition);
    return strcmp(partition, "1") == 0 ? 1 : strcmp(partition, "x") == 0 ? KVP_EINVAL : KVP_ENOENT;
  }
  if (atomic_load(&f->ready))
    return 1;
  snprintf(why, len, "NATS: not connected");
  return 0;
}

/* One HTTP/1.0 request; returns the status code and copies the reply (head
 * and body) into buf. */
static int http(int port, const char *method, const char *path, char *buf, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  char req[256];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: x\r\n\r\n", method, path);
  assert_int_equal(write(fd, req, (size_t)n), n);
  size_t got = 0;
  ssize_t r;
  while (got + 1 < len && (r = read(fd, buf + got, len - 1 - got)) > 0)
    got += (size_t)r;
  buf[got] = '\0';
  close(fd);
  int code = 0;
  assert_int_equal(sscanf(buf, "HTTP/1.%*d %d", &code), 1);
  return code;
}

static void server_answers_metrics_healthz_readyz_404_405(void **state) {
  (void)state;
  fake_t f;
  kvp__metrics_server_t *s;
  char err[256], buf[4096];
  atomic_init(&f.ready, 0);
  atomic_init(&f.collects, 0);
  assert_int_equal(kvp__metrics_server_start("--metrics", "127.0.0.1:0", NULL, fake_collect,
                                             fake_ready, &f, &s, err, sizeof err),
                   0);
  int port = kvp__metrics_server_port(s);
  assert_true(port > 0);

  assert_int_equal(http(port, "GET", "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "version=0.0.4"));
  assert_non_null(strstr(buf, "# TYPE kvplane_test_scrapes_total counter\n"
                              "kvplane_test_scrapes_total 1\n"));
  assert_int_equal(http(port, "GET", "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "kvplane_test_scrapes_total 2\n"));

  assert_int_equal(http(port, "GET", "/healthz", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "\r\n\r\nok\n"));
  assert_int_equal(http(port, "GET", "/readyz", buf, sizeof buf), 503);
  assert_non_null(strstr(buf, "\r\n\r\nNATS: not connected\n"));
  atomic_store(&f.ready, 1);
  assert_int_equal(http(port, "GET", "/readyz", buf, sizeof buf), 200);
  assert_int_equal(http(port, "GET", "/readyz?partition=1", buf, sizeof buf), 200);
  assert_int_equal(http(port, "GET", "/readyz?partition=2", buf, sizeof buf), 404);
  assert_non_null(strstr(buf, "\r\n\r\npartition '2'\n"));
  assert_int_equal(http(port, "GET", "/readyz?partition=x", buf, sizeof buf), 400);

  assert_int_equal(http(port, "GET", "/nothing", buf, sizeof buf), 404);
  assert_int_equal(http(port, "POST", "/metrics", buf, sizeof buf), 405);
  assert_non_null(strstr(buf, "Allow: GET, HEAD"));
  assert_int_equal(http(port, "DELETE", "/healthz", buf, sizeof buf), 405);
  assert_int_equal(atomic_load(&f.collects), 2);
  kvp__metrics_server_stop(s);
}

/* With more than FD_SETSIZE (1024) descriptors open in the process (an
 * advisor with a large packed volume: one per segment) the server still
 * answers: it polls with poll(), not select(), which dropped every
 * connection numbered 1024 or more (and refused a listening socket so
 * numbered: the advisor did not start). */
static void server_answers_past_fd_setsize(void **state) {
  (void)state;
  fake_t f;
  kvp__metrics_server_t *s;
  char err[256], buf[4096];
  int fds[1100], n;
  atomic_init(&f.ready, 1);
  atomic_init(&f.collects, 0);

  if (!kvp_test_nofile_at_least(1300))
    skip();
  assert_int_equal(kvp__metrics_server_start("--metrics", "127.0.0.1:0", NULL, fake_collect,
                                             fake_ready, &f, &s, err, sizeof err),
                   0);
  assert_int_equal(n = kvp_test_hold_fds(fds, 1100), 1100);
  assert_int_equal(http(kvp__metrics_server_port(s), "GET", "/healthz", buf, sizeof buf), 200);
  kvp__metrics_server_stop(s);
  while (n > 0)
    close(fds[--n]);
  /* Started with its listening socket past FD_SETSIZE too. */
  n = kvp_test_hold_fds(fds, 1100);
  assert_int_equal(kvp__metrics_server_start("--metrics", "127.0.0.1:0", NULL, fake_collect,
                                             fake_ready, &f, &s, err, sizeof err),
                   0);
  assert_int_equal(http(kvp__metrics_server_port(s), "GET", "/healthz", buf, sizeof buf), 200);
  kvp__metrics_server_stop(s);
  while (n > 0)
    close(fds[--n]);
}

static void server_refuses_a_port_in_use_naming_key_and_address(void **state) {
  (void)state;
  fake_t f;
  kvp__metrics_server_t *a, *b;
  char err[256], addr[64];
  atomic_init(&f.ready, 1);
  atomic_init(&f.collects, 0);
  assert_int_equal(kvp__metrics_server_start("[metrics] listen", "127.0.0.1:0", NULL, fake_collect,
                                             fake_ready, &f, &a, err, sizeof err),
                   0);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", kvp__metrics_server_port(a));
  assert_int_equal(kvp__metrics_server_start("[metrics] listen", addr, NULL, fake_collect,
                                             fake_ready, &f, &b, err, sizeof err),
                   KVP_EIO);
  assert_null(b);
  assert_non_null(strstr(err, "[metrics] listen"));
  assert_non_null(strstr(err, addr));
  assert_non_null(strstr(err, "in use"));
  assert_int_equal(kvp__metrics_server_start("--metrics", "nowhere:1", NULL, fake_collect,
                                             fake_ready, &f, &b, err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "--metrics"));
  kvp__metrics_server_stop(a);
  kvp__metrics_server_stop(NULL);
}

/* The server as the relay runs it (no [http] server beside it): a client
 * trickling a byte every 50 ms is cut at request_timeout, one address
 * holds per_client connections, and /metrics counts both (server
 * "metrics" only). Before httpguard.c the trickling clients were never
 * cut (libmicrohttpd's timeout is per idle period) and every one was let
 * in. */
static void server_cuts_slow_requests_and_counts_them(void **state) {
  (void)state;
  fake_t f;
  kvp__metrics_server_t *s;
  kvp__metrics_server_opts_t o;
  char err[256], buf[8192];
  int fd[3], open = 0;
  struct timespec t0, t1;
  double cut[3] = {0, 0, 0};
  atomic_init(&f.ready, 1);
  atomic_init(&f.collects, 0);
  kvp__metrics_server_opts_init(&o);
  o.request_timeout_ms = 300;
  o.per_client = 2;
  assert_int_equal(kvp__metrics_server_start("--metrics", "127.0.0.1:0", &o, fake_collect,
                                             fake_ready, &f, &s, err, sizeof err),
                   0);
  int port = kvp__metrics_server_port(s);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 3; i++) {
    assert_true((fd[i] = kvp_test_connect(port)) >= 0);
    assert_int_equal(send(fd[i], "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL), 23);
  }
  for (int round = 0; round < 40; round++) {
    usleep(50000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double t = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    open = 0;
    for (int i = 0; i < 3; i++) {
      char b[256];
      if (cut[i] != 0)
        continue;
      ssize_t r = recv(fd[i], b, sizeof b, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN) || send(fd[i], "X", 1, MSG_NOSIGNAL) != 1)
        cut[i] = t;
      else
        open++;
    }
    if (open == 0)
      break;
  }
  for (int i = 0; i < 3; i++)
    close(fd[i]);
  /* One refused at once (the third of one address), two cut at 300 ms. */
  int refused = 0, timed = 0;
  for (int i = 0; i < 3; i++) {
    assert_true(cut[i] != 0);
    if (cut[i] < 0.2)
      refused++;
    else if (cut[i] >= 0.28 && cut[i] < 1.5)
      timed++;
  }
  assert_int_equal(refused, 1);
  assert_int_equal(timed, 2);
  assert_int_equal(http(port, "GET", "/metrics", buf, sizeof buf), 200);
  assert_non_null(strstr(buf, "kvplane_http_requests_timed_out_total{server=\"metrics\"} 2\n"));
  assert_non_null(strstr(buf, "kvplane_http_connections_refused_total{server=\"metrics\"} 1\n"));
  assert_null(strstr(buf, "server=\"http\""));
  assert_int_equal(atomic_load(&kvp__metrics_server_counts(s)->timed_out), 2);
  kvp__metrics_server_stop(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(family_writes_help_and_type_and_escapes_help),
    cmocka_unit_test(sample_escapes_label_values),
    cmocka_unit_test(sample_writes_special_values),
    cmocka_unit_test(histogram_buckets_are_cumulative_with_inf_sum_count),
    cmocka_unit_test(writer_grows_past_its_first_buffer),
    cmocka_unit_test(build_info_is_one_gauge_with_the_version_labels),
    cmocka_unit_test(parse_addr_accepts_ipv4_ipv6_localhost_and_names_bad_ones),
    cmocka_unit_test(server_answers_metrics_healthz_readyz_404_405),
    cmocka_unit_test(server_refuses_a_port_in_use_naming_key_and_address),
    cmocka_unit_test(server_answers_past_fd_setsize),
    cmocka_unit_test(server_cuts_slow_requests_and_counts_them),
};

KVP_TEST_MAIN("metrics", tests)
