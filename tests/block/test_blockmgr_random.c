/* Block manager, randomized: seeded runs of 20000 operations (create and
 * allocate with prompts drawn from a few shared prefixes, decode appends,
 * frees, resets) against a reference model of the live sequences. After
 * every operation the test checks the contract's invariants:
 *   - per pool: active + inactive = capacity, state counts sum to capacity,
 *     the counts agree with the blocks one by one;
 *   - every G1 block's reference count is the number of live sequences
 *     listing it; G2 blocks are never held between operations;
 *   - every registered hash maps to exactly one block per tier
 *     (kvp_pool_lookup round trip);
 *   - the Stored/Removed/Cleared events replayed into per-tier sets equal
 *     kvp_blockmgr_snapshot of G1 and G2, Stored never adds a present hash,
 *     Removed never removes an absent one, and Stored parents chain;
 *   - a sequence's blocks and hashes are those of its tokens;
 *   - prefix hits, onboards and KVP_ENOSPC are the ones the pools' state
 *     before the operation implies, and KVP_ENOSPC changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfix.h"
#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

#define NOPS 20000
#define MAXSEQ 8
#define MAXTOK 64
#define NROOTS 5
#define ROOTLEN 24

static const char *const lora_names[2] = {NULL, "loraA"};
static const int32_t lora_ids[2] = {0, 5};

typedef struct {
  kvp_seq_t *s;
  uint32_t tok[MAXTOK];
  size_t n;
  int lora;
} mseq_t;

typedef struct {
  kvp_blockmgr_t *bm;
  bf_rec_t rec;
  bf_pmap_t pmap;
  mseq_t seq[MAXSEQ];
  size_t nseq;
  uint64_t rng;
  uint32_t g1cap, g2cap;
  uint32_t *refs; /* scratch, g1cap */
  /* How often each interesting thing happened. */
  unsigned allocs, enospc_alloc, appends, enospc_append, frees, resets, busy, g1_hits, g2_hits,
      dedups;
} rt_t;

static uint32_t rnd(rt_t *t, uint32_t n) {
  t->rng ^= t->rng >> 12;
  t->rng ^= t->rng << 25;
  t->rng ^= t->rng >> 27;
  return (uint32_t)((t->rng * UINT64_C(2685821657736338717)) >> 33) % n;
}

static kvp_pool_t *pool(rt_t *t, int tier) {
  return kvp_blockmgr_pool(t->bm, tier);
}

static size_t seq_hashes(const mseq_t *m, uint64_t *h) {
  return bf_hashes(m->tok, m->n, lora_names[m->lora], h, MAXTOK / BF_PS + 1);
}

static int in_tier(rt_t *t, int tier, uint64_t h, uint32_t *b) {
  uint32_t x;
  kvp_pool_t *p = pool(t, tier);
  return p && kvp_pool_lookup(p, h, b ? b : &x) == 0;
}

/* ---- invariants -------------------------------------------------------- */

static void check_pool(rt_t *t, int tier) {
  kvp_pool_t *p = pool(t, tier);
  kvp_pool_counts_t c;

  if (p == NULL) {
    assert_int_equal(t->rec.nset[tier], 0);
    return;
  }
  bf_assert_pool_consistent(p);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.tier, tier);
  assert_int_equal(c.state[KVP_BLOCK_REGISTERED], t->rec.nset[tier]);
  assert_int_equal(c.state[KVP_BLOCK_COMPLETE], 0); /* filled blocks are registered at once */
  if (tier == KVP_TIER_G2) {
    assert_int_equal(c.active, 0);
    assert_int_equal(c.state[KVP_BLOCK_PARTIAL], 0);
  }
  bf_assert_snapshot_matches(t->bm, &t->rec, tier);
}

