/* Advisor ingest: event ids, gaps, epochs, snapshots, heartbeats, clears,
 * malformed input. In memory, through the wire codec, no NATS. */
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "harness.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

#define NOW 1800000000000ull

typedef struct fx_s {
  kvp__index_t *ix;
  kvp__adv_ingest_t *ing;
  int resyncs;
  char last_reason[32];
  char last_worker[65];
} fx_t;

static void on_resync(void *ctx, const char *worker, uint32_t dp, uint64_t epoch,
                      const char *reason) {
  fx_t *f = ctx;
  (void)dp;
  (void)epoch;
  f->resyncs++;
  strncpy(f->last_reason, reason, sizeof f->last_reason - 1);
  strncpy(f->last_worker, worker, sizeof f->last_worker - 1);
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  kvp__adv_ingest_opts_t o = {
      .heartbeat_timeout_ms = 10000, .resync_retry_ms = 1000, .resync = on_resync, .resync_ctx = f};
  if (kvp__index_create(16, 3600, &f->ix) != 0 || kvp__adv_ingest_create(f->ix, &o, &f->ing) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp__adv_ingest_destroy(f->ing);
  kvp__index_destroy(f->ix);
  free(f);
  return 0;
}

/* Encodes and feeds one batch of events. */
static int feed(fx_t *f, const char *worker, uint64_t epoch, uint64_t first, kvp_event_t *ev,
                size_t n, uint64_t dropped, uint64_t now) {
  uint8_t buf[65536];
  size_t len;
  for (size_t i = 0; i < n; i++)
    ev[i].event_id = first + i;
  kvp_batch_t b = {.worker_id = worker,
                   .epoch = epoch,
                   .first_event_id = first,
                   .events = ev,
                   .nevents = n,
                   .dropped_events = dropped};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  return kvp__adv_ingest_message(f->ing, buf, len, NULL, now);
}

static kvp_event_t stored(int tier, const uint64_t *h, size_t n) {
  return (kvp_event_t){.type = KVP_EV_STORED,
                       .tier = tier,
                       .volume = tier >= 3 ? "vol" : NULL,
                       .hashes = h,
                       .nhashes = n,
                       .block_tokens = 16,
                       .block_bytes = 4096};
}

static size_t locs_of(fx_t *f, const char *worker, int tier) {
  uint16_t w;
  size_t n = 0;
  kvp__index_match_t m[16];
  /* Count via match over each known test hash range. */
  if (kvp__index_worker(f->ix, worker, 0, &w) != 0)
    return 0;
  for (uint64_t h = 1; h < 200; h++) {
    uint64_t q = h;
    size_t k = 0;
    assert_int_equal(kvp__index_match(f->ix, &q, 1, m, 16, &k), 0);
    for (size_t i = 0; i < k; i++)
      n += m[i].worker == w && m[i].tier == tier;
  }
  return n;
}

static void applies_stored_removed_accessed(void **state) {
  fx_t *f = *state;
  uint64_t h[4] = {1, 2, 3, 4}, r[1] = {2};
  uint32_t hits[1] = {5};
  kvp_event_t ev[3] = {
      stored(1, h, 4),
      {.type = KVP_EV_REMOVED, .tier = 1, .hashes = r, .nhashes = 1},
      {.type = KVP_EV_ACCESSED, .tier = 1, .hashes = h, .nhashes = 1, .hit_counts = hits}};
  assert_int_equal(feed(f, "w", 1, 1, ev, 3, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 3);
  kvp__index_block_t b;
  assert_int_equal(kvp__index_get(f->ix, 3, &b, NULL, 0, NULL), 0);
  assert_true(b.parent == 2);
  assert_int_equal(kvp__index_get(f->ix, 1, &b, NULL, 0, NULL), 0);
  assert_int_equal(b.hits, 5);
  assert_int_equal(f->resyncs, 0);
  const kvp__adv_ingest_counters_t *c = kvp__adv_ingest_counters(f->ing);
  assert_int_equal(c->events, 3);
  assert_int_equal(c->block_events, 6);
  /* By type (kvplane_advisor_events_total{type}). */
  assert_int_equal(c->by_type[KVP_EV_STORED], 1);
  assert_int_equal(c->by_type[KVP_EV_REMOVED], 1);
  assert_int_equal(c->by_type[KVP_EV_ACCESSED], 1);
  assert_int_equal(c->by_type[KVP_EV_CLEARED], 0);
}

static void duplicate_events_are_skipped(void **state) {
  fx_t *f = *state;
  uint64_t h[2] = {1, 2}, r[1] = {1};
  kvp_event_t ev[2] = {stored(1, h, 2),
                       {.type = KVP_EV_REMOVED, .tier = 1, .hashes = r, .nhashes = 1}};
  assert_int_equal(feed(f, "w", 1, 1, ev, 2, 0, NOW), 0);
  /* The same batch again (a redelivery): the removed block stays removed. */
  assert_int_equal(feed(f, "w", 1, 1, ev, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 1);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->duplicates, 1);
}

static void gap_requests_resync_and_snapshot_converges(void **state) {
  fx_t *f = *state;
  uint64_t h[3] = {1, 2, 3}, h2[1] = {4};
  kvp_event_t ev = stored(1, h, 3);
  assert_int_equal(feed(f, "w", 1, 1, &ev, 1, 0, NOW), 0);
  ev = stored(1, h2, 1);
  assert_int_equal(feed(f, "w", 1, 5, &ev, 1, 0, NOW), 0); /* ids 2..4 lost */
  assert_int_equal(f->resyncs, 1);
  assert_string_equal(f->last_reason, "gap");
  /* The worker's real G1 set is {1, 3, 4, 9} (parents: 9 has none). */
  uint64_t snap[4] = {1, 3, 4, 9}, par[4] = {1, 1, 3, 9};
  kvp_event_t s0 = {.type = KVP_EV_SNAPSHOT,
                    .tier = 1,
                    .snapshot_id = 7,
                    .chunk = 0,
                    .hashes = snap,
                    .parent_hashes = par,
                    .nhashes = 2,
                    .block_tokens = 16};
  kvp_event_t s1 = s0;
  s1.chunk = 1;
  s1.last = 1;
  s1.hashes = snap + 2;
  s1.parent_hashes = par + 2;
  assert_int_equal(feed(f, "w", 1, 6, &s0, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 4); /* {1,2,3,4}: nothing replaced before the last chunk */
  assert_int_equal(feed(f, "w", 1, 7, &s1, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 4);
  assert_int_equal(kvp__index_get(f->ix, 2, NULL, NULL, 0, NULL), KVP_ENOENT);
  kvp__index_block_t b;
  assert_int_equal(kvp__index_get(f->ix, 9, &b, NULL, 0, NULL), 0);
  assert_true(b.parent == 9);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->snapshots, 1);
  /* Answered: no retry. */
  kvp__adv_ingest_tick(f->ing, NOW + 5000);
  assert_int_equal(f->resyncs, 1);
}

static void dropped_events_marker_is_a_gap(void **state) {
  fx_t *f = *state;
  uint64_t h[1] = {1};
  kvp_event_t ev = stored(1, h, 1);
  assert_int_equal(feed(f, "w", 1, 1, &ev, 1, 3, NOW), 0);
  assert_int_equal(f->resyncs, 1);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->gaps, 1);
  /* Unanswered: sent again after the retry interval. */
  kvp__adv_ingest_tick(f->ing, NOW + 500);
  assert_int_equal(f->resyncs, 1);
  kvp__adv_ingest_tick(f->ing, NOW + 1500);
  assert_int_equal(f->resyncs, 2);
}

static void first_contact_mid_stream_is_unknown_state(void **state) {
  fx_t *f = *state;
  uint64_t h[1] = {1};
  kvp_event_t ev = stored(1, h, 1);
  assert_int_equal(feed(f, "w", 1, 40, &ev, 1, 0, NOW), 0);
  assert_int_equal(f->resyncs, 1);
  assert_string_equal(f->last_reason, "unknown");
}

static void new_epoch_drops_g1_g2_keeps_g3(void **state) {
  fx_t *f = *state;
  uint64_t a[2] = {1, 2}, b[1] = {3}, c[1] = {4}, n[1] = {5};
  kvp_event_t ev[3] = {stored(1, a, 2), stored(2, b, 1), stored(3, c, 1)};
  assert_int_equal(feed(f, "w", 10, 1, ev, 3, 0, NOW), 0);
  assert_int_equal(feed(f, "other", 1, 1, ev, 1, 0, NOW), 0);
  kvp_event_t e2 = stored(1, n, 1);
  assert_int_equal(feed(f, "w", 11, 1, &e2, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 1);
  assert_int_equal(locs_of(f, "w", 2), 0);
  assert_int_equal(locs_of(f, "w", 3), 1);
  assert_int_equal(locs_of(f, "other", 1), 2);
  assert_int_equal(f->resyncs, 0);
  /* A straggler from the old epoch changes nothing. */
  assert_int_equal(feed(f, "w", 10, 4, ev, 1, 0, NOW), 0);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->stale, 1);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->epochs, 1);
}

static void cleared_drops_tier_or_all(void **state) {
  fx_t *f = *state;
  uint64_t a[1] = {1}, b[1] = {2}, c[1] = {3};
  kvp_event_t ev[3] = {stored(1, a, 1), stored(2, b, 1), stored(3, c, 1)};
  assert_int_equal(feed(f, "w", 1, 1, ev, 3, 0, NOW), 0);
  kvp_event_t cl = {.type = KVP_EV_CLEARED, .tier = 2};
  assert_int_equal(feed(f, "w", 1, 4, &cl, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 2), 0);
  assert_int_equal(locs_of(f, "w", 1), 1);
  cl.tier = KVP_TIER_ALL;
  assert_int_equal(feed(f, "w", 1, 5, &cl, 1, 0, NOW), 0);
  kvp__index_stats_t st;
  kvp__index_stats(f->ix, &st);
  assert_int_equal(st.locations, 0);
}

static void silent_worker_goes_down_and_resyncs_on_return(void **state) {
  fx_t *f = *state;
  uint64_t a[1] = {1}, c[1] = {3};
  const uint8_t *unused = NULL;
  (void)unused;
  kvp_event_t ev[2] = {stored(1, a, 1), stored(4, c, 1)};
  assert_int_equal(feed(f, "w", 1, 1, ev, 2, 0, NOW), 0);
  /* A heartbeat keeps it up. */
  assert_int_equal(feed(f, "w", 1, 3, NULL, 0, 0, NOW + 8000), 0);
  kvp__adv_ingest_tick(f->ing, NOW + 12000);
  assert_int_equal(kvp__adv_ingest_workers_up(f->ing), 1);
  kvp__adv_ingest_tick(f->ing, NOW + 18001);
  assert_int_equal(kvp__adv_ingest_workers_up(f->ing), 0);
  assert_int_equal(locs_of(f, "w", 1), 0);
  assert_int_equal(locs_of(f, "w", 4), 1);
  kvp__adv_worker_state_t ws;
  assert_int_equal(kvp__adv_ingest_worker_get(f->ing, 0, &ws), 0);
  assert_true(ws.down_at_ms == NOW + 18001);
  assert_int_equal(ws.locations_dropped, 1);
  assert_int_equal(feed(f, "w", 1, 3, NULL, 0, 0, NOW + 20000), 0);
  assert_int_equal(kvp__adv_ingest_workers_up(f->ing), 1);
  assert_int_equal(kvp__adv_ingest_worker_get(f->ing, 0, &ws), 0);
  assert_true(ws.down_at_ms == 0);
  assert_int_equal(ws.locations_dropped, 0);
  assert_int_equal(f->resyncs, 1);
  assert_string_equal(f->last_reason, "down");
}

static void malformed_and_oversized_are_counted(void **state) {
  fx_t *f = *state;
  uint8_t junk[64];
  uint64_t h[64];
  uint8_t buf[4096];
  size_t len;
  for (int i = 0; i < 64; i++) {
    junk[i] = (uint8_t)(i * 37 + 11);
    h[i] = (uint64_t)i + 1;
  }
  assert_int_not_equal(kvp__adv_ingest_message(f->ing, junk, sizeof junk, NULL, NOW), 0);
  kvp_event_t ev = stored(1, h, 64);
  kvp_batch_t b = {.worker_id = "w", .epoch = 1, .first_event_id = 1, .events = &ev, .nevents = 1};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  kvp_wire_limits_t lim = {.max_bytes = 128};
  assert_int_equal(kvp__adv_ingest_message(f->ing, buf, len, &lim, NOW), KVP_ETOOBIG);
  const kvp__adv_ingest_counters_t *c = kvp__adv_ingest_counters(f->ing);
  assert_int_equal(c->malformed, 2);
  assert_int_equal(c->oversized, 1);
  assert_int_equal(c->batches, 0);
  /* The next good batch applies normally. */
  assert_int_equal(kvp__adv_ingest_message(f->ing, buf, len, NULL, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 64);
}

/* An event type the advisor does not know is a bad event, not an applied
 * one, and does not stop the rest of the batch. */
static void unknown_event_type_is_a_bad_event(void **state) {
  fx_t *f = *state;
  uint64_t h[2] = {5, 6};
  kvp_event_t ev[2] = {{.event_id = 1, .type = 99, .tier = 1, .hashes = h, .nhashes = 2},
                       stored(1, h, 2)};
  ev[1].event_id = 2;
  kvp_batch_t b = {.worker_id = "u", .epoch = 1, .first_event_id = 1, .events = ev, .nevents = 2};
  assert_int_equal(kvp__adv_ingest_apply(f->ing, &b, NOW), 0);
  const kvp__adv_ingest_counters_t *c = kvp__adv_ingest_counters(f->ing);
  assert_int_equal(c->bad_events, 1);
  assert_int_equal(c->events, 1);
  assert_int_equal(locs_of(f, "u", 1), 2);
}

static void out_of_order_snapshot_chunk_is_discarded(void **state) {
  fx_t *f = *state;
  uint64_t h[2] = {1, 2};
  kvp_event_t ev = stored(1, h, 2);
  assert_int_equal(feed(f, "w", 1, 1, &ev, 1, 0, NOW), 0);
  kvp_event_t s = {.type = KVP_EV_SNAPSHOT,
                   .tier = 1,
                   .snapshot_id = 3,
                   .chunk = 1,
                   .last = 1,
                   .hashes = h,
                   .nhashes = 1};
  assert_int_equal(feed(f, "w", 1, 2, &s, 1, 0, NOW), 0);
  assert_int_equal(locs_of(f, "w", 1), 2);
  assert_int_equal(f->resyncs, 1);
  assert_string_equal(f->last_reason, "snapshot");
}

/* A snapshot replaces a tier's set by its difference: a location in both
 * keeps its block's access time and hits; one the snapshot lacks goes, one
 * it adds comes; chunks of one snapshot may name different volumes (the
 * tiering advisor's worker holds blocks on several). */
static void a_snapshot_changes_only_what_differs(void **state) {
  fx_t *f = *state;
  uint64_t h[3] = {1, 2, 3}, h3[1] = {3};
  uint32_t hits[1] = {5};
  kvp_event_t ev[3] = {
      stored(3, h, 3),
      stored(3, h3, 1),
      {.type = KVP_EV_ACCESSED, .tier = 3, .hashes = h, .nhashes = 1, .hit_counts = hits}};
  ev[1].volume = "vol2";
  assert_int_equal(feed(f, "w", 1, 1, ev, 3, 0, NOW), 0);
  kvp_event_t g = stored(3, h3, 1);
  assert_int_equal(feed(f, "w", 1, 9, &g, 1, 0, NOW), 0); /* a gap */
  assert_int_equal(f->resyncs, 1);
  /* The worker holds 1 and 4 on vol, 3 on vol2 (3 left vol, 2 is gone). */
  uint64_t on_vol[2] = {1, 4}, on_vol2[1] = {3};
  kvp_event_t s0 = {.type = KVP_EV_SNAPSHOT,
                    .tier = 3,
                    .volume = "vol",
                    .snapshot_id = 2,
                    .hashes = on_vol,
                    .nhashes = 2,
                    .block_tokens = 16,
                    .block_bytes = 4096};
  kvp_event_t s1 = s0;
  s1.volume = "vol2";
  s1.chunk = 1;
  s1.last = 1;
  s1.hashes = on_vol2;
  s1.nhashes = 1;
  assert_int_equal(feed(f, "w", 1, 10, &s0, 1, 0, NOW + 60000), 0);
  assert_int_equal(feed(f, "w", 1, 11, &s1, 1, 0, NOW + 60000), 0);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->snapshots, 1);
  kvp__index_block_t b;
  kvp__index_loc_t l[4];
  size_t n = 0;
  uint16_t vol, vol2;
  assert_int_equal(kvp__index_volume(f->ix, "vol", &vol), 0);
  assert_int_equal(kvp__index_volume(f->ix, "vol2", &vol2), 0);
  /* 1: kept as it was, its hits and access time too. */
  assert_int_equal(kvp__index_get(f->ix, 1, &b, l, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(l[0].volume, vol);
  assert_int_equal(b.hits, 5);
  assert_int_equal(b.last_access_ms / 1000, NOW / 1000);
  /* 2: gone. 3: on vol2 only. 4: new, accessed as of the snapshot. */
  assert_int_equal(kvp__index_get(f->ix, 2, NULL, NULL, 0, NULL), KVP_ENOENT);
  assert_int_equal(kvp__index_get(f->ix, 3, NULL, l, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(l[0].volume, vol2);
  assert_int_equal(kvp__index_get(f->ix, 4, &b, l, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(l[0].volume, vol);
  assert_int_equal(b.last_access_ms / 1000, (NOW + 60000) / 1000);
  assert_int_equal(locs_of(f, "w", 3), 3);
}

/* The blocks a snapshot adds are stored in the snapshot's order, not in
 * the difference's (hash) order: a chain then takes consecutive records,
 * each block's parent the record before (no side-table entry, the
 * index's bytes per location), as the events that stored it would. */
static void a_snapshot_stores_its_chains_in_order(void **state) {
  fx_t *f = *state;
  enum { N = 64 };
  uint64_t chain[N], parents[N];
  for (size_t i = 0; i < N; i++) {
    chain[i] = 0x9e3779b97f4a7c15ull * (i + 1); /* hash order is not chain order */
    parents[i] = i ? chain[i - 1] : chain[i];
  }
  /* The first 10 arrive as an event, the worker then resyncs (a gap). */
  kvp_event_t e = stored(1, chain, 10);
  assert_int_equal(feed(f, "w", 1, 1, &e, 1, 0, NOW), 0);
  kvp_event_t g = stored(2, chain, 1);
  assert_int_equal(feed(f, "w", 1, 9, &g, 1, 0, NOW), 0);
  assert_int_equal(f->resyncs, 1);
  kvp_event_t sn = {.type = KVP_EV_SNAPSHOT,
                    .tier = 1,
                    .snapshot_id = 1,
                    .last = 1,
                    .hashes = chain,
                    .parent_hashes = parents,
                    .nhashes = N,
                    .block_tokens = 16,
                    .block_bytes = 4096};
  assert_int_equal(feed(f, "w", 1, 10, &sn, 1, 0, NOW), 0);
  assert_int_equal(kvp__adv_ingest_counters(f->ing)->snapshots, 1);
  kvp__index_stats_t st;
  kvp__index_stats(f->ix, &st);
  assert_int_equal(st.tier_locations[1], N);
  assert_int_equal(st.parents_side, 0);
  for (size_t i = 1; i < N; i++) {
    kvp__index_block_t b;
    assert_int_equal(kvp__index_get(f->ix, chain[i], &b, NULL, 0, NULL), 0);
    assert_int_equal(b.parent, chain[i - 1]);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(a_snapshot_changes_only_what_differs, setup, teardown),
    cmocka_unit_test_setup_teardown(a_snapshot_stores_its_chains_in_order, setup, teardown),
    cmocka_unit_test_setup_teardown(applies_stored_removed_accessed, setup, teardown),
    cmocka_unit_test_setup_teardown(duplicate_events_are_skipped, setup, teardown),
    cmocka_unit_test_setup_teardown(gap_requests_resync_and_snapshot_converges, setup, teardown),
    cmocka_unit_test_setup_teardown(dropped_events_marker_is_a_gap, setup, teardown),
    cmocka_unit_test_setup_teardown(first_contact_mid_stream_is_unknown_state, setup, teardown),
    cmocka_unit_test_setup_teardown(new_epoch_drops_g1_g2_keeps_g3, setup, teardown),
    cmocka_unit_test_setup_teardown(cleared_drops_tier_or_all, setup, teardown),
    cmocka_unit_test_setup_teardown(silent_worker_goes_down_and_resyncs_on_return, setup, teardown),
    cmocka_unit_test_setup_teardown(malformed_and_oversized_are_counted, setup, teardown),
    cmocka_unit_test_setup_teardown(out_of_order_snapshot_chunk_is_discarded, setup, teardown),
    cmocka_unit_test_setup_teardown(unknown_event_type_is_a_bad_event, setup, teardown),
};

KVP_TEST_MAIN("advisor_ingest", tests)
