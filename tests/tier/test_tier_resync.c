/* A resync asked of the tiering advisor's worker (_advisor) is answered:
 *   - the engine's publisher answers a request on the worker's resync
 *     subject with a snapshot of its G3 and G4 locations, one run of
 *     chunks per volume and block shape, each naming its volume, and an
 *     empty tier as one empty last chunk;
 *   - the advisor's ingest does not apply its own engine's events when NATS
 *     brings them back: the echo of a snapshot taken before later moves
 *     would remove those moves from the engine's own index;
 *   - a volume whose name no announcement can carry is refused;
 *   - end to end, in core mode: a second advisor started after the first
 *     one's moves (a standby, a restarted consumer) asks for the resync
 *     on the _advisor heartbeat it joins on, and ends with the same G4
 *     locations in its database as the advisor that moved them.
 * Real nats-server, real posix volumes, real SQLite; loopback only.
 * Why this file is long: its cases share the engine fixture (tier_fx.h),
 * the snapshot subscriber and an in-process advisor; each is one
 * behaviour of the resync. */
#include <pthread.h>
#include <unistd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "index/index.h"
#include "store/store.h"
#include "advisor/advisor.h"
#include "harness.h"
#include "natsd.h"
#include <nats/nats.h>
#include "kvplane/publisher.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "tier/engine.h"
#include "advisor/ingest.h"

#include "tier_fx.h"
#include "../scale/scale_tier_fx.h" /* adv_t, run_main, adv_stop */

/* The snapshot chunks of worker _advisor a plain subscriber saw. */
#define MAXSEEN 64
typedef struct chunk_s {
  int tier, last;
  uint32_t chunk, tokens;
  uint64_t snapshot_id;
  char volume[32];
  uint64_t hashes[16];
  size_t n;
} chunk_t;

typedef struct seen_s {
  pthread_mutex_t mu;
  chunk_t c[MAXSEEN];
  int n;
} seen_t;

static void on_event(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *ctx) {
  seen_t *seen = ctx;
  kvp_wire_batch_t *wb = NULL;
  (void)nc;
  (void)sub;
  if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), NULL,
                      &wb) == 0) {
    const kvp_batch_t *b = kvp_wire_batch_view(wb);
    pthread_mutex_lock(&seen->mu);
    for (size_t i = 0; i < b->nevents && seen->n < MAXSEEN; i++) {
      const kvp_event_t *ev = &b->events[i];
      if (ev->type != KVP_EV_SNAPSHOT)
        continue;
      chunk_t *c = &seen->c[seen->n++];
      c->tier = ev->tier;
      c->last = ev->last;
      c->chunk = ev->chunk;
      c->tokens = ev->block_tokens;
      c->snapshot_id = ev->snapshot_id;
      snprintf(c->volume, sizeof c->volume, "%s", ev->volume ? ev->volume : "");
      for (size_t k = 0; k < ev->nhashes && c->n < 16; k++)
        c->hashes[c->n++] = ev->hashes[k];
    }
    pthread_mutex_unlock(&seen->mu);
    kvp_wire_batch_free(wb);
  }
  natsMsg_Destroy(m);
}

