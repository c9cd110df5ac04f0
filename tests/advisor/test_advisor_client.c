/* The advisor client (kvplane/client.h) against a real nats-server and the
 * in-process advisor: match rows as the publisher stored them, rows beyond
 * cap, stats through kvp_client_request, no advisor (KVP_ENOENT), and the
 * replies a broken responder sends (KVP_EPROTO), from a fake responder on
 * another namespace's match subject. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advfix.h"
#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"

static kvp_client_t *open_client(advfix_t *f, const char *ns) {
  kvp_nats_opts_t o;
  kvp_client_t *c = NULL;
  char err[512];
  kvp_nats_opts_init(&o);
  snprintf(o.servers, sizeof o.servers, "%s", f->natsd.url);
  int rc = kvp_client_open(&o, ns, &c, err, sizeof err);
  if (rc != 0)
    fail_msg("kvp_client_open: %s", err);
  return c;
}

/* One publisher (one epoch: a second open of the same worker is a restart
 * that empties its G1 and G2) stores h[0..n1) in G1 and h[0..n2) in G2. */
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

/* Polls match until it reports want rows (the advisor applies batches on
 * its own thread). */
static size_t match_soon(kvp_client_t *c, const uint64_t *h, size_t n, kvp_match_t *rows,
                         size_t cap, size_t want) {
  size_t got = 0;
  char err[512];
  for (int i = 0; i < 500; i++) {
    int rc = kvp_client_match(c, h, n, 2000, rows, cap, &got, err, sizeof err);
    if (rc != 0)
      fail_msg("kvp_client_match: %s", err);
    if (got == want)
      break;
    usleep(10000);
  }
  return got;
}

static void match_rows(void **state) {
  advfix_t *f = *state;
  const uint64_t h[4] = {0x1111, 0x2222, 0x3333, UINT64_C(0xfedcba9876543210)};
  kvp_match_t rows[4], one;
  size_t got;
  char err[512];

  assert_int_equal(advfix_start(f), 0);
  publish(f, "w0", 2, h, 4, 2);
  publish(f, "w1", 0, h, 3, 0);
  kvp_client_t *c = open_client(f, f->cfg.ns);
  assert_int_equal(match_soon(c, h, 4, rows, 4, 3), 3);
  /* Longest first, each row as stored. */
  assert_string_equal(rows[0].worker, "w0");
  assert_int_equal(rows[0].dp_rank, 2);
  assert_int_equal(rows[0].tier, 1);
  assert_int_equal(rows[0].length, 4);
  assert_string_equal(rows[1].worker, "w1");
  assert_int_equal(rows[1].tier, 1);
  assert_int_equal(rows[1].length, 3);
  assert_string_equal(rows[2].worker, "w0");
  assert_int_equal(rows[2].tier, 2);
  assert_int_equal(rows[2].length, 2);
  /* Room for one row: the first is written, the count says three. */
  memset(&one, 0x5a, sizeof one);
  assert_int_equal(kvp_client_match(c, h, 4, 2000, &one, 1, &got, err, sizeof err), 0);
  assert_int_equal(got, 3);
  assert_string_equal(one.worker, "w0");
  assert_int_equal(one.length, 4);
  assert_int_equal(kvp_client_match(c, h, 4, 2000, NULL, 0, &got, err, sizeof err), 0);
  assert_int_equal(got, 3);
  /* A sequence nobody holds the start of. */
  const uint64_t other[2] = {0x9999, 0x1111};
  assert_int_equal(kvp_client_match(c, other, 2, 2000, rows, 4, &got, err, sizeof err), 0);
  assert_int_equal(got, 0);
  /* Bad arguments. */
  assert_int_equal(kvp_client_match(c, h, 0, 2000, rows, 4, &got, err, sizeof err), KVP_EINVAL);
  assert_non_null(strstr(err, "0 hashes"));
  assert_int_equal(kvp_client_match(c, h, 4, 2000, NULL, 4, &got, err, sizeof err), KVP_EINVAL);

  /* stats through the generic request. */
  char *reply = NULL;
  assert_int_equal(kvp_client_request(c, "stats", NULL, 2000, &reply, err, sizeof err), 0);
  json_t *j = json_loads(reply, 0, NULL);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "locations")), 9);
  json_decref(j);
  kvp_client_reply_free(reply);
  assert_int_equal(kvp_client_request(c, "not a token", NULL, 2000, &reply, err, sizeof err),
                   KVP_EINVAL);
  assert_null(reply);

  /* The advisor gone: nobody listens on the subject. */
  advfix_stop(f);
  assert_int_equal(kvp_client_match(c, h, 4, 5000, rows, 4, &got, err, sizeof err), KVP_ENOENT);
  assert_non_null(strstr(err, "kvplane.api.t.match"));
  kvp_client_close(c);
  kvp_client_close(NULL);
}

