/* Block manager, pool level (include/kvplane/blockmgr.h): layout arithmetic,
 * option checking, storage plugging, every (state, transition) pair of the
 * block state machine, and the pool's allocation and LRU eviction order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockfix.h"
#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/status.h"

static kvp_pool_t *mkpool(int tier, uint32_t n) {
  kvp_pool_opts_t o;
  kvp_pool_t *p = NULL;

  memset(&o, 0, sizeof o);
  o.tier = tier;
  o.num_blocks = n;
  o.layout = bf_layout();
  assert_int_equal(kvp_pool_create(&o, &p), 0);
  assert_non_null(p);
  return p;
}

/* The call is rejected with want (or alt, where the header allows either of
 * two codes) and the pool is left exactly as it was. */
#define REJECTS(p, call, want, alt)                                                                \
  do {                                                                                             \
    bf_pool_snap_t before_, after_;                                                                \
    bf_pool_take((p), &before_);                                                                   \
    int rc_ = (call);                                                                              \
    if (rc_ != (want) && rc_ != (alt))                                                             \
      fail_msg("%s returned %s, want %s", #call, kvp_err_name(rc_), kvp_err_name(want));           \
    bf_pool_take((p), &after_);                                                                    \
    bf_pool_assert_same(&before_, &after_, #call);                                                 \
    bf_pool_snap_free(&before_);                                                                   \
    bf_pool_snap_free(&after_);                                                                    \
  } while (0)

static void expect_block(const kvp_pool_t *p, uint32_t b, int state, uint32_t refs, uint64_t hash) {
  assert_int_equal(kvp_pool_block_state(p, b), state);
  assert_int_equal(kvp_pool_block_refs(p, b), refs);
  assert_true(kvp_pool_block_hash(p, b) == hash);
  bf_assert_pool_consistent(p);
}

static void expect_counts(const kvp_pool_t *p, uint32_t active, uint32_t free_, uint32_t cached) {
  kvp_pool_counts_t c;
  kvp_pool_counts(p, &c);
  assert_int_equal(c.active, active);
  assert_int_equal(c.free, free_);
  assert_int_equal(c.cached, cached);
}

/* Allocates a block and takes it to Registered under h (parent may be
 * NULL). */
static uint32_t registered(kvp_pool_t *p, uint64_t h, const uint64_t *parent) {
  uint32_t b;
  assert_int_equal(kvp_pool_alloc(p, &b, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(p, b), 0);
  assert_int_equal(kvp_block_commit(p, b), 0);
  assert_int_equal(kvp_block_register(p, b, h, parent, NULL), 0);
  return b;
}

/* ---- layout and options ------------------------------------------------ */

static void layout_strides(void **state) {
  (void)state;
  static const struct {
    kvp_layout_t l;
    size_t layer, block;
  } cases[] = {
      {{2, 4, 8, 2, 64}, 64, 128},    {{1, 1, 1, 1, 0}, 1, 64}, /* alignment 0 means 64 */
      {{3, 5, 7, 2, 64}, 70, 256},    {{3, 5, 7, 2, 1}, 70, 210},
      {{3, 5, 7, 2, 4096}, 70, 4096}, {{32, 16, 1024, 2, 256}, 32768, 1048576},
      {{5, 3, 3, 8, 16}, 72, 368},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(kvp_layout_check(&cases[i].l), 0);
    assert_int_equal(kvp_layout_layer_stride(&cases[i].l), cases[i].layer);
    assert_int_equal(kvp_layout_block_stride(&cases[i].l), cases[i].block);
  }
}

static void layout_check_rejects_bad_values(void **state) {
  (void)state;
  static const struct {
    kvp_layout_t l;
    int rc;
  } cases[] = {
      {{0, 4, 8, 2, 64}, KVP_EINVAL},
      {{2, 0, 8, 2, 64}, KVP_EINVAL},
      {{2, 4, 0, 2, 64}, KVP_EINVAL},
      {{2, 4, 8, 0, 64}, KVP_EINVAL},
      {{2, 4, 8, 3, 64}, KVP_EINVAL},
      {{2, 4, 8, 16, 64}, KVP_EINVAL},
      {{2, 4, 8, 2, 3}, KVP_EINVAL},
      {{2, 4, 8, 2, 48}, KVP_EINVAL},
      {{2, 4, 8, 2, 0x80000001u}, KVP_EINVAL},
      {{1024, 1024, 1024, 1, 64}, 0},           /* exactly 1 GiB */
      {{1024, 1024, 1025, 1, 64}, KVP_ETOOBIG}, /* 1 GiB + 1 MiB */
      {{65536, 65536, 1, 1, 64}, KVP_ETOOBIG},  /* 2^32: wraps to 0 in 32 bits */
      {{65536, 65536, 65536, 8, 64}, KVP_ETOOBIG},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 8, 64}, KVP_ETOOBIG},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = kvp_layout_check(&cases[i].l);
    if (rc != cases[i].rc)
      fail_msg("case %zu: kvp_layout_check returned %s, want %s", i, kvp_err_name(rc),
               kvp_err_name(cases[i].rc));
  }
}

static void pool_create_rejects_bad_options(void **state) {
  (void)state;
  kvp_pool_opts_t o;
  kvp_pool_t *p = NULL;
  kvp_pool_counts_t c;

  memset(&o, 0, sizeof o);
  o.tier = KVP_TIER_G1;
  o.num_blocks = 4;
  o.layout = bf_layout();
  for (int tier = -1; tier <= 5; tier++) {
    if (tier == KVP_TIER_G1 || tier == KVP_TIER_G2)
      continue;
    o.tier = tier;
    assert_int_equal(kvp_pool_create(&o, &p), KVP_ETIER);
  }
  o.tier = KVP_TIER_G2;
  o.num_blocks = 0;
  assert_int_equal(kvp_pool_create(&o, &p), KVP_EINVAL);
  o.num_blocks = 0x80000000u;
  assert_int_equal(kvp_pool_create(&o, &p), KVP_EINVAL);
  o.num_blocks = 4;
  o.layout.elem_size = 3;
  assert_int_equal(kvp_pool_create(&o, &p), KVP_EINVAL);
  o.layout = (kvp_layout_t){1024, 1024, 1025, 1, 64};
  assert_int_equal(kvp_pool_create(&o, &p), KVP_ETOOBIG);

  o.layout = bf_layout();
  assert_int_equal(kvp_pool_create(&o, &p), 0);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.tier, KVP_TIER_G2);
  assert_int_equal(c.capacity, 4);
  assert_int_equal(c.state[KVP_BLOCK_RESET], 4);
  assert_int_equal(c.inactive, 4);
  assert_int_equal(c.free, 4);
  assert_int_equal(c.active + c.cached + c.evictions, 0);
  assert_true(kvp_pool_metadata_bytes(p) > 0);
  bf_assert_pool_consistent(p);
  kvp_pool_destroy(p);
  kvp_pool_destroy(NULL);
}

