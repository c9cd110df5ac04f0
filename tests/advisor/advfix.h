/* Shared fixture code for the advisor tests that run a real nats-server:
 * an in-process advisor on its own thread, polling of the database, and
 * request/reply helpers. */
#ifndef KVP_TEST_ADVFIX_H
#define KVP_TEST_ADVFIX_H

#include <nats/nats.h>
#include <pthread.h>

#include "advisor/advisor.h"
#include "natsd.h"
#include "testworker.h"

typedef struct advfix_s {
  kvp_natsd_t natsd;
  char dir[256];
  char db[320];
  kvp_advisor_config_t cfg;
  kvp_advisor_t *adv;
  pthread_t thread;
  int running;
  int run_rc;
  natsConnection *nc;
  jsCtx *js;
  int shares_natsd; /* attached to another fixture's server: not ours to stop */
} advfix_t;

/* Starts nats-server (JetStream when js) and a temp dir; cfg gets defaults
 * pointing at both (namespace "t", flush every 50 ms, no heartbeat
 * timeout). Returns 0 or -1. */
int advfix_setup(advfix_t *f, int js);

/* A second advisor fixture on owner's server (owner must outlive it), with
 * its own temp dir and database, for namespace ns. Returns 0 or -1. */
int advfix_attach(advfix_t *f, const advfix_t *owner, const char *ns);

/* Stops whatever runs and removes everything. */
void advfix_teardown(advfix_t *f);

/* Opens the advisor with f->cfg and runs it on a thread. Returns 0 or the
 * open error (err printed). */
int advfix_start(advfix_t *f);

/* Stops the advisor thread and closes it; returns kvp_advisor_run's code. */
int advfix_stop(advfix_t *f);

/* Polls the database until every worker's locations equal its model and
 * the table holds no other worker's rows (or timeout_ms passes). Returns 0,
 * or -1 with why set to the last difference. */
int advfix_wait_equal(advfix_t *f, tw_t **w, int n, int timeout_ms, char *why, size_t whylen);

/* A request on kvplane.api.<cfg.ns>.<what>; returns the reply's JSON text
 * (malloc'd) or NULL. */
char *advfix_request(advfix_t *f, const char *what, const void *data, int len);

/* An integer at a dotted path ("ingest.malformed") of a stats reply; -1
 * when absent. */
long long advfix_stat(advfix_t *f, const char *path);

/* cmocka setup and teardown of a fixture in *state: core or JetStream. */
int advfix_cm_setup_core(void **state);
int advfix_cm_setup_js(void **state);
int advfix_cm_teardown(void **state);

/* Publishes nbatches batches of nevents events from w on the fixture's
 * connection (JetStream when the fixture has it), flushing as it goes;
 * fails the test when one cannot be built or published. */
void advfix_publish_batches(advfix_t *f, tw_t *w, int nbatches, int nevents);

#endif
