/* Block manager, tiers and events (include/kvplane/blockmgr.h): offload
 * and onboarding with the bytes they copy, write-through, the frequency
 * filter, no offload, the exact event stream of a scripted scenario,
 * snapshots, reset, and sink failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfix.h"
#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

/* ---- offload and onboarding -------------------------------------------- */

static unsigned char pattern(int block, uint32_t layer, int k) {
  return (unsigned char)(block * 64 + (int)layer * 16 + k * 7 + 3);
}

/* Offload G1 -> G2 and onboarding back copy every byte of every layer, with
 * blocks of layout l (stride bytes each). */
static void onboard_round_trip(kvp_layout_t l, size_t stride) {
  const uint32_t nl = l.num_layers;
  bf_rec_t r;
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;
  kvp_pool_t *p1, *p2;
  uint32_t ta[8], tb[8];
  uint64_t ha[2];
  kvp_seq_t *a, *b, *c;
  kvp_blockmgr_stats_t st;
  size_t ls;

  bf_rec_init(&r, 0);
  kvp_blockmgr_opts_init(&o);
  o.layout = l;
  o.g1_blocks = 2;
  o.g2_blocks = 4;
  o.sink = bf_rec_sink(&r);
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  p1 = bf_g1(bm);
  p2 = kvp_blockmgr_pool(bm, KVP_TIER_G2);
  ls = kvp_layout_layer_stride(&o.layout);
  assert_int_equal(kvp_layout_block_stride(&o.layout), stride);
  bf_tokens(ta, 8, 1);
  bf_hashes(ta, 8, NULL, ha, 2);
  bf_tokens(tb, 8, 100);

  /* The engine writes A's KV data, every layer. */
  a = bf_seq(bm, ta, 8, NULL, 0);
  for (int i = 0; i < 2; i++)
    for (uint32_t l = 0; l < nl; l++) {
      unsigned char *q = kvp_pool_block_layer(p1, bf_blk(a, (size_t)i), l);
      assert_non_null(q);
      for (size_t k = 0; k < ls; k++)
        q[k] = pattern(i, l, (int)k);
    }
  kvp_seq_free(a);

  /* B evicts both; they are copied to G2. */
  b = bf_seq(bm, tb, 8, NULL, 0);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 2);
  for (int i = 0; i < 2; i++) {
    assert_false(bf_registered(bm, KVP_TIER_G1, ha[i]));
    uint32_t g = bf_lookup(bm, KVP_TIER_G2, ha[i]);
    for (uint32_t l = 0; l < nl; l++) {
      const unsigned char *q = kvp_pool_block_layer(p2, g, l);
      for (size_t k = 0; k < ls; k++)
        assert_int_equal(q[k], pattern(i, l, (int)k));
    }
  }
  /* B overwrites the G1 blocks that held A's bytes. */
  for (int i = 0; i < 2; i++)
    for (uint32_t l = 0; l < nl; l++)
      memset(kvp_pool_block_layer(p1, bf_blk(b, (size_t)i), l), 0xee, ls);
  kvp_seq_free(b);

  /* A's prompt again: found only in G2, onboarded with its bytes. */
  c = bf_seq(bm, ta, 8, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(c), 8);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(bf_lookup(bm, KVP_TIER_G1, ha[i]), bf_blk(c, (size_t)i));
    assert_int_equal(kvp_pool_block_state(p1, bf_blk(c, (size_t)i)), KVP_BLOCK_REGISTERED);
    for (uint32_t l = 0; l < nl; l++) {
      const unsigned char *q = kvp_pool_block_layer(p1, bf_blk(c, (size_t)i), l);
      for (size_t k = 0; k < ls; k++)
        if (q[k] != pattern(i, l, (int)k))
          fail_msg("onboarded block %d layer %u byte %zu: %02x, want %02x", i, l, k, q[k],
                   pattern(i, l, (int)k));
    }
    assert_true(bf_registered(bm, KVP_TIER_G2, ha[i])); /* G2 keeps its copy */
  }
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.onboards, 2);
  assert_int_equal(st.hits_g2, 2);
  assert_int_equal(st.hits_g1, 0);
  assert_int_equal(st.offloads, 4); /* B's two blocks made room */
  assert_int_equal(st.g2.cached, 4);
  assert_int_equal(st.g2.active, 0);
  kvp_seq_free(c);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* 256-byte blocks: copied by 64-byte moves. */
