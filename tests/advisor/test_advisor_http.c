/* The routers' indexer API ([http] enabled, src/advisor/routerhttp.c) of an
 * in-process advisor against a real nats-server, from a raw HTTP/1.1 client:
 * the answers equal the NATS match reply's while events stream in and
 * several clients ask at once (the HTTP thread hands each query to the loop
 * thread: this is the test the sanitizer builds run, the Python client of
 * tests/python/test_router_api.py being skipped there), a stop while
 * requests are in flight, and a listen address in use. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "advfix.h"
#include "advisor/routerapi.h"
#include "harness.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"

/* POSTs body to path on 127.0.0.1:port; returns the status (0: no answer)
 * and the body in *reply (malloc'd, or NULL). */
static int post(int port, const char *path, const char *body, char **reply) {
  char head[256];
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  int fd = kvp_test_connect(port), status = 0;

  *reply = NULL;
  if (fd < 0 || buf == NULL) {
    free(buf);
    if (fd >= 0)
      close(fd);
    return 0;
  }
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                   path, strlen(body));
  if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n ||
      send(fd, body, strlen(body), MSG_NOSIGNAL) != (ssize_t)strlen(body))
    goto out;
  for (;;) {
    if (len + 1024 > cap && (buf = realloc(buf, cap *= 2)) == NULL)
      goto out;
    ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  buf[len] = '\0';
  if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
    status = 0;
  char *b = strstr(buf, "\r\n\r\n");
  if (b != NULL)
    *reply = strdup(b + 4);
out:
  free(buf);
  close(fd);
  return status;
}

