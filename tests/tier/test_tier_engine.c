/* The tiering engine (src/tier/engine.c) with real posix volumes and a real
 * SQLite journal: a G3 volume over its high watermark has its coldest
 * blocks copied to G4, verified, journaled, recorded in the index under
 * "_advisor", and their sources deleted after the grace period; a
 * destination that is full fails cleanly and keeps the source; moves
 * interrupted by a crash are failed at the next open and committed ones
 * finished; a volume that does not open stops the engine with its name.
 *
 * Why this file is long: its cases share the engine fixture (tier_fx.h)
 * and a NATS subscriber; each case is one behaviour of the engine.
 */
#include <pthread.h>
#include <unistd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "index/index.h"
#include "store/store.h"
#include "common/clock.h"
#include "advisor/advisor.h"
#include "harness.h"
#include "natsd.h"
#include "s3v.h"
#include <nats/nats.h>
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "tier/engine.h"

#include "tier_fx.h"

/* Events of worker _advisor seen by a plain subscriber. */
typedef struct seen_s {
  int stored_g4, removed_g3;
} seen_t;

static void on_event(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *ctx) {
  seen_t *seen = ctx;
  kvp_wire_batch_t *wb = NULL;
  (void)nc;
  (void)sub;
  if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), NULL,
                      &wb) == 0) {
    const kvp_batch_t *b = kvp_wire_batch_view(wb);
    for (size_t i = 0; i < b->nevents; i++) {
      const kvp_event_t *ev = &b->events[i];
      if (ev->type == KVP_EV_STORED && ev->tier == 4 && strcmp(ev->volume, "g4") == 0)
        __atomic_add_fetch(&seen->stored_g4, (int)ev->nhashes, __ATOMIC_RELAXED);
      if (ev->type == KVP_EV_REMOVED && ev->tier == 3 && strcmp(ev->volume, "g3") == 0)
        __atomic_add_fetch(&seen->removed_g3, (int)ev->nhashes, __ATOMIC_RELAXED);
    }
    kvp_wire_batch_free(wb);
  }
  natsMsg_Destroy(m);
}

static void cold_g3_blocks_move_to_g4_whole(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512], subj[KVP_SUBJECT_MAX];
  kvp__tier_stats_t st;
  kvp_natsd_t d;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  seen_t seen = {0};

  /* The moves are published as worker _advisor: a subscriber sees them. */
  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  snprintf(f->cfg.nats.servers, sizeof f->cfg.nats.servers, "%s", d.url);
  f->cfg.mode = KVP_ADVISOR_CORE;
  assert_int_equal(kvp_subject_events(subj, sizeof subj, "t", "_advisor"), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);
  assert_int_equal(natsConnection_Subscribe(&sub, nc, subj, on_event, &seen), NATS_OK);
  natsConnection_Flush(nc);
  seed(f, 10); /* 10 of 10 blocks: fill 1.0 > 0.90 */
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  /* Down to 0.80: two blocks, the leaves first: the chain's end (10, 9),
   * although block 1 is the least recently accessed. */
  assert_int_equal(st.demoted, 2);
  /* Bytes by tier pair (kvplane_migrated_bytes_total): all of them G3 -> G4. */
  assert_true(st.bytes_moved > 0);
  assert_int_equal(st.bytes_tiers[3][4], st.bytes_moved);
  assert_int_equal(st.bytes_tiers[4][3], 0);
  assert_int_equal(locs_in(f, 10, 4), 1);
  assert_int_equal(locs_in(f, 9, 4), 1);
  assert_int_equal(locs_in(f, 1, 4), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'committed'"), 2);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE to_volume = 'g4'"), 2);
  /* Each row names its objects' key namespace (schema 8). */
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE ns = 't'"), 2);
  assert_int_equal(q1(f->db, "SELECT capacity FROM volumes WHERE volume = 'g3'"),
                   10 * (1000 + KVP_FRAME_HEADER));
  /* Both copies exist until the grace period (0 here) is over and the next
   * round deletes the sources. */
  assert_int_equal(kvp_volume_exists(f->g3, "t", 10), 1);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.sources_deleted, 2);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 10), 0);
  assert_int_equal(locs_in(f, 10, 3), 0);
  assert_int_equal(locs_in(f, 10, 4), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'source_deleted'"), 2);
  /* The G4 copy is a verified frame with the bytes. */
  kvp_volume_t *g4 = NULL;
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  uint8_t out[1000];
  kvp_frame_t m;
  assert_int_equal(kvp_volume_get_block(g4, "t", 10, &m, out, sizeof out, err, sizeof err), 0);
  assert_int_equal(out[0], 10);
  assert_int_equal(m.parent, 9);
  kvp_volume_close(g4);
  /* Below the high watermark now: nothing more moves. */
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);
  assert_int_equal(st.events_published, 4);
  kvp__tier_vol_stats_t vs[4];
  assert_int_equal(kvp__tier_engine_volumes(e, vs, 4), 2);
  assert_string_equal(vs[0].name, "g3");
  assert_int_equal(vs[0].moved_out, 2);
  assert_int_equal(vs[0].used, 8 * (1000 + KVP_FRAME_HEADER)); /* 0.80 of its capacity */
  assert_int_equal(vs[0].queued, 0);
  assert_int_equal(vs[1].moved_in, 2);
  assert_int_equal(vs[1].bytes_in, 2 * 1000);
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e); /* flushes the publisher */
  for (int i = 0; i < 100 && (__atomic_load_n(&seen.stored_g4, __ATOMIC_RELAXED) < 2 ||
                              __atomic_load_n(&seen.removed_g3, __ATOMIC_RELAXED) < 2);
       i++)
    nats_Sleep(20);
  assert_int_equal(__atomic_load_n(&seen.stored_g4, __ATOMIC_RELAXED), 2);
  assert_int_equal(__atomic_load_n(&seen.removed_g3, __ATOMIC_RELAXED), 2);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
}

