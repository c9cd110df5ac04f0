/* Trust and isolation (issue "Trust and isolation"): a worker's identity is
 * its subject; advisors of different namespaces share a server without
 * touching each other's consumer or database; the shipped NATS permissions
 * example confines each worker to its own subject; publisher, advisor and
 * CLI work over TLS with a CA made by openssl in the test. Every test runs
 * a real nats-server. */
#include <jansson.h>
#include <nats/nats.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advfix.h"
#include "index/index.h"
#include "advisor/ingest.h"
#include "harness.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

static void assert_equal_soon(advfix_t *f, tw_t **w, int n) {
  char why[512] = "";
  if (advfix_wait_equal(f, w, n, 20000, why, sizeof why) != 0)
    fail_msg("database %s differs from the workers: %s", f->db, why);
}

static long long stat_soon(advfix_t *f, const char *path, long long want) {
  long long v = -1;
  for (int i = 0; i < 200; i++) {
    if ((v = advfix_stat(f, path)) == want)
      break;
    nats_Sleep(50);
  }
  return v;
}

/* --- identity from the subject ---------------------------------------------- */

/* A valid batch of w0's, published on another worker's subject, changes
 * nothing of w0's and is counted as spoofed. */
static void batch_claiming_another_worker_is_rejected(void **state) {
  advfix_t *f = *state;
  tw_t *w[1] = {tw_create("t", "w0", 0, 1, 61)};
  tw_t *impostor = tw_create("t", "w0", 0, 1, 62);
  const uint8_t *buf;
  size_t len;

  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, w[0], 20, 10);
  assert_equal_soon(f, w, 1);
  assert_int_equal(tw_batch(impostor, 30, &buf, &len), 0);
  assert_int_equal(natsConnection_Publish(f->nc, "kvplane.ev.t.evil", buf, (int)len), NATS_OK);
  natsConnection_Flush(f->nc);
  assert_int_equal(stat_soon(f, "ingest.spoofed", 1), 1);
  /* w0's rows are exactly its own: the impostor's events were not applied. */
  assert_equal_soon(f, w, 1);
  assert_int_equal(advfix_stat(f, "workers"), 1);
  assert_int_equal(advfix_stop(f), 0);
  tw_destroy(w[0]);
  tw_destroy(impostor);
}

/* The ingest refuses subjects outside its namespace before decoding. */
static void subject_outside_namespace_is_never_applied(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  kvp__adv_ingest_t *ing = NULL;
  kvp__adv_ingest_opts_t io = {0};
  tw_t *w = tw_create("u", "w0", 0, 1, 71);
  const uint8_t *buf;
  size_t len;

  assert_int_equal(kvp__index_create(1024, 3600.0, &ix), 0);
  assert_int_equal(kvp__adv_ingest_create(ix, &io, &ing), 0);
  assert_int_equal(tw_batch(w, 5, &buf, &len), 0);
  const char *bad[] = {"kvplane.ev.u.w0", "kvplane.ev.t", "kvplane.ctl.t.w0.resync", "x", NULL};
  for (int i = 0; i < 5; i++)
    assert_int_equal(kvp__adv_ingest_message_on(ing, bad[i], "t", buf, len, NULL, 1), KVP_EPROTO);
  assert_int_equal(kvp__adv_ingest_counters(ing)->foreign, 5);
  assert_int_equal(kvp__adv_ingest_counters(ing)->batches, 0);
  /* On its own namespace's subject, the same batch of "w0" in namespace
   * "u" is refused for its namespace... */
  assert_int_equal(kvp__adv_ingest_message_on(ing, "kvplane.ev.t.w0", "t", buf, len, NULL, 1),
                   KVP_EAUTH);
  assert_int_equal(kvp__adv_ingest_counters(ing)->spoofed, 1);
  /* ...and applied where it belongs. */
  assert_int_equal(kvp__adv_ingest_message_on(ing, "kvplane.ev.u.w0", "u", buf, len, NULL, 1), 0);
  assert_int_equal(kvp__adv_ingest_counters(ing)->batches, 1);
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ix);
  tw_destroy(w);
}

/* --- two advisors, one server ---------------------------------------------- */