static int lasts(seen_t *seen) {
  int k = 0;
  pthread_mutex_lock(&seen->mu);
  for (int i = 0; i < seen->n; i++)
    k += seen->c[i].last;
  pthread_mutex_unlock(&seen->mu);
  return k;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* A nats-server for the engine (core mode) and a plain subscriber to
 * worker _advisor's events through cb; ctl receives its resync subject. */
static void listen_advisor(fx_t *f, kvp_natsd_t *d, natsConnection **nc, natsSubscription **sub,
                           natsMsgHandler cb, void *ctx, char ctl[KVP_SUBJECT_MAX]) {
  char subj[KVP_SUBJECT_MAX];
  assert_int_equal(kvp_natsd_start(d, NULL), 0);
  snprintf(f->cfg.nats.servers, sizeof f->cfg.nats.servers, "%s", d->url);
  f->cfg.mode = KVP_ADVISOR_CORE;
  assert_int_equal(kvp_subject_events(subj, sizeof subj, "t", "_advisor"), 0);
  assert_int_equal(kvp_subject_resync(ctl, KVP_SUBJECT_MAX, "t", "_advisor"), 0);
  assert_int_equal(natsConnection_ConnectTo(nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_Subscribe(sub, *nc, subj, cb, ctx), NATS_OK);
  natsConnection_Flush(*nc);
}

/* Undoes listen_advisor, the engine closed first. */
static void unlisten(kvp__tier_engine_t *e, kvp_natsd_t *d, natsConnection *nc,
                     natsSubscription *sub) {
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(d);
}

static void engine_answers_per_volume(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512], ctl[KVP_SUBJECT_MAX];
  kvp_natsd_t d;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  seen_t seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
  uint16_t adv, vx;

  listen_advisor(f, &d, &nc, &sub, on_event, &seen, ctl);
  seed(f, 10); /* 10 of 10 blocks: the two coldest leaves (10, 9) go to G4 */
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  fx_engine = e;
  round_and_wait(f, e);
  round_and_wait(f, e); /* the sources deleted */
  assert_int_equal(locs_in(f, 10, 4), 1);
  assert_int_equal(locs_in(f, 9, 4), 1);
  /* Two more of _advisor's locations, as moves the engine made before a
   * restart would leave them: one on another G4 volume, of another shape. */
  assert_int_equal(kvp__index_worker(f->ix, "_advisor", 0, &adv), 0);
  assert_int_equal(kvp__index_volume(f->ix, "g4b", &vx), 0);
  assert_int_equal(kvp__index_store(f->ix, 77, 0, 0, adv, 4, vx, 32, 5000, NOW_MS), 0);
  /* Nothing is sent before a request. */
  nats_Sleep(100);
  assert_int_equal(lasts(&seen), 0);
  assert_int_equal(natsConnection_PublishString(nc, ctl, ""), NATS_OK);
  natsConnection_Flush(nc);
  nats_Sleep(200); /* the publisher's subscription raises its flag */
  for (int i = 0; i < 100 && lasts(&seen) < 2; i++) {
    round_and_wait(f, e); /* the round polls the publishers first */
    nats_Sleep(20);
  }
  assert_int_equal(lasts(&seen), 2); /* G3 and G4, once each */
  pthread_mutex_lock(&seen.mu);
  uint64_t g4[8];
  size_t ng4 = 0;
  int g3_chunks = 0, on_g4b = 0;
  uint64_t id = seen.c[0].snapshot_id;
  for (int i = 0; i < seen.n; i++) {
    chunk_t *c = &seen.c[i];
    assert_int_equal(c->snapshot_id, id); /* one snapshot, every tier in it */
    if (c->tier == 3) {
      /* _advisor holds nothing in G3: one empty chunk, the last. */
      g3_chunks++;
      assert_int_equal(c->n, 0);
      assert_int_equal(c->last, 1);
      assert_int_equal(c->chunk, 0);
      continue;
    }
    assert_int_equal(c->tier, 4);
    if (strcmp(c->volume, "g4b") == 0) {
      on_g4b++;
      assert_int_equal(c->n, 1);
      assert_int_equal(c->hashes[0], 77);
      assert_int_equal(c->tokens, 32);
    } else {
      assert_string_equal(c->volume, "g4");
      assert_int_equal(c->tokens, 16);
    }
    for (size_t k = 0; k < c->n && ng4 < 8; k++)
      g4[ng4++] = c->hashes[k];
  }
  pthread_mutex_unlock(&seen.mu);
  assert_int_equal(g3_chunks, 1);
  assert_int_equal(on_g4b, 1);
  assert_int_equal(ng4, 3);
  qsort(g4, ng4, sizeof g4[0], cmp_u64);
  assert_int_equal(g4[0], 9);
  assert_int_equal(g4[1], 10);
  assert_int_equal(g4[2], 77);
  unlisten(e, &d, nc, sub);
}

/* Every message on worker _advisor's subject, as NATS delivered it. */
typedef struct echo_s {
  pthread_mutex_t mu;
  uint8_t *msg[256];
  size_t len[256];
  int n;
  int snap_end;     /* the message with the first snapshot's last G4 chunk; -1 */
  size_t g4_stored; /* hashes in G4 Stored events so far */
} echo_t;

static void on_echo(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *ctx) {
  echo_t *e = ctx;
  kvp_wire_batch_t *wb = NULL;
  size_t len = (size_t)natsMsg_GetDataLength(m);
  (void)nc;
  (void)sub;
  pthread_mutex_lock(&e->mu);
  if (e->n < 256 && (e->msg[e->n] = malloc(len ? len : 1)) != NULL) {
    memcpy(e->msg[e->n], natsMsg_GetData(m), len);
    e->len[e->n] = len;
    if (kvp_wire_decode(e->msg[e->n], len, NULL, &wb) == 0) {
      const kvp_batch_t *b = kvp_wire_batch_view(wb);
      for (size_t i = 0; i < b->nevents; i++) {
        const kvp_event_t *ev = &b->events[i];
        if (ev->type == KVP_EV_SNAPSHOT && ev->tier == 4 && ev->last && e->snap_end < 0)
          e->snap_end = e->n;
        if (ev->type == KVP_EV_STORED && ev->tier == 4)
          e->g4_stored += ev->nhashes;
      }
      kvp_wire_batch_free(wb);
    }
    e->n++;
  }
  pthread_mutex_unlock(&e->mu);
  natsMsg_Destroy(m);
}

/* The G4 locations worker w holds by the index. */
static size_t held_g4(fx_t *f, uint16_t w) {
  kvp__index_held_t *h = NULL;
  size_t n = 0;
  assert_int_equal(kvp__index_held(f->ix, w, 4, &h, &n), 0);
  free(h);
  return n;
}

/* The advisor's ingest reads its own engine's events back from NATS, late
 * (its inbox behind, under load). The engine had made two moves to G4,
 * answered a resync with a snapshot of them, then made more; the ingest
 * then applied the echo up to that snapshot as a difference and removed
 * the later moves from the index the engine itself works on (their objects
 * in G4, no location: a resync answered meanwhile said so to every
 * consumer, for good). Its own events are now followed by id, not applied
 * again. */
static void an_advisors_own_echo_undoes_nothing(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  kvp__adv_ingest_t *ing = NULL;
  char err[512], ctl[KVP_SUBJECT_MAX];
  kvp_natsd_t d;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  echo_t echo = {.mu = PTHREAD_MUTEX_INITIALIZER, .snap_end = -1};
  uint16_t adv;
  uint8_t payload[1000];
  kvp__adv_ingest_opts_t io = {.resync_retry_ms = 1000};

  listen_advisor(f, &d, &nc, &sub, on_echo, &echo, ctl);
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  fx_engine = e;
  assert_int_equal(kvp__index_worker(f->ix, "_advisor", 0, &adv), 0);
  round_and_wait(f, e);
  round_and_wait(f, e);
  size_t first = held_g4(f, adv);
  assert_true(first > 0);
  /* A resync: the snapshot holds the moves so far. */
  assert_int_equal(natsConnection_PublishString(nc, ctl, ""), NATS_OK);
  natsConnection_Flush(nc);
  nats_Sleep(200);
  for (int i = 0; i < 100; i++) {
    pthread_mutex_lock(&echo.mu);
    int done = echo.snap_end >= 0;
    pthread_mutex_unlock(&echo.mu);
    if (done)
      break;
    round_and_wait(f, e);
    nats_Sleep(20);
  }
  assert_true(echo.snap_end >= 0);
  /* The worker fills G3 again: more moves, after the snapshot. */
  for (int i = 11; i <= 12; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = 1,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(f->g3, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, (uint64_t)i, 1, (uint64_t)i - 1, f->w, 3, f->v3, 16,
                                      sizeof payload + KVP_FRAME_HEADER,
                                      NOW_MS + (uint64_t)i * 1000),
                     0);
  }
  round_and_wait(f, e);
  round_and_wait(f, e);
  size_t later = held_g4(f, adv);
  assert_true(later > first);
  for (int i = 0; i < 100; i++) { /* their Stored events are out */
    pthread_mutex_lock(&echo.mu);
    size_t got = echo.g4_stored;
    pthread_mutex_unlock(&echo.mu);
    if (got >= later)
      break;
    nats_Sleep(20);
  }
  /* The echo, late: up to the snapshot, then the rest. */
  assert_int_equal(kvp__adv_ingest_create(f->ix, &io, &ing), 0);
  pthread_mutex_lock(&echo.mu);
  int n = echo.n, end = echo.snap_end;
  pthread_mutex_unlock(&echo.mu);
  for (int i = 0; i <= end; i++)
    assert_int_equal(kvp__adv_ingest_message(ing, echo.msg[i], echo.len[i], NULL, NOW_MS), 0);
  size_t mid = held_g4(f, adv);
  for (int i = end + 1; i < n; i++)
    assert_int_equal(kvp__adv_ingest_message(ing, echo.msg[i], echo.len[i], NULL, NOW_MS), 0);
  size_t last = held_g4(f, adv);
  print_message("_advisor's G4 locations: %zu after the first moves, %zu after the later ones, "
                "%zu once the echo up to the snapshot was applied, %zu at its end\n",
                first, later, mid, last);
  kvp__adv_ingest_destroy(ing);
  unlisten(e, &d, nc, sub);
  for (int i = 0; i < n; i++)
    free(echo.msg[i]);
  assert_int_equal(mid, later);
  assert_int_equal(last, later);
}

