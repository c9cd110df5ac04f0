/* Advisor index: match, LRU, removal, drops, dirty tracking, the memory
 * figure. In memory, no NATS.
 * Why this file is long: one program holds the index's unit tests, each a
 * short scenario beside the reference checks they share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "harness.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

#define NOW 1800000000000ull

static kvp__index_t *mk(void) {
  kvp__index_t *ix = NULL;
  assert_int_equal(kvp__index_create(4, 3600, &ix), 0);
  return ix;
}

static uint16_t wid(kvp__index_t *ix, const char *name) {
  uint16_t id;
  assert_int_equal(kvp__index_worker(ix, name, 0, &id), 0);
  return id;
}

static void store_chain(kvp__index_t *ix, const uint64_t *h, size_t n, uint16_t w, int tier) {
  for (size_t i = 0; i < n; i++)
    assert_int_equal(
        kvp__index_store(ix, h[i], i > 0, i ? h[i - 1] : 0, w, tier, 0, 16, 1 << 20, NOW), 0);
}

static uint64_t len_of(const kvp__index_match_t *m, size_t n, uint16_t w, int tier) {
  for (size_t i = 0; i < n; i++)
    if (m[i].worker == w && m[i].tier == tier)
      return m[i].length;
  return 0;
}

static void match_longest_prefix_per_worker_and_tier(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint64_t h[10];
  kvp__index_match_t m[16];
  for (int i = 0; i < 10; i++)
    h[i] = 1000 + (uint64_t)i;
  uint16_t a = wid(ix, "a"), b = wid(ix, "b");
  store_chain(ix, h, 10, a, KVP_TIER_G1);
  store_chain(ix, h, 4, b, KVP_TIER_G1);
  store_chain(ix, h, 6, b, KVP_TIER_G2);
  /* b holds 8 in G2 but not 6 and 7: its G2 prefix stops at 6. */
  assert_int_equal(kvp__index_store(ix, h[8], 1, h[7], b, KVP_TIER_G2, 0, 16, 1, NOW), 0);
  size_t n = 0;
  assert_int_equal(kvp__index_match(ix, h, 10, m, 16, &n), 0);
  assert_int_equal(n, 3);
  assert_int_equal(len_of(m, n, a, KVP_TIER_G1), 10);
  assert_int_equal(len_of(m, n, b, KVP_TIER_G1), 4);
  assert_int_equal(len_of(m, n, b, KVP_TIER_G2), 6);
  /* A query whose first hash is unknown matches nothing. */
  uint64_t q[2] = {999, 1000};
  assert_int_equal(kvp__index_match(ix, q, 2, m, 16, &n), 0);
  assert_int_equal(n, 0);
  /* A (worker, tier) that starts later in the chain has no prefix. */
  uint64_t q2[3] = {1004, 1005, 1006};
  assert_int_equal(kvp__index_match(ix, q2, 3, m, 16, &n), 0);
  assert_int_equal(len_of(m, n, a, KVP_TIER_G1), 3);
  assert_int_equal(len_of(m, n, b, KVP_TIER_G1), 0);
  assert_int_equal(len_of(m, n, b, KVP_TIER_G2), 2);
  /* Too many pairs: the code says so, the count stays a count. */
  assert_int_equal(kvp__index_match(ix, h, 10, m, 1, &n), KVP_ENOSPC);
  assert_int_equal(n, 1);
  kvp__index_destroy(ix);
}

/* The row count and lengths travel as size_t / uint64_t, never through an
 * int that also carries error codes: 2,000 workers x 4 tiers all match. */
static void match_counts_many_rows_without_int(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { W = 2000 };
  kvp__index_match_t *m = calloc(4 * W, sizeof *m);
  uint64_t h[2] = {77, 78};
  char name[16];
  for (int i = 0; i < W; i++) {
    snprintf(name, sizeof name, "w%d", i);
    uint16_t w = wid(ix, name);
    for (int t = KVP_TIER_G1; t <= KVP_TIER_G4; t++)
      store_chain(ix, h, 2, w, t);
  }
  size_t n = 0;
  assert_int_equal(kvp__index_match(ix, h, 2, m, 4 * W, &n), 0);
  assert_int_equal(n, 4 * W);
  for (size_t i = 0; i < n; i++)
    assert_true(m[i].length == 2);
  assert_int_equal(kvp__index_match(ix, h, 2, m, 4 * W - 1, &n), KVP_ENOSPC);
  assert_int_equal(n, 4 * W - 1);
  free(m);
  kvp__index_destroy(ix);
}