static void full_destination_fails_cleanly(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  /* G4 takes one framed block of 1000 bytes only. */
  snprintf(f->cfg.volumes[1].params, sizeof f->cfg.volumes[1].params,
           "path=%s\nfsync=off\ncapacity=1100\n", f->p4);
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 1);
  assert_int_equal(st.failed, 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed'"
                             " AND error LIKE '%do not fit%'"),
                   1);
  /* The source of the failed move stays, in the volume and the index. */
  assert_int_equal(kvp_volume_exists(f->g3, "t", 9), 1);
  assert_int_equal(locs_in(f, 9, 3), 1);
  kvp__tier_engine_close(e);
}

static void restart_finishes_or_fails_unfinished_moves(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  sqlite3 *db = NULL;

  seed(f, 3);
  /* A crash left move 1 copying and move 2 committed (its copy in G4). */
  kvp_volume_t *g4 = NULL;
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  uint8_t payload[1000];
  memset(payload, 2, sizeof payload);
  kvp_frame_t m = {.hash = 2, .parent = 1, .has_parent = 1, .payload_len = sizeof payload};
  assert_int_equal(kvp_volume_put_block(g4, "t", &m, payload, err, sizeof err), 0);
  assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "INSERT INTO migrations(hash, from_tier, from_volume, to_tier,"
                                " to_volume, bytes, state, created, updated) VALUES"
                                " (1, 3, 'g3', 4, 'g4', 1064, 'copying', 1, 1),"
                                " (2, 3, 'g3', 4, 'g4', 1064, 'committed', 1, 1)",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  f->cfg.volumes[0].capacity = 1000000; /* nothing to demote now */
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  assert_int_equal(q1(f->db, "SELECT state = 'failed' FROM migrations WHERE hash = 1"), 1);
  assert_int_equal(locs_in(f, 2, 4), 1); /* recorded at the destination again */
  round_and_wait(f, e);                  /* grace 0: the source goes */
  assert_int_equal(q1(f->db, "SELECT state FROM migrations WHERE hash = 2") >= 0, 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 2 AND state ="
                             " 'source_deleted'"),
                   1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 2), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 1), 1); /* the interrupted one kept its source */
  assert_int_equal(locs_in(f, 2, 3), 0);
  kvp_volume_close(g4);
  kvp__tier_engine_close(e);
}

/* Partitioned (two parts of one advisor): block 2 is in the shared G4 under
 * both parts' key namespaces, and a crash left part 1's promotion of it
 * committed (its copy in G3 under t-p1). The journal row names t-p1: the
 * restart finishes that move in part 1 and deletes part 1's G4 object
 * only. Guessing the part by where the object is (rows before schema 8)
 * would take part 0's and delete the object part 0 still holds. */
