/* The tiering engine compacts (src/tier/compact.c): a G3 volume of the
 * posix plugin's packed layout whose dead bytes pass [tiering]
 * compact_ratio is compacted by a round, journaled as a migrations row
 * (from_volume = to_volume, state 'compacted'), counted, and every live
 * block reads back whole afterwards; one below the ratio is left alone; a
 * compaction row left 'copying' by a crash is failed at the next open. */
#include "kvplane/status.h"
#include "tier_fx.h"

#define NBLOCKS 120

/* The fixture's G3 as a packed volume of 16 KiB segments, far from its
 * watermarks (no moves, only compaction), and no scrub (the blocks are the
 * volume's alone: no orphans to find). */
static void packed_g3(fx_t *f) {
  kvp_advisor_volume_t *g3 = &f->cfg.volumes[0];
  g3->capacity = 100 << 20;
  snprintf(g3->params, sizeof g3->params, "path=%s\nfsync=off\nlayout=packed\nsegment_size=16K\n",
           f->p3);
  f->cfg.tier_scrub_ms = 0;
}

static kvp_volume_t *open_g3(fx_t *f) {
  char err[512];
  kvp_volume_t *v = NULL;
  kvp_volume_param_t p[] = {
      {"path", f->p3}, {"fsync", "off"}, {"layout", "packed"}, {"segment_size", "16K"}};
  if (kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3", p, 4, &v, err, sizeof err) != 0)
    print_message("open g3: %s\n", err);
  return v;
}

/* Blocks 1..NBLOCKS of 1000 bytes in the packed G3, then every block with
 * i % keep_every != 0 deleted (none when keep_every is 0). */
static void seed_packed(fx_t *f, int keep_every) {
  uint8_t payload[1000];
  char err[512];
  kvp_volume_t *v = open_g3(f);
  assert_non_null(v);
  for (int i = 1; i <= NBLOCKS; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i, .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(v, "t", &m, payload, err, sizeof err), 0);
  }
  for (int i = 1; keep_every && i <= NBLOCKS; i++)
    if (i % keep_every != 0)
      assert_int_equal(kvp_volume_delete(v, "t", (uint64_t)i, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* Every block that should be there reads back whole, the others do not. */
static void check_blocks(fx_t *f, int keep_every) {
  uint8_t payload[1000];
  char err[512];
  kvp_frame_t m;
  kvp_volume_t *v = open_g3(f);
  assert_non_null(v);
  for (int i = 1; i <= NBLOCKS; i++) {
    int rc =
        kvp_volume_get_block(v, "t", (uint64_t)i, &m, payload, sizeof payload, err, sizeof err);
    if (keep_every && i % keep_every != 0) {
      assert_int_equal(rc, KVP_ENOENT);
      continue;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(payload[0], (uint8_t)i);
    assert_int_equal(payload[999], (uint8_t)i);
  }
  kvp_volume_close(v);
}

static kvp__tier_engine_t *open_engine(fx_t *f) {
  kvp__tier_engine_t *e = NULL;
  char err[512];
  int rc = kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix, &e, err,
                                 sizeof err);
  if (rc != 0)
    print_message("engine: %s\n", err);
  assert_int_equal(rc, 0);
  fx_engine = e; /* teardown closes it after a failure */
  return e;
}

static void dead_volume_is_compacted_and_journaled(void **state) {
  fx_t *f = *state;
  packed_g3(f);
  kvp__tier_stats_t st;
  kvp__tier_vol_stats_t vs[2];

  seed_packed(f, 4); /* three in four deleted: 75% dead */
  kvp__tier_engine_t *e = open_engine(f);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 1);
  assert_true(st.compacted_bytes >= 60 * 1000);
  assert_int_equal(kvp__tier_engine_volumes(e, vs, 2), 2);
  assert_true(vs[0].store_bytes > 0);
  assert_true(vs[0].dead_bytes * 20 < vs[0].store_bytes); /* under 5% left */
  assert_int_equal(vs[0].compacted_bytes, st.compacted_bytes);
  /* Not again until compact_interval has passed. */
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 1);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE from_volume = 'g3' AND "
                             "to_volume = 'g3' AND state = 'compacted' AND hash = 0 AND "
                             "error LIKE 'reclaimed %'"),
                   1);
  check_blocks(f, 4);
}

static void a_volume_under_the_ratio_is_left_alone(void **state) {
  fx_t *f = *state;
  packed_g3(f);
  kvp__tier_stats_t st;

  seed_packed(f, 0);
  f->cfg.tier_compact_ms = 1000;
  kvp__tier_engine_t *e = open_engine(f);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 0);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations"), 0);
  /* compact_ratio 0: never, however dead. */
  seed_packed(f, 4);
  f->cfg.tier_compact_ratio = 0;
  e = open_engine(f);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 0);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
  check_blocks(f, 4);
}

static void an_interrupted_compaction_is_failed_at_open(void **state) {
  fx_t *f = *state;
  packed_g3(f);
  sqlite3 *h = NULL;

  seed_packed(f, 0);
  assert_int_equal(sqlite3_open(f->db, &h), SQLITE_OK);
  assert_int_equal(sqlite3_exec(h,
                                "INSERT INTO migrations(hash, from_tier, from_volume, to_tier, "
                                "to_volume, bytes, state, created, updated) VALUES "
                                "(0, 3, 'g3', 3, 'g3', 5000, 'copying', 1, 1)",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(h);
  kvp__tier_engine_t *e = open_engine(f);
  kvp__tier_engine_close(e);
  fx_engine = NULL;
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE state = 'failed' AND error "
                             "LIKE 'compaction interrupted%'"),
                   1);
  check_blocks(f, 0); /* no block of g3 touched (the old code deleted "block 0") */
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(dead_volume_is_compacted_and_journaled, setup, teardown),
    cmocka_unit_test_setup_teardown(a_volume_under_the_ratio_is_left_alone, setup, teardown),
    cmocka_unit_test_setup_teardown(an_interrupted_compaction_is_failed_at_open, setup, teardown),
};

KVP_TEST_MAIN("tier_compact", tests)