static void two_namespaces_share_a_server_and_stay_exact(void **state) {
  advfix_t *f = *state, g;
  tw_t *wt[2] = {tw_create("t", "w0", 0, 1, 81), tw_create("t", "w1", 0, 1, 82)};
  tw_t *wu[2] = {tw_create("u", "w0", 0, 1, 83), tw_create("u", "w9", 0, 1, 84)};

  assert_int_equal(advfix_attach(&g, f, "u"), 0);
  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(advfix_start(&g), 0);
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < 2; i++) {
      advfix_publish_batches(f, wt[i], 40, 8);
      advfix_publish_batches(&g, wu[i], 40, 8);
    }
  assert_equal_soon(f, wt, 2);
  assert_equal_soon(&g, wu, 2);
  assert_int_equal(advfix_stat(f, "ingest.batches"), 240);
  assert_int_equal(advfix_stat(&g, "ingest.batches"), 240);
  /* Both restart: each resumes its own consumer, nothing crosses over. */
  assert_int_equal(advfix_stop(f), 0);
  assert_int_equal(advfix_stop(&g), 0);
  advfix_publish_batches(f, wt[0], 30, 8);
  advfix_publish_batches(&g, wu[1], 30, 8);
  assert_int_equal(advfix_start(&g), 0);
  assert_int_equal(advfix_start(f), 0);
  assert_equal_soon(f, wt, 2);
  assert_equal_soon(&g, wu, 2);
  assert_int_equal(advfix_stat(f, "ingest.batches"), 30);
  assert_int_equal(advfix_stat(&g, "ingest.batches"), 30);
  assert_int_equal(advfix_stat(f, "ingest.foreign") + advfix_stat(&g, "ingest.foreign"), 0);
  advfix_teardown(&g);
  for (int i = 0; i < 2; i++) {
    tw_destroy(wt[i]);
    tw_destroy(wu[i]);
  }
}

/* A second advisor configured with the first one's consumer is refused at
 * start, naming it, and the first stays exact; --takeover replaces it. */
static void foreign_consumer_is_refused_unless_taken_over(void **state) {
  advfix_t *f = *state, g;
  tw_t *wt[1] = {tw_create("t", "w0", 0, 1, 91)};
  char err[1024];
  kvp_advisor_t *adv = NULL;

  assert_int_equal(advfix_attach(&g, f, "u"), 0);
  snprintf(g.cfg.consumer, sizeof g.cfg.consumer, "kvplane-advisor-t");
  assert_int_equal(advfix_start(f), 0);
  advfix_publish_batches(f, wt[0], 20, 8);
  assert_equal_soon(f, wt, 1);
  assert_int_equal(kvp_advisor_open(&g.cfg, &adv, err, sizeof err), KVP_EBUSY);
  assert_null(adv);
  print_message("refused: %s\n", err);
  assert_non_null(strstr(err, "kvplane-advisor-t"));
  assert_non_null(strstr(err, "--takeover"));
  advfix_publish_batches(f, wt[0], 20, 8);
  assert_equal_soon(f, wt, 1);
  assert_int_equal(advfix_stat(f, "ingest.batches"), 40);
  assert_int_equal(advfix_stop(f), 0);
  /* The operator takes the consumer over on purpose. */
  g.cfg.takeover = 1;
  assert_int_equal(advfix_start(&g), 0);
  assert_int_equal(advfix_stop(&g), 0);
  advfix_teardown(&g);
  tw_destroy(wt[0]);
}

/* A database remembers its namespace and consumer. */
static void database_refuses_another_namespace(void **state) {
  advfix_t *f = *state;
  kvp_advisor_t *adv = NULL;
  char err[1024];

  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(advfix_stop(f), 0);
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "u");
  assert_int_equal(kvp_advisor_open(&f->cfg, &adv, err, sizeof err), KVP_ECONFIG);
  print_message("refused: %s\n", err);
  assert_non_null(strstr(err, "namespace 't'"));
  assert_non_null(strstr(err, "namespace 'u'"));
  assert_non_null(strstr(err, f->db));
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "t");
  snprintf(f->cfg.consumer, sizeof f->cfg.consumer, "other");
  assert_int_equal(kvp_advisor_open(&f->cfg, &adv, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "consumer 'kvplane-advisor-t'"));
  f->cfg.consumer[0] = '\0';
  assert_int_equal(advfix_start(f), 0);
  assert_int_equal(advfix_stop(f), 0);
}

/* --- the shipped permissions example ---------------------------------------- */