static void a_restart_finishes_a_move_in_its_rows_partition(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512], ns[2][KVP_PARTITION_NS_MAX + 1];
  sqlite3 *db = NULL;
  uint16_t v4;
  uint8_t payload[1000];
  kvp_frame_t m = {.hash = 2, .parent = 1, .has_parent = 1, .payload_len = sizeof payload};

  memset(payload, 2, sizeof payload);
  kvp_volume_t *g4 = NULL;
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  for (uint32_t k = 0; k < 2; k++) {
    kvp_partition_volume_ns(ns[k], sizeof ns[k], "t", k);
    assert_int_equal(kvp_volume_put_block(g4, ns[k], &m, payload, err, sizeof err), 0);
  }
  assert_int_equal(kvp_volume_put_block(f->g3, ns[1], &m, payload, err, sizeof err), 0);
  assert_int_equal(kvp__index_volume(f->ix, "g4", &v4), 0);
  assert_int_equal(kvp__index_store(f->ix, 2, 1, 1, f->w, 4, v4, 16, sizeof payload + 64, NOW_MS),
                   0);
  assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "INSERT INTO migrations(hash, from_tier, from_volume, to_tier,"
                                " to_volume, bytes, state, created, updated, ns) VALUES"
                                " (2, 4, 'g4', 3, 'g3', 1064, 'committed', 1, 1, 't-p1')",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  f->cfg.volumes[0].capacity = 1000000; /* nothing to demote now */
  kvp__tier_opts_t o = *kvp__adv_tier_opts(&f->cfg, &f->topts);
  static const uint32_t owned[2] = {0, 1};
  o.partitions = 2;
  o.owned = owned;
  o.nowned = 2;
  assert_int_equal(kvp__tier_engine_open(&o, &f->loop, f->ix, &e, err, sizeof err), 0);
  fx_engine = e;
  round_and_wait(f, e); /* grace 0: the source goes */
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 2 AND state ="
                             " 'source_deleted'"),
                   1);
  assert_int_equal(kvp_volume_exists(g4, ns[1], 2), 0);
  assert_int_equal(kvp_volume_exists(g4, ns[0], 2), 1); /* part 0's object stays */
  assert_int_equal(kvp_volume_exists(f->g3, ns[1], 2), 1);
  kvp_volume_close(g4);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
}

/* Partitioned with leases, a partition is tiered again once its lease is
 * held (add 1), and its moves are announced by its advisor worker's
 * publisher, opened then. When that publisher cannot open (the servers
 * away at that moment), the partition must not be tiered unannounced (its
 * standby and the routers would never learn its G4 locations): it stays
 * untiered and the call fails, to be tried again. */
static void a_partition_whose_publisher_fails_is_not_tiered(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  uint32_t t[4];
  static const uint32_t owned[2] = {0, 1};
  snprintf(f->cfg.nats.servers, sizeof f->cfg.nats.servers, "nats://127.0.0.1:%d",
           kvp_test_free_port()); /* nobody listens */
  f->cfg.nats.connect_timeout_ms = 500;
  kvp__tier_opts_t o = *kvp__adv_tier_opts(&f->cfg, &f->topts);
  o.partitions = 2;
  o.owned = owned;
  o.nowned = 2;
  o.leased = 1; /* no publisher until a partition is tiered (its lease held) */
  assert_int_equal(kvp__tier_engine_open(&o, &f->loop, f->ix, &e, err, sizeof err), 0);
  fx_engine = e;
  assert_int_equal(kvp__tier_engine_partition(e, 0, -1, err, sizeof err), 0); /* waits */
  assert_int_equal(kvp__tier_engine_partition(e, 1, -1, err, sizeof err), 0);
  assert_int_equal(kvp__tier_engine_tiered(e, t, 4), 0);
  int rc = kvp__tier_engine_partition(e, 0, 1, err, sizeof err); /* its lease held */
  size_t n = kvp__tier_engine_tiered(e, t, 4);
  printf("tiering partition 0 with its publisher's servers away: %s (%s); tiered: %zu\n",
         kvp_strerror(rc), err, n);
  assert_int_not_equal(rc, 0);
  assert_int_equal(n, 0);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
}

/* The index places block 10 in G3 but its file is gone (a location replayed
 * after a crash, a delete behind the advisor's back): the demotion that
 * finds no source drops the location instead of keeping it forever. */
static void a_missing_source_drops_its_stale_location(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  seed(f, 10);
  assert_int_equal(kvp_volume_delete(f->g3, "t", 10, err, sizeof err), 0);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.failed, 1);
  assert_int_equal(locs_in(f, 10, 3), 0);
  assert_int_equal(locs_in(f, 10, 4), 0);
  assert_int_equal(locs_in(f, 9, 4), 1); /* the other leaf moved */
  kvp__tier_engine_close(e);
}

/* Puts blocks first..last (a chain: i's parent is i - 1) in G4, placed
 * there by worker w in the index, last accessed at NOW. */