static void onboard_copies_bytes_from_g2(void **state) {
  (void)state;
  onboard_round_trip((kvp_layout_t){4, BF_PS, 8, 2, 64}, 256);
}

/* The other copy paths for host blocks: 48 bytes (16-byte moves), 24
 * bytes (not a multiple of 16: memcpy) and 320 bytes (over the inline
 * limit: memcpy). */
static void onboard_copies_bytes_stride_48(void **state) {
  (void)state;
  onboard_round_trip((kvp_layout_t){3, BF_PS, 2, 2, 16}, 48);
}

static void onboard_copies_bytes_stride_24(void **state) {
  (void)state;
  onboard_round_trip((kvp_layout_t){3, BF_PS, 1, 2, 8}, 24);
}

static void onboard_copies_bytes_stride_320(void **state) {
  (void)state;
  onboard_round_trip((kvp_layout_t){5, BF_PS, 8, 2, 64}, 320);
}

/* A G2 storage whose copies fail on demand: an offload that cannot copy
 * loses only the copy. The G1 block leaves G1 as it would anyway, a G2
 * victim taken for the copy is evicted (and announced), the G2 block goes
 * back to free, and nothing is registered that holds wrong bytes. */
static int failing_copy;

static int fc_alloc(void *ctx, size_t size, size_t alignment, void **base) {
  (void)ctx;
  *base = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  return *base ? 0 : KVP_ENOMEM;
}

static void fc_free(void *ctx, void *base, size_t size) {
  (void)ctx;
  (void)size;
  free(base);
}

static int fc_copy(void *ctx, void *dst, const kvp_storage_t *src_storage, const void *src,
                   size_t n) {
  (void)ctx;
  (void)src_storage;
  if (failing_copy)
    return KVP_EIO;
  memcpy(dst, src, n);
  return 0;
}

static const kvp_storage_ops_t fc_ops = {
    .kind = "system", .alloc = fc_alloc, .free = fc_free, .copy = fc_copy};