static void blockmgr_create_rejects_bad_options(void **state) {
  (void)state;
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;
  kvp_blockmgr_stats_t st;
  uint64_t *h = (uint64_t *)1, *p = (uint64_t *)1;
  size_t n = 7;

  kvp_blockmgr_opts_init(&o);
  assert_int_equal(o.offload, KVP_OFFLOAD_ON_EVICT);
  assert_int_equal(o.offload_min_hits, 0);
  assert_null(o.sink.emit);
  assert_int_equal(o.g2_blocks, 0);

  o.layout = bf_layout();
  o.g1_blocks = 0;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_EINVAL);
  o.g1_blocks = 4;
  o.offload = 3;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_EINVAL);
  o.offload = -1;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_EINVAL);
  o.offload = KVP_OFFLOAD_ON_EVICT;
  o.layout.page_size = 0;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_EINVAL);
  o.layout = bf_layout();
  o.layout.alignment = 96;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_EINVAL);
  o.layout = (kvp_layout_t){1024, 1024, 1025, 1, 64};
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_ETOOBIG);
  /* G1 and G2 share one hash table: 2^31 blocks together are refused
   * before anything is allocated. */
  o.layout = bf_layout();
  o.g1_blocks = 0x7fffffffu;
  o.g2_blocks = 1;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_ETOOBIG);
  o.g1_blocks = 0x40000000u;
  o.g2_blocks = 0x40000000u;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_ETOOBIG);
  assert_null(bm);
  o.g1_blocks = 4;
  o.g2_blocks = 0;

  /* No G2: the tier does not exist anywhere. */
  o.layout = bf_layout();
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  assert_non_null(kvp_blockmgr_pool(bm, KVP_TIER_G1));
  assert_null(kvp_blockmgr_pool(bm, KVP_TIER_G2));
  assert_null(kvp_blockmgr_pool(bm, KVP_TIER_G3));
  assert_null(kvp_blockmgr_pool(bm, KVP_TIER_ALL));
  assert_int_equal(kvp_blockmgr_snapshot(bm, KVP_TIER_G2, &h, &p, &n), KVP_ETIER);
  assert_int_equal(kvp_blockmgr_snapshot(bm, KVP_TIER_G3, &h, &p, &n), KVP_ETIER);
  assert_int_equal(kvp_blockmgr_snapshot(bm, KVP_TIER_ALL, &h, &p, &n), KVP_ETIER);
  assert_int_equal(kvp_blockmgr_snapshot_fn(bm, KVP_TIER_G2, &h, &p, &n), KVP_ETIER);
  assert_int_equal(kvp_blockmgr_snapshot(bm, KVP_TIER_G1, &h, &p, &n), 0);
  assert_int_equal(n, 0);
  assert_null(h);
  assert_null(p);
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.g1.capacity, 4);
  assert_int_equal(st.g1.free, 4);
  assert_int_equal(st.g2.capacity, 0);
  assert_int_equal(st.sequences + st.lookups + st.events, 0);
  assert_true(st.hit_rate == 0.0);
  assert_true(st.metadata_bytes > 0);
  assert_int_equal(st.metadata_bytes, kvp_pool_metadata_bytes(kvp_blockmgr_pool(bm, KVP_TIER_G1)));
  kvp_blockmgr_destroy(bm);
  kvp_blockmgr_destroy(NULL);

  o.g2_blocks = 8;
  o.offload = KVP_OFFLOAD_NONE;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  assert_non_null(kvp_blockmgr_pool(bm, KVP_TIER_G2));
  kvp_blockmgr_stats(bm, &st);
  assert_int_equal(st.g2.capacity, 8);
  assert_int_equal(st.g2.tier, KVP_TIER_G2);
  assert_int_equal(st.g1.tier, KVP_TIER_G1);
  assert_int_equal(st.metadata_bytes,
                   kvp_pool_metadata_bytes(kvp_blockmgr_pool(bm, KVP_TIER_G1)) +
                       kvp_pool_metadata_bytes(kvp_blockmgr_pool(bm, KVP_TIER_G2)));
  kvp_blockmgr_destroy(bm);
}

/* ---- storage ----------------------------------------------------------- */

typedef struct {
  int allocs, frees, copies, fail_alloc_at; /* fail the n-th alloc (1-based), 0: never */
  size_t last_size, last_align, copy_bytes;
  const kvp_storage_t *copy_src;
  void *copy_src_ctx;
} mem_t;

static int mem_alloc(void *ctx, size_t size, size_t alignment, void **base) {
  mem_t *m = ctx;
  if (++m->allocs == m->fail_alloc_at)
    return KVP_ENOMEM;
  m->last_size = size;
  m->last_align = alignment;
  *base = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  return *base ? 0 : KVP_ENOMEM;
}