static void seed_g4(fx_t *f, kvp_volume_t *g4, uint16_t v4, int first, int last) {
  uint8_t payload[1000];
  char err[256];
  for (int i = first; i <= last; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = i > 1,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(g4, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, (uint64_t)i, i > 1, (uint64_t)i - 1, f->w, 4, v4, 16,
                                      sizeof payload + KVP_FRAME_HEADER, NOW_MS),
                     0);
  }
}

static kvp_volume_t *open_g4(fx_t *f, uint16_t *v4) {
  kvp_volume_t *g4 = NULL;
  char err[256];
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  assert_int_equal(kvp__index_volume(f->ix, "g4", v4), 0);
  return g4;
}

/* A G4 block at promote_freq (4 decayed hits) comes back to G3, verified,
 * and its G4 source goes after the grace period; one between keep_freq and
 * promote_freq (the hysteresis band) and a cold one stay. */
static void hot_g4_blocks_come_back_and_the_band_holds(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;
  uint16_t v4;
  kvp_volume_t *g4 = open_g4(f, &v4);

  seed_g4(f, g4, v4, 101, 103); /* a chain, each block in G4 only */
  uint64_t now = kvp__unix_ms();
  assert_int_equal(kvp__index_access(f->ix, 101, 4, 6, now), 0); /* hot */
  assert_int_equal(kvp__index_access(f->ix, 102, 4, 3, now), 0); /* in the band */
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.promoted, 1);
  assert_int_equal(st.prefetched, 0); /* no G4 hit was reported */
  /* Bytes by tier pair (kvplane_migrated_bytes_total): the promotion is G4 -> G3. */
  assert_true(st.bytes_tiers[4][3] > 0);
  assert_int_equal(st.bytes_tiers[4][3], st.bytes_moved);
  assert_int_equal(st.bytes_tiers[3][4], 0);
  assert_int_equal(locs_in(f, 101, 3), 1);
  assert_int_equal(locs_in(f, 102, 3), 0);
  assert_int_equal(locs_in(f, 103, 3), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 101), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 101 AND from_tier = 4"
                             " AND to_tier = 3 AND to_volume = 'g3' AND state = 'committed'"),
                   1);
  round_and_wait(f, e); /* grace 0: the G4 source goes */
  assert_int_equal(kvp_volume_exists(g4, "t", 101), 0);
  assert_int_equal(locs_in(f, 101, 4), 0);
  assert_int_equal(kvp_volume_exists(g4, "t", 102), 1);
  /* Nothing else moves, round after round. */
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.promoted, 1);
  assert_int_equal(st.failed, 0);
  kvp_volume_close(g4);
  kvp__tier_engine_close(e);
}

/* A worker reads block 201 from G4 (an Accessed event, and no G3 copy):
 * its descendants in G4 come to G3 ahead of the requests that
 * will want them, up to [tiering] prefetch_depth generations. */
static void a_g4_hit_prefetches_its_descendants(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;
  uint16_t v4;
  kvp_volume_t *g4 = open_g4(f, &v4);

  f->cfg.tier_prefetch_depth = 3;
  seed_g4(f, g4, v4, 201, 206);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e); /* cold: nothing moves */
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.promoted, 0);
  assert_int_equal(kvp__index_access(f->ix, 201, 4, 1, kvp__unix_ms()), 0);
  kvp__tier_engine_hit(e, 201); /* as the advisor's ingest does for an Accessed G4 */
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.prefetched, 3); /* 202, 203, 204: three generations */
  assert_int_equal(st.promoted, 3);
  assert_int_equal(locs_in(f, 201, 3), 0); /* the hit itself was just read */
  for (uint64_t h = 202; h <= 204; h++) {
    assert_int_equal(locs_in(f, h, 3), 1);
    assert_int_equal(kvp_volume_exists(f->g3, "t", h), 1);
  }
  assert_int_equal(locs_in(f, 205, 3), 0);
  kvp_volume_close(g4);
  kvp__tier_engine_close(e);
}

/* [tiering] max_bytes_per_s: a round copies what the budget lets through
 * (one block of 1064 bytes at 1000 B/s: the budget goes negative) and
 * defers the rest to later rounds, counted. */
static void the_throttle_defers_moves(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  f->cfg.tier_max_bytes_per_s = 1000;
  f->cfg.tier_high = 0.5; /* seven demotions are due, down to 0.3 */
  f->cfg.tier_low = 0.3;
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 1);
  assert_true(st.throttled >= 1);
  round_and_wait(f, e); /* at once: the budget is still spent */
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 1);
  nats_Sleep(1200); /* paid back */
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);
  kvp__tier_engine_close(e);
}