static void failed_offload_copy_loses_only_the_copy(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;
  uint32_t ta[8], tb[8], tc[8];
  uint64_t ha[2], hb[2], hc[2];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 0);
  kvp_blockmgr_opts_init(&o);
  o.layout = bf_layout();
  o.g1_blocks = 2;
  o.g2_blocks = 2;
  o.g2_storage = (kvp_storage_t){.ops = &fc_ops, .ctx = NULL};
  o.sink = bf_rec_sink(&r);
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  kvp_pool_t *p2 = kvp_blockmgr_pool(bm, KVP_TIER_G2);
  bf_tokens(ta, 8, 1);
  bf_hashes(ta, 8, NULL, ha, 2);
  bf_tokens(tb, 8, 100);
  bf_hashes(tb, 8, NULL, hb, 2);
  bf_tokens(tc, 8, 200);
  bf_hashes(tc, 8, NULL, hc, 2);

  /* A, then B evicting A to G2: G2 is full. */
  failing_copy = 0;
  kvp_seq_free(bf_seq(bm, ta, 8, NULL, 0));
  kvp_seq_free(bf_seq(bm, tb, 8, NULL, 0));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 2);
  assert_true(bf_registered(bm, KVP_TIER_G2, ha[0]) && bf_registered(bm, KVP_TIER_G2, ha[1]));

  /* C evicts B and the copies fail: the first evicts G2's LRU block (A's
   * second: A was freed last block first) for nothing and leaves it free, the second takes that
   * free block and fails too. B is in neither tier, C is in G1. */
  failing_copy = 1;
  kvp_seq_t *c = bf_seq(bm, tc, 8, NULL, 0);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 2);
  assert_int_equal(st.g2.evictions, 1);
  assert_int_equal(st.g2.free, 1);
  assert_int_equal(st.g2.cached, 1);
  assert_true(bf_registered(bm, KVP_TIER_G2, ha[0]));
  assert_false(bf_registered(bm, KVP_TIER_G2, ha[1]));
  for (int i = 0; i < 2; i++) {
    assert_false(bf_registered(bm, KVP_TIER_G1, hb[i]));
    assert_false(bf_registered(bm, KVP_TIER_G2, hb[i]));
    assert_true(bf_registered(bm, KVP_TIER_G1, hc[i]));
  }
  kvp_seq_free(c);

  /* A again: its first block is onboarded from G2, its second computed;
   * evicting C finds the free G2 block, whose copies fail too: it stays
   * free. */
  kvp_seq_t *a = bf_seq(bm, ta, 8, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(a), BF_PS);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.onboards, 1);
  assert_int_equal(st.offloads, 2);
  assert_int_equal(st.g2.evictions, 1);
  assert_int_equal(st.g2.free, 1);
  assert_false(bf_registered(bm, KVP_TIER_G2, hc[0]) || bf_registered(bm, KVP_TIER_G2, hc[1]));
  kvp_seq_free(a);
  bf_assert_pool_consistent(bf_g1(bm));
  bf_assert_pool_consistent(p2);

  /* Copies work again: B evicts A, whose first block is in G2 already and
   * whose second is copied to the free G2 block. */
  failing_copy = 0;
  kvp_seq_free(bf_seq(bm, tb, 8, NULL, 0));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 3);
  assert_int_equal(st.g2.free, 0);
  assert_true(bf_registered(bm, KVP_TIER_G2, ha[0]) && bf_registered(bm, KVP_TIER_G2, ha[1]));
  bf_assert_pool_consistent(p2);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* Under write-through every registered block is copied to G2 once, before
 * G1 evicts it; eviction then copies nothing, and onboarding copies nothing
 * back. When the copy happens is asserted separately below. */
static void write_through_copies_each_block_once(void **state) {
  (void)state;
  bf_rec_t r;
  bf_pmap_t m;
  kvp_blockmgr_t *bm;
  uint32_t ta[8], tb[12];
  uint64_t ha[2], hb[3];
  kvp_seq_t *a, *b, *c;
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bf_pmap_init(&m, 64);
  r.pmap = &m;
  bm = bf_mgr(3, 8, KVP_OFFLOAD_WRITE_THROUGH, 0, &r);
  bf_tokens(ta, 8, 1);
  bf_hashes(ta, 8, NULL, ha, 2);
  bf_pmap_add_chain(&m, ha, 2);
  bf_tokens(tb, 12, 100);
  bf_hashes(tb, 12, NULL, hb, 3);
  bf_pmap_add_chain(&m, hb, 3);

  a = bf_seq(bm, ta, 8, NULL, 0);
  kvp_seq_free(a);
  for (int i = 0; i < 2; i++) {
    assert_true(bf_registered(bm, KVP_TIER_G1, ha[i]));
    assert_true(bf_registered(bm, KVP_TIER_G2, ha[i]));
  }
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 2);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);

  /* B evicts a1 (one block was never used), its decoded block evicts a0:
   * both are in G2 already, so eviction copies and stores nothing. */
  b = bf_seq(bm, tb, 8, NULL, 0);
  for (int i = 8; i < 12; i++)
    assert_int_equal(kvp_seq_append(b, tb[i]), 0);
  for (int i = 0; i < 2; i++) {
    assert_false(bf_registered(bm, KVP_TIER_G1, ha[i]));
    assert_true(bf_registered(bm, KVP_TIER_G2, ha[i]));
  }
  kvp_seq_free(b);
  for (int i = 0; i < 3; i++)
    assert_true(bf_registered(bm, KVP_TIER_G2, hb[i]));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 5);
  assert_false(r.bad);

  /* A's prompt: found in G2 only, onboarded; nothing is copied back to G2,
   * neither now nor when C frees the onboarded blocks. */
  c = bf_seq(bm, ta, 8, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(c), 8);
  kvp_seq_free(c);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.onboards, 2);
  assert_int_equal(st.offloads, 5);
  assert_int_equal(st.offloads_filtered, 0);
  assert_int_equal(st.g2.cached, 5);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
  bf_pmap_free(&m);
}

