/* The tiering engine with [tiering] policy (src/tier/policy_registry.c): the
 * configured policy is the one that plans the engine's rounds, against a
 * real index, journal and volumes (the mem plugin); an unknown policy stops
 * the engine from opening, naming the policies there are. */
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
#include "tier/policy.h"

#define NOW_MS 1700000000000ull /* in the past: every block may move */

typedef struct fx_s {
  char dir[256], db[300], store3[300], store4[300];
  uv_loop_t loop;
  kvp__index_t *ix;
  kvp__store_t *st;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;
  kvp_volume_t *g3; /* the worker's own handle on G3 */
  uint16_t w, v3;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char err[256];
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->db, sizeof f->db, "%s/a.db", f->dir);
  /* mem stores named after the test's directory: fresh ones per case. */
  snprintf(f->store3, sizeof f->store3, "%s/g3", f->dir);
  snprintf(f->store4, sizeof f->store4, "%s/g4", f->dir);
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
  snprintf(g3->plugin, sizeof g3->plugin, "mem");
  g3->capacity = 10 * (1000 + KVP_FRAME_HEADER); /* ten blocks */
  snprintf(g3->params, sizeof g3->params, "store=%s\n", f->store3);
  snprintf(g4->name, sizeof g4->name, "g4");
  g4->tier = 4;
  snprintf(g4->plugin, sizeof g4->plugin, "mem");
  snprintf(g4->params, sizeof g4->params, "store=%s\n", f->store4);
  kvp_volume_param_t p[1] = {{"store", f->store3}};
  if (kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "mem", "g3", p, 1, &f->g3, err, sizeof err) != 0)
    return -1;
  if (kvp__index_worker(f->ix, "w", 0, &f->w) != 0 || kvp__index_volume(f->ix, "g3", &f->v3) != 0)
    return -1;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  uv_run(&f->loop, UV_RUN_DEFAULT);
  uv_loop_close(&f->loop);
  kvp_volume_close(f->g3);
  kvp__store_close(f->st);
  kvp__index_destroy(f->ix);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* The worker put blocks first..last (no parents) in G3, block i last
 * accessed at NOW + i s. */
static void seed(fx_t *f, int first, int last) {
  uint8_t payload[1000];
  char err[256];
  for (int i = first; i <= last; i++) {
    memset(payload, i, sizeof payload);
    kvp_frame_t m = {.hash = (uint64_t)i, .payload_len = sizeof payload};
    assert_int_equal(kvp_volume_put_block(f->g3, "t", &m, payload, err, sizeof err), 0);
    assert_int_equal(kvp__index_store(f->ix, (uint64_t)i, 0, 0, f->w, 3, f->v3, 16,
                                      sizeof payload + KVP_FRAME_HEADER,
                                      NOW_MS + (uint64_t)i * 1000),
                     0);
  }
}

static void round_and_wait(fx_t *f, kvp__tier_engine_t *e) {
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(&f->loop, UV_RUN_ONCE);
}

static int policy_index(const char *name) {
  for (int i = 0; kvp__tier_policy_names[i]; i++)
    if (strcmp(kvp__tier_policy_names[i], name) == 0)
      return i;
  fail_msg("no policy %s", name);
  return -1;
}

/* Blocks 1..8 in G3 (below the high watermark: a round moves nothing but
 * the policy learns them), then 9 and 10 arrive and block 1 is read again
 * at NOW + 2.5 s. G3 is full: two blocks go. lru takes the least recently
 * read, 2 and 1; s3fifo gives 1, read again in its small queue, a place in
 * the main queue, and takes 2 and 3. */
static void demoted_blocks(fx_t *f, const char *policy, uint64_t *got) {
  kvp__tier_engine_t *e = NULL;
  kvp__tier_stats_t st;
  char err[512];

  f->cfg.tier_policy = policy_index(policy);
  seed(f, 1, 8);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 0);
  seed(f, 9, 10);
  assert_int_equal(kvp__index_access(f->ix, 1, 3, 1, NOW_MS + 2500), 0);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);
  size_t n = 0;
  for (uint64_t h = 1; h <= 10; h++) {
    kvp__index_loc_t loc[4];
    size_t nl = 0;
    kvp__index_block_t b;
    assert_int_equal(kvp__index_get(f->ix, h, &b, loc, 4, &nl), 0);
    for (size_t k = 0; k < nl; k++)
      if (loc[k].tier == 4 && n < 2)
        got[n++] = h;
  }
  assert_int_equal(n, 2);
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
}

static void lru_plans_the_rounds(void **state) {
  uint64_t got[2];
  demoted_blocks(*state, "lru", got);
  assert_int_equal(got[0], 1);
  assert_int_equal(got[1], 2);
}

static void s3fifo_plans_the_rounds(void **state) {
  uint64_t got[2];
  demoted_blocks(*state, "s3fifo", got);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 3);
}

/* hyperbolic through the engine: the index's decayed count reaches the
 * policy. Block 1 was stored and read again (two uses), the others used
 * once; at the engine's clock (years after NOW_MS) their ages are alike,
 * so 1 has half the others' (age + tau) / count and stays, and the least
 * recently used of the rest, 2 and 3, leave (lru took 1 and 2). */