static void check_all(rt_t *t) {
  kvp_pool_t *p1 = pool(t, KVP_TIER_G1);
  kvp_blockmgr_stats_t st;
  kvp_pool_counts_t c;
  uint64_t h[MAXTOK / BF_PS + 1];

  if (t->rec.bad)
    fail_msg("event stream: %s", t->rec.why);
  check_pool(t, KVP_TIER_G1);
  check_pool(t, KVP_TIER_G2);

  /* Reference counts are exactly the live sequences' block lists. */
  memset(t->refs, 0, t->g1cap * sizeof *t->refs);
  for (size_t i = 0; i < t->nseq; i++) {
    const mseq_t *m = &t->seq[i];
    size_t nb = 99, nh = 99, nfull = seq_hashes(m, h);
    const uint32_t *b = kvp_seq_blocks(m->s, &nb);
    const uint64_t *sh = kvp_seq_hashes(m->s, &nh);

    assert_int_equal(kvp_seq_num_tokens(m->s), m->n);
    assert_int_equal(nb, (m->n + BF_PS - 1) / BF_PS);
    assert_int_equal(nh, nfull);
    assert_non_null(b);
    for (size_t k = 0; k < nb; k++) {
      assert_true(b[k] < t->g1cap);
      t->refs[b[k]]++;
      if (k < nfull) {
        assert_true(sh[k] == h[k]);
        assert_int_equal(kvp_pool_block_state(p1, b[k]), KVP_BLOCK_REGISTERED);
        assert_true(kvp_pool_block_hash(p1, b[k]) == h[k]);
      } else {
        assert_int_equal(kvp_pool_block_state(p1, b[k]), KVP_BLOCK_PARTIAL);
        assert_int_equal(kvp_pool_block_refs(p1, b[k]), 1);
      }
    }
  }
  for (uint32_t b = 0; b < t->g1cap; b++) {
    if (kvp_pool_block_refs(p1, b) != t->refs[b])
      fail_msg("G1 block %u: %u references, %u sequences list it", b, kvp_pool_block_refs(p1, b),
               t->refs[b]);
    /* G1 stays prefix-closed: a registered block's parent is registered
     * (children are released before, so evicted before, their parents). */
    if (kvp_pool_block_state(p1, b) == KVP_BLOCK_REGISTERED) {
      uint64_t hh = kvp_pool_block_hash(p1, b), parent;
      assert_true(bf_pmap_get(&t->pmap, hh, &parent));
      if (parent != hh && !in_tier(t, KVP_TIER_G1, parent, NULL))
        fail_msg("G1 block %u (%016llx) registered without its parent", b, (unsigned long long)hh);
    }
  }

  kvp_blockmgr_stats(t->bm, &st);
  assert_int_equal(st.sequences, t->nseq);
  kvp_pool_counts(p1, &c);
  bf_assert_counts_equal(&st.g1, &c);
  if (pool(t, KVP_TIER_G2)) {
    kvp_pool_counts(pool(t, KVP_TIER_G2), &c);
    bf_assert_counts_equal(&st.g2, &c);
  } else {
    assert_int_equal(st.g2.capacity, 0);
  }
  assert_int_equal(st.events, t->rec.total);
  assert_int_equal(st.event_errors, 0);
  assert_true(st.hits_g1 + st.hits_g2 <= st.lookups);
}

/* ---- operations -------------------------------------------------------- */

static void make_prompt(rt_t *t, mseq_t *m) {
  uint32_t root = rnd(t, NROOTS), keep = rnd(t, ROOTLEN + 1), extra = 1 + rnd(t, 10);
  int fixed = rnd(t, 3) == 0;

  m->n = 0;
  m->lora = rnd(t, 8) == 0;
  if (fixed) {
    /* One of a few fixed prompts ending in a partial block: sequences that
     * decode the same tokens after it fill blocks registered already. */
    keep = 8 + 4 * (root % 2);
    extra = 2 + root % 3;
  }
  for (uint32_t i = 0; i < keep; i++)
    m->tok[m->n++] = 1000 * (root + 1) + i;
  for (uint32_t i = 0; i < extra; i++) /* a small alphabet: suffixes collide */
    m->tok[m->n++] = fixed ? 1 : 1 + rnd(t, 3);
}

