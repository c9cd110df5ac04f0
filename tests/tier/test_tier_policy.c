/* Tiering policy (src/tier): scripted access patterns produce exactly the
 * expected demotions, promotions, evictions and prefetches, and nothing
 * inside the hysteresis band or the minimum residence time. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"
#include "tier/policy.h"

#define NOW 10000000000ull
#define OLD (NOW - 3600000ull) /* arrived an hour ago: may move */

static kvp__tier_cand_t cand(uint64_t hash, uint64_t parent, uint32_t vol, uint64_t access,
                             double freq) {
  return (kvp__tier_cand_t){.hash = hash,
                            .parent = parent,
                            .has_parent = parent != 0,
                            .vol = vol,
                            .bytes = 100,
                            .last_access_ms = access,
                            .freq = freq,
                            .since_ms = OLD};
}

static void plan(kvp__tier_vol_t *v, size_t nv, kvp__tier_cand_t *c, size_t nc,
                 kvp__tier_move_t **m, size_t *n) {
  kvp__tier_params_t p;
  kvp__tier_params_init(&p);
  assert_int_equal(kvp__tier_plan(&kvp__tier_order_lru, &p, v, nv, c, nc, NOW, m, n), 0);
}

static void expect_move(const kvp__tier_move_t *m, uint64_t hash, uint32_t from, uint32_t to,
                        int kind) {
  assert_int_equal(m->hash, hash);
  assert_int_equal(m->from, from);
  assert_int_equal(m->to, to);
  assert_string_equal(kvp__tier_kind_name(m->kind), kvp__tier_kind_name(kind));
}

/* Chain 1 <- 2 <- 3 (3 the newest block of the prefix, but its prefix's
 * root is the least recently used) and a lone block 4: the volume must lose
 * two blocks; the leaves go first, so 3 then 2, never 1 before its
 * children. */
static void demotion_keeps_prefixes_whole(void **state) {
  (void)state;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = 950}, {.tier = 4}};
  kvp__tier_cand_t c[] = {cand(1, 0, 0, NOW - 9000, 0), cand(2, 1, 0, NOW - 8000, 0),
                          cand(3, 2, 0, NOW - 7000, 0), cand(4, 0, 0, NOW - 5000, 0)};
  kvp__tier_move_t *m;
  size_t n;

  plan(v, 2, c, 4, &m, &n);
  assert_int_equal(n, 2);
  expect_move(&m[0], 3, 0, 1, KVP__TIER_DEMOTE);
  expect_move(&m[1], 2, 0, 1, KVP__TIER_DEMOTE);
  assert_int_equal(v[0].used, 750); /* at or below the low watermark (800) */
  assert_int_equal(v[1].used, 200);
  free(m);

  /* Below the high watermark nothing moves. */
  kvp__tier_vol_t v2[2] = {{.tier = 3, .capacity = 1000, .used = 900}, {.tier = 4}};
  plan(v2, 2, c, 4, &m, &n);
  assert_int_equal(n, 0);
  free(m);
}

/* A block that arrived within min_residence does not move, and holds its
 * prefix's parent in place too; a busy block (a move queued) is skipped. */
static void residence_and_busy_hold_blocks(void **state) {
  (void)state;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = 1000}, {.tier = 4}};
  kvp__tier_cand_t c[] = {cand(1, 0, 0, NOW - 9000, 0), cand(2, 1, 0, NOW - 8000, 0),
                          cand(5, 0, 0, NOW - 6000, 0), cand(6, 0, 0, NOW - 5000, 0),
                          cand(7, 0, 0, NOW - 4000, 0)};
  kvp__tier_move_t *m;
  size_t n;

  c[1].since_ms = NOW - 1000; /* block 2 arrived a second ago */
  c[2].busy = 1;
  plan(v, 2, c, 5, &m, &n);
  assert_int_equal(n, 2); /* 1000 -> 800 */
  expect_move(&m[0], 6, 0, 1, KVP__TIER_DEMOTE);
  expect_move(&m[1], 7, 0, 1, KVP__TIER_DEMOTE);
  free(m);
}

/* G4 blocks: freq 3 is inside the band (keep 2 .. promote 4): stays; freq 5
 * comes back to G3 where there is room. */