/* blockmgr.h: KVP_OFFLOAD_WRITE_THROUGH copies a block to G2 "as soon as its
 * data is final: when the last sequence holding it releases it", not at
 * registration (prompt blocks are registered at allocate, before the engine
 * computes them) and not at eviction. */
static void write_through_copies_at_last_release(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t t[12];
  uint64_t h[3];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(8, 8, KVP_OFFLOAD_WRITE_THROUGH, 0, &r);
  bf_tokens(t, 12, 1);
  bf_hashes(t, 12, NULL, h, 3);
  kvp_seq_t *a = bf_seq(bm, t, 8, NULL, 0);
  kvp_seq_t *b = bf_seq(bm, t, 4, NULL, 0); /* shares h0 */
  for (int i = 8; i < 12; i++)
    assert_int_equal(kvp_seq_append(a, t[i]), 0);
  for (int i = 0; i < 3; i++)
    assert_false(bf_registered(bm, KVP_TIER_G2, h[i])); /* registered, still held */
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 0);

  /* A goes: h2 and h1 are released for good and copied; h0 is still B's. */
  kvp_seq_free(a);
  assert_true(bf_registered(bm, KVP_TIER_G2, h[2]));
  assert_true(bf_registered(bm, KVP_TIER_G2, h[1]));
  assert_false(bf_registered(bm, KVP_TIER_G2, h[0]));
  kvp_seq_free(b);
  assert_true(bf_registered(bm, KVP_TIER_G2, h[0]));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 3);
  assert_int_equal(st.g1.evictions, 0);

  /* Used and released again: already in G2, nothing is copied. */
  kvp_seq_free(bf_seq(bm, t, 12, NULL, 0));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 3);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* G1 and G2 share a hash table, and a G1 block's record remembers whether
 * G2 may hold its hash too, so that most evictions move the entry without
 * searching the table. A hash registered in G2 through the pool API, not
 * by an offload, must still be seen when its G1 block is evicted: the G2
 * block is kept (touched), not copied over again, and G2 holds the hash
 * once. */