static void op_create(rt_t *t) {
  mseq_t *m = &t->seq[t->nseq];
  uint64_t h[MAXTOK / BF_PS + 1];
  size_t nfull, nb, k1 = 0, k2 = 0, cached_hits = 0;
  kvp_pool_counts_t c;
  kvp_blockmgr_stats_t s0, s1;
  int want;

  make_prompt(t, m);
  nfull = seq_hashes(m, h);
  bf_pmap_add_chain(&t->pmap, h, nfull);
  nb = (m->n + BF_PS - 1) / BF_PS;

  /* What the pools say before: the longest prefix registered in G1, then
   * the run found in G2; hits on cached G1 blocks are not evictable. */
  while (k1 < nfull) {
    uint32_t b;
    if (!in_tier(t, KVP_TIER_G1, h[k1], &b))
      break;
    cached_hits += kvp_pool_block_refs(pool(t, KVP_TIER_G1), b) == 0;
    k1++;
  }
  while (k1 + k2 < nfull && in_tier(t, KVP_TIER_G2, h[k1 + k2], NULL))
    k2++;
  kvp_pool_counts(pool(t, KVP_TIER_G1), &c);
  want = nb - k1 > c.free + c.cached - cached_hits ? KVP_ENOSPC : 0;

  assert_int_equal(
      kvp_seq_create(t->bm, m->tok, m->n, lora_names[m->lora], lora_ids[m->lora], &m->s), 0);
  t->nseq++;
  kvp_blockmgr_stats(t->bm, &s0);
  if (want == KVP_ENOSPC) {
    bf_world_t w0, w1;
    bf_world_take(t->bm, &t->rec, &w0);
    assert_int_equal(kvp_seq_allocate(m->s), KVP_ENOSPC);
    bf_world_take(t->bm, &t->rec, &w1);
    bf_world_assert_same(&w0, &w1);
    bf_world_free(&w0);
    bf_world_free(&w1);
    assert_null(kvp_seq_blocks(m->s, &nb));
    assert_int_equal(nb, 0);
    kvp_seq_free(m->s);
    t->nseq--;
    t->enospc_alloc++;
    return;
  }
  int rc = kvp_seq_allocate(m->s);
  if (rc != 0)
    fail_msg("allocate of %zu tokens (%zu G1 hits, %zu G2 hits, %u free, %u cached): %s", m->n, k1,
             k2, c.free, c.cached, kvp_err_name(rc));
  assert_int_equal(kvp_seq_cached_tokens(m->s), (k1 + k2) * BF_PS);
  kvp_blockmgr_stats(t->bm, &s1);
  assert_int_equal(s1.hits_g1 - s0.hits_g1, k1);
  assert_int_equal(s1.hits_g2 - s0.hits_g2, k2);
  assert_int_equal(s1.onboards - s0.onboards, k2);
  t->allocs++;
  t->g1_hits += (unsigned)k1;
  t->g2_hits += (unsigned)k2;
}