static void promotion_has_a_hysteresis_band(void **state) {
  (void)state;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = 500}, {.tier = 4, .used = 200}};
  kvp__tier_cand_t c[] = {cand(10, 0, 1, NOW - 100, 3.0), cand(11, 0, 1, NOW - 100, 5.0)};
  kvp__tier_move_t *m;
  size_t n;

  plan(v, 2, c, 2, &m, &n);
  assert_int_equal(n, 1);
  expect_move(&m[0], 11, 1, 0, KVP__TIER_PROMOTE);
  assert_int_equal(v[0].used, 600);
  free(m);

  /* G3 at its high watermark: a hot G4 block displaces a G3 block colder
   * than keep_freq (the demotion comes first in the plan)... */
  kvp__tier_vol_t full[2] = {{.tier = 3, .capacity = 1000, .used = 900}, {.tier = 4}};
  kvp__tier_cand_t c2[] = {cand(20, 0, 0, NOW - 50000, 1.0), cand(11, 0, 1, NOW - 100, 5.0)};
  plan(full, 2, c2, 2, &m, &n);
  assert_int_equal(n, 2);
  expect_move(&m[0], 20, 0, 1, KVP__TIER_DEMOTE);
  expect_move(&m[1], 11, 1, 0, KVP__TIER_PROMOTE);
  free(m);
  /* ...but not one at or above keep_freq. */
  kvp__tier_vol_t full2[2] = {{.tier = 3, .capacity = 1000, .used = 900}, {.tier = 4}};
  c2[0].freq = 2.5;
  plan(full2, 2, c2, 2, &m, &n);
  assert_int_equal(n, 0);
  free(m);
  /* G3 at 750 of 1000: a promotion would take it past its low watermark
   * (800), and there is nothing colder than keep_freq to displace: no move.
   * Before, promotions filled G3 up to its high watermark, and the
   * workers' next offloads had the next round demote as much again. */
  kvp__tier_vol_t mid[2] = {{.tier = 3, .capacity = 1000, .used = 750}, {.tier = 4}};
  kvp__tier_cand_t c4[] = {cand(21, 0, 0, NOW - 50000, 3.0), cand(11, 0, 1, NOW - 100, 5.0)};
  plan(mid, 2, c4, 2, &m, &n);
  assert_int_equal(n, 0);
  free(m);
  /* A block already in G3 (another copy) is not promoted again. */
  kvp__tier_vol_t v3[2] = {{.tier = 3, .capacity = 1000, .used = 500}, {.tier = 4}};
  kvp__tier_cand_t c3[] = {cand(11, 0, 0, NOW - 100, 5.0), cand(11, 0, 1, NOW - 100, 5.0)};
  plan(v3, 2, c3, 2, &m, &n);
  assert_int_equal(n, 0);
  free(m);
}

/* G4 over its quota: its coldest leaves are deleted down to its low
 * watermark (0.95); a destination in backoff takes no demotions. */
static void eviction_and_backoff(void **state) {
  (void)state;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = 100},
                          {.tier = 4, .capacity = 1000, .used = 1100}};
  kvp__tier_cand_t c[] = {cand(30, 0, 1, NOW - 9000, 0), cand(31, 30, 1, NOW - 8000, 0),
                          cand(32, 0, 1, NOW - 1000, 0)};
  kvp__tier_move_t *m;
  size_t n;

  plan(v, 2, c, 3, &m, &n);
  assert_int_equal(n, 2); /* 1100 -> 900: two blocks, the chain's leaf first */
  expect_move(&m[0], 31, 1, KVP__TIER_NOWHERE, KVP__TIER_EVICT);
  expect_move(&m[1], 30, 1, KVP__TIER_NOWHERE, KVP__TIER_EVICT);
  free(m);

  kvp__tier_vol_t b[2] = {{.tier = 3, .capacity = 1000, .used = 1000},
                          {.tier = 4, .backoff_until_ms = NOW + 1}};
  kvp__tier_cand_t c2[] = {cand(40, 0, 0, NOW - 9000, 0)};
  plan(b, 2, c2, 1, &m, &n);
  assert_int_equal(n, 0);
  free(m);
}

/* G4 full (a demotion never fills it past its capacity): G3 over its high
 * watermark finds no room there, so G4's coldest go, leaves first, until
 * what G3 still has to move fits (1000 -> 850 for G3's 150), and the next
 * plan demotes. A full G4 that nobody needs room in keeps its blocks.
 * (G4 evicted only past its high watermark, 1.0: a full G4 stopped every
 * demotion for good.) */