static void match_long_query_crosses_batches(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint64_t h[300];
  kvp__index_match_t m[4];
  for (int i = 0; i < 300; i++)
    h[i] = 0x1234567800000000ull + (uint64_t)i * 77;
  uint16_t a = wid(ix, "a");
  store_chain(ix, h, 200, a, KVP_TIER_G3);
  size_t n = 0;
  assert_int_equal(kvp__index_match(ix, h, 300, m, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(m[0].length, 200);
  kvp__index_destroy(ix);
}

static void remove_deletes_block_with_last_location(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  kvp__index_block_t b;
  kvp__index_loc_t locs[4];
  size_t n;
  uint16_t a = wid(ix, "a"), c = wid(ix, "c"), vol;
  assert_int_equal(kvp__index_volume(ix, "nvme0", &vol), 0);
  assert_int_equal(kvp__index_store(ix, 42, 1, 41, a, KVP_TIER_G1, 0, 16, 100, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 42, 1, 41, c, KVP_TIER_G3, vol, 16, 100, NOW), 0);
  assert_int_equal(kvp__index_get(ix, 42, &b, locs, 4, &n), 0);
  assert_int_equal(n, 2);
  assert_true(b.parent == 41);
  assert_int_equal(kvp__index_remove(ix, 42, a, KVP_TIER_G2, KVP__INDEX_NO_VOLUME), KVP_ENOENT);
  assert_int_equal(kvp__index_remove(ix, 42, a, KVP_TIER_G1, KVP__INDEX_NO_VOLUME), 0);
  assert_int_equal(kvp__index_get(ix, 42, &b, locs, 4, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(locs[0].worker, c);
  assert_int_equal(locs[0].volume, vol);
  assert_int_equal(kvp__index_remove(ix, 42, c, KVP_TIER_G3, vol), 0);
  assert_int_equal(kvp__index_get(ix, 42, &b, locs, 4, &n), KVP_ENOENT);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 0);
  assert_int_equal(st.locations, 0);
  assert_int_equal(st.tier_bytes[1] + st.tier_bytes[3], 0);
  kvp__index_destroy(ix);
}

static void many_blocks_grow_and_shrink(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a");
  const size_t N = 50000;
  for (size_t i = 1; i <= N; i++)
    assert_int_equal(
        kvp__index_store(ix, i * 0x9e3779b97f4a7c15ull, 0, 0, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  for (size_t i = 1; i <= N; i += 2)
    assert_int_equal(kvp__index_remove(ix, i * 0x9e3779b97f4a7c15ull, a, KVP_TIER_G1, 0), 0);
  for (size_t i = 1; i <= N; i++) {
    int rc = kvp__index_get(ix, i * 0x9e3779b97f4a7c15ull, NULL, NULL, 0, NULL);
    assert_int_equal(rc, i % 2 ? KVP_ENOENT : 0);
  }
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, N / 2);
  kvp__index_destroy(ix);
}

static void lru_orders_by_last_touch(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a");
  uint64_t out[8];
  for (uint64_t h = 1; h <= 4; h++)
    assert_int_equal(kvp__index_store(ix, h, 0, 0, a, KVP_TIER_G3, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_lru(ix, KVP_TIER_G3, out, 8), 4);
  assert_true(out[0] == 1 && out[3] == 4);
  assert_int_equal(kvp__index_access(ix, 1, KVP_TIER_G3, 3, NOW + 1000), 0);
  assert_int_equal(kvp__index_store(ix, 2, 0, 0, a, KVP_TIER_G3, 0, 16, 1, NOW + 2000), 0);
  assert_int_equal(kvp__index_lru(ix, KVP_TIER_G3, out, 8), 4);
  assert_true(out[0] == 3 && out[1] == 4 && out[2] == 1 && out[3] == 2);
  assert_int_equal(kvp__index_lru(ix, KVP_TIER_G1, out, 8), 0);
  kvp__index_block_t b;
  assert_int_equal(kvp__index_get(ix, 1, &b, NULL, 0, NULL), 0);
  assert_int_equal(b.hits, 3);
  assert_true(b.freq > 2.9 && b.freq < 3.1);
  kvp__index_destroy(ix);
}

static void hit_frequency_decays_with_half_life(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  kvp__index_block_t b;
  assert_int_equal(kvp__index_create(4, 10, &ix), 0);
  uint16_t a = wid(ix, "a");
  assert_int_equal(kvp__index_store(ix, 7, 0, 0, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_access(ix, 7, 0, 8, NOW), 0);
  assert_int_equal(kvp__index_access(ix, 7, 0, 0, NOW + 10000), 0);
  assert_int_equal(kvp__index_get(ix, 7, &b, NULL, 0, NULL), 0);
  assert_true(b.freq > 3.9 && b.freq < 4.1);
  assert_int_equal(b.hits, 8);
  kvp__index_destroy(ix);
}

/* The hit count shares a word with the record's flags: it stops at 2^27 -
 * 1, on access and on load, and the flags around it stay as they were
 * (the block still live, its parent still its parent). */
static void hits_saturate_without_touching_the_flags(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  kvp__index_block_t b;
  const uint32_t max = (1u << 27) - 1;
  assert_int_equal(kvp__index_create(4, 10, &ix), 0);
  uint16_t a = wid(ix, "a");
  assert_int_equal(kvp__index_store(ix, 7, 0, 0, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 8, 1, 7, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_access(ix, 8, 0, max - 1, NOW), 0);
  assert_int_equal(kvp__index_get(ix, 8, &b, NULL, 0, NULL), 0);
  assert_int_equal(b.hits, max - 1);
  assert_int_equal(kvp__index_access(ix, 8, 0, 5, NOW), 0);
  assert_int_equal(kvp__index_access(ix, 8, 0, UINT32_MAX, NOW), 0);
  assert_int_equal(kvp__index_get(ix, 8, &b, NULL, 0, NULL), 0);
  assert_int_equal(b.hits, max);
  assert_int_equal(b.parent, 7);
  kvp__index_block_t in = {.hash = 9,
                           .parent = 8,
                           .tokens = 16,
                           .bytes = 1,
                           .last_access_ms = NOW,
                           .hits = 1u << 27,
                           .freq = 2.5};
  assert_int_equal(kvp__index_load_block(ix, &in), 0);
  assert_int_equal(kvp__index_get(ix, 9, &b, NULL, 0, NULL), 0);
  assert_int_equal(b.hits, max);
  assert_int_equal(b.parent, 8);
  assert_true(b.freq > 2.49 && b.freq < 2.51);
  kvp__index_loc_t loc = {.worker = a, .tier = KVP_TIER_G1, .volume = 0};
  assert_int_equal(kvp__index_load_loc(ix, 9, &loc), 0);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 3);
  assert_int_equal(st.locations, 3);
  kvp__index_destroy(ix);
}

static void drop_removes_worker_tiers_only(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a"), b = wid(ix, "b");
  kvp__index_match_t m[8];
  uint64_t h[3] = {11, 12, 13};
  store_chain(ix, h, 3, a, KVP_TIER_G1);
  store_chain(ix, h, 3, a, KVP_TIER_G3);
  store_chain(ix, h, 3, b, KVP_TIER_G1);
  assert_int_equal(kvp__index_drop(ix, a, 1u << KVP_TIER_G1 | 1u << KVP_TIER_G2), 3);
  size_t n = 0;
  assert_int_equal(kvp__index_match(ix, h, 3, m, 8, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(len_of(m, n, a, KVP_TIER_G3), 3);
  assert_int_equal(len_of(m, n, b, KVP_TIER_G1), 3);
  assert_int_equal(kvp__index_drop(ix, b, 0x1e), 3);
  assert_int_equal(kvp__index_drop(ix, a, 0x1e), 3);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 0);
  kvp__index_destroy(ix);
}

/* drop_some in slices of 7 records drops what kvp__index_drop drops for
 * the marked workers (two of three), the third's locations left whole. */
static void drop_some_in_slices_drops_the_marked_workers(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a"), b = wid(ix, "b"), c = wid(ix, "c");
  uint64_t h[100];
  for (int i = 0; i < 100; i++)
    h[i] = 1000 + (uint64_t)i;
  store_chain(ix, h, 100, a, KVP_TIER_G1);
  store_chain(ix, h, 60, b, KVP_TIER_G2);
  store_chain(ix, h + 40, 60, c, KVP_TIER_G1);
  uint8_t marks[8] = {0};
  marks[a] = marks[b] = 1;
  size_t next = 0, dropped = 0;
  int slices = 0;
  while (!kvp__index_drop_some(ix, marks, sizeof marks, 0xffu, &next, 7, &dropped))
    slices++;
  assert_true(slices >= 100 / 7);
  assert_int_equal(dropped, 160);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 60); /* c's */
  kvp__index_match_t m[8];
  size_t n = 0;
  assert_int_equal(kvp__index_match(ix, h + 40, 60, m, 8, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(len_of(m, n, c, KVP_TIER_G1), 60);
  assert_int_equal(kvp__index_drop(ix, a, 0x1e) + kvp__index_drop(ix, b, 0x1e), 0);
  kvp__index_destroy(ix);
}

static void changes_list_each_block_once(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a"), b = wid(ix, "b");
  kvp__index_changes_t ch;
  for (int r = 0; r < 3; r++)
    for (uint64_t h = 1; h <= 5; h++)
      assert_int_equal(kvp__index_store(ix, h, 0, 0, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  assert_int_equal(ch.nblocks, 5);
  assert_int_equal(ch.blocks[0].what, KVP__INDEX_CH_BLOCK | KVP__INDEX_CH_LOCS);
  assert_int_equal(ch.ngone, 0);
  kvp__index_changes_free(&ch);
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  assert_int_equal(ch.nblocks, 0);
  kvp__index_changes_free(&ch);
  /* An access changes the block row only. */
  assert_int_equal(kvp__index_access(ix, 2, 0, 1, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 4, 0, 0, b, KVP_TIER_G2, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_remove(ix, 3, a, KVP_TIER_G1, 0), 0);
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  assert_int_equal(ch.nblocks, 3);
  assert_true(ch.blocks[0].hash == 2 && ch.blocks[0].what == KVP__INDEX_CH_BLOCK);
  assert_true(ch.blocks[1].hash == 4 &&
              ch.blocks[1].what == (KVP__INDEX_CH_BLOCK | KVP__INDEX_CH_LOCS));
  assert_true(ch.blocks[2].hash == 3 && ch.blocks[2].what == 0);
  assert_int_equal(ch.ngone, 1);
  assert_true(ch.gone[0].hash == 3 && ch.gone[0].worker == a && ch.gone[0].tier == 1);
  /* A failed write gives everything back. */
  kvp__index_changes_restore(ix, &ch);
  kvp__index_changes_free(&ch);
  assert_int_equal(kvp__index_dirty_count(ix), 3);
  assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
  assert_int_equal(ch.ngone, 1);
  kvp__index_changes_free(&ch);
  kvp__index_track_dirty(ix, 0);
  assert_int_equal(kvp__index_store(ix, 9, 0, 0, a, KVP_TIER_G1, 0, 16, 1, NOW), 0);
  assert_int_equal(kvp__index_dirty_count(ix), 0);
  kvp__index_destroy(ix);
}

static void rejects_bad_tier_and_names(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  uint16_t a = wid(ix, "a"), id;
  assert_int_equal(kvp__index_store(ix, 1, 0, 0, a, 0, 0, 16, 1, NOW), KVP_ETIER);
  assert_int_equal(kvp__index_store(ix, 1, 0, 0, a, 5, 0, 16, 1, NOW), KVP_ETIER);
  assert_int_equal(kvp__index_store(ix, 1, 0, 0, 77, 1, 0, 16, 1, NOW), KVP_EINVAL);
  assert_int_equal(kvp__index_worker(ix, "bad name", 0, &id), KVP_EINVAL);
  assert_int_equal(kvp__index_worker(ix, "a", 1, &id), 0);
  assert_int_not_equal(id, a);
  kvp__index_destroy(ix);
}

/* The published memory figure: bytes the index allocates per location. */
static void memory_per_location_is_bounded(void **state) {
  (void)state;
  kvp__index_t *ix = NULL;
  const size_t N = 200000;
  assert_int_equal(kvp__index_create(N, 3600, &ix), 0);
  kvp__index_track_dirty(ix, 0); /* the dirty list is flushed every interval */
  uint16_t w[8];
  for (int i = 0; i < 8; i++) {
    char name[8] = {'w', (char)('0' + i), 0};
    w[i] = wid(ix, name);
  }
  for (size_t i = 1; i <= N; i++)
    assert_int_equal(
        kvp__index_store(ix, i * 0x9e3779b97f4a7c15ull, 0, 0, w[i % 8], KVP_TIER_G1, 0, 16, 1, NOW),
        0);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  double per = (double)st.memory_bytes / (double)st.locations;
  print_message("index memory: %.1f bytes per block location (%zu locations)\n", per, st.locations);
  /* One location per block is the worst case: a 40-byte record (with the
   * location inline) and 4-byte map slots at a load of 0.33..0.5. */
  assert_true(per <= 49.0);
  kvp__index_destroy(ix);
}

/* Random stores, removes and drops against a plain reference array. */
static void random_operations_match_a_reference(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { N = 20000 };
  static uint64_t keys[N];
  static int in[N][2];
  uint64_t x = 88172645463325252ull;
  uint16_t w[2] = {wid(ix, "a"), wid(ix, "b")};
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    /* Many keys share their top bits (tags) and home slots. */
    keys[i] = (i % 3 == 0) ? x : (x & 0x07ffffffffffff00ull) | (uint64_t)(i & 0xff);
  }
  for (int op = 0; op < 400000; op++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int k = (int)(x % N), who = (int)((x >> 20) & 1), what = (int)((x >> 30) % 10);
    if (what < 6) {
      assert_int_equal(kvp__index_store(ix, keys[k], 0, 0, w[who], 1, 0, 16, 1, NOW), 0);
      in[k][who] = 1;
    } else if (what < 9) {
      int rc = kvp__index_remove(ix, keys[k], w[who], 1, 0);
      assert_int_equal(rc, in[k][who] ? 0 : KVP_ENOENT);
      in[k][who] = 0;
    } else if (op % 1000 == 0) {
      kvp__index_drop(ix, w[who], 0x1e);
      for (int i = 0; i < N; i++)
        in[i][who] = 0;
    }
    if (op % 50000 == 0) {
      kvp__index_changes_t ch;
      assert_int_equal(kvp__index_changes_take(ix, &ch), 0);
      kvp__index_changes_free(&ch);
    }
  }
  size_t blocks = 0;
  for (int i = 0; i < N; i++) {
    size_t n = 0;
    int rc = kvp__index_get(ix, keys[i], NULL, NULL, 0, &n);
    if (in[i][0] || in[i][1]) {
      assert_int_equal(rc, 0);
      assert_int_equal(n, (size_t)(in[i][0] + in[i][1]));
      blocks++;
    } else {
      assert_int_equal(rc, KVP_ENOENT);
    }
  }
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, blocks);
  kvp__index_destroy(ix);
}

/* The reference answer of a match: per (worker, tier) holding the first
 * block, how many blocks from the first it holds without a gap, read
 * block by block through kvp__index_get (the map, never the chain). */
static size_t reference_match(kvp__index_t *ix, const uint64_t *h, size_t n,
                              kvp__index_match_t *out) {
  size_t rows = 0;
  kvp__index_loc_t l[16];
  size_t nl = 0;
  if (kvp__index_get(ix, h[0], NULL, l, 16, &nl) != 0)
    return 0;
  for (size_t k = 0; k < nl && k < 16; k++) {
    size_t r;
    for (r = 0; r < rows; r++)
      if (out[r].worker == l[k].worker && out[r].tier == l[k].tier)
        break;
    if (r == rows)
      out[rows++] = (kvp__index_match_t){.worker = l[k].worker, .tier = l[k].tier, .length = 0};
  }
  for (size_t r = 0; r < rows; r++) {
    size_t len = 0;
    for (; len < n; len++) {
      int held = 0;
      if (kvp__index_get(ix, h[len], NULL, l, 16, &nl) == 0)
        for (size_t k = 0; k < nl && k < 16; k++)
          held |= l[k].worker == out[r].worker && l[k].tier == out[r].tier;
      if (!held)
        break;
    }
    out[r].length = len;
  }
  return rows;
}

static int by_worker_tier(const void *a, const void *b) {
  const kvp__index_match_t *x = a, *y = b;
  return x->worker != y->worker ? (int)x->worker - (int)y->worker : (int)x->tier - (int)y->tier;
}

/* A match reads a chain's blocks from consecutive records when they are
 * (kvp__index_match's chain path) and through the map when not: chains
 * stored whole, then broken (blocks removed: their records freed, reused
 * by other blocks), interleaved with each other (records alternate) and
 * queried from any block on or across two chains, always against the
 * answer read block by block through the map. */
static void match_follows_chains_against_a_reference(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { C = 200, L = 150, Q = 300 };
  static uint64_t ch[C][L];
  uint64_t x = 0x2545f4914f6cdd1dull;
  uint16_t w[4] = {wid(ix, "a"), wid(ix, "b"), wid(ix, "c"), wid(ix, "d")};
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
  for (int c = 0; c < C; c++)
    for (int i = 0; i < L; i++)
      ch[c][i] = RND() | 1;
  /* Whole chains, one after the other; every fourth interleaved with the
   * next, block by block. */
  for (int c = 0; c < C; c++) {
    if (c % 4 == 0 && c + 1 < C) {
      for (int i = 0; i < L; i++)
        for (int d = 0; d < 2; d++)
          assert_int_equal(kvp__index_store(ix, ch[c + d][i], i > 0, i ? ch[c + d][i - 1] : 0,
                                            w[(c + d) % 4], 1, 0, 16, 1, NOW),
                           0);
      c++;
      continue;
    }
    for (int i = 0; i < L; i++)
      assert_int_equal(kvp__index_store(ix, ch[c][i], i > 0, i ? ch[c][i - 1] : 0, w[c % 4],
                                        1 + (i % 7 == 0), 0, 16, 1, NOW),
                       0);
  }
  /* Second holders of some chains' prefixes, in another tier. */
  for (int c = 0; c < C; c += 3)
    for (int i = 0; i < L / 2; i++)
      assert_int_equal(kvp__index_store(ix, ch[c][i], 0, 0, w[(c + 1) % 4], 2, 0, 16, 1, NOW), 0);
  /* Holes: blocks removed (the freed records reused by the next stores). */
  for (int k = 0; k < 2000; k++) {
    int c = (int)(RND() % C), i = (int)(RND() % L);
    (void)kvp__index_remove(ix, ch[c][i], w[c % 4], 1, KVP__INDEX_NO_VOLUME);
    if (k % 3 == 0)
      assert_int_equal(kvp__index_store(ix, ch[c][i], 0, 0, w[(c + 2) % 4], 1, 0, 16, 1, NOW), 0);
  }
  kvp__index_match_t got[64], want[64];
  uint64_t q[2 * L];
  for (int k = 0; k < Q; k++) {
    int c = (int)(RND() % C), d = (int)(RND() % C), from = (int)(RND() % L);
    size_t n = 0;
    for (int i = from; i < L; i++)
      q[n++] = ch[c][i];
    if (k % 2) /* then another chain's blocks */
      for (int i = 0; i < L; i++)
        q[n++] = ch[d][i];
    size_t ng = 0, nw = reference_match(ix, q, n, want);
    assert_int_equal(kvp__index_match(ix, q, n, got, 64, &ng), 0);
    assert_int_equal(ng, nw);
    qsort(got, ng, sizeof *got, by_worker_tier);
    qsort(want, nw, sizeof *want, by_worker_tier);
    for (size_t r = 0; r < ng; r++) {
      assert_int_equal(got[r].worker, want[r].worker);
      assert_int_equal(got[r].tier, want[r].tier);
      assert_int_equal(got[r].length, want[r].length);
    }
  }
#undef RND
  kvp__index_destroy(ix);
}

/* A block's parent is a flag when it is the block of the record before
 * (a chain stored in order), else an entry of a side table; freeing the
 * record before moves the flag's parent there. Chains stored, blocks
 * removed (records freed, then reused oldest first by other blocks),
 * parents changed, against a reference of every block's parent. */
static void parents_survive_frees_and_reuse_against_a_reference(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { C = 300, L = 40 };
  static uint64_t ch[C][L], parent[C][L];
  static int live[C][L];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  uint16_t w = wid(ix, "a");
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
  for (int c = 0; c < C; c++)
    for (int i = 0; i < L; i++)
      ch[c][i] = RND() | 1;
  for (int round = 0; round < 40; round++) {
    for (int c = 0; c < C; c++) {
      int what = (int)(RND() % 6);
      if (what == 0) { /* (re)store the chain, in order */
        for (int i = 0; i < L; i++) {
          assert_int_equal(
              kvp__index_store(ix, ch[c][i], i > 0, i ? ch[c][i - 1] : 0, w, 1, 0, 16, 1, NOW), 0);
          if (!live[c][i] || i > 0)
            parent[c][i] = i ? ch[c][i - 1] : ch[c][i];
          live[c][i] = 1;
        }
      } else if (what == 1) { /* drop a run of it */
        int from = (int)(RND() % L), to = from + (int)(RND() % 8);
        for (int i = from; i < L && i <= to; i++)
          if (live[c][i]) {
            assert_int_equal(kvp__index_remove(ix, ch[c][i], w, 1, 0), 0);
            live[c][i] = 0;
          }
      } else if (what == 2) { /* one block's parent changes to another chain's block */
        int i = (int)(RND() % L), d = (int)(RND() % C), j = (int)(RND() % L);
        if (live[c][i]) {
          assert_int_equal(kvp__index_store(ix, ch[c][i], 1, ch[d][j], w, 1, 0, 16, 1, NOW), 0);
          parent[c][i] = ch[d][j];
        }
      }
    }
    for (int c = 0; c < C; c++)
      for (int i = 0; i < L; i++) {
        kvp__index_block_t b;
        int rc = kvp__index_get(ix, ch[c][i], &b, NULL, 0, NULL);
        if (!live[c][i]) {
          assert_int_equal(rc, KVP_ENOENT);
          continue;
        }
        assert_int_equal(rc, 0);
        if (b.parent != parent[c][i])
          fail_msg("round %d chain %d block %d: parent %016llx, want %016llx", round, c, i,
                   (unsigned long long)b.parent, (unsigned long long)parent[c][i]);
      }
  }
#undef RND
  kvp__index_destroy(ix);
}

/* A long life of chains freed and stored again (issue 27: router memory
 * must not grow without bound): chains freed tail first, as an engine
 * evicts, or head first, come back in consecutive records (their parents
 * flags, not side-table entries), and a burst of side parents (chains
 * stored child first), once freed, gives its table back. At 2663e8d's
 * parent the first part failed: chains freed tail first came back in
 * descending records, every parent in the side table. */
static void memory_stays_bounded_under_churn(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { C = 64, L = 64, R = 40, B = 24 };
  static uint64_t ch[C][L], burst[B][L];
  uint64_t x = 0x2545f4914f6cdd1dull;
  uint16_t w = wid(ix, "a");
  kvp__index_stats_t s0, s;
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
  kvp__index_track_dirty(ix, 0);
  for (int c = 0; c < C; c++) {
    for (int i = 0; i < L; i++)
      ch[c][i] = RND() | 1;
    store_chain(ix, ch[c], L, w, 1);
  }
  kvp__index_stats(ix, &s0);
  assert_int_equal(s0.parents_side, 0);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      for (int k = 0; k < L; k++) {
        int i = (r + c) % 2 ? L - 1 - k : k;
        assert_int_equal(kvp__index_remove(ix, ch[c][i], w, 1, 0), 0);
      }
      for (int i = 0; i < L; i++)
        ch[c][i] = RND() | 1;
      store_chain(ix, ch[c], L, w, 1);
    }
  kvp__index_stats(ix, &s);
  assert_int_equal(s.blocks, (size_t)C * L);
  assert_int_equal(s.parents_side, 0);
  /* The side table's smallest size (16 slots), made by a chain freed head
   * first (each freed block's child goes there until it is freed too). */
  assert_true(s.memory_bytes <= s0.memory_bytes + 256);
  /* The burst: B chains stored child first, every parent in the table. */
  for (int c = 0; c < B; c++)
    for (int k = 0; k < L; k++) {
      int i = L - 1 - k;
      burst[c][i] = RND() | 1;
    }
  for (int c = 0; c < B; c++)
    for (int k = 0; k < L; k++) {
      int i = L - 1 - k;
      assert_int_equal(kvp__index_store(ix, burst[c][i], i > 0, i ? burst[c][i - 1] : 0, w, 1, 0,
                                        16, 1 << 20, NOW),
                       0);
    }
  kvp__index_stats_t sb;
  kvp__index_stats(ix, &sb);
  assert_true(sb.parents_side >= (size_t)B * (L - 2));
  assert_true(sb.memory_bytes > s0.memory_bytes + 32768);
  for (int c = 0; c < B; c++)
    for (int i = 0; i < L; i++)
      assert_int_equal(kvp__index_remove(ix, burst[c][i], w, 1, 0), 0);
  kvp__index_stats(ix, &s);
  assert_int_equal(s.parents_side, 0);
  /* The table, 4096 slots of 16 bytes for the burst, back to at most 1024
   * (the records and the map keep the burst's size: blocks come back). */
  assert_true(sb.memory_bytes - s.memory_bytes >= 65536 - 16384);
  for (int c = 0; c < C; c++) {
    kvp__index_match_t m[4];
    size_t n = 0;
    assert_int_equal(kvp__index_match(ix, ch[c], L, m, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(m[0].length, L);
  }
#undef RND
  kvp__index_destroy(ix);
}

/* Blocks held by many (worker, tier, volume) copies: lists move between the
 * record and slab chunks of every size and back, in order, against a
 * reference. */
/* A block's list past 65,536 locations: the slab chunk's count is kept in
 * two parts of the record's second location word (bits 0-15 and 24-31,
 * around the overflow mark), so the 16-bit boundary is where it would break. */
static void one_block_holds_more_than_65536_locations(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { W = 6600, V = 4, PER = 2 + 2 * V };
  static uint16_t ws[W];
  uint16_t vol[V];
  char name[16];
  kvp__index_loc_t got[4];
  size_t n = 0;
  for (int v = 0; v < V; v++) {
    snprintf(name, sizeof name, "v%d", v);
    assert_int_equal(kvp__index_volume(ix, name, &vol[v]), 0);
  }
  for (int i = 0; i < W; i++) {
    snprintf(name, sizeof name, "w%d", i);
    uint16_t w = ws[i] = wid(ix, name);
    for (int k = 0; k < PER; k++) {
      int t = k < 2 ? KVP_TIER_G1 + k : k < 2 + V ? KVP_TIER_G3 : KVP_TIER_G4;
      uint16_t v = k < 2 ? 0 : vol[(k - 2) % V];
      assert_int_equal(kvp__index_store(ix, 77, 0, 0, w, t, v, 16, 1, NOW), 0);
    }
  }
  assert_int_equal(kvp__index_get(ix, 77, NULL, got, 4, &n), 0);
  assert_int_equal(n, (size_t)W * PER);
  /* Newest first: the last worker's last G4 copy. */
  assert_int_equal(got[0].worker, ws[W - 1]);
  assert_int_equal(got[0].tier, KVP_TIER_G4);
  assert_int_equal(got[0].volume, vol[V - 1]);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.locations, (size_t)W * PER);
  assert_int_equal(st.tier_locations[KVP_TIER_G3], (size_t)W * V);
  /* Back under 65,536: the first 700 workers' G1 and G2 copies go. */
  for (int i = 0; i < 700; i++) {
    assert_int_equal(kvp__index_remove(ix, 77, ws[i], KVP_TIER_G1, KVP__INDEX_NO_VOLUME), 0);
    assert_int_equal(kvp__index_remove(ix, 77, ws[i], KVP_TIER_G2, KVP__INDEX_NO_VOLUME), 0);
    assert_int_equal(kvp__index_remove(ix, 77, ws[i], KVP_TIER_G1, KVP__INDEX_NO_VOLUME),
                     KVP_ENOENT);
  }
  assert_int_equal(kvp__index_get(ix, 77, NULL, got, 4, &n), 0);
  assert_int_equal(n, (size_t)W * PER - 1400);
  assert_true(n < 65536);
  /* The list kept its order across the moves: still newest first. */
  assert_int_equal(got[0].worker, ws[W - 1]);
  assert_int_equal(got[0].tier, KVP_TIER_G4);
  /* One worker at a time drops everything; the block goes with the last. */
  for (int i = 0; i < W; i++)
    assert_int_equal(kvp__index_drop(ix, ws[i], 0x1e), i < 700 ? PER - 2 : PER);
  assert_int_equal(kvp__index_get(ix, 77, NULL, got, 4, &n), KVP_ENOENT);
  kvp__index_stats(ix, &st);
  assert_int_equal(st.blocks, 0);
  assert_int_equal(st.locations, 0);
  kvp__index_destroy(ix);
}

static void many_holders_per_block_match_a_reference(void **state) {
  (void)state;
  kvp__index_t *ix = mk();
  enum { K = 64, W = 24, V = 3 };
  static unsigned char in[K][W][5][V];
  uint16_t w[W], vol[V];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  char name[16];
  for (int i = 0; i < W; i++) {
    snprintf(name, sizeof name, "w%d", i);
    w[i] = wid(ix, name);
  }
  vol[0] = 0;
  assert_int_equal(kvp__index_volume(ix, "v1", &vol[1]), 0);
  assert_int_equal(kvp__index_volume(ix, "v2", &vol[2]), 0);
  for (int op = 0; op < 200000; op++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int k = (int)(x % K), who = (int)((x >> 8) % W), t = 1 + (int)((x >> 16) % 4);
    int v = t >= 3 ? 1 + (int)((x >> 20) % 2) : 0, what = (int)((x >> 24) % 10);
    uint64_t h = 5000 + (uint64_t)k;
    if (what < 6) {
      assert_int_equal(kvp__index_store(ix, h, 0, 0, w[who], t, vol[v], 16, 1 + (uint64_t)(k % 3),
                                        NOW + (uint64_t)op),
                       0);
      in[k][who][t][v] = 1;
    } else if (what < 9) {
      int rc = kvp__index_remove(ix, h, w[who], t, vol[v]);
      assert_int_equal(rc, in[k][who][t][v] ? 0 : KVP_ENOENT);
      in[k][who][t][v] = 0;
    } else {
      size_t n = kvp__index_drop(ix, w[who], 1u << t);
      size_t want = 0;
      for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) {
          want += in[i][who][t][j];
          in[i][who][t][j] = 0;
        }
      assert_int_equal(n, want);
    }
  }
  kvp__index_loc_t locs[W * 4 * V];
  size_t total = 0;
  uint64_t bytes = 0;
  for (int k = 0; k < K; k++) {
    size_t want = 0, n = 0;
    for (int i = 0; i < W; i++)
      for (int t = 1; t <= 4; t++)
        for (int v = 0; v < V; v++)
          want += in[k][i][t][v];
    int rc = kvp__index_get(ix, 5000 + (uint64_t)k, NULL, locs, W * 4 * V, &n);
    assert_int_equal(rc, want ? 0 : KVP_ENOENT);
    assert_int_equal(n, want);
    for (size_t j = 0; j < n; j++) {
      int v = locs[j].volume == vol[1] ? 1 : locs[j].volume == vol[2] ? 2 : 0;
      assert_true(in[k][locs[j].worker - w[0]][locs[j].tier][v]);
    }
    total += n;
    bytes += n * (1 + (uint64_t)(k % 3));
  }
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  assert_int_equal(st.locations, total);
  assert_true(st.tier_bytes[1] + st.tier_bytes[2] + st.tier_bytes[3] + st.tier_bytes[4] == bytes);
  kvp__index_destroy(ix);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(many_holders_per_block_match_a_reference),
    cmocka_unit_test(one_block_holds_more_than_65536_locations),
    cmocka_unit_test(random_operations_match_a_reference),
    cmocka_unit_test(match_longest_prefix_per_worker_and_tier),
    cmocka_unit_test(match_long_query_crosses_batches),
    cmocka_unit_test(match_follows_chains_against_a_reference),
    cmocka_unit_test(parents_survive_frees_and_reuse_against_a_reference),
    cmocka_unit_test(memory_stays_bounded_under_churn),
    cmocka_unit_test(match_counts_many_rows_without_int),
    cmocka_unit_test(remove_deletes_block_with_last_location),
    cmocka_unit_test(many_blocks_grow_and_shrink),
    cmocka_unit_test(lru_orders_by_last_touch),
    cmocka_unit_test(hit_frequency_decays_with_half_life),
    cmocka_unit_test(hits_saturate_without_touching_the_flags),
    cmocka_unit_test(drop_removes_worker_tiers_only),
    cmocka_unit_test(drop_some_in_slices_drops_the_marked_workers),
    cmocka_unit_test(changes_list_each_block_once),
    cmocka_unit_test(rejects_bad_tier_and_names),
    cmocka_unit_test(memory_per_location_is_bounded),
};

KVP_TEST_MAIN("advisor_index", tests)
