/* The tiering engine's operator controls (src/tier/control.c) with real
 * posix volumes and a real SQLite database: a pin holds its ancestors, is
 * refused past a volume's capacity (naming it), survives a reopen, and
 * keeps its blocks through rounds that demote the rest; a move and a
 * delete are queued, taken by the next round, journaled; a pinned block's
 * delete is refused. (Against a running advisor, over NATS, with the CLI's
 * request format: python.test_operator_controls.) */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "advisor/control.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "store/store.h"
#include "tier/engine.h"

#define NOW_MS 1700000000000ull
#define BLOCK (1000 + KVP_FRAME_HEADER)

typedef struct fx_s {
  char dir[256], db[300], p3[300], p4[300];
  uv_loop_t loop;
  kvp__index_t *ix;
  kvp__store_t *st;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;
  uint16_t w, v3;
  kvp__tier_engine_t *e; /* the one open, closed by teardown after a failure */
} fx_t;

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
  f->cfg.tier_residence_ms = 0;
  f->cfg.tier_grace_ms = 0;
  f->cfg.nvolumes = 2;
  kvp_advisor_volume_t *g3 = &f->cfg.volumes[0], *g4 = &f->cfg.volumes[1];
  snprintf(g3->name, sizeof g3->name, "g3");
  g3->tier = 3;
  snprintf(g3->plugin, sizeof g3->plugin, "posix");
  g3->capacity = 8 * BLOCK; /* ten blocks are seeded: over capacity */
  snprintf(g3->params, sizeof g3->params, "path=%s\nfsync=off\n", f->p3);
  snprintf(g4->name, sizeof g4->name, "g4");
  g4->tier = 4;
  snprintf(g4->plugin, sizeof g4->plugin, "posix");
  snprintf(g4->params, sizeof g4->params, "path=%s\nfsync=off\n", f->p4);
  if (kvp__index_worker(f->ix, "w", 0, &f->w) != 0 || kvp__index_volume(f->ix, "g3", &f->v3) != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_close(f->e); /* a test that failed left it open */
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  kvp__store_close(f->st);
  kvp__index_destroy(f->ix);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Blocks 1..10 in G3, a chain (i's parent is i - 1), block i last accessed
 * at NOW + i s. */
static void seed(fx_t *f) {
  uint8_t payload[1000];
  char err[256];
  kvp_volume_t *v = NULL;
  kvp_volume_param_t p[2] = {{"path", f->p3}, {"fsync", "off"}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3", p, 2, &v, err, sizeof err),
                   0);
  for (int i = 1; i <= 10; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i,
                     .parent = (uint64_t)i - 1,
                     .has_parent = i > 1,
                     .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(v, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, (uint64_t)i, i > 1, (uint64_t)i - 1, f->w, 3, f->v3,
                                      16, BLOCK, NOW_MS + (uint64_t)i * 1000),
                     0);
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
  f->e = e;
  return e;
}

static void close_engine(fx_t *f) {
  kvp__tier_engine_close(f->e);
  f->e = NULL;
}

static void round_and_wait(fx_t *f, kvp__tier_engine_t *e) {
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(&f->loop, UV_RUN_ONCE);
}

static int in_tier(fx_t *f, uint64_t hash, int tier) {
  kvp__index_loc_t l[8];
  size_t n = 0;
  int k = 0;
  if (kvp__index_get(f->ix, hash, NULL, l, 8, &n) != 0)
    return 0;
  for (size_t i = 0; i < n && i < 8; i++)
    k += l[i].tier == tier;
  return k;
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

static void pins_hold_prefixes_and_survive_a_reopen(void **state) {
  fx_t *f = *state;
  kvp__tier_stats_t st;
  char err[512] = "";
  size_t changed = 0;
  uint64_t pin = 4;

  seed(f);
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 1, "test", &changed, err, sizeof err), 0);
  assert_int_equal(changed, 1);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.pins, 1);
  assert_int_equal(st.pinned_blocks, 4); /* 4 and its ancestors 1..3 */
  assert_true(kvp__tier_engine_pinned(e, 1) && !kvp__tier_engine_pinned(e, 5));
  close_engine(f);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM pins WHERE hash = 4 AND note = 'test'"), 1);

  /* Reopened: the pin is back, and rounds over the watermark (0.5, down to
   * 0.1: every block could go) demote 5..10 (leaves first) and never 1..4. */
  f->cfg.tier_high = 0.5;
  f->cfg.tier_low = 0.1;
  e = open_engine(f);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.pinned_blocks, 4);
  for (int r = 0; r < 4; r++)
    round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 6);
  for (uint64_t h = 1; h <= 10; h++)
    assert_int_equal(in_tier(f, h, 3), h <= 4);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash <= 4"), 0);
  kvp__tier_vol_stats_t vs[2];
  kvp__tier_engine_volumes(e, vs, 2);
  assert_int_equal(vs[0].pinned_bytes, 4 * BLOCK);
  /* Unpinned, the rest may go. */
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 0, NULL, &changed, err, sizeof err), 0);
  assert_int_equal(changed, 1);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.pinned_blocks, 0);
  close_engine(f);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM pins"), 0);
}