static atomic_int perm_errors; /* counted on a nats.c thread */

static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus s, void *c) {
  (void)nc;
  (void)sub;
  (void)c;
  if (s == NATS_NOT_PERMITTED)
    atomic_fetch_add(&perm_errors, 1);
}

static natsConnection *connect_as(const char *url, const char *user, const char *pass) {
  natsOptions *o = NULL;
  natsConnection *nc = NULL;
  if (natsOptions_Create(&o) != NATS_OK || natsOptions_SetURL(o, url) != NATS_OK ||
      natsOptions_SetUserInfo(o, user, pass) != NATS_OK ||
      natsOptions_SetErrorHandler(o, on_async_error, NULL) != NATS_OK ||
      natsConnection_Connect(&nc, o) != NATS_OK)
    nc = NULL;
  natsOptions_Destroy(o);
  return nc;
}

/* Whether the file at path holds text (a server's log: its permission
 * violations name the user). */
static int log_has(const char *path, const char *text) {
  static char buf[1 << 20];
  FILE *in = fopen(path, "r");
  size_t n = in ? fread(buf, 1, sizeof buf - 1, in) : 0;
  if (in)
    fclose(in);
  buf[n] = '\0';
  if (strstr(buf, text))
    fprintf(stderr, "%s", buf);
  return strstr(buf, text) != NULL;
}

