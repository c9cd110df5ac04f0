/* The tiering engine's operator controls (src/tier/control.c) with real
 * posix volumes and a real SQLite database: a pin holds its ancestors, is
 * refused past a volume's capacity (naming it), survives a reopen, and
 * keeps its blocks through rounds that demote the rest; a move and a
 * delete are queued, taken by the next round, journaled; a pinned block's
 * delete is refused. (Against a running advisor, over NATS, with the CLI's
 * request format: python.test_operator_controls.) */
#include <unistd.h>

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
  kvp__tier_ctl_counts_t n;
  size_t changed;
  uint64_t leaf = 10, pin = 2, twice[2] = {9, 9};

  seed(f, 10); /* in a G3 of ten blocks' capacity: no demotion of its own */
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, NULL, &n, err, sizeof err), 0);
  assert_int_equal(n.queued, 1);
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, "g3", &n, err, sizeof err),
                   KVP_EINVAL); /* g3 is not a G4 volume */
  round_and_wait(f, e);
  assert_int_equal(locs_in(f, 10, 4), 1);
  round_and_wait(f, e); /* its source deleted (grace 0) */
  assert_int_equal(locs_in(f, 10, 3), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 10 AND from_volume = "
                             "'g3' AND to_volume = 'g4'"),
                   1);
  /* Already in G4: skipped. A block given twice is queued once. */
  assert_int_equal(kvp__tier_engine_move(e, &leaf, 1, 4, NULL, &n, err, sizeof err), 0);
  assert_int_equal(n.skipped, 1);
  assert_int_equal(kvp__tier_engine_drop(e, twice, 2, 0, &n, err, sizeof err), 0);
  assert_int_equal(n.queued, 2); /* 9 in G3, and 10 in G4 below it */
  assert_int_equal(n.skipped, 1);
  assert_int_equal(n.continuations, 1);
  round_and_wait(f, e);
  assert_int_equal(locs_in(f, 9, 3), 0);
  assert_int_equal(locs_in(f, 10, 4), 0);
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash = 9 AND to_volume = '' "
                             "AND state = 'source_deleted'"),
                   1);
  /* A pinned block (1 is 2's ancestor) cannot be deleted. */
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 1, NULL, &changed, err, sizeof err), 0);
  uint64_t one = 1;
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 3, &n, err, sizeof err), KVP_EBUSY);
  assert_non_null(strstr(err, "pinned"));
  close_engine(f);
}

/* Block hash with parent (0: none) in G3, put by the worker and known to
 * the index there. */
static void put_g3(fx_t *f, uint64_t hash, uint64_t parent) {
  uint8_t payload[1000];
  char err[256];
  memset(payload, (int)hash, sizeof payload);
  kvp_frame_t m = {
      .hash = hash, .parent = parent, .has_parent = parent != 0, .payload_len = sizeof payload};
  assert_int_equal(kvp_volume_put_block(f->g3, "t", &m, payload, err, sizeof err), 0);
  assert_int_equal(kvp__index_store(f->ix, hash, parent != 0, parent, f->w, 3, f->v3, 16,
                                    sizeof payload + KVP_FRAME_HEADER, NOW_MS + hash * 1000),
                   0);
}

/* Whether the object of hash is in the directory of a posix volume. */
static int in_dir(const char *root, uint64_t hash) {
  char p[512];
  snprintf(p, sizeof p, "%s/t/%02x/%016llx", root, (unsigned)(hash >> 56),
           (unsigned long long)hash);
  return access(p, F_OK) == 0;
}

/* A prefix delete takes the prefix's continuations with it: the blocks
 * below its last block (the index's parent links), in the tiers it
 * deletes from, journaled like its own blocks; not a sibling chain that
 * shares only the prefix's first block. Chains: 1-2-3-4 (4 in G4), the
 * branch 2-33-34 (34 in G4), the sibling 1-22-23. */