/* Starts the verifying S3 server (tests/tools/s3_verify.py) and makes the
 * fixture's G4 volume an s3 one on it. */
static void s3_as_g4(fx_t *f, kvp_s3v_t *s3) {
  assert_int_equal(kvp_s3v_start(s3, NULL), 0);
  kvp_advisor_volume_t *v4 = &f->cfg.volumes[1];
  snprintf(v4->plugin, sizeof v4->plugin, "s3");
  snprintf(v4->params, sizeof v4->params,
           "endpoint=%s\nbucket=%s\naccess_key=%s\nsecret_key=%s\nprefix=kv/\n"
           "timeout_ms=2000\nretries=1\n",
           s3->endpoint, s3->bucket, KVP_S3V_ACCESS, KVP_S3V_SECRET);
}

/* The test's own handle on that G4 volume. */
static kvp_volume_t *open_s3_g4(const kvp_s3v_t *s3) {
  kvp_volume_t *g4 = NULL;
  char err[512];
  kvp_volume_param_t p[6] = {
      {"endpoint", s3->endpoint},     {"bucket", s3->bucket}, {"access_key", KVP_S3V_ACCESS},
      {"secret_key", KVP_S3V_SECRET}, {"prefix", "kv/"},      {"timeout_ms", "3000"}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4", p, 6, &g4, err, sizeof err),
                   0);
  return g4;
}

/* Block h (seeded) is in exactly one of G3 and g4, its frame valid and the
 * index placing it there alone: 1 when in g4, 0 when in G3. */
static int in_g4_alone(fx_t *f, kvp_volume_t *g4, uint64_t h) {
  int a = kvp_volume_exists(f->g3, "t", h), b = kvp_volume_exists(g4, "t", h);
  uint8_t out[1000];
  kvp_frame_t m;
  char err[512];
  assert_int_equal(a + b, 1);
  assert_int_equal(locs_in(f, h, 3), a);
  assert_int_equal(locs_in(f, h, 4), b);
  assert_int_equal(
      kvp_volume_get_block(a ? f->g3 : g4, "t", h, &m, out, sizeof out, err, sizeof err), 0);
  assert_int_equal(out[999], (uint8_t)h);
  return b;
}

/* G4 on an S3-protocol server (the verifying S3 server on loopback, the s3 plugin): moves
 * commit while it runs; stopped mid-run, the moves into it fail and their
 * sources stay; restarted, the next rounds finish the work. Every block
 * ends in exactly one volume, its frame valid. */
static void s3_as_g4_survives_a_server_restart(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  kvp__tier_stats_t st;
  kvp_s3v_t s3;
  kvp_volume_t *g4 = NULL;
  char err[512];

  s3_as_g4(f, &s3);
  f->cfg.tier_high = 0.5;
  f->cfg.tier_low = 0.2;
  f->cfg.tier_max_moves = 2;
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e); /* 10 -> 8 blocks in G3 */
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);

  kvp_s3v_kill(&s3);
  /* The chain's next leaf waits for the sources of the two to go (G3,
   * posix); then its moves into the stopped G4 fail. */
  round_and_wait(f, e);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);
  assert_int_equal(st.failed, 2);
  assert_int_equal(st.sources_deleted, 2);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed'"), 2);

  assert_int_equal(kvp_s3v_restart(&s3), 0);
  usleep(1100 * 1000); /* G4's backoff after its first failed job (1 s) */
  for (int i = 0; i < 10; i++)
    round_and_wait(f, e); /* 8 -> 6 -> 4 (0.4: at most the high watermark) */
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 6);
  assert_int_equal(st.sources_deleted, 6);
  kvp__tier_engine_close(e);

  g4 = open_s3_g4(&s3);
  int in4 = 0;
  for (uint64_t h = 1; h <= 10; h++)
    in4 += in_g4_alone(f, g4, h);
  assert_int_equal(in4, 6);
  kvp_volume_close(g4);
  kvp_s3v_stop(&s3);
}

/* Kills the S3 server after delay_ms, from another thread: while the job runs. */
typedef struct killer_s {
  kvp_s3v_t *s3;
  int delay_ms;
} killer_t;

static void *kill_later(void *arg) {
  killer_t *k = arg;
  nats_Sleep(k->delay_ms);
  kvp_s3v_kill(k->s3);
  return NULL;
}

/* The S3 server killed in the middle of a job of nine moves into it (25 ms in;
 * each move is a PUT and a GET back), then restarted: the moves it cut
 * fail or commit, never half; the next rounds finish the work, and every
 * block ends in exactly one volume with a valid frame, the index agreeing. */