static void op_append(rt_t *t, mseq_t *m) {
  kvp_pool_counts_t c;
  kvp_blockmgr_stats_t s0, s1;
  uint32_t tok = 1 + rnd(t, 2);
  int need_block = m->n % BF_PS == 0, fills = (m->n + 1) % BF_PS == 0, dup = 0;

  kvp_pool_counts(pool(t, KVP_TIER_G1), &c);
  if (need_block && c.free + c.cached == 0) {
    bf_world_t w0, w1;
    size_t n0, n1;
    const uint32_t *b0 = kvp_seq_blocks(m->s, &n0);
    uint32_t copy[MAXTOK / BF_PS + 1];
    memcpy(copy, b0, n0 * sizeof *copy);
    bf_world_take(t->bm, &t->rec, &w0);
    assert_int_equal(kvp_seq_append(m->s, tok), KVP_ENOSPC);
    bf_world_take(t->bm, &t->rec, &w1);
    bf_world_assert_same(&w0, &w1);
    bf_world_free(&w0);
    bf_world_free(&w1);
    const uint32_t *b1 = kvp_seq_blocks(m->s, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(copy, b1, n1 * sizeof *b1);
    t->enospc_append++;
    return;
  }
  m->tok[m->n++] = tok;
  if (fills) {
    uint64_t h[MAXTOK / BF_PS + 1];
    size_t nfull = seq_hashes(m, h);
    bf_pmap_add_chain(&t->pmap, h, nfull);
    dup = in_tier(t, KVP_TIER_G1, h[nfull - 1], NULL);
  }
  kvp_blockmgr_stats(t->bm, &s0);
  int rc = kvp_seq_append(m->s, tok);
  if (rc != 0)
    fail_msg("append to %zu tokens (%u free, %u cached): %s", m->n - 1, c.free, c.cached,
             kvp_err_name(rc));
  kvp_blockmgr_stats(t->bm, &s1);
  assert_int_equal(s1.dedups - s0.dedups, dup);
  t->dedups += (unsigned)dup;
  t->appends++;
}

static void op_free(rt_t *t, size_t i) {
  kvp_seq_free(t->seq[i].s);
  t->seq[i] = t->seq[--t->nseq];
  t->frees++;
}

static void op_reset(rt_t *t) {
  uint64_t before = t->rec.total;

  if (t->nseq) {
    bf_world_t w0, w1;
    bf_world_take(t->bm, &t->rec, &w0);
    assert_int_equal(kvp_blockmgr_reset(t->bm), KVP_EBUSY);
    bf_world_take(t->bm, &t->rec, &w1);
    bf_world_assert_same(&w0, &w1);
    bf_world_free(&w0);
    bf_world_free(&w1);
    t->busy++;
    return;
  }
  assert_int_equal(kvp_blockmgr_reset(t->bm), 0);
  assert_int_equal(t->rec.total, before + 1);
  assert_int_equal(t->rec.nset[KVP_TIER_G1] + t->rec.nset[KVP_TIER_G2], 0);
  t->resets++;
}

static void run(uint64_t seed, uint32_t g1, uint32_t g2, int offload, uint32_t min_hits) {
  static rt_t t;
  kvp_blockmgr_stats_t st;

  memset(&t, 0, sizeof t);
  t.rng = seed;
  t.g1cap = g1;
  t.g2cap = g2;
  t.refs = calloc(g1, sizeof *t.refs);
  assert_non_null(t.refs);
  bf_rec_init(&t.rec, 0);
  bf_pmap_init(&t.pmap, 1u << 18);
  t.rec.pmap = &t.pmap;
  t.bm = bf_mgr(g1, g2, offload, min_hits, &t.rec);

  for (int op = 0; op < NOPS; op++) {
    uint32_t r = rnd(&t, 1000);
    if (t.nseq == 0 || (r < 300 && t.nseq < MAXSEQ)) {
      op_create(&t);
    } else if (r < 750) {
      size_t i = rnd(&t, (uint32_t)t.nseq);
      if (t.seq[i].n < MAXTOK)
        op_append(&t, &t.seq[i]);
      else
        op_free(&t, i);
    } else if (r < 987) {
      op_free(&t, rnd(&t, (uint32_t)t.nseq));
    } else if (r < 997) {
      op_reset(&t);
    } else {
      while (t.nseq)
        op_free(&t, t.nseq - 1);
      op_reset(&t);
    }
    check_all(&t);
  }

  kvp_blockmgr_stats(t.bm, &st);
  print_message("seed %llu: %u allocs (%u ENOSPC), %u appends (%u ENOSPC), %u frees, %u resets "
                "(%u busy), %u G1 hits, %u G2 hits, %u dedups, %llu offloads (%llu filtered), "
                "%llu G1 / %llu G2 evictions, %llu events\n",
                (unsigned long long)seed, t.allocs, t.enospc_alloc, t.appends, t.enospc_append,
                t.frees, t.resets, t.busy, t.g1_hits, t.g2_hits, t.dedups,
                (unsigned long long)st.offloads, (unsigned long long)st.offloads_filtered,
                (unsigned long long)st.g1.evictions, (unsigned long long)st.g2.evictions,
                (unsigned long long)t.rec.total);
  /* The run exercised what it is meant to. */
  assert_true(t.enospc_alloc > 0);
  assert_true(t.enospc_append > 0);
  assert_true(t.resets > 0 && t.busy > 0);
  assert_true(t.g1_hits > 0);
  assert_true(t.dedups > 0);
  assert_true(st.g1.evictions > 0);
  if (g2 && offload != KVP_OFFLOAD_NONE) {
    assert_true(t.g2_hits > 0);
    assert_true(st.offloads > 0);
    assert_true(st.g2.evictions > 0);
  }
  if (min_hits)
    assert_true(st.offloads_filtered > 0);

  while (t.nseq)
    op_free(&t, t.nseq - 1);
  check_all(&t);
  kvp_blockmgr_destroy(t.bm);
  bf_rec_free(&t.rec);
  bf_pmap_free(&t.pmap);
  free(t.refs);
}

static void random_ops_offload_on_evict(void **state) {
  (void)state;
  run(0x9e3779b97f4a7c15u, 32, 16, KVP_OFFLOAD_ON_EVICT, 0);
}

static void random_ops_write_through(void **state) {
  (void)state;
  run(0x2545f4914f6cdd1du, 32, 16, KVP_OFFLOAD_WRITE_THROUGH, 0);
}

static void random_ops_frequency_filter(void **state) {
  (void)state;
  run(0xd1b54a32d192ed03u, 24, 12, KVP_OFFLOAD_ON_EVICT, 1);
}

static void random_ops_without_g2(void **state) {
  (void)state;
  run(0x853c49e6748fea9bu, 24, 0, KVP_OFFLOAD_ON_EVICT, 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(random_ops_offload_on_evict),
    cmocka_unit_test(random_ops_write_through),
    cmocka_unit_test(random_ops_frequency_filter),
    cmocka_unit_test(random_ops_without_g2),
};

KVP_TEST_MAIN("block_random", tests)