static void a_prefix_delete_takes_its_continuations(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  kvp__tier_ctl_counts_t n;
  size_t changed;
  uint64_t to_g4[2] = {4, 34}, prefix[2] = {1, 2}, gone[6] = {1, 2, 3, 4, 33, 34};

  f->cfg.volumes[0].capacity = 20 * BLOCK;
  seed(f, 4);
  put_g3(f, 22, 1);
  put_g3(f, 23, 22);
  put_g3(f, 33, 2);
  put_g3(f, 34, 33);
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_move(e, to_g4, 2, 4, NULL, &n, err, sizeof err), 0);
  assert_int_equal(n.queued, 2);
  round_and_wait(f, e);
  round_and_wait(f, e); /* the sources deleted (grace 0) */
  assert_true(locs_in(f, 4, 4) == 1 && locs_in(f, 4, 3) == 0 && in_dir(f->p4, 34));

  /* The prefix 1-2 (as kvplane delete --tokens sends it: its blocks in
   * order): 1 and 2 themselves, and 3, 4, 33, 34 below 2 in G3 and G4. */
  assert_int_equal(kvp__tier_engine_drop(e, prefix, 2, 0, &n, err, sizeof err), 0);
  assert_int_equal(n.queued, 6);
  assert_int_equal(n.skipped, 0);
  assert_int_equal(n.continuations, 4);
  round_and_wait(f, e);
  for (size_t i = 0; i < 6; i++) {
    assert_int_equal(locs_in(f, gone[i], 3) + locs_in(f, gone[i], 4), 0);
    assert_false(in_dir(f->p3, gone[i]) || in_dir(f->p4, gone[i]));
  }
  assert_int_equal(q1(f->db, "SELECT count(*) FROM migrations WHERE hash IN (1, 2, 3, 4, 33, 34) "
                             "AND to_volume = '' AND state = 'source_deleted'"),
                   6);
  /* The sibling 1-22-23 is not below the prefix's last block: it stays. */
  assert_true(locs_in(f, 22, 3) == 1 && locs_in(f, 23, 3) == 1);
  assert_true(in_dir(f->p3, 22) && in_dir(f->p3, 23));

  /* 1 is gone from the index, yet 22 and 23 keep it as their parent: a
   * delete of 1 now takes them as its continuations. A pin of 23 holds
   * 22 and 1 (its ancestors), so the delete is refused, as a pinned
   * block's is; in G4 there are none. */
  uint64_t pin = 23, one = 1;
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 1, NULL, &changed, err, sizeof err), 0);
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 0, &n, err, sizeof err), KVP_EBUSY);
  assert_non_null(strstr(err, "pinned"));
  assert_int_equal(n.queued, 0);
  round_and_wait(f, e);
  assert_true(locs_in(f, 22, 3) == 1 && locs_in(f, 23, 3) == 1);
  assert_int_equal(kvp__tier_engine_pin(e, &pin, 1, 0, NULL, &changed, err, sizeof err), 0);
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 4, &n, err, sizeof err), 0);
  assert_true(n.queued == 0 && n.skipped == 1 && n.continuations == 0);
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 3, &n, err, sizeof err), 0);
  assert_true(n.queued == 2 && n.skipped == 1 && n.continuations == 2);
  round_and_wait(f, e);
  assert_true(locs_in(f, 22, 3) == 0 && locs_in(f, 23, 3) == 0);
  assert_false(in_dir(f->p3, 22) || in_dir(f->p3, 23));
  close_engine(f);
}

/* The prefix's end when the request is longer than what is cached (a
 * prompt's tail never stored): the last requested block, which the index
 * does not know, so the known block's other children are siblings of that
 * tail and stay. A loop of parent links (bad events: 50 and 51 each
 * other's parent) is walked by the first delete and ends it. */
static void a_prefix_past_the_cache_ends_at_its_last_block(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  kvp__tier_ctl_counts_t n;
  uint64_t longer[4] = {1, 2, 3, 77}, loop = 50;

  seed(f, 4); /* 1-2-3-4: 4 is a sibling of the request's 77 */
  put_g3(f, 50, 51);
  put_g3(f, 51, 50);
  kvp__tier_engine_t *e = open_engine(f);
  assert_int_equal(kvp__tier_engine_drop(e, longer, 4, 0, &n, err, sizeof err), 0);
  assert_true(n.queued == 3 && n.skipped == 1 && n.continuations == 0);
  round_and_wait(f, e);
  assert_true(locs_in(f, 3, 3) == 0 && locs_in(f, 4, 3) == 1 && in_dir(f->p3, 4));
  /* Deleted as a prefix, 50 has 51 below it. */
  assert_int_equal(kvp__tier_engine_drop(e, &loop, 1, 3, &n, err, sizeof err), 0);
  assert_true(n.queued == 2 && n.continuations == 1);
  close_engine(f);
}

/* A move or delete asked while a round's job moves the block: decided
 * again after that job, by where the block is then. The first round
 * demotes every block (G3 of eight blocks' capacity holds ten, low
 * watermark 0.1); asked before its job is done, a delete of 10 and a move
 * of 9 back to G3 see both in G3 still. */
static void controls_during_a_move_are_decided_after_it(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  kvp__tier_ctl_counts_t n;
  uint64_t leaf = 10, nine = 9;

  f->cfg.tier_high = 0.5;
  f->cfg.tier_low = 0.1;
  seed10(f);
  kvp__tier_engine_t *e = open_engine(f);
  kvp__tier_engine_round(e);
  assert_true(kvp__tier_engine_busy(e));
  assert_int_equal(kvp__tier_engine_drop(e, &leaf, 1, 0, &n, err, sizeof err), 0);
  assert_true(n.in_flight == 1 && n.queued == 0 && n.skipped == 0);
  assert_int_equal(kvp__tier_engine_move(e, &nine, 1, 3, NULL, &n, err, sizeof err), 0);
  assert_true(n.in_flight == 1 && n.queued == 0 && n.skipped == 0); /* not "already there" */
  while (kvp__tier_engine_busy(e))
    uv_run(&f->loop, UV_RUN_ONCE);
  assert_true(locs_in(f, 10, 4) == 1 && locs_in(f, 9, 4) == 1); /* the job's demotions */
  /* The sources go (grace 0), then 9 comes back, then its G4 source goes. */
  for (int r = 0; r < 3; r++)
    round_and_wait(f, e);
  /* 10 is gone from G4 too, and 9 is back in G3. */
  assert_int_equal(locs_in(f, 10, 3) + locs_in(f, 10, 4), 0);
  assert_false(in_dir(f->p4, 10) || in_dir(f->p3, 10));
  assert_true(locs_in(f, 9, 3) == 1 && locs_in(f, 9, 4) == 0);
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
    cmocka_unit_test_setup_teardown(a_prefix_delete_takes_its_continuations, setup, teardown),
    cmocka_unit_test_setup_teardown(a_prefix_past_the_cache_ends_at_its_last_block, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(controls_during_a_move_are_decided_after_it, setup, teardown),
    cmocka_unit_test(requests_parse_or_say_why),
};

KVP_TEST_MAIN("tier_control", tests)