static void s3_killed_during_a_job(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  kvp__tier_stats_t st;
  kvp_s3v_t s3;
  kvp_volume_t *g4 = NULL;
  pthread_t th;
  char err[512];

  s3_as_g4(f, &s3);
  f->cfg.tier_high = 0.15; /* down to one block: nine moves in one round */
  f->cfg.tier_low = 0.1;
  f->cfg.tier_max_moves = 16;
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  killer_t k = {&s3, 25};
  assert_int_equal(pthread_create(&th, NULL, kill_later, &k), 0);
  round_and_wait(f, e);
  pthread_join(th, NULL);
  kvp__tier_engine_stats(e, &st);
  print_message("with the S3 server killed 25 ms into the job: %llu moves committed, %llu failed\n",
                (unsigned long long)st.demoted, (unsigned long long)st.failed);
  assert_int_equal(st.demoted + st.failed, 9);
  assert_int_equal(
      q1(f->db, "SELECT count(*) FROM migrations WHERE state IN ('queued', 'copying')"), 0);

  assert_int_equal(kvp_s3v_restart(&s3), 0);
  usleep(1100 * 1000); /* G4's backoff after its first failed job (1 s) */
  for (int i = 0; i < 20 && (st.demoted < 9 || st.sources_deleted < st.demoted); i++) {
    round_and_wait(f, e);
    kvp__tier_engine_stats(e, &st);
  }
  assert_int_equal(st.demoted, 9);
  assert_int_equal(st.sources_deleted, 9);
  kvp__tier_engine_close(e);

  g4 = open_s3_g4(&s3);
  for (uint64_t h = 1; h <= 10; h++)
    assert_int_equal(in_g4_alone(f, g4, h), h != 1); /* the chain's root stays in G3 */
  kvp_volume_close(g4);
  kvp_s3v_stop(&s3);
}

/* Block 10 is also in G1 at 100 workers: its G3 location is still seen
 * (tiering once looked at a block's first 64 locations only) and it is
 * demoted like any other leaf. */
static void a_block_held_by_many_workers_still_moves(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];

  seed(f, 10);
  for (int i = 0; i < 100; i++) {
    char name[16];
    uint16_t w;
    snprintf(name, sizeof name, "gpu%d", i);
    assert_int_equal(kvp__index_worker(f->ix, name, 0, &w), 0);
    assert_int_equal(kvp__index_store(f->ix, 10, 1, 9, w, 1, 0, 16, 1064, NOW_MS + 10000), 0);
  }
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  assert_int_equal(locs_in(f, 10, 4), 1);
  round_and_wait(f, e); /* grace 0: the G3 source goes, the G1 copies stay */
  assert_int_equal(locs_in(f, 10, 3), 0);
  kvp__index_loc_t l[128];
  size_t n = 0;
  assert_int_equal(kvp__index_get(f->ix, 10, NULL, l, 128, &n), 0);
  assert_int_equal(n, 101); /* 100 in G1, 1 in G4 */
  kvp__tier_engine_close(e);
}

static void a_volume_that_does_not_open_is_named(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  snprintf(f->cfg.volumes[1].plugin, sizeof f->cfg.volumes[1].plugin, "nosuch");
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   KVP_ENOENT);
  assert_non_null(strstr(err, "volume g4"));
  assert_non_null(strstr(err, "kvplane-volume-nosuch.so"));
  assert_null(e);
}

/* G4's directory renamed away (a dropped mount, a moved directory): the
 * first failed move marks it offline; later rounds try nothing into it (no
 * failure per move and round), its path is not re-created, the sources
 * stay; renamed back, a round finds it online and the moves go. */
static void an_offline_volume_is_left_alone_until_it_is_back(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512], away[400];
  kvp__tier_stats_t st;
  kvp__tier_vol_stats_t vs[4];

  f->cfg.tier_low = 0.1; /* 9 demotions wanted */
  seed(f, 10);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  snprintf(away, sizeof away, "%s/g4-away", f->dir);
  assert_int_equal(rename(f->p4, away), 0);
  for (int i = 0; i < 20; i++)
    round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 0);
  assert_int_equal(st.failed, 1); /* 180 before: 9 moves a round, 20 rounds */
  assert_true(st.skipped <= 8);
  assert_int_equal(kvp__tier_engine_volumes(e, vs, 4), 2);
  assert_int_equal(vs[1].offline, 1);
  assert_int_equal(vs[1].backoff, 1);
  assert_int_not_equal(access(f->p4, F_OK), 0); /* never re-created */
  assert_int_equal(locs_in(f, 10, 3), 1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 10), 1);
  /* Back. */
  assert_int_equal(rename(away, f->p4), 0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 9);
  assert_int_equal(kvp__tier_engine_volumes(e, vs, 4), 2);
  assert_int_equal(vs[1].offline, 0);
  kvp__tier_engine_close(e);
}