static void hyperbolic_plans_the_rounds(void **state) {
  uint64_t got[2];
  demoted_blocks(*state, "hyperbolic", got);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 3);
}

/* lfu over blocks 1..8 in G3, a round that learns them, then blocks 1 and
 * 2 read three times each through the engine's hook (what the advisor does
 * for every Accessed event in G3 or G4). */
static kvp__tier_engine_t *lfu_with_reads(fx_t *f) {
  kvp__tier_engine_t *e = NULL;
  char err[512];
  f->cfg.tier_policy = policy_index("lfu");
  seed(f, 1, 8);
  assert_int_equal(kvp__tier_engine_open(kvp__adv_tier_opts(&f->cfg, &f->topts), &f->loop, f->ix,
                                         &e, err, sizeof err),
                   0);
  round_and_wait(f, e);
  for (int k = 0; k < 3; k++) {
    kvp__tier_engine_access(e, 1, 3);
    kvp__tier_engine_access(e, 2, 3);
  }
  return e;
}

/* Blocks 9 and 10 arrive: two blocks go to G4; of 1..4 exactly those whose
 * bit is set in want_g4 (bit h) are there. Then the engine closes. */
static void two_go_and_close(fx_t *f, kvp__tier_engine_t *e, unsigned want_g4) {
  kvp__tier_stats_t st;
  seed(f, 9, 10);
  round_and_wait(f, e);
  kvp__tier_engine_stats(e, &st);
  assert_int_equal(st.demoted, 2);
  for (uint64_t h = 1; h <= 4; h++) {
    kvp__index_loc_t loc[4];
    size_t nl = 0;
    int in_g4 = 0;
    assert_int_equal(kvp__index_get(f->ix, h, NULL, loc, 4, &nl), 0);
    for (size_t k = 0; k < nl; k++)
      in_g4 |= loc[k].tier == 4;
    if (in_g4 != !!(want_g4 & 1u << h))
      fail_msg("block %llu %s G4", (unsigned long long)h, in_g4 ? "in" : "not in");
  }
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
}

/* Reads reported through the engine's hook reach the policy: lfu keeps
 * blocks 1 and 2, read just now, and takes the next least recently used,
 * 3 and 4. Without the hook (the engine never called on_access) lfu saw
 * no reads and took 1 and 2, the least recently used. */
static void lfu_hears_reads_through_the_engine(void **state) {
  fx_t *f = *state;
  two_go_and_close(f, lfu_with_reads(f), 1u << 3 | 1u << 4);
}

/* An operator's delete reaches the policy as the engine's own evictions
 * do (on_move to nowhere): lfu forgets what it counted of block 1, read
 * three times, so block 1 put back in G3 later is as cold as a new one and
 * goes with 3 (the least recently used of the rest). Before, operator ops
 * were never told to the policy: lfu kept 1's reads and took 3 and 4. */
static void lfu_hears_the_operators_deletes(void **state) {
  fx_t *f = *state;
  kvp__tier_ctl_counts_t c;
  char err[512];
  const uint64_t one = 1;
  kvp__tier_engine_t *e = lfu_with_reads(f);
  assert_int_equal(kvp__tier_engine_drop(e, &one, 1, 3, &c, err, sizeof err), 0);
  assert_int_equal(c.queued, 1);
  round_and_wait(f, e);
  assert_int_equal(kvp__index_get(f->ix, 1, NULL, NULL, 0, NULL), KVP_ENOENT);
  seed(f, 1, 1); /* the worker offloads block 1 again */
  two_go_and_close(f, e, 1u << 1 | 1u << 3);
}

static void an_unknown_policy_is_named(void **state) {
  fx_t *f = *state;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  kvp__adv_tier_opts(&f->cfg, &f->topts);
  f->topts.policy = "arc";
  assert_int_equal(kvp__tier_engine_open(&f->topts, &f->loop, f->ix, &e, err, sizeof err),
                   KVP_ECONFIG);
  assert_null(e);
  assert_non_null(
      strstr(err, "'arc' is not a policy (there are: lru, s3fifo, lfu, hyperbolic, density)"));
  f->topts.policy = "lfu";
  f->topts.policy_params = "half_life=forever";
  assert_int_equal(kvp__tier_engine_open(&f->topts, &f->loop, f->ix, &e, err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "lfu.half_life"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(lru_plans_the_rounds, setup, teardown),
    cmocka_unit_test_setup_teardown(hyperbolic_plans_the_rounds, setup, teardown),
    cmocka_unit_test_setup_teardown(s3fifo_plans_the_rounds, setup, teardown),
    cmocka_unit_test_setup_teardown(lfu_hears_reads_through_the_engine, setup, teardown),
    cmocka_unit_test_setup_teardown(lfu_hears_the_operators_deletes, setup, teardown),
    cmocka_unit_test_setup_teardown(an_unknown_policy_is_named, setup, teardown),
};

KVP_TEST_MAIN("tier_engine_policy", tests)