/* A responder that answers every request with the text in its closure. */
static void fake_reply(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)sub;
  const char *text = *(const char *const *)closure;
  if (text != NULL)
    natsConnection_PublishString(nc, natsMsg_GetReply(msg), text);
  natsMsg_Destroy(msg);
}

static void broken_replies(void **state) {
  advfix_t *f = *state;
  const uint64_t h[1] = {42};
  kvp_match_t rows[2];
  natsSubscription *sub = NULL;
  const char *text = NULL;
  size_t got;
  char err[512];

  assert_int_equal(
      natsConnection_Subscribe(&sub, f->nc, "kvplane.api.fake.match", fake_reply, &text), NATS_OK);
  natsConnection_Flush(f->nc);
  kvp_client_t *c = open_client(f, "fake");
  static const struct {
    const char *reply, *says;
  } cases[] = {
      {"not json", "not JSON"},
      {"{\"error\": \"bad JSON: x\"}", "refused the request: bad JSON: x"},
      {"{\"hashes\": 1}", "no \"matches\" array"},
      {"{\"matches\": [{\"worker\": \"w\", \"dp_rank\": 0, \"tier\": \"G9\", \"length\": 1}]}",
       "row 0"},
      {"{\"matches\": [{\"worker\": \"w\", \"dp_rank\": -1, \"tier\": \"G1\", \"length\": 1}]}",
       "row 0"},
      {"{\"matches\": [{\"worker\": 5}]}", "row 0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    text = cases[i].reply;
    err[0] = '\0';
    assert_int_equal(kvp_client_match(c, h, 1, 2000, rows, 2, &got, err, sizeof err), KVP_EPROTO);
    if (strstr(err, cases[i].says) == NULL)
      fail_msg("reply %s: error '%s' does not say '%s'", cases[i].reply, err, cases[i].says);
    assert_int_equal(got, 0);
  }
  /* A good reply from the same responder. */
  text = "{\"hashes\": 1, \"matches\": [{\"worker\": \"w9\", \"dp_rank\": 7, \"tier\": \"G4\", "
         "\"length\": 1}]}";
  assert_int_equal(kvp_client_match(c, h, 1, 2000, rows, 2, &got, err, sizeof err), 0);
  assert_int_equal(got, 1);
  assert_string_equal(rows[0].worker, "w9");
  assert_int_equal(rows[0].dp_rank, 7);
  assert_int_equal(rows[0].tier, 4);
  /* A responder that never answers: the timeout. */
  text = NULL;
  assert_int_equal(kvp_client_match(c, h, 1, 200, rows, 2, &got, err, sizeof err), KVP_ETIMEDOUT);
  assert_non_null(strstr(err, "no reply within 200 ms"));
  kvp_client_close(c);
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
}

static void open_errors(void **state) {
  advfix_t *f = *state;
  kvp_nats_opts_t o;
  kvp_client_t *c = (kvp_client_t *)1;
  char err[512];

  kvp_nats_opts_init(&o);
  snprintf(o.servers, sizeof o.servers, "%s", f->natsd.url);
  assert_int_equal(kvp_client_open(&o, "bad ns", &c, err, sizeof err), KVP_EINVAL);
  assert_null(c);
  assert_non_null(strstr(err, "'bad ns'"));
  snprintf(o.servers, sizeof o.servers, "nats://127.0.0.1:%d", kvp_test_free_port());
  o.connect_timeout_ms = 300;
  assert_int_equal(kvp_client_open(&o, NULL, &c, err, sizeof err), KVP_ECONN);
  assert_null(c);
  assert_non_null(strstr(err, "cannot connect"));
  snprintf(o.user, sizeof o.user, "u");
  assert_int_equal(kvp_client_open(&o, NULL, &c, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "password"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(match_rows, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(broken_replies, advfix_cm_setup_core, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(open_errors, advfix_cm_setup_core, advfix_cm_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_client", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
