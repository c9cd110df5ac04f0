/* Advisor test fixture; see advfix.h. */
#include "kvplane/subjects.h"
#include "advfix.h"

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

int advfix_setup(advfix_t *f, int js) {
  kvp_natsd_opts_t o = {.jetstream = js};
  memset(f, 0, sizeof *f);
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  if (kvp_natsd_start(&f->natsd, &o) != 0)
    return -1;
  snprintf(f->db, sizeof f->db, "%s/advisor.db", f->dir);
  kvp_advisor_config_defaults(&f->cfg);
  snprintf(f->cfg.nats.servers, sizeof f->cfg.nats.servers, "%s", f->natsd.url);
  snprintf(f->cfg.db_path, sizeof f->cfg.db_path, "%s", f->db);
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "t");
  f->cfg.mode = js ? KVP_ADVISOR_JETSTREAM : KVP_ADVISOR_CORE;
  f->cfg.flush_interval_ms = 50;
  f->cfg.heartbeat_timeout_ms = 0;
  f->cfg.resync_retry_ms = 1000;
  f->cfg.log_level = 1;
  if (natsConnection_ConnectTo(&f->nc, f->natsd.url) != NATS_OK)
    return -1;
  if (js && natsConnection_JetStream(&f->js, f->nc, NULL) != NATS_OK)
    return -1;
  return 0;
}

int advfix_attach(advfix_t *f, const advfix_t *owner, const char *ns) {
  memset(f, 0, sizeof *f);
  f->shares_natsd = 1;
  f->natsd = owner->natsd;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->db, sizeof f->db, "%s/advisor.db", f->dir);
  f->cfg = owner->cfg;
  snprintf(f->cfg.db_path, sizeof f->cfg.db_path, "%s", f->db);
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "%s", ns);
  if (natsConnection_ConnectTo(&f->nc, f->natsd.url) != NATS_OK)
    return -1;
  if (owner->js && natsConnection_JetStream(&f->js, f->nc, NULL) != NATS_OK)
    return -1;
  return 0;
}

void advfix_teardown(advfix_t *f) {
  if (f->running)
    advfix_stop(f);
  jsCtx_Destroy(f->js);
  natsConnection_Destroy(f->nc);
  if (!f->shares_natsd)
    kvp_natsd_stop(&f->natsd);
  kvp_test_rmtree(f->dir);
}

static void *run_main(void *arg) {
  advfix_t *f = arg;
  f->run_rc = kvp_advisor_run(f->adv);
  return NULL;
}

int advfix_start(advfix_t *f) {
  char err[512];
  int rc = kvp_advisor_open(&f->cfg, &f->adv, err, sizeof err);
  if (rc != 0) {
    print_message("advisor open: %s\n", err);
    return rc;
  }
  pthread_create(&f->thread, NULL, run_main, f);
  f->running = 1;
  return 0;
}

int advfix_stop(advfix_t *f) {
  if (!f->running)
    return 0;
  kvp_advisor_stop(f->adv);
  pthread_join(f->thread, NULL);
  kvp_advisor_close(f->adv);
  f->adv = NULL;
  f->running = 0;
  return f->run_rc;
}

static int check_once(advfix_t *f, tw_t **w, int n, char *why, size_t whylen) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int rc = -1;
  size_t want = 0;
  if (sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    snprintf(why, whylen, "cannot open %s", f->db);
    goto done;
  }
  sqlite3_busy_timeout(db, 2000);
  for (int i = 0; i < n; i++) {
    if (tw_check_db(w[i], db, why, whylen) != 0)
      goto done;
    want += tw_size(w[i]);
  }
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM block_locations", -1, &s, NULL) != SQLITE_OK ||
      sqlite3_step(s) != SQLITE_ROW) {
    snprintf(why, whylen, "count: %s", sqlite3_errmsg(db));
    goto done;
  }
  if ((size_t)sqlite3_column_int64(s, 0) != want) {
    snprintf(why, whylen, "%lld locations in the database, %zu expected",
             (long long)sqlite3_column_int64(s, 0), want);
    goto done;
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  sqlite3_close(db);
  return rc;
}

int advfix_wait_equal(advfix_t *f, tw_t **w, int n, int timeout_ms, char *why, size_t whylen) {
  for (int t = 0; t < timeout_ms; t += 50) {
    if (check_once(f, w, n, why, whylen) == 0)
      return 0;
    nats_Sleep(50);
  }
  return -1;
}

char *advfix_request(advfix_t *f, const char *what, const void *data, int len) {
  char subj[KVP_SUBJECT_MAX];
  natsMsg *rep = NULL;
  char *out = NULL;
  if (kvp_subject_api(subj, sizeof subj, f->cfg.ns, what) != 0)
    return NULL;
  if (natsConnection_Request(&rep, f->nc, subj, data, len, 5000) != NATS_OK)
    return NULL;
  out = strndup(natsMsg_GetData(rep), (size_t)natsMsg_GetDataLength(rep));
  natsMsg_Destroy(rep);
  return out;
}

long long advfix_stat(advfix_t *f, const char *path) {
  char *txt = advfix_request(f, "stats", "{}", 2);
  json_t *root = txt ? json_loads(txt, 0, NULL) : NULL, *v = root;
  char buf[128], *save = NULL;
  long long out = -1;
  snprintf(buf, sizeof buf, "%s", path);
  for (char *k = strtok_r(buf, ".", &save); v && k; k = strtok_r(NULL, ".", &save))
    v = json_object_get(v, k);
  if (json_is_integer(v))
    out = json_integer_value(v);
  json_decref(root);
  free(txt);
  return out;
}

int advfix_cm_setup_core(void **state) {
  advfix_t *f = calloc(1, sizeof *f);
  *state = f;
  return f ? advfix_setup(f, 0) : -1;
}

int advfix_cm_setup_js(void **state) {
  advfix_t *f = calloc(1, sizeof *f);
  *state = f;
  return f ? advfix_setup(f, 1) : -1;
}

int advfix_cm_teardown(void **state) {
  advfix_teardown(*state);
  free(*state);
  return 0;
}

void advfix_publish_batches(advfix_t *f, tw_t *w, int nbatches, int nevents) {
  const uint8_t *buf;
  size_t len;
  for (int i = 0; i < nbatches; i++) {
    assert_int_equal(tw_batch(w, nevents, &buf, &len), 0);
    assert_int_equal(tw_publish(w, f->nc, f->js, buf, len), 0);
    if (i % 50 == 49)
      natsConnection_Flush(f->nc);
  }
  natsConnection_Flush(f->nc);
}
