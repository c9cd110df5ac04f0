/* Block manager, sequence level (include/kvplane/blockmgr.h): hashing and
 * errors of sequences, shared prefixes and reference counts, LRU order at
 * free, decode appends and dedup, and KVP_ENOSPC that changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfix.h"
#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

/* ---- sequences --------------------------------------------------------- */

static void seq_create_hashes_and_errors(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  kvp_seq_t *s = NULL, *l = NULL, *e = NULL;
  uint32_t t[10];
  uint64_t want[4], lwant[4];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(8, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(t, 10, 1);
  assert_int_equal(bf_hashes(t, 10, NULL, want, 4), 2);
  assert_int_equal(bf_hashes(t, 10, "adapterX", lwant, 4), 2);
  assert_true(kvp_hash_seed("adapterX") != KVP_HASH_SEED);
  assert_true(lwant[0] != want[0] && lwant[1] != want[1]);

  assert_int_equal(kvp_seq_create(NULL, t, 10, NULL, 0, &s), KVP_EINVAL);
  assert_int_equal(kvp_seq_create(bm, NULL, 10, NULL, 0, &s), KVP_EINVAL);
  assert_int_equal(kvp_seq_create(bm, t, 10, NULL, 0, &s), 0);
  assert_int_equal(kvp_seq_num_tokens(s), 10);
  bf_hashes_equal(s, want, 2);
  assert_null(kvp_seq_blocks(s, &(size_t){0}));
  assert_int_equal(bf_nblocks(s), 0);
  assert_int_equal(kvp_seq_cached_tokens(s), 0);
  assert_int_equal(kvp_seq_append(s, 11), KVP_EINVAL); /* before allocate */
  assert_int_equal(kvp_seq_num_tokens(s), 10);
  assert_int_equal(r.total, 0);

  assert_int_equal(kvp_seq_allocate(s), 0);
  assert_int_equal(kvp_seq_allocate(s), KVP_EINVAL);
  assert_int_equal(bf_nblocks(s), 3);
  assert_int_equal(r.nev, 1);
  bf_assert_ev(&r, 0, KVP_EV_STORED, KVP_TIER_G1, want, 2, 0, 0);
  assert_int_equal(r.ev[0].block_tokens, BF_PS);
  assert_int_equal(r.ev[0].block_bytes, 128);
  assert_int_equal(r.ev[0].lora_id, 0);
  assert_int_equal(kvp_pool_block_state(bf_g1(bm), bf_blk(s, 0)), KVP_BLOCK_REGISTERED);
  assert_int_equal(kvp_pool_block_state(bf_g1(bm), bf_blk(s, 1)), KVP_BLOCK_REGISTERED);
  assert_int_equal(kvp_pool_block_state(bf_g1(bm), bf_blk(s, 2)), KVP_BLOCK_PARTIAL);
  assert_true(kvp_pool_block_hash(bf_g1(bm), bf_blk(s, 1)) == want[1]);

  /* A LoRA name salts every hash; its id travels in Stored events. */
  assert_int_equal(kvp_seq_create(bm, t, 10, "adapterX", 7, &l), 0);
  bf_hashes_equal(l, lwant, 2);
  assert_int_equal(kvp_seq_allocate(l), 0);
  assert_int_equal(kvp_seq_cached_tokens(l), 0);
  assert_int_equal(r.nev, 2);
  bf_assert_ev(&r, 1, KVP_EV_STORED, KVP_TIER_G1, lwant, 2, 0, 0);
  assert_int_equal(r.ev[1].lora_id, 7);

  /* An empty name is no name: same hashes, a prefix hit on s. */
  assert_int_equal(kvp_seq_create(bm, t, 10, "", 0, &e), 0);
  bf_hashes_equal(e, want, 2);
  assert_int_equal(kvp_seq_allocate(e), 0);
  assert_int_equal(kvp_seq_cached_tokens(e), 8);
  assert_int_equal(bf_blk(e, 0), bf_blk(s, 0));
  assert_int_equal(bf_blk(e, 1), bf_blk(s, 1));
  assert_true(bf_blk(e, 2) != bf_blk(s, 2)); /* a partial tail is private */
  assert_int_equal(r.nev, 3);
  bf_assert_ev(&r, 2, KVP_EV_ACCESSED, KVP_TIER_G1, want, 2, 0, 0);

  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.sequences, 3);
  assert_int_equal(st.hits_g1, 2);
  assert_true(st.lookups >= 2);
  assert_true(st.hit_rate > 0.0 && st.hit_rate <= 1.0);
  assert_int_equal(st.events, 3);
  kvp_seq_free(s);
  kvp_seq_free(l);
  kvp_seq_free(e);
  kvp_seq_free(NULL);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.sequences, 0);
  assert_int_equal(r.nev, 3); /* freeing emits nothing */
  assert_false(r.bad);
  bf_expect_g1_counts(bm, 0, 4, 4);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void shared_prefix_refcounts(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  kvp_pool_t *p;
  uint32_t ta[14], tb[13], tc[16];
  uint64_t h[4];
  kvp_seq_t *a, *b, *c, *d;
  uint32_t pb[3];
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(16, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  p = bf_g1(bm);
  bf_tokens(ta, 12, 1); /* prefix P: three full blocks */
  ta[12] = 500;
  ta[13] = 501;
  memcpy(tb, ta, 8 * sizeof *tb);
  bf_tokens(tb + 8, 5, 600);
  memcpy(tc, ta, 12 * sizeof *tc);
  bf_tokens(tc + 12, 4, 800);
  assert_int_equal(bf_hashes(ta, 12, NULL, h, 4), 3);

  a = bf_seq(bm, ta, 14, NULL, 0);
  b = bf_seq(bm, tb, 13, NULL, 0);
  c = bf_seq(bm, tc, 16, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(a), 0);
  assert_int_equal(kvp_seq_cached_tokens(b), 8);
  assert_int_equal(kvp_seq_cached_tokens(c), 12);
  for (int i = 0; i < 3; i++)
    pb[i] = bf_blk(a, (size_t)i);
  assert_int_equal(bf_blk(b, 0), pb[0]);
  assert_int_equal(bf_blk(b, 1), pb[1]);
  assert_int_equal(bf_blk(c, 0), pb[0]);
  assert_int_equal(bf_blk(c, 1), pb[1]);
  assert_int_equal(bf_blk(c, 2), pb[2]);
  assert_int_equal(kvp_pool_block_refs(p, pb[0]), 3);
  assert_int_equal(kvp_pool_block_refs(p, pb[1]), 3);
  assert_int_equal(kvp_pool_block_refs(p, pb[2]), 2);
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(a, 3)), 1);
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(b, 2)), 1);
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(b, 3)), 1);
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(c, 3)), 1);
  assert_int_equal(kvp_pool_block_state(p, bf_blk(c, 3)), KVP_BLOCK_REGISTERED);
  assert_int_equal(kvp_pool_block_state(p, bf_blk(b, 3)), KVP_BLOCK_PARTIAL);
  bf_expect_g1_counts(bm, 7, 9, 0);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.hits_g1, 5);
  assert_int_equal(st.sequences, 3);
  assert_int_equal(st.onboards + st.hits_g2, 0);

  /* References drop as sequences go; registered blocks stay cached. */
  kvp_seq_free(c);
  assert_int_equal(kvp_pool_block_refs(p, pb[0]), 2);
  assert_int_equal(kvp_pool_block_refs(p, pb[1]), 2);
  assert_int_equal(kvp_pool_block_refs(p, pb[2]), 1);
  bf_expect_g1_counts(bm, 6, 9, 1);
  kvp_seq_free(a);
  assert_int_equal(kvp_pool_block_refs(p, pb[0]), 1);
  assert_int_equal(kvp_pool_block_refs(p, pb[2]), 0);
  assert_int_equal(kvp_pool_block_state(p, pb[2]), KVP_BLOCK_REGISTERED);
  bf_expect_g1_counts(bm, 4, 10, 2); /* a's partial tail was reset and freed */
  kvp_seq_free(b);
  bf_expect_g1_counts(bm, 0, 11, 5);
  for (int i = 0; i < 3; i++)
    assert_int_equal(bf_lookup(bm, KVP_TIER_G1, h[i]), pb[i]);

  /* The whole prefix again: all hits, on the same blocks. */
  size_t before = r.nev;
  d = bf_seq(bm, ta, 12, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(d), 12);
  assert_int_equal(bf_nblocks(d), 3);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(bf_blk(d, (size_t)i), pb[i]);
    assert_int_equal(kvp_pool_block_refs(p, pb[i]), 1);
  }
  assert_int_equal(r.nev, before + 1);
  bf_assert_ev(&r, before, KVP_EV_ACCESSED, KVP_TIER_G1, h, 3, 0, 0);
  bf_expect_g1_counts(bm, 3, 11, 2);
  kvp_seq_free(d);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void free_releases_last_block_first(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ta[12], t[12];
  uint64_t ha[3], hb[3], hx[3];
  kvp_seq_t *b, *c, *d, *e, *f;

  /* A's tail is evicted before its prefix. */
  bf_rec_init(&r, 1);
  bm = bf_mgr(6, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(ta, 12, 1);
  bf_hashes(ta, 12, NULL, ha, 3);
  kvp_seq_free(bf_seq(bm, ta, 12, NULL, 0));
  bf_tokens(t, 12, 100);
  bf_hashes(t, 12, NULL, hb, 3);
  b = bf_seq(bm, t, 12, NULL, 0); /* the three never-used blocks */
  for (int i = 0; i < 3; i++)
    assert_true(bf_registered(bm, KVP_TIER_G1, ha[i]));
  bf_rec_clear_list(&r);
  bf_tokens(t, 4, 200);
  c = bf_seq(bm, t, 4, NULL, 0);
  bf_tokens(t, 4, 300);
  d = bf_seq(bm, t, 4, NULL, 0);
  assert_int_equal(r.nev, 4);
  bf_assert_ev(&r, 0, KVP_EV_REMOVED, KVP_TIER_G1, &ha[2], 1, 0, 0);
  bf_assert_ev(&r, 2, KVP_EV_REMOVED, KVP_TIER_G1, &ha[1], 1, 0, 0);
  assert_true(bf_registered(bm, KVP_TIER_G1, ha[0]));
  /* B freed now: its blocks are younger than A's remaining a0. */
  kvp_seq_free(b);
  bf_rec_clear_list(&r);
  bf_tokens(t, 4, 400);
  e = bf_seq(bm, t, 4, NULL, 0);
  bf_tokens(t, 4, 500);
  f = bf_seq(bm, t, 4, NULL, 0);
  assert_int_equal(r.nev, 4);
  bf_assert_ev(&r, 0, KVP_EV_REMOVED, KVP_TIER_G1, &ha[0], 1, 0, 0);
  bf_assert_ev(&r, 2, KVP_EV_REMOVED, KVP_TIER_G1, &hb[2], 1, 0, 0);
  kvp_pool_counts_t cnt;
  kvp_pool_counts(bf_g1(bm), &cnt);
  assert_int_equal(cnt.evictions, 4);
  kvp_seq_free(c);
  kvp_seq_free(d);
  kvp_seq_free(e);
  kvp_seq_free(f);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
  bf_rec_init(&r, 1);

  /* A shared prefix outlives both tails: G = g0 g1, H = g0 h1; free G then
   * H; three one-block sequences evict g1, h1, then g0. */
  bm = bf_mgr(3, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(t, 8, 1);
  bf_hashes(t, 8, NULL, hx, 2);
  kvp_seq_t *g = bf_seq(bm, t, 8, NULL, 0);
  bf_tokens(t + 4, 4, 50);
  bf_hashes(t, 8, NULL, hb, 2);
  kvp_seq_t *hs = bf_seq(bm, t, 8, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(hs), 4);
  kvp_seq_free(g);
  kvp_seq_free(hs);
  bf_rec_clear_list(&r);
  kvp_seq_t *x[3];
  for (int i = 0; i < 3; i++) {
    bf_tokens(t, 4, 1000 + 10 * (uint32_t)i);
    x[i] = bf_seq(bm, t, 4, NULL, 0);
  }
  assert_int_equal(r.nev, 6);
  bf_assert_ev(&r, 0, KVP_EV_REMOVED, KVP_TIER_G1, &hx[1], 1, 0, 0);
  bf_assert_ev(&r, 2, KVP_EV_REMOVED, KVP_TIER_G1, &hb[1], 1, 0, 0);
  bf_assert_ev(&r, 4, KVP_EV_REMOVED, KVP_TIER_G1, &hx[0], 1, 0, 0);
  for (int i = 0; i < 3; i++)
    kvp_seq_free(x[i]);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void append_registers_full_blocks_and_dedups(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  kvp_pool_t *p;
  uint32_t t[12];
  uint64_t h[3], lh[2];
  kvp_seq_t *a, *b, *l;
  kvp_blockmgr_stats_t st;

  bf_rec_init(&r, 1);
  bm = bf_mgr(8, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  p = bf_g1(bm);
  bf_tokens(t, 12, 1);
  bf_hashes(t, 12, NULL, h, 3);
  bf_hashes(t, 8, "adapterX", lh, 2);

  a = bf_seq(bm, t, 6, NULL, 0);
  assert_int_equal(bf_nblocks(a), 2);
  assert_int_equal(kvp_seq_append(a, t[6]), 0);
  assert_int_equal(r.nev, 1); /* nothing until the block fills */
  assert_int_equal(kvp_pool_block_state(p, bf_blk(a, 1)), KVP_BLOCK_PARTIAL);
  assert_int_equal(kvp_seq_append(a, t[7]), 0);
  assert_int_equal(r.nev, 2);
  bf_assert_ev(&r, 1, KVP_EV_STORED, KVP_TIER_G1, &h[1], 1, 1, h[0]);
  assert_int_equal(kvp_seq_num_tokens(a), 8);
  bf_hashes_equal(a, h, 2);
  assert_int_equal(bf_nblocks(a), 2); /* the next block is taken on the next append */
  assert_int_equal(kvp_pool_block_state(p, bf_blk(a, 1)), KVP_BLOCK_REGISTERED);
  assert_true(kvp_pool_block_hash(p, bf_blk(a, 1)) == h[1]);
  assert_int_equal(kvp_seq_append(a, t[8]), 0);
  assert_int_equal(bf_nblocks(a), 3);
  assert_int_equal(kvp_pool_block_state(p, bf_blk(a, 2)), KVP_BLOCK_PARTIAL);
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(a, 2)), 1);
  bf_expect_g1_counts(bm, 3, 5, 0);

  /* B decodes the same tokens: its filled block is a dedup and B shares
   * A's block; its own private block is freed. */
  b = bf_seq(bm, t, 6, NULL, 0);
  assert_int_equal(bf_blk(b, 0), bf_blk(a, 0));
  assert_true(bf_blk(b, 1) != bf_blk(a, 1));
  bf_expect_g1_counts(bm, 4, 4, 0);
  size_t before = r.nev;
  assert_int_equal(kvp_seq_append(b, t[6]), 0);
  assert_int_equal(kvp_seq_append(b, t[7]), 0);
  for (size_t i = before; i < r.nev; i++)
    assert_int_not_equal(r.ev[i].type, KVP_EV_STORED);
  assert_int_equal(bf_blk(b, 1), bf_blk(a, 1));
  assert_int_equal(kvp_pool_block_refs(p, bf_blk(a, 1)), 2);
  bf_hashes_equal(b, h, 2);
  bf_expect_g1_counts(bm, 3, 5, 0);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.dedups, 1);

  /* Under a LoRA name, the filled block's hash is salted. */
  l = bf_seq(bm, t, 6, "adapterX", 7);
  assert_int_equal(kvp_seq_cached_tokens(l), 0);
  assert_int_equal(kvp_seq_append(l, t[6]), 0);
  before = r.nev;
  assert_int_equal(kvp_seq_append(l, t[7]), 0);
  assert_int_equal(r.nev, before + 1);
  bf_assert_ev(&r, before, KVP_EV_STORED, KVP_TIER_G1, &lh[1], 1, 1, lh[0]);
  assert_int_equal(r.ev[before].lora_id, 7);
  bf_hashes_equal(l, lh, 2);

  kvp_seq_free(a);
  kvp_seq_free(b);
  kvp_seq_free(l);
  bf_expect_g1_counts(bm, 0, 4, 4);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* ---- KVP_ENOSPC -------------------------------------------------------- */

/* Allocating s fails with KVP_ENOSPC and nothing observable changes. */
static void enospc_allocate(kvp_blockmgr_t *bm, const bf_rec_t *r, kvp_seq_t *s) {
  bf_world_t w0, w1;
  size_t ntok = kvp_seq_num_tokens(s), nh0, nh1;

  kvp_seq_hashes(s, &nh0);
  bf_world_take(bm, r, &w0);
  assert_int_equal(kvp_seq_allocate(s), KVP_ENOSPC);
  bf_world_take(bm, r, &w1);
  bf_world_assert_same(&w0, &w1);
  bf_world_free(&w0);
  bf_world_free(&w1);
  assert_null(kvp_seq_blocks(s, &(size_t){0}));
  assert_int_equal(bf_nblocks(s), 0);
  assert_int_equal(kvp_seq_num_tokens(s), ntok);
  assert_int_equal(kvp_seq_cached_tokens(s), 0);
  kvp_seq_hashes(s, &nh1);
  assert_int_equal(nh0, nh1);
}

static void enospc_allocate_changes_nothing(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ty[16], t[12];
  uint64_t hy[4];
  kvp_seq_t *a, *c, *d, *e, *f;

  bf_rec_init(&r, 0);
  bm = bf_mgr(4, 8, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(ty, 16, 2000);
  bf_hashes(ty, 16, NULL, hy, 4);
  kvp_seq_free(bf_seq(bm, ty, 16, NULL, 0)); /* cached y3 y2 y1 y0 */
  bf_tokens(t, 10, 1);
  a = bf_seq(bm, t, 10, NULL, 0); /* evicts y3 y2 y1 into G2 */
  for (int i = 1; i < 4; i++)
    assert_true(bf_registered(bm, KVP_TIER_G2, hy[i]));
  bf_expect_g1_counts(bm, 3, 0, 1);

  /* Three new blocks wanted, one evictable. */
  bf_tokens(t, 9, 3000);
  assert_int_equal(kvp_seq_create(bm, t, 9, NULL, 0, &c), 0);
  enospc_allocate(bm, &r, c);
  /* One new block and one cached block, but that block is y0, a hit of
   * this sequence: it is not evictable for the new one. */
  memcpy(t, ty, 4 * sizeof *t);
  bf_tokens(t + 4, 4, 4000);
  assert_int_equal(kvp_seq_create(bm, t, 8, NULL, 0, &d), 0);
  enospc_allocate(bm, &r, d);
  /* y0 a hit in G1, y1..y3 in G2 would need three G1 blocks. */
  assert_int_equal(kvp_seq_create(bm, ty, 16, NULL, 0, &e), 0);
  enospc_allocate(bm, &r, e);
  assert_false(r.bad);

  /* One block: fits by evicting y0. */
  bf_tokens(t, 4, 5000);
  f = bf_seq(bm, t, 4, NULL, 0);
  assert_true(bf_registered(bm, KVP_TIER_G2, hy[0]));
  kvp_seq_free(f);
  kvp_seq_free(a);
  /* The sequences that failed are intact and allocate now. */
  assert_int_equal(kvp_seq_allocate(e), 0);
  assert_int_equal(kvp_seq_cached_tokens(e), 16); /* all four from G2 */
  kvp_seq_free(e);
  assert_int_equal(kvp_seq_allocate(c), 0);
  assert_int_equal(bf_nblocks(c), 3);
  assert_int_equal(kvp_seq_cached_tokens(c), 0);
  kvp_seq_free(c);
  kvp_seq_free(d); /* never allocated */
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G1);
  bf_assert_snapshot_matches(bm, &r, KVP_TIER_G2);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

/* Appending to s fails with KVP_ENOSPC and nothing observable changes. */
static void enospc_append(kvp_blockmgr_t *bm, const bf_rec_t *r, kvp_seq_t *s) {
  bf_world_t w0, w1;
  size_t n0, n1, nh0, nh1, ntok = kvp_seq_num_tokens(s);
  const uint32_t *b0 = kvp_seq_blocks(s, &n0);
  uint32_t copy[16];

  assert_true(n0 <= 16);
  memcpy(copy, b0, n0 * sizeof *copy);
  kvp_seq_hashes(s, &nh0);
  bf_world_take(bm, r, &w0);
  assert_int_equal(kvp_seq_append(s, 77), KVP_ENOSPC);
  bf_world_take(bm, r, &w1);
  bf_world_assert_same(&w0, &w1);
  bf_world_free(&w0);
  bf_world_free(&w1);
  const uint32_t *b1 = kvp_seq_blocks(s, &n1);
  assert_int_equal(n0, n1);
  assert_memory_equal(copy, b1, n1 * sizeof *b1);
  assert_int_equal(kvp_seq_num_tokens(s), ntok);
  kvp_seq_hashes(s, &nh1);
  assert_int_equal(nh0, nh1);
}

static void enospc_append_changes_nothing(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t ta[12], tb[4];
  uint64_t ha[3], hb[1];
  kvp_seq_t *a, *b;

  bf_rec_init(&r, 1);
  bm = bf_mgr(3, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(ta, 12, 1);
  bf_hashes(ta, 12, NULL, ha, 3);
  bf_tokens(tb, 4, 100);
  bf_hashes(tb, 4, NULL, hb, 1);
  a = bf_seq(bm, ta, 8, NULL, 0);
  b = bf_seq(bm, tb, 4, NULL, 0);
  bf_expect_g1_counts(bm, 3, 0, 0);
  enospc_append(bm, &r, a);
  enospc_append(bm, &r, b);

  /* B gone: A's next block evicts B's cached block. */
  kvp_seq_free(b);
  bf_rec_clear_list(&r);
  assert_int_equal(kvp_seq_append(a, ta[8]), 0);
  assert_int_equal(r.nev, 1);
  bf_assert_ev(&r, 0, KVP_EV_REMOVED, KVP_TIER_G1, hb, 1, 0, 0);
  assert_int_equal(kvp_seq_num_tokens(a), 9);
  assert_int_equal(bf_nblocks(a), 3);
  assert_int_equal(kvp_seq_append(a, ta[9]), 0);
  assert_int_equal(kvp_seq_append(a, ta[10]), 0);
  assert_int_equal(kvp_seq_append(a, ta[11]), 0);
  assert_int_equal(r.nev, 2);
  bf_assert_ev(&r, 1, KVP_EV_STORED, KVP_TIER_G1, &ha[2], 1, 1, ha[1]);
  bf_hashes_equal(a, ha, 3);
  enospc_append(bm, &r, a); /* full blocks, all A's own */
  kvp_seq_free(a);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void seq_create_hashed_continues_the_chain(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t t[12];
  uint64_t h[3], lh[3];
  kvp_seq_t *s = NULL, *u, *l = NULL;

  bf_rec_init(&r, 1);
  bm = bf_mgr(8, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  bf_tokens(t, 12, 1);
  bf_hashes(t, 12, NULL, h, 3);
  bf_hashes(t, 12, "adapterX", lh, 3);
  assert_int_equal(kvp_seq_create_hashed(NULL, h, 2, NULL, 0, &s), KVP_EINVAL);
  assert_int_equal(kvp_seq_create_hashed(bm, NULL, 2, NULL, 0, &s), KVP_EINVAL);

  assert_int_equal(kvp_seq_create_hashed(bm, h, 2, NULL, 0, &s), 0);
  assert_int_equal(kvp_seq_num_tokens(s), 8);
  bf_hashes_equal(s, h, 2);
  assert_int_equal(kvp_seq_allocate(s), 0);
  assert_int_equal(bf_nblocks(s), 2);
  assert_int_equal(r.nev, 1);
  bf_assert_ev(&r, 0, KVP_EV_STORED, KVP_TIER_G1, h, 2, 0, 0);

  /* The same blocks as a sequence created from the tokens. */
  u = bf_seq(bm, t, 10, NULL, 0);
  assert_int_equal(kvp_seq_cached_tokens(u), 8);
  assert_int_equal(bf_blk(u, 0), bf_blk(s, 0));
  assert_int_equal(bf_blk(u, 1), bf_blk(s, 1));

  /* Decode continues the chain. */
  for (int i = 8; i < 12; i++)
    assert_int_equal(kvp_seq_append(s, t[i]), 0);
  bf_hashes_equal(s, h, 3);
  assert_int_equal(kvp_seq_num_tokens(s), 12);
  bf_assert_ev(&r, r.nev - 1, KVP_EV_STORED, KVP_TIER_G1, &h[2], 1, 1, h[1]);

  /* Under a LoRA name, with the salted chain. */
  assert_int_equal(kvp_seq_create_hashed(bm, lh, 2, "adapterX", 7, &l), 0);
  assert_int_equal(kvp_seq_allocate(l), 0);
  assert_int_equal(r.ev[r.nev - 1].lora_id, 7);
  for (int i = 8; i < 12; i++)
    assert_int_equal(kvp_seq_append(l, t[i]), 0);
  bf_hashes_equal(l, lh, 3);
  bf_assert_ev(&r, r.nev - 1, KVP_EV_STORED, KVP_TIER_G1, &lh[2], 1, 1, lh[1]);

  kvp_seq_free(s);
  kvp_seq_free(u);
  kvp_seq_free(l);
  assert_false(r.bad);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void set_sink_redirects_events(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  kvp_blockmgr_stats_t st;
  uint32_t t[8];
  kvp_seq_t *a, *b, *c;

  bf_rec_init(&r, 1);
  bm = bf_mgr(8, 0, KVP_OFFLOAD_ON_EVICT, 0, NULL);
  bf_tokens(t, 8, 1);
  a = bf_seq(bm, t, 8, NULL, 0); /* no sink: nothing emitted, nothing counted */
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.events, 0);
  kvp_blockmgr_set_sink(bm, bf_rec_sink(&r));
  bf_tokens(t, 8, 100);
  b = bf_seq(bm, t, 8, NULL, 0);
  assert_int_equal(r.nev, 1);
  assert_int_equal(r.ev[0].type, KVP_EV_STORED);
  kvp_blockmgr_set_sink(bm, (kvp_event_sink_t){NULL, NULL});
  bf_tokens(t, 8, 200);
  c = bf_seq(bm, t, 8, NULL, 0);
  assert_int_equal(r.nev, 1);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.events, 1);
  kvp_seq_free(a);
  kvp_seq_free(b);
  kvp_seq_free(c);
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static void destroy_frees_live_sequences(void **state) {
  (void)state;
  bf_rec_t r;
  kvp_blockmgr_t *bm;
  uint32_t t[10];
  kvp_seq_t *a, *b = NULL;

  bf_rec_init(&r, 0);
  bm = bf_mgr(4, 4, KVP_OFFLOAD_WRITE_THROUGH, 0, &r);
  bf_tokens(t, 10, 1);
  a = bf_seq(bm, t, 10, NULL, 0);
  assert_int_equal(kvp_seq_append(a, 3), 0);
  assert_int_equal(kvp_seq_create(bm, t, 6, "adapterX", 7, &b), 0);
  (void)a;
  uint64_t before = r.total;
  kvp_blockmgr_destroy(bm); /* both sequences go with it (LeakSanitizer) */
  assert_int_equal(r.total, before);
  bf_rec_free(&r);
}

/* Engine-supplied hashes may repeat (kvp_seq_create_hashed does not check
 * them): a G1 block met twice in a prefix is counted once, so a sequence
 * that does not fit gets KVP_ENOSPC with nothing changed, and one that fits
 * shares the repeated block. */
static void seq_create_hashed_with_repeated_hashes(void **state) {
  (void)state;
  bf_rec_t r;
  bf_world_t before, after;
  kvp_blockmgr_t *bm;
  uint64_t a = 0x1111, c = 0x3333, dup[3] = {a, a, c};
  kvp_seq_t *s;

  bf_rec_init(&r, 1);
  bm = bf_mgr(1, 0, KVP_OFFLOAD_ON_EVICT, 0, &r);
  assert_int_equal(kvp_seq_create_hashed(bm, &a, 1, NULL, 0, &s), 0);
  assert_int_equal(kvp_seq_allocate(s), 0);
  kvp_seq_free(s); /* A cached in the only G1 block */
  assert_int_equal(kvp_seq_create_hashed(bm, dup, 3, NULL, 0, &s), 0);
  bf_world_take(bm, &r, &before);
  assert_int_equal(kvp_seq_allocate(s), KVP_ENOSPC);
  bf_world_take(bm, &r, &after);
  bf_world_assert_same(&before, &after);
  kvp_seq_free(s);
  bf_world_free(&before);
  bf_world_free(&after);
  bf_assert_pool_consistent(kvp_blockmgr_pool(bm, KVP_TIER_G1));
  kvp_blockmgr_destroy(bm);

  bm = bf_mgr(4, 0, KVP_OFFLOAD_ON_EVICT, 0, NULL);
  assert_int_equal(kvp_seq_create_hashed(bm, dup, 3, NULL, 0, &s), 0);
  assert_int_equal(kvp_seq_allocate(s), 0);
  size_t n;
  const uint32_t *ids = kvp_seq_blocks(s, &n);
  assert_int_equal(n, 3);
  assert_int_equal(ids[0], ids[1]); /* the repeat shares the block */
  assert_int_equal(kvp_pool_block_refs(kvp_blockmgr_pool(bm, KVP_TIER_G1), ids[0]), 2);
  kvp_seq_free(s);
  bf_assert_pool_consistent(kvp_blockmgr_pool(bm, KVP_TIER_G1));
  kvp_blockmgr_destroy(bm);
  bf_rec_free(&r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(seq_create_hashes_and_errors),
    cmocka_unit_test(shared_prefix_refcounts),
    cmocka_unit_test(free_releases_last_block_first),
    cmocka_unit_test(append_registers_full_blocks_and_dedups),
    cmocka_unit_test(enospc_allocate_changes_nothing),
    cmocka_unit_test(enospc_append_changes_nothing),
    cmocka_unit_test(seq_create_hashed_continues_the_chain),
    cmocka_unit_test(seq_create_hashed_with_repeated_hashes),
    cmocka_unit_test(set_sink_redirects_events),
    cmocka_unit_test(destroy_frees_live_sequences),
};

KVP_TEST_MAIN("block_seq", tests)