/* A flipped byte in a G3 copy: the demotion that reads it quarantines it
 * once (the object deleted, the location dropped, one journal row saying
 * so); later rounds never plan it again. */
static void a_corrupt_copy_is_quarantined_once(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512], path[512];
  kvp__tier_stats_t st;

  seed(f, 10);
  snprintf(path, sizeof path, "%s/t/00/%016x", f->p3, 10);
  FILE *fp = fopen(path, "r+b");
  assert_non_null(fp);
  fseek(fp, KVP_FRAME_HEADER + 500, SEEK_SET);
  fputc(0xee, fp); /* the payload is all 10s */
  fclose(fp);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  for (int i = 0; i < 6; i++)
    round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.quarantined, 1);
  assert_int_equal(st.lost, 1);
  assert_int_equal(st.failed, 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 10"), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 10 AND state = 'failed'"
                             " AND error LIKE 'quarantined: %checksum%'"),
                   1);
  assert_int_equal(locs_in(f, 10, 3), 0);
  assert_int_equal(locs_in(f, 10, 4), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 10), 0);
  assert_int_equal(locs_in(f, 9, 4), 1); /* the rest moves as before */
  kvp__tier_engine_close(e);
}

/* A round of 270 moves: their outcomes reach the index in batches while
 * the job runs, not all at its end. */
static void a_long_job_reaches_the_index_in_batches(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;
  int seen_early = 0;

  f->cfg.volumes[0].capacity = 300 * (1000 + KVP_FRAME_HEADER);
  snprintf(f->cfg.volumes[1].params, sizeof f->cfg.volumes[1].params, "path=%s\n", f->p4);
  f->cfg.tier_high = 0.5;
  f->cfg.tier_low = 0.1;
  f->cfg.tier_max_moves = 1000;
  seed(f, 300);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e)) {
    uv_run(&f->loop, UV_RUN_ONCE);
    if (kvp__tier_engine_busy(e) && locs_in(f, 300, 4) == 1) /* the first leaf moved */
      seen_early = 1;
  }
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 270);
  assert_true(st.batches >= 1);
  assert_true(seen_early);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'committed'"), 270);
  kvp__tier_engine_close(e);
}

/* Between G3 and G4 a block has one copy (DESIGN.md, "Migrations"): a
 * block a worker put in G3 that G4 already holds loses its G3 copy in the
 * next round, journaled (one migrations row from g3, to no volume) and
 * announced; a redundant G3 copy that a G3 descendant needs (prefixes stay
 * whole in G3) keeps its G3 copy and loses the G4 one instead. */
static void a_block_in_g3_and_g4_keeps_one_copy(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;
  uint16_t v4;

  seed(f, 3); /* 1 <- 2 <- 3 in G3, fill 0.3: no move for space */
  kvp_volume_t *g4 = NULL;
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  assert_int_equal(kvp__index_volume(f->ix, "g4", &v4), 0);
  uint8_t payload[1000];
  for (uint64_t h = 2; h <= 3; h++) {
    memset(payload, (int)h, sizeof payload);
    kvp_frame_t m = {.hash = h, .parent = h - 1, .has_parent = 1, .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(g4, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, h, 1, h - 1, f->w, 4, v4, 16,
                                      sizeof payload + KVP_FRAME_HEADER, NOW_MS + h * 1000),
                     0);
  }
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.redundant, 2);
  /* 3, a leaf of G3: its G3 copy goes. */
  assert_int_equal(locs_in(f, 3, 3), 0);
  assert_int_equal(locs_in(f, 3, 4), 1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 3), 0);
  assert_int_equal(kvp_volume_exists(g4, "t", 3), 1);
  /* 2 ... is a leaf of G3 too once 3 goes: its G3 copy goes as well. */
  assert_int_equal(locs_in(f, 2, 3), 0);
  assert_int_equal(locs_in(f, 2, 4), 1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 2), 0);
  assert_int_equal(locs_in(f, 1, 3), 1);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE from_volume = 'g3' AND"
                             " to_volume = '' AND state = 'source_deleted'"),
                   2);
  /* Nothing more to do: still the same rows. */
  round_and_wait(f, e);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations"), 2);
  kvp__tier_engine_close(e);

  /* A G3 child that has no G4 copy keeps its parent's G3 copy: the
   * parent's G4 copy goes instead. */
  seed(f, 3);
  assert_int_equal(kvp_volume_exists(g4, "t", 2), 1);
  assert_int_equal(kvp__index_remove(f->ix, 3, f->w, 4, v4), 0);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  assert_int_equal(locs_in(f, 2, 3), 1);
  assert_int_equal(locs_in(f, 2, 4), 0);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 2), 1);
  assert_int_equal(kvp_volume_exists(g4, "t", 2), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE from_volume = 'g4' AND"
                             " to_volume = ''"),
                   1);
  kvp__tier_engine_close(e);
  kvp_volume_close(g4);
}