static void permissions_example_confines_each_worker(void **state) {
  (void)state;
  advfix_t f;
  char conf[512], err[512];
  kvp_natsd_opts_t so = {.jetstream = 1};
  kvp_publisher_opts_t po;
  kvp_publisher_t *pub = NULL;
  uint64_t h[3] = {11, 12, 13};

  snprintf(conf, sizeof conf, "%s/../etc/nats-server.conf.example", kvp_test_srcdir());
  so.config = conf;
  memset(&f, 0, sizeof f);
  assert_non_null(kvp_test_tmpdir(f.dir, sizeof f.dir));
  assert_int_equal(kvp_natsd_start(&f.natsd, &so), 0);
  snprintf(f.db, sizeof f.db, "%s/advisor.db", f.dir);
  kvp_advisor_config_defaults(&f.cfg);
  snprintf(f.cfg.nats.servers, sizeof f.cfg.nats.servers, "%s", f.natsd.url);
  snprintf(f.cfg.nats.user, sizeof f.cfg.nats.user, "advisor");
  snprintf(f.cfg.nats.password, sizeof f.cfg.nats.password, "change-me-advisor");
  snprintf(f.cfg.db_path, sizeof f.cfg.db_path, "%s", f.db);
  snprintf(f.cfg.ns, sizeof f.cfg.ns, "prod");
  f.cfg.flush_interval_ms = 50;
  f.cfg.log_level = 1;
  /* Tiering on, over one G4 volume: the file lets the advisor make and keep
   * its tiering lease, and its moves' publisher hear resync requests. */
  kvp_advisor_volume_t *v = &f.cfg.volumes[f.cfg.nvolumes++];
  char dir[256];
  memcpy(dir, f.dir, sizeof dir);
  snprintf(v->name, sizeof v->name, "g4");
  v->tier = 4;
  snprintf(v->plugin, sizeof v->plugin, "posix");
  v->capacity = 1 << 20;
  snprintf(v->params, sizeof v->params, "path=%s/g4\nfsync=off\n", dir);
  snprintf(f.cfg.plugin_dir, sizeof f.cfg.plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  f.cfg.tiering = 1;
  f.cfg.tier_lease_ms = 1000;
  assert_int_equal(advfix_start(&f), 0);
  /* The advisor's own user cannot be used to publish as a worker. */
  f.nc = connect_as(f.natsd.url, "operator", "change-me-operator");
  assert_non_null(f.nc);
  assert_int_equal(stat_soon(&f, "tiering.leases_held", 1), 1);

  /* w0 publishes through JetStream as itself. */
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", f.natsd.url);
  snprintf(po.nats.user, sizeof po.nats.user, "w0");
  snprintf(po.nats.password, sizeof po.nats.password, "change-me-w0");
  po.ns = "prod";
  po.worker_id = "w0";
  po.mode = KVP_PUB_JETSTREAM;
  assert_int_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, h, 3, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_close(pub);
  assert_int_equal(stat_soon(&f, "locations", 3), 3);

  /* w0 cannot publish on w1's subject: the server refuses it. */
  tw_t *impostor = tw_create("prod", "w1", 0, 1, 5);
  const uint8_t *buf;
  size_t len;
  natsConnection *w0 = connect_as(f.natsd.url, "w0", "change-me-w0");
  assert_non_null(w0);
  assert_int_equal(tw_batch(impostor, 10, &buf, &len), 0);
  natsConnection_Publish(w0, "kvplane.ev.prod.w1", buf, (int)len);
  natsConnection_Flush(w0);
  for (int i = 0; i < 100 && atomic_load(&perm_errors) == 0; i++)
    nats_Sleep(20);
  assert_true(atomic_load(&perm_errors) > 0);
  /* w1 may publish on its subject, but a batch there that claims w0 is
   * rejected by the advisor. */
  natsConnection *w1 = connect_as(f.natsd.url, "w1", "change-me-w1");
  assert_non_null(w1);
  tw_t *as_w0 = tw_create("prod", "w0", 0, 1, 6);
  assert_int_equal(tw_batch(as_w0, 10, &buf, &len), 0);
  assert_int_equal(natsConnection_Publish(w1, "kvplane.ev.prod.w1", buf, (int)len), NATS_OK);
  natsConnection_Flush(w1);
  assert_int_equal(stat_soon(&f, "ingest.spoofed", 1), 1);
  assert_int_equal(advfix_stat(&f, "locations"), 3);
  assert_int_equal(advfix_stat(&f, "workers"), 2); /* w0 and the tiering's own _advisor */

  /* The operator's CLI may ask; a worker may not. */
  char cli[512];
  snprintf(cli, sizeof cli, "%s/tools/kvplane", getenv("KVP_TEST_BINDIR"));
  char *ok[] = {cli,  "stats",    "-s", f.natsd.url,          "-n", "prod",
                "-u", "operator", "-p", "change-me-operator", NULL};
  assert_int_equal(kvp_test_spawn_wait(ok, NULL, NULL), 0);
  char *no[] = {cli,  "stats", "-s",           f.natsd.url, "-n",  "prod", "-u",
                "w0", "-p",    "change-me-w0", "-w",        "500", NULL};
  assert_int_equal(kvp_test_spawn_wait(no, NULL, NULL), 2);

  natsConnection_Destroy(w0);
  natsConnection_Destroy(w1);
  tw_destroy(impostor);
  tw_destroy(as_w0);
  /* Renewed all along (a 1 s TTL, several renewals since), and the
   * server refused the advisor nothing. */
  assert_int_equal(advfix_stat(&f, "tiering.leases_held"), 1);
  assert_int_equal(advfix_stop(&f), 0);
  char log[600];
  memcpy(log, f.natsd.dir, sizeof f.natsd.dir);
  strcat(log, "/nats-server.log");
  assert_false(log_has(log, "User \"advisor\""));
  advfix_teardown(&f);
}

/* --- TLS ---------------------------------------------------------------------- */

static void tls_with_a_test_ca_for_every_part(void **state) {
  (void)state;
  advfix_t f;
  char pki[256], ca[320], cert[320], key[320], rogue[320], scert[320], skey[320], err[512];
  kvp_natsd_opts_t so = {.jetstream = 1};
  kvp_publisher_opts_t po;
  kvp_publisher_t *pub = NULL;
  uint64_t h[2] = {21, 22};

  assert_non_null(kvp_test_tmpdir(pki, sizeof pki));
  assert_int_equal(kvp_test_make_certs(pki), 0);
  snprintf(ca, sizeof ca, "%s/ca.pem", pki);
  snprintf(cert, sizeof cert, "%s/client.pem", pki);
  snprintf(key, sizeof key, "%s/client-key.pem", pki);
  snprintf(rogue, sizeof rogue, "%s/rogue-ca.pem", pki);
  snprintf(scert, sizeof scert, "%s/server.pem", pki);
  snprintf(skey, sizeof skey, "%s/server-key.pem", pki);
  /* Mutual TLS: the server verifies clients against the same CA. */
  so.tls_cert = scert;
  so.tls_key = skey;
  so.tls_ca = ca;
  memset(&f, 0, sizeof f);
  assert_non_null(kvp_test_tmpdir(f.dir, sizeof f.dir));
  assert_int_equal(kvp_natsd_start(&f.natsd, &so), 0);
  snprintf(f.db, sizeof f.db, "%s/advisor.db", f.dir);
  kvp_advisor_config_defaults(&f.cfg);
  snprintf(f.cfg.nats.servers, sizeof f.cfg.nats.servers, "%s", f.natsd.url);
  snprintf(f.cfg.nats.tls_ca, sizeof f.cfg.nats.tls_ca, "%s", ca);
  snprintf(f.cfg.nats.tls_cert, sizeof f.cfg.nats.tls_cert, "%s", cert);
  snprintf(f.cfg.nats.tls_key, sizeof f.cfg.nats.tls_key, "%s", key);
  snprintf(f.cfg.db_path, sizeof f.cfg.db_path, "%s", f.db);
  snprintf(f.cfg.ns, sizeof f.cfg.ns, "t");
  f.cfg.flush_interval_ms = 50;
  f.cfg.log_level = 1;
  assert_int_equal(advfix_start(&f), 0);

  kvp_publisher_opts_init(&po);
  po.nats = f.cfg.nats;
  po.ns = "t";
  po.worker_id = "w0";
  po.mode = KVP_PUB_JETSTREAM;
  assert_int_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, h, 2, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_close(pub);
  pub = NULL;

  /* The events went through: asked over a TLS connection of the test's. */
  natsOptions *nopt = NULL;
  assert_int_equal(natsOptions_Create(&nopt), NATS_OK);
  assert_int_equal(natsOptions_SetURL(nopt, f.natsd.url), NATS_OK);
  assert_int_equal(natsOptions_SetSecure(nopt, true), NATS_OK);
  assert_int_equal(natsOptions_LoadCATrustedCertificates(nopt, ca), NATS_OK);
  assert_int_equal(natsOptions_LoadCertificatesChain(nopt, cert, key), NATS_OK);
  assert_int_equal(natsConnection_Connect(&f.nc, nopt), NATS_OK);
  natsOptions_Destroy(nopt);
  assert_int_equal(stat_soon(&f, "locations", 2), 2);
  /* The CLI asks over TLS too. */
  char cli[512];
  snprintf(cli, sizeof cli, "%s/tools/kvplane", getenv("KVP_TEST_BINDIR"));
  char *ok[] = {cli, "stats",      "-s", f.natsd.url, "-n", "t", "--tls-ca",
                ca,  "--tls-cert", cert, "--tls-key", key,  NULL};
  assert_int_equal(kvp_test_spawn_wait(ok, NULL, NULL), 0);

  /* A server certificate from an unknown CA is refused... */
  snprintf(po.nats.tls_ca, sizeof po.nats.tls_ca, "%s", rogue);
  po.nats.connect_timeout_ms = 2000;
  int rc = kvp_publisher_open(&po, &pub, err, sizeof err);
  print_message("rogue CA: %s: %s\n", kvp_err_name(rc), err);
  assert_int_equal(rc, KVP_ECONN);
  assert_null(pub);
  /* ...and so is a client without a certificate. */
  snprintf(po.nats.tls_ca, sizeof po.nats.tls_ca, "%s", ca);
  po.nats.tls_cert[0] = po.nats.tls_key[0] = '\0';
  assert_int_not_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  assert_null(pub);
  char *no[] = {cli, "stats", "-s", f.natsd.url, "-n", "t", "-w", "500", NULL};
  assert_int_equal(kvp_test_spawn_wait(no, NULL, NULL), 2);

  assert_int_equal(advfix_stop(&f), 0);
  advfix_teardown(&f);
  kvp_test_rmtree(pki);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(batch_claiming_another_worker_is_rejected, advfix_cm_setup_core,
                                    advfix_cm_teardown),
    cmocka_unit_test(subject_outside_namespace_is_never_applied),
    cmocka_unit_test_setup_teardown(two_namespaces_share_a_server_and_stay_exact,
                                    advfix_cm_setup_js, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(foreign_consumer_is_refused_unless_taken_over,
                                    advfix_cm_setup_js, advfix_cm_teardown),
    cmocka_unit_test_setup_teardown(database_refuses_another_namespace, advfix_cm_setup_js,
                                    advfix_cm_teardown),
    cmocka_unit_test(permissions_example_confines_each_worker),
    cmocka_unit_test(tls_with_a_test_ca_for_every_part),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_trust", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
