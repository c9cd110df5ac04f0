/* The tiering engine compacts (src/tier/compact.c): a G3 volume of the
 * posix plugin's packed layout whose dead bytes pass [tiering]
 * compact_ratio is compacted by a round, journaled as a migrations row
 * (from_volume = to_volume, state 'compacted'), counted, and every live
 * block reads back whole afterwards; one below the ratio is left alone; a
 * compaction row left 'copying' by a crash is failed at the next open. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "store/store.h"
#include "tier/engine.h"

#define NBLOCKS 120

typedef struct fx_s {
  char dir[256], db[300], p3[300], p4[300];
  uv_loop_t loop;
  kvp__index_t *ix;
  kvp__store_t *st;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;
} fx_t;

static const char *packed_params(fx_t *f, char *buf, size_t n) {
  snprintf(buf, n, "path=%s\nfsync=off\nlayout=packed\nsegment_size=16K\n", f->p3);
  return buf;
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

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char err[256];
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->db, sizeof f->db, "%s/a.db", f->dir);
  snprintf(f->p3, sizeof f->p3, "%s/g3", f->dir);
  snprintf(f->p4, sizeof f->p4, "%s/g4", f->dir);
  uv_loop_init(&f->loop);
  if (kvp__index_create(64, 3600, &f->ix) != 0 ||
      kvp__store_open(f->db, &f->st, err, sizeof err) != 0)
    return -1;
  kvp_advisor_config_defaults(&f->cfg);
  snprintf(f->cfg.ns, sizeof f->cfg.ns, "t");
  snprintf(f->cfg.db_path, sizeof f->cfg.db_path, "%s", f->db);
  snprintf(f->cfg.plugin_dir, sizeof f->cfg.plugin_dir, "%s", KVP_BUILD_PLUGIN_DIR);
  f->cfg.tiering = 1;
  f->cfg.nats.servers[0] = '\0';
  f->cfg.tier_scrub_ms = 0; /* the blocks are the volume's alone: no orphans to find */
  f->cfg.nvolumes = 2;
  kvp_advisor_volume_t *g3 = &f->cfg.volumes[0], *g4 = &f->cfg.volumes[1];
  snprintf(g3->name, sizeof g3->name, "g3");
  g3->tier = 3;
  snprintf(g3->plugin, sizeof g3->plugin, "posix");
  g3->capacity = 100 << 20; /* far from its watermark: no moves, only compaction */
  packed_params(f, g3->params, sizeof g3->params);
  snprintf(g4->name, sizeof g4->name, "g4");
  g4->tier = 4;
  snprintf(g4->plugin, sizeof g4->plugin, "posix");
  snprintf(g4->params, sizeof g4->params, "path=%s\nfsync=off\n", f->p4);
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  kvp__store_close(f->st);
  kvp__index_destroy(f->ix);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Blocks 1..NBLOCKS of 1000 bytes in the packed G3, then every block with
 * i % keep_every != 0 deleted (none when keep_every is 0). */
static void seed(fx_t *f, int keep_every) {
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

static void round_and_wait(fx_t *f, kvp__tier_engine_t *e) {
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(&f->loop, UV_RUN_ONCE);
}

static int64_t q1(const char *db, const char *sql) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open(db, &h) == SQLITE_OK && sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}

static kvp__tier_engine_t *open_engine(fx_t *f) {
  kvp__tier_engine_t *e = NULL;
  char err[512];
  int rc = kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix, &e, err,
                                 sizeof err);
  if (rc != 0)
    print_message("engine: %s\n", err);
  assert_int_equal(rc, 0);
  return e;
}

static void dead_volume_is_compacted_and_journaled(void **state) {
  fx_t *f = *state;
  kvp__tier_stats_t st;
  kvp__tier_vol_stats_t vs[2];

  seed(f, 4); /* three in four deleted: 75% dead */
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
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE from_volume = 'g3' AND "
                             "to_volume = 'g3' AND state = 'compacted' AND hash = 0 AND "
                             "error LIKE 'reclaimed %'"),
                   1);
  check_blocks(f, 4);
}

static void a_volume_under_the_ratio_is_left_alone(void **state) {
  fx_t *f = *state;
  kvp__tier_stats_t st;

  seed(f, 0);
  f->cfg.tier_compact_ms = 1000;
  kvp__tier_engine_t *e = open_engine(f);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 0);
  kvp__tier_engine_close(e);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations"), 0);
  /* compact_ratio 0: never, however dead. */
  seed(f, 4);
  f->cfg.tier_compact_ratio = 0;
  e = open_engine(f);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.compactions, 0);
  kvp__tier_engine_close(e);
  check_blocks(f, 4);
}

static void an_interrupted_compaction_is_failed_at_open(void **state) {
  fx_t *f = *state;
  sqlite3 *h = NULL;

  seed(f, 0);
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