static void publish(advfix_t *f, const char *worker, uint32_t dp, const uint64_t *h, size_t n1,
                    size_t n2) {
  kvp_publisher_opts_t po;
  kvp_publisher_t *pub;
  char err[512];
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", f->natsd.url);
  po.ns = f->cfg.ns;
  po.worker_id = worker;
  po.dp_rank = dp;
  assert_int_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, h, n1, 16, 0, 0), 0);
  if (n2 > 0)
    assert_int_equal(kvp_publisher_stored(pub, 2, NULL, NULL, h, n2, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_close(pub);
}

/* The spec's answer built from the NATS match reply: {"default": {worker:
 * {GPU, CPU, DISK, EXTERNAL, longest_matched, DP}}}, tokens = blocks * 16. */
static json_t *expected(const char *match_reply) {
  static const char *const medium[] = {NULL, "GPU", "CPU", "DISK", "EXTERNAL"};
  json_t *m = json_loads(match_reply, 0, NULL), *t = json_object(), *arr, *row;
  size_t i;
  assert_non_null(m);
  arr = json_object_get(m, "matches");
  json_array_foreach(arr, i, row) {
    const char *w = json_string_value(json_object_get(row, "worker"));
    const char *tier = json_string_value(json_object_get(row, "tier"));
    json_int_t tokens = json_integer_value(json_object_get(row, "length")) * 16;
    char dp[16];
    snprintf(dp, sizeof dp, "%" JSON_INTEGER_FORMAT,
             json_integer_value(json_object_get(row, "dp_rank")));
    json_t *inst = json_object_get(t, w);
    if (inst == NULL) {
      inst = json_pack("{s:I, s:I, s:I, s:I, s:I, s:{}}", "longest_matched", (json_int_t)0, "GPU",
                       (json_int_t)0, "CPU", (json_int_t)0, "DISK", (json_int_t)0, "EXTERNAL",
                       (json_int_t)0, "DP");
      json_object_set_new(t, w, inst);
    }
    const char *med = medium[tier[1] - '0'];
#define MAX_SET(o, k)                                                                              \
  do {                                                                                             \
    json_t *c = json_object_get((o), (k));                                                         \
    if (c == NULL || json_integer_value(c) < tokens)                                               \
      json_object_set_new((o), (k), json_integer(tokens));                                         \
  } while (0)
    MAX_SET(inst, "longest_matched");
    MAX_SET(inst, med);
    MAX_SET(json_object_get(inst, "DP"), dp);
  }
  json_decref(m);
  return json_pack("{s:o}", "default", t);
}

static const uint64_t H[6] = {0x1111, 0x2222, 0x3333, UINT64_C(0xfedcba9876543210), 0x5555, 0x6666};
static const char HASH_BODY[] = "{\"seq_hashes\": [4369, 8738, 13107, 18364758544493064720, "
                                "21845, 26214], \"block_size\": 16}";
static const uint8_t MATCH_REQ[] = "{\"hashes\": [\"1111\", \"2222\", \"3333\", "
                                   "\"fedcba9876543210\", \"5555\", \"6666\"]}";

typedef struct client_s {
  int port, n, ok, bad;
  atomic_int *stop;
} client_t;

static void *client_loop(void *arg) {
  client_t *c = arg;
  while (!atomic_load(c->stop) && c->n < 400) {
    char *reply = NULL;
    int st = post(c->port, "/query_by_hash", HASH_BODY, &reply);
    json_t *j = reply ? json_loads(reply, 0, NULL) : NULL;
    if (st == 200 && json_is_object(json_object_get(j, "default")))
      c->ok++;
    else if (st != 503 && st != 0)
      c->bad++;
    json_decref(j);
    free(reply);
    c->n++;
  }
  return NULL;
}

static void equals_nats_match(void **state) {
  advfix_t *f = *state;
  int port = kvp_test_free_port();
  atomic_int stop = 0;
  client_t cl[3];
  pthread_t th[3];
  char *reply = NULL;

  f->cfg.http_enabled = 1;
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "127.0.0.1:%d", port);
  assert_int_equal(advfix_start(f), 0);
  /* Clients ask while the workers' events arrive. */
  for (int i = 0; i < 3; i++) {
    cl[i] = (client_t){.port = port, .stop = &stop};
    assert_int_equal(pthread_create(&th[i], NULL, client_loop, &cl[i]), 0);
  }
  publish(f, "w0", 2, H, 6, 2);
  publish(f, "w1", 0, H, 3, 0);
  publish(f, "w1", 1, H, 5, 0);
  /* Settled: the NATS reply has its four rows; then both must agree. */
  char *m = NULL;
  for (int i = 0; i < 500; i++) {
    free(m);
    m = advfix_request(f, "match", MATCH_REQ, (int)sizeof MATCH_REQ - 1);
    json_t *j = m ? json_loads(m, 0, NULL) : NULL;
    size_t rows = json_array_size(json_object_get(j, "matches"));
    json_decref(j);
    if (rows == 4)
      break;
    usleep(10000);
  }
  assert_non_null(m);
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(cl[i].bad, 0);
    assert_true(cl[i].ok > 0);
  }
  json_t *want = expected(m);
  free(m);
  assert_int_equal(post(port, "/query_by_hash", HASH_BODY, &reply), 200);
  json_t *got = json_loads(reply, 0, NULL);
  /* rank_matches (the cumulative walk, routerpath.c): every rank here
   * holds a G1 prefix and no later block elsewhere, so each of its four
   * boundaries is its DP figure. The rest is the NATS reply's. */
  const char *name;
  json_t *inst;
  json_object_foreach(json_object_get(got, "default"), name, inst) {
    json_t *rm = json_object_get(inst, "rank_matches"), *v;
    const char *rank;
    assert_int_equal(json_object_size(rm), json_object_size(json_object_get(inst, "DP")));
    json_object_foreach(json_object_get(inst, "DP"), rank, v) {
      json_t *r = json_object_get(rm, rank);
      static const char *const keys[] = {"gpu", "cpu", "disk", "external"};
      for (int k = 0; k < 4; k++)
        assert_int_equal(json_integer_value(json_object_get(r, keys[k])), json_integer_value(v));
    }
    json_object_del(inst, "rank_matches");
  }
  if (!json_equal(got, want)) {
    char *w = json_dumps(want, JSON_SORT_KEYS);
    fail_msg("HTTP %s\nNATS %s", reply, w);
  }
  json_t *w1 = json_object_get(json_object_get(got, "default"), "w1");
  assert_int_equal(json_integer_value(json_object_get(w1, "longest_matched")), 80);
  assert_int_equal(json_integer_value(json_object_get(json_object_get(w1, "DP"), "0")), 48);
  json_decref(got);
  json_decref(want);
  free(reply);
  /* A bad request is a 400 naming the field; the advisor keeps answering. */
  assert_int_equal(post(port, "/query", "{\"token_ids\": [1, -1], \"block_size\": 1}", &reply),
                   400);
  assert_non_null(strstr(reply, "token_ids[1]"));
  free(reply);
  assert_int_equal(post(port, "/register", "{}", &reply), 501);
  free(reply);
  assert_int_equal(advfix_stop(f), 0);
}

/* Requests in flight while the advisor stops: each is answered (200 or
 * 503) or refused, nothing hangs, and the stop is clean. */
static void stop_under_load(void **state) {
  advfix_t *f = *state;
  int port = kvp_test_free_port();
  atomic_int stop = 0;
  client_t cl[2];
  pthread_t th[2];

  f->cfg.http_enabled = 1;
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "127.0.0.1:%d", port);
  assert_int_equal(advfix_start(f), 0);
  publish(f, "w0", 0, H, 6, 0);
  for (int i = 0; i < 2; i++) {
    cl[i] = (client_t){.port = port, .stop = &stop};
    assert_int_equal(pthread_create(&th[i], NULL, client_loop, &cl[i]), 0);
  }
  usleep(100000);
  assert_int_equal(advfix_stop(f), 0);
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(cl[i].bad, 0);
  }
}

/* [http] listen on an address in use: the advisor does not open, and
 * says which setting and address. */
static void address_in_use(void **state) {
  advfix_t *f = *state;
  kvp_advisor_t *adv = NULL;
  char err[512];
  int port = kvp_test_free_port();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(0x7f000001);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 1), 0);
  f->cfg.http_enabled = 1;
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "127.0.0.1:%d", port);
  assert_int_equal(kvp_advisor_open(&f->cfg, &adv, err, sizeof err), KVP_ECONFIG);
  assert_null(adv);
  assert_non_null(strstr(err, "[http] listen"));
  close(fd);
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "nowhere");
  assert_int_equal(kvp_advisor_config_check(&f->cfg, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "[http] listen"));
}