/* The scrub lists one volume per scrub_interval: a G3 object deleted
 * behind the advisor's back loses its location (dropped and announced);
 * a stray object in G4 that no location names is counted, and deleted
 * once the next scrub of G4 finds it orphaned still. */
static void the_scrub_drops_missing_locations_and_deletes_orphans(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__tier_stats_t st;

  f->cfg.tier_scrub_ms = 1;
  seed(f, 3); /* fill 0.3: no move */
  assert_int_equal(kvp_volume_delete(f->g3, "t", 2, err, sizeof err), 0);
  kvp_volume_t *g4 = NULL;
  kvp_volume_param_t p[1] = {{"path", f->p4}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &g4, err, sizeof err),
                   0);
  uint8_t payload[1000];
  memset(payload, 7, sizeof payload);
  kvp_frame_t m = {.hash = 99, .payload_len = sizeof payload};
  assert_int_equal(kvp_volume_put_block(g4, "t", &m, payload, err, sizeof err), 0);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  /* g3, g4, g3, g4 (the orphan's second finding), then its delete. */
  for (int i = 0; i < 5; i++) {
    usleep(3000);
    round_and_wait(f, e);
  }
  kvp__tier_engine_stats(e, &st);
  assert_true(st.scrubs >= 4);
  assert_int_equal(st.scrub_missing, 1);
  assert_int_equal(locs_in(f, 2, 3), 0);
  assert_int_equal(locs_in(f, 1, 3), 1);
  assert_int_equal(locs_in(f, 3, 3), 1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 1), 1);
  assert_int_equal(kvp_volume_exists(f->g3, "t", 3), 1);
  assert_int_equal(st.scrub_orphans, 1);
  assert_int_equal(st.orphans_deleted, 1);
  assert_int_equal(kvp_volume_exists(g4, "t", 99), 0);
  kvp__tier_engine_close(e);
  kvp_volume_close(g4);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(cold_g3_blocks_move_to_g4_whole, setup, teardown),
    cmocka_unit_test_setup_teardown(full_destination_fails_cleanly, setup, teardown),
    cmocka_unit_test_setup_teardown(restart_finishes_or_fails_unfinished_moves, setup, teardown),
    cmocka_unit_test_setup_teardown(a_restart_finishes_a_move_in_its_rows_partition, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(a_missing_source_drops_its_stale_location, setup, teardown),
    cmocka_unit_test_setup_teardown(a_partition_whose_publisher_fails_is_not_tiered, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(a_volume_that_does_not_open_is_named, setup, teardown),
    cmocka_unit_test_setup_teardown(hot_g4_blocks_come_back_and_the_band_holds, setup, teardown),
    cmocka_unit_test_setup_teardown(a_g4_hit_prefetches_its_descendants, setup, teardown),
    cmocka_unit_test_setup_teardown(the_throttle_defers_moves, setup, teardown),
    cmocka_unit_test_setup_teardown(s3_as_g4_survives_a_server_restart, setup, teardown),
    cmocka_unit_test_setup_teardown(s3_killed_during_a_job, setup, teardown),
    cmocka_unit_test_setup_teardown(a_block_held_by_many_workers_still_moves, setup, teardown),
    cmocka_unit_test_setup_teardown(an_offline_volume_is_left_alone_until_it_is_back, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(a_corrupt_copy_is_quarantined_once, setup, teardown),
    cmocka_unit_test_setup_teardown(a_long_job_reaches_the_index_in_batches, setup, teardown),
    cmocka_unit_test_setup_teardown(a_block_in_g3_and_g4_keeps_one_copy, setup, teardown),
    cmocka_unit_test_setup_teardown(the_scrub_drops_missing_locations_and_deletes_orphans, setup,
                                    teardown),
};

KVP_TEST_MAIN("tier_engine", tests)