/* A volume whose name the publisher cannot carry (32 characters or more:
 * the config takes 63) is refused when the engine announces its moves:
 * before, every announcement of a move into or out of it failed
 * (KVP_EINVAL, counted in events_dropped only) and the snapshots cut its
 * name to 31 characters, a volume no consumer knew. */
static void a_volume_name_too_long_to_announce_is_refused(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  kvp_natsd_t d;
  char err[512];
  const char *name = "g4-a-name-of-forty-characters-0123456789";

  assert_int_equal(strlen(name), 40);
  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  snprintf(f->cfg.nats.servers, sizeof f->cfg.nats.servers, "%s", d.url);
  f->cfg.mode = KVP_ADVISOR_CORE;
  snprintf(f->cfg.volumes[1].name, sizeof f->cfg.volumes[1].name, "%s", name);
  int rc = kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix, &e, err,
                                 sizeof err);
  fx_engine = e;
  if (rc == 0) {
    kvp__tier_engine_close(e);
    fx_engine = NULL;
  }
  kvp_natsd_stop(&d);
  assert_int_equal(rc, KVP_ECONFIG);
  assert_non_null(strstr(err, name));
  print_message("%s\n", err);
}

static void adv_start(adv_t *a, fx_t *f, const char *name, const char *url, int tiering) {
  kvp_advisor_config_t *c = &a->cfg;
  char err[512];
  kvp_advisor_config_defaults(c);
  snprintf(c->db_path, sizeof c->db_path, "%s/%s.db", f->dir, name);
  snprintf(c->nats.servers, sizeof c->nats.servers, "%s", url);
  snprintf(c->ns, sizeof c->ns, "t");
  snprintf(c->consumer, sizeof c->consumer, "%s", name);
  snprintf(c->plugin_dir, sizeof c->plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  c->mode = KVP_ADVISOR_CORE;
  c->flush_interval_ms = 50;
  c->heartbeat_timeout_ms = 0;
  c->log_level = 1;
  if (tiering) {
    c->tiering = 1;
    c->tier_interval_ms = 100;
    c->tier_residence_ms = 0;
    c->tier_grace_ms = 0;
    c->tier_high = 0.9;
    c->tier_low = 0.5;
    c->nvolumes = 2;
    memcpy(c->volumes, f->cfg.volumes, 2 * sizeof c->volumes[0]);
  }
  if (kvp_advisor_open(c, &a->adv, err, sizeof err) != 0)
    fail_msg("advisor %s: %s", name, err);
  assert_int_equal(pthread_create(&a->thread, NULL, run_main, a), 0);
  a->running = 1;
}

/* The hashes _advisor holds in G4 by the database at path, sorted, as a
 * comma-separated list ("" when none; "?" when it cannot be read). */
static void advisor_g4(const char *path, char *out, size_t len) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  size_t k = 0;
  snprintf(out, len, "?");
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    if (sqlite3_prepare_v2(
            db,
            "SELECT hash FROM block_locations WHERE worker = '_advisor' AND tier = 4 "
            "AND volume = 'g4' ORDER BY hash",
            -1, &s, NULL) == SQLITE_OK) {
      out[0] = '\0';
      while (sqlite3_step(s) == SQLITE_ROW && k + 24 < len)
        k += (size_t)snprintf(out + k, len - k, "%s%lld", k ? "," : "",
                              (long long)sqlite3_column_int64(s, 0));
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
}

/* The entries of such a list. */
static int items(const char *list) {
  int n = list[0] != '\0' && list[0] != '?';
  for (const char *p = list; *p; p++)
    n += *p == ',';
  return n;
}

static void a_late_advisor_learns_the_moves_made_before_it(void **state) {
  fx_t *f = *state;
  kvp_natsd_t d;
  adv_t a = {0}, b = {0};
  kvp_publisher_opts_t po;
  kvp_publisher_t *pub = NULL;
  char err[512], da[320], db[320], ga[512], gb[512];
  uint64_t h[10];
  uint8_t payload[1000];

  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  /* Worker w puts a chain of 10 in its G3 (full: 10 of 10) and says so. */
  for (int i = 0; i < 10; i++) {
    h[i] = 0x7100000000000000ull + (uint64_t)i;
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = h[i],
                     .parent = i ? h[i - 1] : 0,
                     .has_parent = i > 0,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(f->g3, "t", &m, payload, err, sizeof err), 0);
  }
  adv_start(&a, f, "a", d.url, 1);
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", d.url);
  po.ns = "t";
  po.worker_id = "w";
  po.max_delay_ms = 1;
  assert_int_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  nats_Sleep(300); /* advisor a's subscription is up */
  assert_int_equal(kvp_publisher_stored(pub, KVP_TIER_G3, "g3", NULL, h, 10, 16,
                                        sizeof payload + KVP_FRAME_HEADER, 0),
                   0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  /* a moves the coldest half to G4 as _advisor. */
  snprintf(da, sizeof da, "%s/a.db", f->dir);
  snprintf(db, sizeof db, "%s/b.db", f->dir);
  advisor_g4(da, ga, sizeof ga);
  for (int i = 0; i < 200 && items(ga) != 5; i++) {
    nats_Sleep(50);
    advisor_g4(da, ga, sizeof ga);
  }
  assert_int_equal(items(ga), 5); /* down to 0.5 of G3 */
  /* b joins now: it has seen none of those moves, asks _advisor for a
   * resync on its first heartbeat, and a's engine answers. */
  adv_start(&b, f, "b", d.url, 0);
  for (int i = 0; i < 200; i++) {
    advisor_g4(db, gb, sizeof gb);
    if (strcmp(ga, gb) == 0)
      break;
    nats_Sleep(50);
  }
  advisor_g4(db, gb, sizeof gb);
  kvp_publisher_close(pub);
  adv_stop(&b);
  adv_stop(&a);
  kvp_natsd_stop(&d);
  if (strcmp(ga, gb) != 0)
    fprintf(stderr, "advisor a holds [%s] in G4, b [%s]\n", ga, gb);
  assert_string_equal(gb, ga);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(a_late_advisor_learns_the_moves_made_before_it, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(engine_answers_per_volume, setup, teardown),
    cmocka_unit_test_setup_teardown(an_advisors_own_echo_undoes_nothing, setup, teardown),
    cmocka_unit_test_setup_teardown(a_volume_name_too_long_to_announce_is_refused, setup, teardown),
};

KVP_TEST_MAIN("tier_resync", tests)