/* /query's hashes for body, decoded as the HTTP thread decodes it. */
static int query_hashes(const char *body, kvp__rapi_req_t *req) {
  char err[512];
  return kvp__rapi_parse(0, body, strlen(body), 0, req, err, sizeof err);
}

/* "lora_id": 0 is the base model, as the relay reads an engine's lora_id
 * (relay/apply.c: 0 is no adapter): the hashes are the unsalted ones (or
 * cache_salt's), not those of an adapter named "lora_id:0", so a router
 * that sends 0 for "no LoRA" is answered as NATS match of the relay's
 * hashes would be; with lora_name it is not a conflict. */
static void lora_id_0_is_the_base_model(void **state) {
  static const uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  static const struct {
    const char *extra, *seed; /* the request's fields beside the tokens; the hash seed */
  } cases[] = {
      {"\"lora_id\": 0", NULL},
      {"\"lora_id\": 0, \"cache_salt\": \"s\"", "s"},
      {"\"lora_id\": 0, \"lora_name\": \"a\"", "a"},
      {"\"lora_id\": 7", "lora_id:7"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t want[2];
    kvp__rapi_req_t req;
    char body[256];
    snprintf(body, sizeof body, "{\"token_ids\": [1,2,3,4,5,6,7,8], \"block_size\": 4, %s}",
             cases[i].extra);
    assert_int_equal(kvp_hash_sequence(tok, 8, 4, kvp_hash_seed(cases[i].seed), want, 2), 2);
    assert_int_equal(query_hashes(body, &req), 0);
    assert_int_equal(req.n, 2);
    assert_memory_equal(req.hashes, want, sizeof want);
    kvp__rapi_req_free(&req);
  }
}

/* An integer instance_id is a u64 (Dynamo's instance ids): one above
 * INT64_MAX is its decimal name, not the negative i64 with its bits. */
static void a_u64_instance_id_keeps_its_name(void **state) {
  kvp__rapi_req_t req;
  (void)state;
  assert_int_equal(query_hashes("{\"token_ids\": [], \"block_size\": 4, "
                                "\"instance_id\": 18446744073709551615}",
                                &req),
                   0);
  assert_string_equal(req.instance, "18446744073709551615");
  kvp__rapi_req_free(&req);
  assert_int_equal(
      query_hashes("{\"token_ids\": [], \"block_size\": 4, \"instance_id\": 42}", &req), 0);
  assert_string_equal(req.instance, "42");
  kvp__rapi_req_free(&req);
}

/* The u64 widening does not turn bad JSON into good: a number with a
 * leading zero is refused as jansson refuses it, however large. */
static void leading_zeros_stay_bad_json(void **state) {
  static const char *const bad[] = {
      "{\"seq_hashes\": [09223372036854775808], \"block_size\": 1}",
      "{\"seq_hashes\": [012], \"block_size\": 1}",
  };
  char err[512];
  kvp__rapi_req_t req;
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(kvp__rapi_parse(1, bad[i], strlen(bad[i]), 0, &req, err, sizeof err),
                     KVP_EPROTO);
    assert_non_null(strstr(err, "bad JSON"));
    kvp__rapi_req_free(&req);
  }
}

/* An advisor with more than FD_SETSIZE (1024) descriptors open (a packed
 * volume keeps one per segment: a few TB of 64 MiB segments) still serves
 * the API: libmicrohttpd polls with poll(), not select(), which refused a
 * listening socket numbered 1024 or more (the advisor did not start) and
 * dropped every connection numbered so. */
static void more_descriptors_than_select_takes(void **state) {
  advfix_t *f = *state;
  int fds[1100], n;
  char *reply = NULL;

  if (!kvp_test_nofile_at_least(1300))
    skip();
  assert_int_equal(n = kvp_test_hold_fds(fds, 1100), 1100);
  int port = kvp_test_free_port();
  f->cfg.http_enabled = 1;
  snprintf(f->cfg.http_listen, sizeof f->cfg.http_listen, "127.0.0.1:%d", port);
  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(post(port, "/query_by_hash", "{\"seq_hashes\": [1], \"block_size\": 1}", &reply),
                   200);
  assert_string_equal(reply, "{\"default\":{}}");
  free(reply);
  assert_int_equal(advfix_stop(f), 0);
  while (n > 0)
    close(fds[--n]);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(lora_id_0_is_the_base_model),
    cmocka_unit_test(a_u64_instance_id_keeps_its_name),
    cmocka_unit_test(leading_zeros_stay_bad_json),
    cmocka_unit_test_setup_teardown(equals_nats_match, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(stop_under_load, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(address_in_use, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(more_descriptors_than_select_takes, advfix_cm_setup_core,
                                    advfix_cm_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_http", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