static void mem_free(void *ctx, void *base, size_t size) {
  mem_t *m = ctx;
  (void)size;
  m->frees++;
  free(base);
}

static int mem_copy(void *ctx, void *dst, const kvp_storage_t *src_storage, const void *src,
                    size_t n) {
  mem_t *m = ctx;
  m->copies++;
  m->copy_bytes += n;
  m->copy_src = src_storage;
  m->copy_src_ctx = src_storage ? src_storage->ctx : NULL;
  memcpy(dst, src, n);
  return 0;
}

static const kvp_storage_ops_t mem_ops = {"testmem", mem_alloc, mem_free, mem_copy};

static void storage_ops_back_pools_and_copies(void **state) {
  (void)state;
  mem_t g1 = {0}, g2 = {0};
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;
  kvp_pool_opts_t po;
  kvp_pool_t *p = NULL;
  kvp_storage_t sys = kvp_storage_system();
  uint32_t t[8];

  assert_non_null(sys.ops);
  assert_string_equal(sys.ops->kind, "system");

  kvp_blockmgr_opts_init(&o);
  o.layout = bf_layout();
  o.g1_blocks = 2;
  o.g2_blocks = 4;
  o.g1_storage = (kvp_storage_t){&mem_ops, &g1};
  o.g2_storage = (kvp_storage_t){&mem_ops, &g2};
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  assert_int_equal(g1.allocs, 1);
  assert_int_equal(g2.allocs, 1);
  assert_int_equal(g1.last_size, 2 * 128);
  assert_int_equal(g2.last_size, 4 * 128);
  assert_int_equal(g1.last_align, 64);
  assert_true(((uintptr_t)kvp_pool_block_layer(kvp_blockmgr_pool(bm, KVP_TIER_G1), 0, 0)) % 64 ==
              0);

  /* Two blocks registered, then evicted by two new ones: offloaded to G2
   * through G2's copy, reading G1's storage. */
  bf_tokens(t, 8, 100);
  kvp_seq_free(bf_seq(bm, t, 8, NULL, 0));
  bf_tokens(t, 8, 200);
  kvp_seq_t *s = bf_seq(bm, t, 8, NULL, 0);
  assert_int_equal(g2.copies, 2);
  assert_int_equal(g2.copy_bytes, 2 * 128);
  assert_ptr_equal(g2.copy_src_ctx, &g1);
  assert_int_equal(g1.copies, 0);
  kvp_seq_free(s);
  kvp_blockmgr_destroy(bm);
  assert_int_equal(g1.frees, 1);
  assert_int_equal(g2.frees, 1);

  /* A failing allocation: the pool, or the manager, reports KVP_ENOMEM and
   * releases what it had (LeakSanitizer checks the rest). */
  memset(&g1, 0, sizeof g1);
  memset(&g2, 0, sizeof g2);
  g2.fail_alloc_at = 1;
  bm = NULL;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), KVP_ENOMEM);
  assert_int_equal(g1.allocs - g1.frees, 0);
  memset(&po, 0, sizeof po);
  po.tier = KVP_TIER_G1;
  po.num_blocks = 3;
  po.layout = bf_layout();
  po.storage = (kvp_storage_t){&mem_ops, &g1};
  g1.fail_alloc_at = g1.allocs + 1;
  assert_int_equal(kvp_pool_create(&po, &p), KVP_ENOMEM);
  g1.fail_alloc_at = 0;
  assert_int_equal(kvp_pool_create(&po, &p), 0);
  kvp_pool_destroy(p);
  assert_int_equal(g1.allocs - 1, g1.frees); /* one failed alloc, the rest freed */
}

/* ---- block state machine ----------------------------------------------- */

/* Reset with no reference (a free block), Reset with a reference (fresh from
 * alloc), and ids out of range. */
