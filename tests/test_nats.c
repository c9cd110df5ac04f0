/* The NATS module (src/nats: options, connecting, the stream, the status
 * mapping, subjects) and the integration it rests on: a real nats-server
 * started by the harness carries an encoded EventBatch from a publisher
 * connection to a subscriber that decodes it. */
#include <nats/nats.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "kvplane/nats.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"
#include "kvplane/wire.h"
#include "natsd.h"

static int setup(void **state) {
  static kvp_natsd_t d;
  kvp_natsd_opts_t o = {.jetstream = 1};
  if (kvp_natsd_start(&d, &o) != 0)
    return -1;
  *state = &d;
  return 0;
}

static int teardown(void **state) {
  kvp_natsd_stop(*state);
  return 0;
}

static void publish_and_decode_batch(void **state) {
  kvp_natsd_t *d = *state;
  natsConnection *pub = NULL, *sub_nc = NULL;
  natsSubscription *sub = NULL;
  natsMsg *msg = NULL;
  uint64_t hashes[64];
  uint8_t buf[4096];
  size_t len;
  kvp_wire_batch_t *wb;

  for (int i = 0; i < 64; i++)
    hashes[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  kvp_event_t ev = {.event_id = 1,
                    .type = KVP_EV_STORED,
                    .tier = KVP_TIER_G1,
                    .hashes = hashes,
                    .nhashes = 64,
                    .block_tokens = 16};
  kvp_batch_t b = {.ns = "test",
                   .worker_id = "w0",
                   .epoch = 1,
                   .first_event_id = 1,
                   .events = &ev,
                   .nevents = 1};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);

  assert_int_equal(natsConnection_ConnectTo(&sub_nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_ConnectTo(&pub, d->url), NATS_OK);
  char all[KVP_SUBJECT_MAX], one[KVP_SUBJECT_MAX];
  assert_int_equal(kvp_subject_events_ns(all, sizeof all, "test"), 0);
  assert_int_equal(kvp_subject_events(one, sizeof one, "test", "w0"), 0);
  assert_int_equal(natsConnection_SubscribeSync(&sub, sub_nc, all), NATS_OK);
  assert_int_equal(natsConnection_Flush(sub_nc), NATS_OK);
  assert_int_equal(natsConnection_Publish(pub, one, buf, (int)len), NATS_OK);
  assert_int_equal(natsConnection_Flush(pub), NATS_OK);
  assert_int_equal(natsSubscription_NextMsg(&msg, sub, 5000), NATS_OK);
  assert_string_equal(natsMsg_GetSubject(msg), one);
  assert_int_equal(kvp_wire_decode((const uint8_t *)natsMsg_GetData(msg),
                                   (size_t)natsMsg_GetDataLength(msg), NULL, &wb),
                   0);
  assert_int_equal(kvp_wire_batch_view(wb)->nevents, 1);
  assert_memory_equal(kvp_wire_batch_view(wb)->events[0].hashes, hashes, sizeof hashes);
  kvp_wire_batch_free(wb);
  natsMsg_Destroy(msg);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(pub);
  natsConnection_Destroy(sub_nc);
}

static void jetstream_is_enabled(void **state) {
  kvp_natsd_t *d = *state;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsAccountInfo *ai = NULL;
  jsErrCode jerr = 0;
  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  assert_int_equal(js_GetAccountInfo(&ai, js, NULL, &jerr), NATS_OK);
  jsAccountInfo_Destroy(ai);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
}

static void restart_keeps_port(void **state) {
  kvp_natsd_t *d = *state;
  int port = d->port;
  natsConnection *nc = NULL;
  assert_int_equal(kvp_natsd_restart(d), 0);
  assert_int_equal(d->port, port);
  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  natsConnection_Destroy(nc);
}

/* --- the NATS module ------------------------------------------------------- */

static void subjects_build_and_parse(void **state) {
  (void)state;
  char b[KVP_SUBJECT_MAX], ns[KVP_SUBJECT_TOKEN_MAX + 1], w[KVP_SUBJECT_TOKEN_MAX + 1];
  char long_tok[KVP_SUBJECT_TOKEN_MAX + 2];

  assert_int_equal(kvp_subject_events(b, sizeof b, "prod", "w-0_a"), 0);
  assert_string_equal(b, "kvplane.ev.prod.w-0_a");
  assert_int_equal(kvp_subject_events_ns(b, sizeof b, "prod"), 0);
  assert_string_equal(b, "kvplane.ev.prod.>");
  assert_int_equal(kvp_subject_resync(b, sizeof b, "prod", "w0"), 0);
  assert_string_equal(b, "kvplane.ctl.prod.w0.resync");
  assert_int_equal(kvp_subject_api(b, sizeof b, "prod", KVP_API_MATCH), 0);
  assert_string_equal(b, "kvplane.api.prod.match");
  assert_int_equal(kvp_subject_api(b, sizeof b, "prod", KVP_API_STATS), 0);
  assert_string_equal(b, "kvplane.api.prod.stats");
  /* Tokens: wildcards, separators, empty and over-long ones are refused. */
  assert_int_equal(kvp_subject_events(b, sizeof b, "prod", "w.0"), KVP_EINVAL);
  assert_int_equal(kvp_subject_events(b, sizeof b, "*", "w0"), KVP_EINVAL);
  assert_int_equal(kvp_subject_events(b, sizeof b, "prod", ">"), KVP_EINVAL);
  assert_int_equal(kvp_subject_events(b, sizeof b, "", "w0"), KVP_EINVAL);
  assert_int_equal(kvp_subject_events(b, sizeof b, NULL, "w0"), KVP_EINVAL);
  memset(long_tok, 'a', sizeof long_tok - 1);
  long_tok[sizeof long_tok - 1] = '\0';
  assert_false(kvp_subject_token_valid(long_tok));
  long_tok[KVP_SUBJECT_TOKEN_MAX] = '\0';
  assert_true(kvp_subject_token_valid(long_tok));
  /* Two 64-character tokens still fit the documented maximum. */
  assert_int_equal(kvp_subject_resync(b, sizeof b, long_tok, long_tok), 0);
  assert_int_equal(kvp_subject_events(b, 12, "prod", "w0"), KVP_ETOOBIG);
  /* Parsing reads back exactly what the builder writes, nothing else. */
  assert_int_equal(kvp_subject_events(b, sizeof b, "prod", "w-0_a"), 0);
  assert_int_equal(kvp_subject_parse_events(b, ns, w), 0);
  assert_string_equal(ns, "prod");
  assert_string_equal(w, "w-0_a");
  const char *bad[] = {"kvplane.ev.prod",     "kvplane.ev.prod.w0.x", "kvplane.ev..w0",
                       "kvplane.ev.prod.",    "kvplane.ctl.prod.w0",  "kvplane.ev.prod.*",
                       "kvplane.ev.p*d.w0",   "xkvplane.ev.prod.w0",  "kvplane.ev",
                       ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (kvp_subject_parse_events(bad[i], ns, w) != KVP_EPROTO)
      fail_msg("'%s' parsed as an event subject", bad[i]);
  snprintf(b, sizeof b, "kvplane.ev.prod.%sa", long_tok);
  assert_int_equal(kvp_subject_parse_events(b, ns, w), KVP_EPROTO);
  assert_int_equal(kvp_subject_parse_events(NULL, ns, w), KVP_EPROTO);
}

static void opts_set_and_check_name_the_option(void **state) {
  (void)state;
  kvp_nats_opts_t o;
  char err[256], big[2048];

  kvp_nats_opts_init(&o);
  assert_string_equal(o.servers, KVP_NATS_DEFAULT_SERVERS);
  assert_int_equal(o.connect_timeout_ms, 5000);
  assert_int_equal(kvp_nats_opts_check(&o, NULL, err, sizeof err), 0);
  assert_int_equal(kvp_nats_opts_set(&o, "servers", "nats://a:1, nats://b:2", err, sizeof err), 0);
  assert_int_equal(kvp_nats_opts_check(&o, NULL, err, sizeof err), 0);
  assert_int_equal(kvp_nats_opts_set(&o, "connect_timeout_ms", "250", err, sizeof err), 0);
  assert_int_equal(o.connect_timeout_ms, 250);
  assert_int_equal(kvp_nats_opts_set(&o, "connect_timeout_ms", "soon", err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "connect_timeout_ms"));
  assert_int_equal(kvp_nats_opts_set(&o, "url", "x", err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "url: not a NATS option"));
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(kvp_nats_opts_set(&o, "servers", big, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "servers: longer than"));

  static const struct {
    const char *name, *value, *name2, *value2, *want;
  } cases[] = {
      {"servers", "localhost:4222", NULL, NULL, "[nats] servers: expected URLs"},
      {"servers", "nats://a:1,,nats://b:2", NULL, NULL, "[nats] servers"},
      {"servers", "", NULL, NULL, "[nats] servers: must not be empty"},
      {"user", "u", NULL, NULL, "[nats] password: user and password go together"},
      {"password", "p", NULL, NULL, "[nats] user: user and password go together"},
      {"token", "t", "creds", "/c", "[nats] token: set only one"},
      {"user", "u", "token", "t", "[nats] token"},
      {"tls_cert", "/c.pem", NULL, NULL, "[nats] tls_key: tls_cert and tls_key go together"},
      {"tls_ca", "/nonexistent/ca.pem", NULL, NULL, "[nats] tls_ca: cannot read /nonexistent"},
      {"creds", "/nonexistent/u.creds", NULL, NULL, "[nats] creds: cannot read"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kvp_nats_opts_init(&o);
    assert_int_equal(kvp_nats_opts_set(&o, cases[i].name, cases[i].value, err, sizeof err), 0);
    if (cases[i].name2)
      assert_int_equal(kvp_nats_opts_set(&o, cases[i].name2, cases[i].value2, err, sizeof err), 0);
    if (strcmp(cases[i].name, "user") == 0 && cases[i].name2)
      assert_int_equal(kvp_nats_opts_set(&o, "password", "p", err, sizeof err), 0);
    err[0] = '\0';
    assert_int_equal(kvp_nats_opts_check(&o, "[nats] ", err, sizeof err), KVP_ECONFIG);
    if (strstr(err, cases[i].want) == NULL)
      fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].want);
  }
}

static void status_mapping(void **state) {
  (void)state;
  assert_int_equal(kvp__nats_status(NATS_OK), 0);
  assert_int_equal(kvp__nats_status(NATS_NOT_PERMITTED), KVP_EAUTH);
  assert_int_equal(kvp__nats_status(NATS_CONNECTION_AUTH_FAILED), KVP_EAUTH);
  assert_int_equal(kvp__nats_status(NATS_NO_MEMORY), KVP_ENOMEM);
  assert_int_equal(kvp__nats_status(NATS_TIMEOUT), KVP_ETIMEDOUT);
  assert_int_equal(kvp__nats_status(NATS_NOT_FOUND), KVP_ENOENT);
  assert_int_equal(kvp__nats_status(NATS_IO_ERROR), KVP_ECONN);
  assert_int_equal(kvp__nats_status(NATS_NO_SERVER), KVP_ECONN);
}

static void connect_reports_each_failure(void **state) {
  kvp_natsd_t *d = *state;
  kvp_nats_opts_t o;
  natsConnection *nc = (natsConnection *)1;
  char err[512];
  kvp__nats_conn_args_t a = {.name = "kvp-test", .reconnect_wait_ms = 50};

  /* Connected, with the name the server shows. */
  kvp_nats_opts_init(&o);
  snprintf(o.servers, sizeof o.servers, "%s", d->url);
  assert_int_equal(kvp__nats_connect(&o, &a, &nc, err, sizeof err), 0);
  assert_non_null(nc);
  assert_int_equal(natsConnection_Status(nc), NATS_CONN_STATUS_CONNECTED);
  natsConnection_Destroy(nc);
  /* No server on the port: ECONN, naming the servers. */
  snprintf(o.servers, sizeof o.servers, "nats://127.0.0.1:%d", kvp_test_free_port());
  o.connect_timeout_ms = 500;
  assert_int_equal(kvp__nats_connect(&o, NULL, &nc, err, sizeof err), KVP_ECONN);
  assert_null(nc);
  assert_non_null(strstr(err, "servers: cannot connect to nats://127.0.0.1:"));
  /* A bad option never reaches the network. */
  snprintf(o.servers, sizeof o.servers, "127.0.0.1:4222");
  assert_int_equal(kvp__nats_connect(&o, NULL, &nc, err, sizeof err), KVP_ECONFIG);
  assert_null(nc);
}

static void connect_refused_credentials_are_eauth(void **state) {
  (void)state;
  kvp_natsd_t d;
  kvp_natsd_opts_t so = {.user = "kvp", .pass = "s3cret"};
  kvp_nats_opts_t o;
  natsConnection *nc = NULL;
  char err[512];

  assert_int_equal(kvp_natsd_start(&d, &so), 0);
  kvp_nats_opts_init(&o);
  snprintf(o.servers, sizeof o.servers, "%s", d.url);
  o.connect_timeout_ms = 2000;
  assert_int_equal(kvp__nats_connect(&o, NULL, &nc, err, sizeof err), KVP_EAUTH);
  print_message("no credentials: %s\n", err);
  assert_int_equal(kvp_nats_opts_set(&o, "user", "kvp", err, sizeof err), 0);
  assert_int_equal(kvp_nats_opts_set(&o, "password", "wrong", err, sizeof err), 0);
  assert_int_equal(kvp__nats_connect(&o, NULL, &nc, err, sizeof err), KVP_EAUTH);
  assert_int_equal(kvp_nats_opts_set(&o, "password", "s3cret", err, sizeof err), 0);
  assert_int_equal(kvp__nats_connect(&o, NULL, &nc, err, sizeof err), 0);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
}

static void ensure_stream_creates_once_or_refuses(void **state) {
  kvp_natsd_t *d = *state;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsStreamInfo *si = NULL;
  char err[512];
  int created = -1;

  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  /* Missing and creation off: a configuration error naming the stream. */
  assert_int_equal(kvp__nats_ensure_stream(js, "KVP_T1", 0, &created, err, sizeof err),
                   KVP_ECONFIG);
  assert_int_equal(created, 0);
  assert_non_null(strstr(err, "KVP_T1"));
  /* Created with the event subjects, then found as it is. */
  assert_int_equal(kvp__nats_ensure_stream(js, "KVP_T1", 1, &created, err, sizeof err), 0);
  assert_int_equal(created, 1);
  assert_int_equal(kvp__nats_ensure_stream(js, "KVP_T1", 1, &created, err, sizeof err), 0);
  assert_int_equal(created, 0);
  assert_int_equal(kvp__nats_ensure_stream(js, "KVP_T1", 0, NULL, err, sizeof err), 0);
  assert_int_equal(js_GetStreamInfo(&si, js, "KVP_T1", NULL, NULL), NATS_OK);
  assert_int_equal(si->Config->SubjectsLen, 1);
  assert_string_equal(si->Config->Subjects[0], KVP_SUBJECT_EVENTS_ALL);
  assert_int_equal(si->Config->Storage, js_FileStorage);
  jsStreamInfo_Destroy(si);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(publish_and_decode_batch, setup, teardown),
    cmocka_unit_test_setup_teardown(jetstream_is_enabled, setup, teardown),
    cmocka_unit_test_setup_teardown(restart_keeps_port, setup, teardown),
    cmocka_unit_test(subjects_build_and_parse),
    cmocka_unit_test(opts_set_and_check_name_the_option),
    cmocka_unit_test(status_mapping),
    cmocka_unit_test_setup_teardown(connect_reports_each_failure, setup, teardown),
    cmocka_unit_test(connect_refused_credentials_are_eauth),
    cmocka_unit_test_setup_teardown(ensure_stream_creates_once_or_refuses, setup, teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("nats", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