static void g2_registration_outside_offload_is_seen_at_eviction(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t t[4], u[8];
  uint64_t h[1];
  uint32_t d, found = UINT32_MAX;
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(2, 4, KVP_OFFLOAD_ON_EVICT, 0, &r);
  kvp_pool_t *g2 = kvp_blockmgr_pool(bm, KVP_TIER_G2);
  bf_tokens(t, 4, 1);
  bf_tokens(u, 8, 2);
  bf_hashes(t, 4, NULL, h, 1);
  kvp_seq_free(bf_seq(bm, t, 4, NULL, 0)); /* h0 registered in G1, cached */

  assert_int_equal(kvp_pool_alloc(g2, &d, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(g2, d), 0);
  assert_int_equal(kvp_block_commit(g2, d), 0);
  assert_int_equal(kvp_block_register(g2, d, h[0], NULL, NULL), 0);
  assert_int_equal(kvp_pool_release(g2, d), 0);

  kvp_seq_t *b = bf_seq(bm, u, 8, NULL, 0); /* 2 blocks: the free one, then h0's */
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.g1.evictions, 1);
  assert_int_equal(st.offloads, 0);
  assert_int_equal(st.g2.state[KVP_BLOCK_REGISTERED], 1);
  assert_int_equal(kvp_pool_lookup(g2, h[0], &found), 0);
  assert_int_equal(found, d);
  kvp_seq_free(b);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void frequency_filter_keeps_cold_blocks_out(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ta[4], tz[4], ty[8];
  uint64_t ha, hz;
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(2, 4, KVP_OFFLOAD_ON_EVICT, 2, &r);
  bf_tokens(ta, 4, 1);
  bf_hashes(ta, 4, NULL, &ha, 1);
  bf_tokens(tz, 4, 100);
  bf_hashes(tz, 4, NULL, &hz, 1);
  bf_tokens(ty, 8, 200);

  /* a0: stored, then two prefix hits. z0: stored, then one. */
  for (int i = 0; i < 3; i++) {
    kvp_seq_t *s = bf_seq(bm, ta, 4, NULL, 0);
    assert_int_equal(kvp_seq_cached_tokens(s), i ? 4 : 0);
    kvp_seq_free(s);
  }
  for (int i = 0; i < 2; i++)
    kvp_seq_free(bf_seq(bm, tz, 4, NULL, 0));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.hits_g1, 3);

  /* Y evicts a0 (2 hits: offloaded) and z0 (1 hit: filtered). */
  kvp_seq_t *y = bf_seq(bm, ty, 8, NULL, 0);
  assert_false(bf_registered(bm, KVP_TIER_G1, ha));
  assert_false(bf_registered(bm, KVP_TIER_G1, hz));
  assert_true(bf_registered(bm, KVP_TIER_G2, ha));
  assert_false(bf_registered(bm, KVP_TIER_G2, hz));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads, 1);
  assert_int_equal(st.offloads_filtered, 1);
  assert_int_equal(st.g2.cached, 1);
  kvp_seq_free(y);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void offload_none_keeps_g2_empty(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ta[8], tb[8];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(2, 4, KVP_OFFLOAD_NONE, 0, &r);
  bf_tokens(ta, 8, 1);
  bf_tokens(tb, 8, 100);
  kvp_seq_free(bf_seq(bm, ta, 8, NULL, 0));
  kvp_seq_free(bf_seq(bm, tb, 8, NULL, 0));
  kvp_seq_t *c = bf_seq(bm, ta, 8, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(c), 0);
  kvp_seq_free(c);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.offloads + st.onboards + st.hits_g2 + st.offloads_filtered, 0);
  assert_int_equal(st.g2.free, 4);
  for (size_t i = 0; i < r.nev; i++)
    assert_int_equal(r.ev[i].tier, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_int_equal(r.nset[KVP_TIER_G2], 0);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* ---- the exact event stream -------------------------------------------- */

typedef struct {
  int type, tier;
  uint64_t h[3];
  size_t n;
  int has_parent;
  uint64_t parent;
} want_t;

/* Asserts that the events recorded since *at are exactly want[0..n-1]. */
static void expect_events(const bf_rec_t *r, size_t *at, const char *step, const want_t *want,
                          size_t n) {
  if (r->nev - *at != n) {
    for (size_t i = *at; i < r->nev; i++)
      print_message("  got %s %s (%zu hashes)\n", kvp_event_type_name(r->ev[i].type),
                    kvp_tier_name(r->ev[i].tier), r->ev[i].n);
    fail_msg("%s: %zu events, want %zu", step, r->nev - *at, n);
  }
  for (size_t i = 0; i < n; i++)
    bf_assert_ev(r, *at + i, want[i].type, want[i].tier, want[i].h, want[i].n, want[i].has_parent,
                 want[i].parent);
  *at = r->nev;
}

#define EXPECT(step, ...)                                                                          \
  do {                                                                                             \
    const want_t w_[] = {__VA_ARGS__};                                                             \
    expect_events(&r, &at, step, w_, sizeof w_ / sizeof w_[0]);                                    \
  } while (0)
#define NONE(step) expect_events(&r, &at, step, NULL, 0)
#define ST(tier, n, parent, ...)                                                                   \
  { KVP_EV_STORED, tier, {__VA_ARGS__}, n, parent != 0, parent }
#define RM(tier, h)                                                                                \
  { KVP_EV_REMOVED, tier, {h}, 1, 0, 0 }
#define AC(tier, n, ...)                                                                           \
  { KVP_EV_ACCESSED, tier, {__VA_ARGS__}, n, 0, 0 }

/* Every event of a scripted scenario, in order (blockmgr.h, "Events of one
 * call"): the call's evictions coalesced as Removed G2 (G2's own
 * evictions), Stored G2 (offloads, one event per chain), Removed G1; then
 * Accessed G1 for the shared prefix, Accessed G2 for the onboarded blocks,
 * and Stored G1 for the blocks the call registered (onboarded and new, one
 * event per run). G1 4 blocks, G2 2, offload on eviction. */
static void scripted_event_sequence(void **state) {
  (void)state;
  bf_rec_t r;
  bf_pmap_t m;
  kvp_blockmgr_t *bm;
  uint32_t t[12], tbe[12], v[4], w[4], x[4];
  uint64_t a[3], b[3], d0, f0, g0, h0;
  kvp_seq_t *sa, *sb, *sd, *se, *sf, *sg, *sh;
  size_t at = 0;
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bf_pmap_init(&m, 64);
  r.pmap = &m;
  bm = bf_mgr(4, 2, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(t, 12, 1);
  bf_hashes(t, 12, NULL, a, 3);
  memcpy(tbe, t, 8 * sizeof *tbe);
  bf_tokens(tbe + 8, 4, 101);
  bf_hashes(tbe, 12, NULL, b, 3);
  bf_hashes(t, 4, "adapterX", &d0, 1);
  bf_tokens(v, 4, 201);
  bf_hashes(v, 4, NULL, &f0, 1);
  bf_tokens(w, 4, 301);
  bf_hashes(w, 4, NULL, &g0, 1);
  bf_tokens(x, 4, 401);
  bf_hashes(x, 4, NULL, &h0, 1);
  assert_true(b[0] == a[0] && b[1] == a[1] && b[2] != a[2]);
  assert_true(d0 != a[0]);
  bf_pmap_add_chain(&m, a, 3);
  bf_pmap_add_chain(&m, b, 3);
  bf_pmap_add_chain(&m, &d0, 1);
  bf_pmap_add_chain(&m, &f0, 1);
  bf_pmap_add_chain(&m, &g0, 1);
  bf_pmap_add_chain(&m, &h0, 1);

  sa = bf_seq(bm, t, 10, NULL, 0);
  EXPECT("allocate A", ST(KVP_TIER_G1, 2, 0, a[0], a[1]));
  assert_int_equal(r.ev[0].block_tokens, BF_PS);
  assert_int_equal(r.ev[0].block_bytes, 128);
  assert_int_equal(kvp_seq_append(sa, t[10]), 0);
  NONE("append to a partial block");
  assert_int_equal(kvp_seq_append(sa, t[11]), 0);
  EXPECT("append fills a2", ST(KVP_TIER_G1, 1, a[1], a[2]));

  sb = bf_seq(bm, tbe, 12, NULL, 0);
  EXPECT("allocate B", AC(KVP_TIER_G1, 2, a[0], a[1]), ST(KVP_TIER_G1, 1, a[1], b[2]));

  assert_int_equal(kvp_seq_create(bm, t, 4, "adapterX", 7, &sd), 0);
  assert_int_equal(kvp_seq_allocate(sd), KVP_ENOSPC);
  NONE("D gets KVP_ENOSPC");
  kvp_seq_free(sb);
  NONE("free B");
  assert_int_equal(kvp_seq_allocate(sd), 0);
  EXPECT("allocate D (LoRA)", ST(KVP_TIER_G2, 1, a[1], b[2]), RM(KVP_TIER_G1, b[2]),
         ST(KVP_TIER_G1, 1, 0, d0));
  assert_int_equal(r.ev[at - 1].lora_id, 7);

  kvp_seq_free(sd);
  kvp_seq_free(sa);
  NONE("free D and A"); /* G1 LRU: d0 a2 a1 a0 */

  sf = bf_seq(bm, v, 4, NULL, 0);
  EXPECT("allocate F", ST(KVP_TIER_G2, 1, 0, d0), RM(KVP_TIER_G1, d0), ST(KVP_TIER_G1, 1, 0, f0));
  assert_int_equal(r.ev[at - 3].lora_id, 7); /* d0 keeps D's LoRA id in G2 */
  sg = bf_seq(bm, w, 4, NULL, 0);            /* G2 full: b2 (LRU) goes */
  EXPECT("allocate G", RM(KVP_TIER_G2, b[2]), ST(KVP_TIER_G2, 1, a[1], a[2]), RM(KVP_TIER_G1, a[2]),
         ST(KVP_TIER_G1, 1, 0, g0));

  kvp_seq_free(sf); /* G1 LRU: a1 a0 f0; G holds g0 */
  se = bf_seq(bm, t, 12, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(se), 12);
  EXPECT("allocate E (onboard a2)", RM(KVP_TIER_G2, d0), ST(KVP_TIER_G2, 1, 0, f0),
         RM(KVP_TIER_G1, f0), AC(KVP_TIER_G1, 2, a[0], a[1]), AC(KVP_TIER_G2, 1, a[2]),
         ST(KVP_TIER_G1, 1, a[1], a[2]));

  kvp_seq_free(se); /* G1 LRU: a2 a1 a0 */
  sh = bf_seq(bm, x, 4, NULL, 0);
  EXPECT("allocate H (a2 already in G2)", RM(KVP_TIER_G1, a[2]), ST(KVP_TIER_G1, 1, 0, h0));

  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_int_equal(r.nset[KVP_TIER_G1], 4); /* a0 a1 g0 h0 */
  assert_int_equal(r.nset[KVP_TIER_G2], 2); /* a2 f0 */
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.hits_g1, 4);
  assert_int_equal(st.hits_g2, 1);
  assert_int_equal(st.onboards, 1);
  assert_int_equal(st.offloads, 4);
  assert_int_equal(st.g1.evictions, 5);
  assert_int_equal(st.g2.evictions, 2);
  assert_int_equal(st.events, r.total);
  assert_int_equal(st.event_errors, 0);

  kvp_seq_free(sg);
  kvp_seq_free(sh);
  NONE("free G and H");
  assert_int_equal(kvp_blockmgr_reset(bm), 0);
  EXPECT("reset", {KVP_EV_CLEARED, KVP_TIER_ALL, {0}, 0, 0, 0});
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
  bf_pmap_free(&m);
}

/* ---- snapshot, reset, sink errors -------------------------------------- */

static void snapshot_and_reset(void **state) {
  (void)state;
  bf_rec_t r;
  bf_pmap_t m;
  kvp_blockmgr_t *bm;
  uint32_t tx[16], ta[10], tb[12];
  uint64_t hx[4], ha[2], hb[3];
  kvp_seq_t *a, *b, *c;
  bf_world_t w0, w1;
  kvp_pool_counts_t cnt;

  bf_rec_init(&r, 1);
  bf_pmap_init(&m, 64);
  r.pmap = &m;
  bm = bf_mgr(4, 4, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(tx, 16, 900);
  bf_hashes(tx, 16, NULL, hx, 4);
  bf_pmap_add_chain(&m, hx, 4);
  bf_tokens(ta, 10, 1);
  bf_hashes(ta, 10, NULL, ha, 2);
  bf_pmap_add_chain(&m, ha, 2);
  memcpy(tb, ta, 8 * sizeof *tb);
  bf_tokens(tb + 8, 4, 50);
  bf_hashes(tb, 12, NULL, hb, 3);
  bf_pmap_add_chain(&m, hb, 3);

  kvp_seq_free(bf_seq(bm, tx, 16, NULL, 0));
  a = bf_seq(bm, ta, 10, NULL, 0);
  b = bf_seq(bm, tb, 12, NULL, 0);

  /* Snapshots: the registered sets, parents included (checked against
   * what the hashes chain from), equal to what the events built. */
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_int_equal(r.nset[KVP_TIER_G1], 3);
  assert_int_equal(r.nset[KVP_TIER_G2], 4);
  uint64_t *h1, *p1, *h2, *p2;
  size_t n1, n2;
  assert_int_equal(kvp_blockmgr_snapshot(bm, KVP_TIER_G2, &h1, &p1, &n1), 0);
  assert_int_equal(kvp_blockmgr_snapshot_fn(bm, KVP_TIER_G2, &h2, &p2, &n2), 0);
  assert_int_equal(n1, n2);
  assert_memory_equal(h1, h2, n1 * sizeof *h1);
  assert_memory_equal(p1, p2, n1 * sizeof *p1);
  free(h1);
  free(p1);
  free(h2);
  free(p2);

  /* Reset while sequences hold blocks: KVP_EBUSY, nothing changes. */
  for (int i = 0; i < 2; i++) {
    bf_world_take(bm, &r, &w0);
    assert_int_equal(kvp_blockmgr_reset(bm), KVP_EBUSY);
    bf_world_take(bm, &r, &w1);
    bf_world_assert_same(&w0, &w1);
    bf_world_free(&w0);
    bf_world_free(&w1);
    if (i == 0)
      kvp_seq_free(a); /* B still holds blocks */
  }

  /* Nothing held (C exists but has no blocks): one AllBlocksCleared for
   * every tier, and both tiers are empty. */
  kvp_seq_free(b);
  assert_int_equal(kvp_seq_create(bm, ta, 10, NULL, 0, &c), 0);
  size_t at = r.nev;
  assert_int_equal(kvp_blockmgr_reset(bm), 0);
  assert_int_equal(r.nev, at + 1);
  assert_int_equal(r.ev[at].type, KVP_EV_CLEARED);
  assert_int_equal(r.ev[at].tier, KVP_TIER_ALL);
  for (int tier = KVP_TIER_G1; tier <= KVP_TIER_G2; tier++) {
    bf_assert_snapshot_matches(bm, &r, tier);
    assert_int_equal(r.nset[tier], 0);
    kvp_pool_counts(kvp_blockmgr_pool(bm, tier), &cnt);
    assert_int_equal(cnt.cached, 0);
    assert_int_equal(cnt.free, cnt.capacity);
    bf_assert_pool_consistent(kvp_blockmgr_pool(bm, tier));
  }
  assert_false(bf_registered(bm, KVP_TIER_G1, ha[0]));
  assert_false(bf_registered(bm, KVP_TIER_G2, hx[0]));
  assert_int_equal(kvp_seq_allocate(c), 0);
  assert_int_equal(kvp_seq_cached_tokens(c), 0);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  kvp_seq_free(c);
  assert_int_equal(kvp_blockmgr_reset(bm), 0); /* reset of cached blocks only */
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
  bf_pmap_free(&m);
}

static void sink_errors_are_counted(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ta[8], tb[8];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 0);
  r.fail_rc = KVP_EOVERFLOW;
  bm = bf_mgr(3, 2, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(ta, 8, 1);
  bf_tokens(tb, 8, 100);
  kvp_seq_t *a = bf_seq(bm, ta, 8, NULL, 0);
  kvp_seq_free(a);
  kvp_seq_t *b = bf_seq(bm, tb, 8, NULL, 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(kvp_seq_append(b, 5), 0);
  kvp_seq_free(b);
  assert_int_equal(kvp_blockmgr_reset(bm), 0);
  kvp_blockmgr_stats(bm, &st);
  assert_true(r.total >= 6);
  assert_int_equal(st.event_errors, r.total);
  assert_int_equal(st.g1.active, 0);
  assert_int_equal(st.g2.cached, 0);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(onboard_copies_bytes_from_g2),
    cmocka_unit_test(onboard_copies_bytes_stride_48),
    cmocka_unit_test(onboard_copies_bytes_stride_24),
    cmocka_unit_test(onboard_copies_bytes_stride_320),
    cmocka_unit_test(failed_offload_copy_loses_only_the_copy),
    cmocka_unit_test(write_through_copies_each_block_once),
    cmocka_unit_test(write_through_copies_at_last_release),
    cmocka_unit_test(g2_registration_outside_offload_is_seen_at_eviction),
    cmocka_unit_test(frequency_filter_keeps_cold_blocks_out),
    cmocka_unit_test(offload_none_keeps_g2_empty),
    cmocka_unit_test(scripted_event_sequence),
    cmocka_unit_test(snapshot_and_reset),
    cmocka_unit_test(sink_errors_are_counted),
};

KVP_TEST_MAIN("block_tiers", tests)