static void transitions_from_reset(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, 4);
  uint32_t b, f, bad[] = {4, 1000, UINT32_MAX};
  uint64_t h = 0x1234, par = 0x99;
  kvp_pool_evicted_t ev;

  assert_string_equal(kvp_block_state_name(KVP_BLOCK_RESET), "reset");
  assert_string_equal(kvp_block_state_name(KVP_BLOCK_PARTIAL), "partial");
  assert_string_equal(kvp_block_state_name(KVP_BLOCK_COMPLETE), "complete");
  assert_string_equal(kvp_block_state_name(KVP_BLOCK_REGISTERED), "registered");
  assert_string_equal(kvp_block_state_name(4), "?");
  assert_string_equal(kvp_block_state_name(-1), "?");

  memset(&ev, 0xff, sizeof ev);
  assert_int_equal(kvp_pool_alloc(p, &b, &ev), 0);
  assert_int_equal(ev.evicted, 0);
  expect_block(p, b, KVP_BLOCK_RESET, 1, 0);
  expect_counts(p, 1, 3, 0);
  f = (b + 1) % 4;
  expect_block(p, f, KVP_BLOCK_RESET, 0, 0);

  /* Free block: only acquire (not registered) and evict (not registered)
   * speak of state; the others need a reference. */
  REJECTS(p, kvp_block_init_sequence(p, f), KVP_EINVAL, KVP_EINVAL);
  REJECTS(p, kvp_block_commit(p, f), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, f, h, NULL, NULL), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_block_abort(p, f), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_pool_acquire(p, f), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_release(p, f), KVP_EINVAL, KVP_EINVAL);
  REJECTS(p, kvp_pool_evict(p, f), KVP_ESTATE, KVP_ESTATE);

  /* Referenced Reset block. */
  REJECTS(p, kvp_block_commit(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, b, h, NULL, NULL), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, b, h, &par, NULL), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_abort(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_acquire(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_evict(p, b), KVP_EBUSY, KVP_ESTATE);

  /* Out of range, for every call. */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    REJECTS(p, kvp_block_init_sequence(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_block_commit(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_block_register(p, bad[i], h, NULL, NULL), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_block_abort(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_pool_acquire(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_pool_release(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    REJECTS(p, kvp_pool_evict(p, bad[i]), KVP_EINVAL, KVP_EINVAL);
    assert_null(kvp_pool_block_layer(p, bad[i], 0));
    assert_int_equal(kvp_pool_block_state(p, bad[i]), -1);
    assert_int_equal(kvp_pool_block_refs(p, bad[i]), 0);
  }

  /* Reset -> Partial is the one legal transition; releasing a referenced
   * Reset block frees it. */
  assert_int_equal(kvp_block_init_sequence(p, b), 0);
  expect_block(p, b, KVP_BLOCK_PARTIAL, 1, 0);
  assert_int_equal(kvp_block_abort(p, b), 0);
  expect_block(p, b, KVP_BLOCK_RESET, 1, 0);
  assert_int_equal(kvp_pool_release(p, b), 0);
  expect_block(p, b, KVP_BLOCK_RESET, 0, 0);
  expect_counts(p, 0, 4, 0);
  REJECTS(p, kvp_pool_release(p, b), KVP_EINVAL, KVP_EINVAL);
  kvp_pool_destroy(p);
}

static void transitions_from_partial(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, 4);
  uint32_t b;
  uint64_t h = 0x5678;

  assert_int_equal(kvp_pool_alloc(p, &b, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(p, b), 0);
  expect_block(p, b, KVP_BLOCK_PARTIAL, 1, 0);
  REJECTS(p, kvp_block_init_sequence(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, b, h, NULL, NULL), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_acquire(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_evict(p, b), KVP_EBUSY, KVP_ESTATE);
  assert_int_equal(kvp_pool_lookup(p, h, &b), KVP_ENOENT);

  /* Partial -> Complete. */
  assert_int_equal(kvp_block_commit(p, b), 0);
  expect_block(p, b, KVP_BLOCK_COMPLETE, 1, 0);

  /* Partial -> Reset by abort (still referenced), and Partial released:
   * reset and freed. */
  uint32_t c;
  assert_int_equal(kvp_pool_alloc(p, &c, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(p, c), 0);
  assert_int_equal(kvp_block_abort(p, c), 0);
  expect_block(p, c, KVP_BLOCK_RESET, 1, 0);
  assert_int_equal(kvp_block_init_sequence(p, c), 0);
  expect_counts(p, 2, 2, 0);
  assert_int_equal(kvp_pool_release(p, c), 0);
  expect_block(p, c, KVP_BLOCK_RESET, 0, 0);
  expect_counts(p, 1, 3, 0);

  assert_int_equal(kvp_pool_release(p, b), 0); /* Complete released: reset, freed */
  expect_block(p, b, KVP_BLOCK_RESET, 0, 0);
  expect_counts(p, 0, 4, 0);
  kvp_pool_destroy(p);
}

static void transitions_from_complete(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, 4);
  uint32_t b, d, existing = UINT32_MAX, found;
  uint64_t h = 0xabc, h2 = 0xdef;

  assert_int_equal(kvp_pool_alloc(p, &b, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(p, b), 0);
  assert_int_equal(kvp_block_commit(p, b), 0);
  REJECTS(p, kvp_block_init_sequence(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_commit(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_acquire(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_evict(p, b), KVP_EBUSY, KVP_ESTATE);

  /* Complete -> Reset by abort, then again to Complete. */
  assert_int_equal(kvp_block_abort(p, b), 0);
  expect_block(p, b, KVP_BLOCK_RESET, 1, 0);
  assert_int_equal(kvp_block_init_sequence(p, b), 0);
  assert_int_equal(kvp_block_commit(p, b), 0);

  /* Complete -> Registered. */
  assert_int_equal(kvp_pool_lookup(p, h, &found), KVP_ENOENT);
  assert_int_equal(kvp_block_register(p, b, h, NULL, &existing), 0);
  expect_block(p, b, KVP_BLOCK_REGISTERED, 1, h);
  assert_int_equal(kvp_pool_lookup(p, h, &found), 0);
  assert_int_equal(found, b);

  /* A second block completing with the same hash: KVP_EEXIST names the
   * holder and changes nothing; the caller shares it and aborts its own. */
  assert_int_equal(kvp_pool_alloc(p, &d, NULL), 0);
  assert_int_equal(kvp_block_init_sequence(p, d), 0);
  assert_int_equal(kvp_block_commit(p, d), 0);
  REJECTS(p, kvp_block_register(p, d, h, NULL, &existing), KVP_EEXIST, KVP_EEXIST);
  assert_int_equal(existing, b);
  REJECTS(p, kvp_block_register(p, d, h, &h2, NULL), KVP_EEXIST, KVP_EEXIST);
  expect_block(p, d, KVP_BLOCK_COMPLETE, 1, 0);
  assert_int_equal(kvp_pool_acquire(p, existing), 0);
  assert_int_equal(kvp_block_abort(p, d), 0);
  assert_int_equal(kvp_pool_release(p, d), 0);
  expect_block(p, b, KVP_BLOCK_REGISTERED, 2, h);
  expect_counts(p, 1, 3, 0);

  /* Same when the holder is cached (no reference): still KVP_EEXIST. */
  assert_int_equal(kvp_pool_release(p, b), 0);
  assert_int_equal(kvp_pool_release(p, b), 0);
  expect_counts(p, 0, 3, 1);
  assert_int_equal(kvp_pool_alloc(p, &d, NULL), 0);
  assert_true(d != b); /* a free block is taken before a cached one */
  assert_int_equal(kvp_block_init_sequence(p, d), 0);
  assert_int_equal(kvp_block_commit(p, d), 0);
  existing = UINT32_MAX;
  REJECTS(p, kvp_block_register(p, d, h, NULL, &existing), KVP_EEXIST, KVP_EEXIST);
  assert_int_equal(existing, b);
  /* A different hash registers, with a parent. */
  assert_int_equal(kvp_block_register(p, d, h2, &h, NULL), 0);
  expect_block(p, d, KVP_BLOCK_REGISTERED, 1, h2);
  assert_int_equal(kvp_pool_release(p, d), 0);
  expect_counts(p, 0, 2, 2);
  kvp_pool_destroy(p);
}

static void transitions_from_registered(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G2, 4);
  uint64_t h = 0x77, other = 0x78;
  uint32_t b = registered(p, h, NULL), found;
  kvp_pool_counts_t c;

  /* Registered and referenced. */
  REJECTS(p, kvp_block_init_sequence(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_commit(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_abort(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, b, other, NULL, NULL), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_evict(p, b), KVP_EBUSY, KVP_EBUSY);
  assert_int_equal(kvp_pool_acquire(p, b), 0);
  expect_block(p, b, KVP_BLOCK_REGISTERED, 2, h);
  assert_int_equal(kvp_pool_release(p, b), 0);
  expect_block(p, b, KVP_BLOCK_REGISTERED, 1, h);
  expect_counts(p, 1, 3, 0);

  /* Last reference dropped: cached, still registered and found. */
  assert_int_equal(kvp_pool_release(p, b), 0);
  expect_block(p, b, KVP_BLOCK_REGISTERED, 0, h);
  expect_counts(p, 0, 3, 1);
  assert_int_equal(kvp_pool_lookup(p, h, &found), 0);
  assert_int_equal(found, b);

  /* Cached (Registered, no reference). */
  REJECTS(p, kvp_block_init_sequence(p, b), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_block_commit(p, b), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_block_abort(p, b), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_block_register(p, b, other, NULL, NULL), KVP_EINVAL, KVP_ESTATE);
  REJECTS(p, kvp_pool_release(p, b), KVP_EINVAL, KVP_EINVAL);
  assert_int_equal(kvp_pool_acquire(p, b), 0); /* leaves the inactive set */
  expect_block(p, b, KVP_BLOCK_REGISTERED, 1, h);
  expect_counts(p, 1, 3, 0);
  assert_int_equal(kvp_pool_release(p, b), 0);
  expect_counts(p, 0, 3, 1);

  /* Registered -> Reset by eviction. */
  assert_int_equal(kvp_pool_evict(p, b), 0);
  expect_block(p, b, KVP_BLOCK_RESET, 0, 0);
  expect_counts(p, 0, 4, 0);
  assert_int_equal(kvp_pool_lookup(p, h, &found), KVP_ENOENT);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 1);
  REJECTS(p, kvp_pool_evict(p, b), KVP_ESTATE, KVP_ESTATE);
  REJECTS(p, kvp_pool_acquire(p, b), KVP_ESTATE, KVP_ESTATE);

  /* The hash can be registered again afterwards. */
  b = registered(p, h, NULL);
  assert_int_equal(kvp_pool_release(p, b), 0);
  assert_int_equal(kvp_pool_evict_all(p), 1);
  assert_int_equal(kvp_pool_evict_all(p), 0);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 2);
  expect_counts(p, 0, 4, 0);
  kvp_pool_destroy(p);
}

/* ---- allocation order -------------------------------------------------- */

static void fill(kvp_pool_t *p, uint32_t b, unsigned char v) {
  for (uint32_t l = 0; l < 2; l++)
    memset(kvp_pool_block_layer(p, b, l), v + l, 64);
}

static int holds(kvp_pool_t *p, uint32_t b, unsigned char v) {
  for (uint32_t l = 0; l < 2; l++) {
    const unsigned char *q = kvp_pool_block_layer(p, b, l);
    for (int i = 0; i < 64; i++)
      if (q[i] != (unsigned char)(v + l))
        return 0;
  }
  return 1;
}

static void alloc_prefers_free_blocks_then_lru(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, 4);
  kvp_pool_evicted_t ev;
  uint32_t a, b[4], x, found;
  uint64_t ha = 0xa0, h[4] = {0x10, 0x11, 0x12, 0x13};
  kvp_pool_counts_t c;

  /* A cached block survives while never-used blocks remain. */
  a = registered(p, ha, NULL);
  fill(p, a, 0x40);
  assert_int_equal(kvp_pool_release(p, a), 0);
  for (int i = 0; i < 3; i++) {
    memset(&ev, 0xff, sizeof ev);
    assert_int_equal(kvp_pool_alloc(p, &b[i], &ev), 0);
    assert_int_equal(ev.evicted, 0);
    assert_true(b[i] != a);
    assert_int_equal(kvp_pool_lookup(p, ha, &found), 0);
  }
  /* Then it is evicted; its bytes are left in place. */
  memset(&ev, 0, sizeof ev);
  assert_int_equal(kvp_pool_alloc(p, &b[3], &ev), 0);
  assert_int_equal(b[3], a);
  assert_int_equal(ev.evicted, 1);
  assert_true(ev.hash == ha);
  assert_int_equal(ev.has_parent, 0);
  assert_int_equal(ev.lora_id, 0); /* registered through the pool API: no LoRA */
  assert_true(holds(p, a, 0x40));
  expect_block(p, a, KVP_BLOCK_RESET, 1, 0);
  assert_int_equal(kvp_pool_lookup(p, ha, &found), KVP_ENOENT);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 1);

  /* Every block referenced: KVP_ENOSPC, nothing changes. */
  REJECTS(p, kvp_pool_alloc(p, &x, &ev), KVP_ENOSPC, KVP_ENOSPC);
  REJECTS(p, kvp_pool_alloc(p, &x, NULL), KVP_ENOSPC, KVP_ENOSPC);

  /* Register the four as a chain, release them in the order 2, 0, 3, 1,
   * then use block 0 again: LRU order is 2, 3, 1, 0. A lookup does not
   * count as a use. */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(kvp_block_init_sequence(p, b[i]), 0);
    assert_int_equal(kvp_block_commit(p, b[i]), 0);
    assert_int_equal(kvp_block_register(p, b[i], h[i], i ? &h[i - 1] : NULL, NULL), 0);
  }
  static const int rel[] = {2, 0, 3, 1};
  for (int i = 0; i < 4; i++)
    assert_int_equal(kvp_pool_release(p, b[rel[i]]), 0);
  expect_counts(p, 0, 0, 4);
  assert_int_equal(kvp_pool_acquire(p, b[0]), 0);
  assert_int_equal(kvp_pool_release(p, b[0]), 0);
  assert_int_equal(kvp_pool_lookup(p, h[2], &found), 0);
  assert_int_equal(found, b[2]);
  static const int order[] = {2, 3, 1, 0};
  for (int i = 0; i < 4; i++) {
    memset(&ev, 0, sizeof ev);
    assert_int_equal(kvp_pool_alloc(p, &x, &ev), 0);
    assert_int_equal(x, b[order[i]]);
    assert_int_equal(ev.evicted, 1);
    assert_true(ev.hash == h[order[i]]);
    assert_int_equal(ev.has_parent, order[i] != 0);
    if (order[i])
      assert_true(ev.parent_hash == h[order[i] - 1]);
  }
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 5);

  /* Reset blocks come before cached ones: release b[1] and b[3] while
   * Reset, cache b[0] and b[2]; two allocations take b[1] and b[3]. */
  for (int i = 0; i < 4; i += 2) {
    assert_int_equal(kvp_block_init_sequence(p, b[i]), 0);
    assert_int_equal(kvp_block_commit(p, b[i]), 0);
    assert_int_equal(kvp_block_register(p, b[i], h[i], NULL, NULL), 0);
  }
  assert_int_equal(kvp_pool_release(p, b[2]), 0);
  assert_int_equal(kvp_pool_release(p, b[1]), 0);
  assert_int_equal(kvp_pool_release(p, b[0]), 0);
  assert_int_equal(kvp_pool_release(p, b[3]), 0);
  expect_counts(p, 0, 2, 2);
  uint32_t y;
  assert_int_equal(kvp_pool_alloc(p, &x, &ev), 0);
  assert_int_equal(ev.evicted, 0);
  assert_int_equal(kvp_pool_alloc(p, &y, &ev), 0);
  assert_int_equal(ev.evicted, 0);
  assert_true((x == b[1] && y == b[3]) || (x == b[3] && y == b[1]));
  assert_int_equal(kvp_pool_release(p, x), 0);
  assert_int_equal(kvp_pool_release(p, y), 0);

  /* An explicitly evicted block is free again and taken before the LRU
   * cached block (b[2]). */
  assert_int_equal(kvp_pool_evict(p, b[0]), 0);
  expect_counts(p, 0, 3, 1);
  assert_int_equal(kvp_pool_alloc(p, &x, &ev), 0);
  assert_int_equal(ev.evicted, 0);
  assert_true(x != b[2]);
  assert_int_equal(kvp_pool_lookup(p, h[2], &found), 0);
  assert_int_equal(kvp_pool_release(p, x), 0);
  assert_int_equal(kvp_pool_evict_all(p), 1);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 7);
  expect_counts(p, 0, 4, 0);
  kvp_pool_destroy(p);
}

/* The LRU ring holds an entry per caching, so repeated uses of cached blocks
 * fill it with stale entries; it is compacted when full and its indices wrap.
 * Hundreds of uses of a 4-block pool (a ring of 32 entries) must leave the
 * eviction order exactly that of last use. */
static void lru_order_survives_ring_compaction(void **state) {
  (void)state;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, 4);
  kvp_pool_evicted_t ev;
  uint32_t b[4], x;
  uint64_t h[4] = {0x20, 0x21, 0x22, 0x23};
  kvp_pool_counts_t c;

  for (int i = 0; i < 4; i++)
    b[i] = registered(p, h[i], NULL);
  for (int i = 0; i < 4; i++)
    assert_int_equal(kvp_pool_release(p, b[i]), 0); /* LRU: 0 1 2 3 */
  for (int k = 0; k < 300; k++) {
    assert_int_equal(kvp_pool_acquire(p, b[k % 2]), 0);
    assert_int_equal(kvp_pool_release(p, b[k % 2]), 0);
  } /* LRU: 2 3 0 1 */
  /* An eviction in between moves the head: b[2] goes, comes back newest. */
  assert_int_equal(kvp_pool_alloc(p, &x, &ev), 0);
  assert_int_equal(x, b[2]);
  assert_true(ev.evicted && ev.hash == h[2]);
  assert_int_equal(kvp_block_init_sequence(p, x), 0);
  assert_int_equal(kvp_block_commit(p, x), 0);
  assert_int_equal(kvp_block_register(p, x, h[2], NULL, NULL), 0);
  assert_int_equal(kvp_pool_release(p, x), 0); /* LRU: 3 0 1 2 */
  for (int k = 0; k < 301; k++) {
    assert_int_equal(kvp_pool_acquire(p, b[k % 2 ? 3 : 0]), 0);
    assert_int_equal(kvp_pool_release(p, b[k % 2 ? 3 : 0]), 0);
  } /* the last use is of b[0]: LRU 1 2 3 0 */
  expect_counts(p, 0, 0, 4);
  static const int order[] = {1, 2, 3, 0};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(kvp_pool_alloc(p, &x, &ev), 0);
    assert_int_equal(x, b[order[i]]);
    assert_true(ev.evicted && ev.hash == h[order[i]]);
  }
  kvp_pool_counts(p, &c);
  assert_int_equal(c.evictions, 5);
  expect_counts(p, 4, 0, 0);
  kvp_pool_destroy(p);
}

/* ---- the hash table under collisions ----------------------------------- */

/* The home group of hash h in a table of ngroups groups, as pool.h computes
 * it (tag = high half of h * 2^64/phi, home = tag * ngroups >> 32): the
 * test picks hashes that all start in one group, to fill it and the groups
 * after it. */
static uint64_t home_group(uint64_t h, uint64_t ngroups) {
  uint64_t tag = (h * UINT64_C(0x9e3779b97f4a7c15)) >> 32;
  return (tag * ngroups) >> 32;
}

/* n hashes, the first ones above from, whose home group is g. */
static void colliding(uint64_t *out, size_t n, uint64_t from, uint64_t g, uint64_t ngroups) {
  for (uint64_t h = from + 1; n > 0; h++)
    if (home_group(h, ngroups) == g) {
      *out++ = h;
      n--;
    }
}

#define KVP__TEST_NONE 0xffffffffu

static void expect_mapped(kvp_pool_t *p, const uint64_t *h, const uint32_t *b, size_t n,
                          int present) {
  for (size_t i = 0; i < n; i++) {
    uint32_t found = KVP__TEST_NONE;
    int rc = kvp_pool_lookup(p, h[i], &found);
    if (present ? rc != 0 || found != b[i] : rc != KVP_ENOENT)
      fail_msg("hash %zu (%llx): lookup %d, block %u, want %s %u", i, (unsigned long long)h[i], rc,
               found, present ? "block" : "absent", b[i]);
  }
}

/* Entries whose probe sequences run over many full groups, wrap past the
 * table's last group, and have their groups' overflow counts saturate: every
 * lookup stays exact through registrations, evictions and registrations
 * again. A pool of 600 blocks has a 172-group table (2 slots per block, 7
 * per group); 300 hashes homed in its last group, with 40 homed in group 0
 * where they wrap to, spill over more than 40 groups from there through
 * group 0, so the last group's count passes 255. */
static void table_collisions_overflow_and_wrap(void **state) {
  (void)state;
  enum { N = 600, K = 300, M = 40 };
  const uint64_t ngroups = (2 * N + 6) / 7;
  kvp_pool_t *p = mkpool(KVP_TIER_G1, N);
  static uint64_t h[K], g0[M];
  static uint32_t b[K], b0[M];
  kvp_pool_counts_t c;

  colliding(h, K, 0, ngroups - 1, ngroups);
  colliding(g0, M, h[K - 1], 0, ngroups); /* homed where the others wrap to */
  for (size_t i = 0; i < K; i++) {
    b[i] = registered(p, h[i], NULL);
    if (i % 7 == 0 && i / 7 < M)
      b0[i / 7] = registered(p, g0[i / 7], NULL);
  }
  expect_mapped(p, h, b, K, 1);
  expect_mapped(p, g0, b0, M, 1);

  /* Cache all. The first 7 fill the last group; each later one passed it,
   * 293 in all, so its count stopped at 255. Evict exactly 255 of those
   * that passed it (and every other one homed in group 0): the count must
   * stay saturated, or the 38 left behind it would be lost. */
  for (size_t i = 0; i < K; i++)
    assert_int_equal(kvp_pool_release(p, b[i]), 0);
  for (size_t i = 0; i < M; i++)
    assert_int_equal(kvp_pool_release(p, b0[i]), 0);
  for (size_t i = 7; i < 7 + 255; i++)
    assert_int_equal(kvp_pool_evict(p, b[i]), 0);
  for (size_t i = 1; i < M; i += 2)
    assert_int_equal(kvp_pool_evict(p, b0[i]), 0);
  for (size_t i = 0; i < K; i++) {
    uint32_t f = KVP__TEST_NONE;
    int gone = i >= 7 && i < 7 + 255;
    assert_int_equal(kvp_pool_lookup(p, h[i], &f), gone ? KVP_ENOENT : 0);
    if (!gone)
      assert_int_equal(f, b[i]);
  }
  for (size_t i = 0; i < M; i++) {
    uint32_t f;
    assert_int_equal(kvp_pool_lookup(p, g0[i], &f), i % 2 ? KVP_ENOENT : 0);
  }

  /* Register the evicted ones again (into the holes, wherever they are). */
  for (size_t i = 7; i < 7 + 255; i++)
    b[i] = registered(p, h[i], NULL);
  for (size_t i = 1; i < M; i += 2)
    b0[i] = registered(p, g0[i], NULL);
  expect_mapped(p, h, b, K, 1);
  expect_mapped(p, g0, b0, M, 1);

  /* Everything out, then a fresh set in: nothing stale is found. */
  for (size_t i = 7; i < 7 + 255; i++)
    assert_int_equal(kvp_pool_release(p, b[i]), 0);
  for (size_t i = 1; i < M; i += 2)
    assert_int_equal(kvp_pool_release(p, b0[i]), 0);
  assert_int_equal(kvp_pool_evict_all(p), K + M);
  expect_mapped(p, h, b, K, 0);
  expect_mapped(p, g0, b0, M, 0);
  static uint64_t h2[K];
  colliding(h2, K, g0[M - 1], ngroups - 1, ngroups);
  for (size_t i = 0; i < K; i++)
    b[i] = registered(p, h2[i], NULL);
  expect_mapped(p, h2, b, K, 1);
  expect_mapped(p, h, b, K, 0);
  kvp_pool_counts(p, &c);
  assert_int_equal(c.active, K);
  kvp_pool_destroy(p);
}

/* Overflow counts are upper bounds: a group's count stays raised while an
 * entry that passed it lives, even when the group has emptied since. Here
 * each of the 3 groups of a 10-block pool keeps one entry that passed it,
 * so every count is raised with 4 entries in 21 slots: searches for absent
 * hashes must still end (after one pass over the groups), registration
 * must still find a free slot, and the 4 must still be found. */
static void table_search_ends_when_every_group_is_passed(void **state) {
  (void)state;
  enum { N = 10, G = (2 * N + 6) / 7 };
  kvp_pool_t *p = mkpool(KVP_TIER_G1, N);
  uint64_t h[G][8], live[2 * G], absent[3], from = 0;
  uint32_t b[8], lb[2 * G], x, found;
  size_t nlive = 0;

  assert_int_equal(G, 3);
  for (int g = 0; g < G; g++) {
    /* Group g holds one entry already from the round before (none for
     * group 0): 7 - that fill it, one more passes it into the next group. */
    int fill = g == 0 ? 7 : 6;
    colliding(h[g], (size_t)fill + 1, from, (uint64_t)g, G);
    from = h[g][fill];
    for (int i = 0; i <= fill; i++)
      b[i] = registered(p, h[g][i], NULL);
    for (int i = 0; i <= fill; i++)
      assert_int_equal(kvp_pool_release(p, b[i]), 0);
    for (int i = g == 0 ? 1 : 0; i < fill; i++)
      assert_int_equal(kvp_pool_evict(p, b[i]), 0);
    if (g == 0) {
      live[nlive] = h[0][0];
      lb[nlive++] = b[0];
    }
    live[nlive] = h[g][fill];
    lb[nlive++] = b[fill];
  }
  assert_int_equal((int)nlive, 4);
  expect_mapped(p, live, lb, nlive, 1);

  colliding(absent, 3, from, 1, G);
  for (int i = 0; i < 3; i++)
    assert_int_equal(kvp_pool_lookup(p, absent[i], &found), KVP_ENOENT);
  x = registered(p, absent[0], NULL);
  assert_int_equal(kvp_pool_lookup(p, absent[0], &found), 0);
  assert_int_equal(found, x);
  expect_mapped(p, live, lb, nlive, 1);
  kvp_pool_destroy(p);
}

/* ---- block addresses and copies ---------------------------------------- */

static void block_layers_are_disjoint_and_copyable(void **state) {
  (void)state;
  kvp_pool_opts_t o;
  kvp_pool_t *p = NULL, *q = NULL, *r = NULL;
  const kvp_layout_t l = {3, 5, 7, 2, 256}; /* layer 70 bytes, block 256 */

  memset(&o, 0, sizeof o);
  o.tier = KVP_TIER_G1;
  o.num_blocks = 3;
  o.layout = l;
  assert_int_equal(kvp_pool_create(&o, &p), 0);
  o.tier = KVP_TIER_G2;
  assert_int_equal(kvp_pool_create(&o, &q), 0);
  o.layout = bf_layout();
  assert_int_equal(kvp_pool_create(&o, &r), 0);

  unsigned char *base = kvp_pool_block_layer(p, 0, 0);
  assert_non_null(base);
  assert_true((uintptr_t)base % 256 == 0);
  for (uint32_t b = 0; b < 3; b++) {
    for (uint32_t k = 0; k < 3; k++) {
      unsigned char *a = kvp_pool_block_layer(p, b, k);
      assert_ptr_equal(a, base + b * 256 + k * 70);
      memset(a, (int)(b * 16 + k + 1), 70);
    }
    assert_null(kvp_pool_block_layer(p, b, 3));
  }
  assert_null(kvp_pool_block_layer(p, 3, 0));
  for (uint32_t b = 0; b < 3; b++)
    for (uint32_t k = 0; k < 3; k++) {
      unsigned char *a = kvp_pool_block_layer(p, b, k);
      for (int i = 0; i < 70; i++)
        assert_int_equal(a[i], b * 16 + k + 1);
    }

  /* Copy block 2 of p into block 0 of q, all layers. */
  assert_int_equal(kvp_pool_copy_block(q, 0, p, 2), 0);
  for (uint32_t k = 0; k < 3; k++)
    assert_memory_equal(kvp_pool_block_layer(q, 0, k), kvp_pool_block_layer(p, 2, k), 70);
  assert_int_equal(kvp_pool_copy_block(q, 3, p, 0), KVP_EINVAL);
  assert_int_equal(kvp_pool_copy_block(q, 0, p, 3), KVP_EINVAL);
  assert_int_equal(kvp_pool_copy_block(r, 0, p, 0), KVP_EINVAL); /* different layout */
  kvp_pool_destroy(p);
  kvp_pool_destroy(q);
  kvp_pool_destroy(r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(layout_strides),
    cmocka_unit_test(layout_check_rejects_bad_values),
    cmocka_unit_test(pool_create_rejects_bad_options),
    cmocka_unit_test(blockmgr_create_rejects_bad_options),
    cmocka_unit_test(storage_ops_back_pools_and_copies),
    cmocka_unit_test(transitions_from_reset),
    cmocka_unit_test(transitions_from_partial),
    cmocka_unit_test(transitions_from_complete),
    cmocka_unit_test(transitions_from_registered),
    cmocka_unit_test(alloc_prefers_free_blocks_then_lru),
    cmocka_unit_test(lru_order_survives_ring_compaction),
    cmocka_unit_test(table_collisions_overflow_and_wrap),
    cmocka_unit_test(table_search_ends_when_every_group_is_passed),
    cmocka_unit_test(block_layers_are_disjoint_and_copyable),
};

KVP_TEST_MAIN("block", tests)
