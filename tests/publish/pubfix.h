/* Test fixture for the publisher tests: a subscriber that decodes every
 * batch on kvplane.ev.<ns>.> (core subscription, or a JetStream replay of the
 * stream) and a model of one worker's registered set per tier rebuilt from
 * the events, as an advisor would. */
#ifndef KVP_TEST_PUBFIX_H
#define KVP_TEST_PUBFIX_H

#include <nats/nats.h>
#include <stddef.h>
#include <stdint.h>

#include "kvplane/wire.h"

typedef struct pf_set_s {
  uint64_t *v;
  size_t n, cap;
} pf_set_t;

typedef struct pf_sub_s {
  natsConnection *nc;
  natsSubscription *sub;
  jsCtx *js;
  /* what arrived */
  size_t batches, heartbeats, events, blocks, snapshots_done, snapshot_chunks;
  uint64_t dropped_total;
  uint64_t next_id; /* expected next event id, 0 before the first batch */
  int id_errors;    /* ids not contiguous (gaps not announced by dropped_events) */
  /* model per tier; snapshots are staged until their last chunk */
  pf_set_t tier[5];
  pf_set_t stage[5];
  /* every stored hash in arrival order, and every event id */
  pf_set_t stored;
  pf_set_t ids;
  int decode_errors;
} pf_sub_t;

/* Subscribes on url to kvplane.ev.<ns>.>; with js set, replays the stream
 * from its start instead (an ordered push consumer). Returns 0 or -1. */
int pf_sub_open(pf_sub_t *s, const char *url, const char *ns, int js, const char *user,
                const char *pass);
void pf_sub_close(pf_sub_t *s);

/* Reads batches until idle_ms pass without one, or until total_ms. */
void pf_sub_drain(pf_sub_t *s, int idle_ms, int total_ms);

/* Reads until at least nevents events arrived or total_ms pass. */
void pf_sub_wait_events(pf_sub_t *s, size_t nevents, int total_ms);

void pf_set_add(pf_set_t *s, uint64_t v);
void pf_set_del(pf_set_t *s, uint64_t v);
int pf_set_has(const pf_set_t *s, uint64_t v);
void pf_set_free(pf_set_t *s);
/* 1 when a and b hold the same values (any order). */
int pf_set_equal(const pf_set_t *a, const pf_set_t *b);

/* cmocka fixtures: a real nats-server started for each test, handed to it
 * as *state (a kvp_natsd_t *), stopped after it: core NATS, JetStream on,
 * a user/password, or a token (see pf_user and pf_token). */
int pf_setup_core(void **state);
int pf_setup_js(void **state);
int pf_setup_user(void **state);
int pf_setup_token(void **state);
int pf_teardown(void **state);
extern const char *const pf_user, *const pf_pass, *const pf_token;

void pf_sleep_ms(int ms);
uint64_t pf_now_ms(void);

#endif