static void a_full_g4_makes_room_for_demotions(void **state) {
  (void)state;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 1000, .used = 950},
                          {.tier = 4, .capacity = 1000, .used = 1000}};
  kvp__tier_cand_t c[] = {cand(1, 0, 0, NOW - 5000, 0),  cand(2, 0, 0, NOW - 4000, 0),
                          cand(10, 0, 1, NOW - 9000, 0), cand(11, 10, 1, NOW - 8000, 0),
                          cand(12, 0, 1, NOW - 7000, 0), cand(13, 0, 1, NOW - 100, 0)};
  kvp__tier_move_t *m;
  size_t n;

  plan(v, 2, c, 6, &m, &n);
  assert_int_equal(n, 2);
  expect_move(&m[0], 11, 1, KVP__TIER_NOWHERE, KVP__TIER_EVICT);
  expect_move(&m[1], 10, 1, KVP__TIER_NOWHERE, KVP__TIER_EVICT);
  assert_int_equal(v[0].used, 950);
  assert_int_equal(v[1].used, 800);
  free(m);

  /* The next round: the room is there. */
  kvp__tier_vol_t v2[2] = {{.tier = 3, .capacity = 1000, .used = 950},
                           {.tier = 4, .capacity = 1000, .used = 800}};
  kvp__tier_cand_t c2[] = {c[0], c[1], c[4], c[5]};
  plan(v2, 2, c2, 4, &m, &n);
  assert_int_equal(n, 2);
  expect_move(&m[0], 1, 0, 1, KVP__TIER_DEMOTE);
  expect_move(&m[1], 2, 0, 1, KVP__TIER_DEMOTE);
  assert_int_equal(v2[1].used, 1000);
  free(m);

  /* Full, and G3 below its high watermark: nothing goes. */
  kvp__tier_vol_t v3[2] = {{.tier = 3, .capacity = 1000, .used = 900},
                           {.tier = 4, .capacity = 1000, .used = 1000}};
  plan(v3, 2, c, 6, &m, &n);
  assert_int_equal(n, 0);
  free(m);
}

/* A hit on 50 in G4: its descendants in G4 come to G3, breadth first,
 * within depth and bytes; one already in G3 is followed, not moved. */
static void prefetch_follows_the_prefix(void **state) {
  (void)state;
  kvp__tier_params_t p;
  kvp__tier_vol_t v[2] = {{.tier = 3, .capacity = 10000}, {.tier = 4}};
  kvp__tier_cand_t c[] = {cand(50, 0, 1, NOW, 1),  cand(51, 50, 1, NOW, 1), cand(52, 51, 0, NOW, 1),
                          cand(53, 52, 1, NOW, 1), cand(54, 53, 1, NOW, 1), cand(60, 0, 1, NOW, 9)};
  kvp__tier_move_t *m;
  size_t n;

  kvp__tier_params_init(&p);
  p.prefetch_depth = 3; /* 51, 52 (in G3), 53 */
  assert_int_equal(kvp__tier_prefetch(&p, v, 2, c, 6, 50, NOW, &m, &n), 0);
  assert_int_equal(n, 2);
  expect_move(&m[0], 51, 1, 0, KVP__TIER_PREFETCH);
  expect_move(&m[1], 53, 1, 0, KVP__TIER_PREFETCH);
  free(m);
  p.prefetch_depth = 8;
  p.prefetch_bytes = 100; /* one block */
  kvp__tier_vol_t v2[2] = {{.tier = 3, .capacity = 10000}, {.tier = 4}};
  assert_int_equal(kvp__tier_prefetch(&p, v2, 2, c, 6, 50, NOW, &m, &n), 0);
  assert_int_equal(n, 1);
  expect_move(&m[0], 51, 1, 0, KVP__TIER_PREFETCH);
  free(m);
}

static void params_are_checked(void **state) {
  (void)state;
  kvp__tier_params_t p;
  char err[128];

  kvp__tier_params_init(&p);
  assert_int_equal(kvp__tier_params_check(&p, err, sizeof err), 0);
  p.low_watermark = 0.95;
  assert_int_equal(kvp__tier_params_check(&p, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "low_watermark"));
  kvp__tier_params_init(&p);
  p.keep_freq = 5;
  assert_int_equal(kvp__tier_params_check(&p, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "keep_freq"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(demotion_keeps_prefixes_whole),
    cmocka_unit_test(residence_and_busy_hold_blocks),
    cmocka_unit_test(promotion_has_a_hysteresis_band),
    cmocka_unit_test(eviction_and_backoff),
    cmocka_unit_test(a_full_g4_makes_room_for_demotions),
    cmocka_unit_test(prefetch_follows_the_prefix),
    cmocka_unit_test(params_are_checked),
};

KVP_TEST_MAIN("tier_policy", tests)
