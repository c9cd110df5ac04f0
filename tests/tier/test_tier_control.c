/* The tiering engine's operator controls (src/tier/control.c) with real
 * posix volumes and a real SQLite database: a pin holds its ancestors, is
 * refused past a volume's capacity (naming it), survives a reopen, and
 * keeps its blocks through rounds that demote the rest; a move and a
 * delete are queued, taken by the next round, journaled; a pinned block's
 * delete is refused. (Against a running advisor, over NATS, with the CLI's
 * request format: python.test_operator_controls.) */
#include "advisor/control.h"
#include "kvplane/status.h"
#include "tier_fx.h"

#define BLOCK (1000 + KVP_FRAME_HEADER)

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

static void close_engine(fx_t *f) {
  (void)f;
  kvp__tier_engine_close(fx_engine);
  fx_engine = NULL;
}

/* Ten blocks in a G3 of eight blocks' capacity: over its watermarks. */
static void seed10(fx_t *f) {
  f->cfg.volumes[0].capacity = 8 * BLOCK;
  seed(f, 10);
}

static void pins_hold_prefixes_and_survive_a_reopen(void **state) {
  fx_t *f = *state;
  kvp__tier_stats_t st;
  char err[512] = "";
  size_t changed = 0;
  uint64_t pin = 4;

  seed10(f);
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
    assert_int_equal(locs_in(f, h, 3), h <= 4);
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

  seed10(f);
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

  seed(f, 10); /* in a G3 of ten blocks' capacity: no demotion of its own */
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, NULL, &queued, &skipped, err, sizeof err),
                   0);
  assert_int_equal(queued, 1);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, "g3", &queued, &skipped, err, sizeof err),
                   KVP_EINVAL); /* g3 is not a G4 volume */
  round_and_wait(f, e);
  assert_int_equal(locs_in(f, 10, 4), 1);
  round_and_wait(f, e); /* its source deleted (grace 0) */
  assert_int_equal(locs_in(f, 10, 3), 0);
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
  assert_int_equal(locs_in(f, 9, 3), 0);
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
  const char *ok =
      "{\"op\":\"move\",\"tier\":4,\"volume\":\"g4\",\"hashes\":[\"0x10\",\"00000000000000ff\"]}";
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