static void pin_past_capacity_is_refused(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  size_t changed = 0;
  uint64_t all = 10, some = 8;

  seed(f);
  kvp__tier_engine_t *e = open_engine(f);
  /* 10 blocks in a volume of 8 blocks' capacity. */
  assert_int_equal(kvp__tier_engine_pin(e, &all, 1, 1, NULL, &changed, err, sizeof err),
                   KVP_ENOSPC);
  assert_non_null(strstr(err, "volume g3"));
  assert_non_null(strstr(err, "capacity"));
  assert_int_equal(changed, 0);
  assert_int_equal(kvp__tier_engine_pin(e, &some, 1, 1, NULL, &changed, err, sizeof err), 0);
  close_engine(f);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM pins"), 1);
}

static void moves_and_deletes_are_queued_and_journaled(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  size_t queued, skipped, changed;
  uint64_t leaf = 10, pin = 2, twice[2] = {9, 9};

  f->cfg.volumes[0].capacity = 100 * BLOCK; /* no demotion of its own */
  seed(f);
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, NULL, &queued, &skipped, err, sizeof err),
                   0);
  assert_int_equal(queued, 1);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, "g3", &queued, &skipped, err, sizeof err),
                   KVP_EINVAL); /* g3 is not a G4 volume */
  round_and_wait(f, e);
  assert_int_equal(in_tier(f, 10, 4), 1);
  round_and_wait(f, e); /* its source deleted (grace 0) */
  assert_int_equal(in_tier(f, 10, 3), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 10 AND from_volume = "
                             "'g3' AND to_volume = 'g4'"),
                   1);
  /* Already in G4: skipped. A block given twice is queued once. */
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, NULL, &queued, &skipped, err, sizeof err),
                   0);
  assert_int_equal(skipped, 1);
  assert_int_equal(kvp__tier_engine_drop(e, twice, 2, 0, &queued, &skipped, err, sizeof err), 0);
  assert_int_equal(queued, 1);
  assert_int_equal(skipped, 1);
  round_and_wait(f, e);
  assert_int_equal(in_tier(f, 9, 3), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 9 AND to_volume = '' "
                             "AND state = 'source_deleted'"),
                   1);
  /* A pinned block (1 is 2's ancestor) cannot be deleted. */
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 1, NULL, &changed, err, sizeof err), 0);
  uint64_t one = 1;
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 3, &queued, &skipped, err, sizeof err),
                   KVP_EBUSY);
  assert_non_null(strstr(err, "pinned"));
  close_engine(f);
}

/* The request format, as the CLI and the binding send it. */
static void requests_parse_or_say_why(void **state) {
  kvp__adv_ctl_t c;
  char err[256];
  (void)state;
  const char *ok = "{\"op\":\"move\",\"tier\":4,\"volume\":\"g4\",\"hashes\":[\"0x10\",\"00000000000000ff\"]}";
  assert_int_equal(kvp__adv_ctl_parse(ok, strlen(ok), &c, err, sizeof err), 0);
  assert_int_equal(c.op, KVP__CTL_MOVE);
  assert_int_equal(c.n, 2);
  assert_true(c.hashes[0] == 0x10 && c.hashes[1] == 0xff);
  assert_string_equal(c.volume, "g4");
  free(c.hashes);
  const char *tok = "{\"op\":\"pin\",\"tokens\":[1,2,3,4,5],\"block_tokens\":2}";
  assert_int_equal(kvp__adv_ctl_parse(tok, strlen(tok), &c, err, sizeof err), 0);
  assert_int_equal(c.n, 2); /* two full blocks */
  free(c.hashes);
  const char *bad[] = {"{\"op\":\"move\",\"hashes\":[\"1\"]}", /* no tier */
                       "{\"op\":\"zap\",\"hashes\":[\"1\"]}",
                       "{\"op\":\"pin\"}",
                       "{\"op\":\"pin\",\"hashes\":[\"1\"],\"tokens\":[1]}",
                       "{\"op\":\"pin\",\"hashes\":[\"xyz\"]}",
                       "{\"op\":\"pin\",\"tokens\":[1],\"block_tokens\":2}",
                       "[1]",
                       "{"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    assert_int_not_equal(kvp__adv_ctl_parse(bad[i], strlen(bad[i]), &c, err, sizeof err), 0);
    assert_null(c.hashes);
    assert_true(err[0] != '\0');
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(pins_hold_prefixes_and_survive_a_reopen, setup, teardown),
    cmocka_unit_test_setup_teardown(pin_past_capacity_is_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(moves_and_deletes_are_queued_and_journaled, setup, teardown),
    cmocka_unit_test(requests_parse_or_say_why),
};

KVP_TEST_MAIN("tier_control", tests)
