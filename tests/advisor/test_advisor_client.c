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
#include "kvplane/subjects.h"

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

/* A burst of requests sent without waiting, more than one loop turn
 * answers and more than the query connection keeps before destroying them,
 * with answers of 80 rows (40 workers, G1 and G2: ~17 MB in all, more than
 * the sockets hold, so the advisor's writes come up short) (query.c: the
 * write interest deferred while answering and applied after, answered
 * requests destroyed in batches): every request gets its one right answer
 * without another request to push them out, and a request after the burst
 * is answered at once. */
static void a_burst_is_answered_whole(void **state) {
  advfix_t *f = *state;
  enum { BURST = 3000, HASHES = 64 };
  uint64_t h[HASHES];
  uint8_t req[4 + 8 * HASHES];
  char subj[256], stats_subj[256], to[64];
  static unsigned char seen[BURST + 1];
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;

  for (int i = 0; i < HASHES; i++)
    h[i] = 0x5000 + (uint64_t)i;
  assert_int_equal(advfix_start(f), 0);
  for (int w = 0; w < 40; w++) {
    char name[16];
    snprintf(name, sizeof name, "w%d", w);
    publish(f, name, 0, h, 4, 4);
  }
  kvp_client_t *c = open_client(f, f->cfg.ns);
  static kvp_match_t rows[100];
  assert_int_equal(match_soon(c, h, 4, rows, 100, 80), 80);
  kvp_client_close(c);

  memcpy(req, KVP_MATCH_MAGIC, 4);
  for (int i = 0; i < HASHES; i++)
    for (int b = 0; b < 8; b++)
      req[4 + i * 8 + b] = (uint8_t)(h[i] >> (8 * b));
  assert_int_equal(kvp_subject_api(subj, sizeof subj, f->cfg.ns, KVP_API_MATCH), 0);
  assert_int_equal(kvp_subject_api(stats_subj, sizeof stats_subj, f->cfg.ns, KVP_API_STATS), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, f->natsd.url), NATS_OK);
  assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "burst.*"), NATS_OK);
  natsSubscription_SetPendingLimits(sub, -1, -1);
  for (int i = 1; i <= BURST; i++) {
    snprintf(to, sizeof to, "burst.%d", i);
    if (i % 100 == 0) /* a stats request now and then, on its own subscription */
      assert_int_equal(natsConnection_PublishRequestString(nc, stats_subj, to, "{}"), NATS_OK);
    else
      assert_int_equal(natsConnection_PublishRequest(nc, subj, to, req, (int)sizeof req), NATS_OK);
  }
  assert_int_equal(natsConnection_Flush(nc), NATS_OK);
  int got = 0;
  while (got < BURST) {
    natsMsg *m = NULL;
    if (natsSubscription_NextMsg(&m, sub, 10000) != NATS_OK)
      fail_msg("%d of %d answers after 10 s without one", got, BURST);
    int id = atoi(natsMsg_GetSubject(m) + strlen("burst."));
    assert_true(id >= 1 && id <= BURST);
    assert_int_equal(seen[id], 0);
    seen[id] = 1;
    const char *body = natsMsg_GetData(m);
    if (id % 100 == 0)
      assert_non_null(strstr(body, "\"locations\""));
    else
      assert_non_null(strstr(body, "\"length\":4"));
    natsMsg_Destroy(m);
    got++;
  }
  /* One more after the burst: answered at once. */
  natsMsg *m = NULL;
  int64_t t0 = nats_Now();
  assert_int_equal(natsConnection_Request(&m, nc, subj, req, (int)sizeof req, 2000), NATS_OK);
  assert_true(nats_Now() - t0 < 1000);
  assert_non_null(strstr(natsMsg_GetData(m), "\"length\":4"));
  natsMsg_Destroy(m);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
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
    cmocka_unit_test_setup_teardown(a_burst_is_answered_whole, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(open_errors, advfix_cm_setup_core, advfix_cm_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_client", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
