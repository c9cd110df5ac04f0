/* Shared fixture code for the block manager tests: a recording event sink
 * that also replays Stored/Removed/Cleared into per-tier sets, a capture of
 * the whole observable state of a manager (to prove an operation changed
 * nothing), and small helpers for tokens, hashes and sequences. */
#ifndef KVP_TEST_BLOCKFIX_H
#define KVP_TEST_BLOCKFIX_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/blockmgr.h"
#include "kvplane/event.h"

/* Tokens per block in every fixture layout. */
#define BF_PS 4

/* 2 layers of 4 tokens x 8 elements of 2 bytes: layer_stride 64, block 128
 * bytes, alignment 64 (so block_stride == num_layers * layer_stride). */
kvp_layout_t bf_layout(void);

/* One recorded event, hashes copied. */
typedef struct bf_ev_s {
  int type;
  int tier;
  int has_parent;
  uint64_t parent;
  uint64_t *hashes;
  size_t n;
  uint32_t block_tokens;
  uint64_t block_bytes;
  int32_t lora_id;
  int has_hit_counts;
} bf_ev_t;

/* Optional map from a sequence hash to its parent, filled by the tests from
 * the hashes they compute; the recorder then checks the parents of every
 * Stored event. */
typedef struct bf_pmap_s {
  uint64_t *key;
  uint64_t *parent; /* == key when the block has no parent */
  unsigned char *used;
  size_t cap; /* power of two */
  size_t n;
} bf_pmap_t;

void bf_pmap_init(bf_pmap_t *m, size_t cap);
void bf_pmap_free(bf_pmap_t *m);
/* Records hashes[0..n-1] as one chain (hashes[0] has no parent). */
void bf_pmap_add_chain(bf_pmap_t *m, const uint64_t *hashes, size_t n);
/* 1 with *parent set (== h for a first block), or 0 when h is unknown. */
int bf_pmap_get(const bf_pmap_t *m, uint64_t h, uint64_t *parent);

typedef struct bf_rec_s {
  int keep; /* keep the event list (ev/nev) */
  bf_ev_t *ev;
  size_t nev, capev;
  uint64_t total;                  /* events seen */
  int fail_rc;                     /* what emit returns (0, or an error to test sink failures) */
  uint64_t *set[KVP_TIER_MAX + 1]; /* replayed registered sets per tier */
  size_t nset[KVP_TIER_MAX + 1], capset[KVP_TIER_MAX + 1];
  int bad; /* set by the first inconsistency; why says which */
  char why[256];
  const bf_pmap_t *pmap; /* when set: Stored parents are checked against it */
} bf_rec_t;

void bf_rec_init(bf_rec_t *r, int keep);
void bf_rec_free(bf_rec_t *r);
/* Forgets the kept event list (not the sets or counters). */
void bf_rec_clear_list(bf_rec_t *r);
kvp_event_sink_t bf_rec_sink(bf_rec_t *r);
int bf_rec_has(const bf_rec_t *r, int tier, uint64_t h);

/* Asserts that the replayed set of tier equals kvp_blockmgr_snapshot, and
 * that the snapshot's parents agree with the recorder's pmap when set. */
void bf_assert_snapshot_matches(kvp_blockmgr_t *bm, const bf_rec_t *r, int tier);

/* Asserts the recorded event i: type, tier, hashes (n of them), parent
 * (has_parent 0: none). */
void bf_assert_ev(const bf_rec_t *r, size_t i, int type, int tier, const uint64_t *hashes, size_t n,
                  int has_parent, uint64_t parent);

/* Everything observable about a manager's pools and stats. */
typedef struct bf_pool_snap_s {
  int present;
  kvp_pool_counts_t c;
  uint32_t n;
  int *state;
  uint32_t *refs;
  uint64_t *hash;
} bf_pool_snap_t;

typedef struct bf_world_s {
  bf_pool_snap_t pool[3]; /* by tier, 1 and 2 */
  kvp_blockmgr_stats_t st;
  uint64_t events;
} bf_world_t;

/* One pool's counts and per-block state, refs and hash. */
void bf_pool_take(const kvp_pool_t *p, bf_pool_snap_t *s);
void bf_pool_assert_same(const bf_pool_snap_t *x, const bf_pool_snap_t *y, const char *what);
void bf_pool_snap_free(bf_pool_snap_t *s);

void bf_world_take(kvp_blockmgr_t *bm, const bf_rec_t *r, bf_world_t *w);
void bf_world_assert_same(const bf_world_t *a, const bf_world_t *b);
void bf_world_free(bf_world_t *w);

void bf_assert_counts_equal(const kvp_pool_counts_t *a, const kvp_pool_counts_t *b);
void bf_assert_stats_equal(const kvp_blockmgr_stats_t *a, const kvp_blockmgr_stats_t *b);

/* Asserts the pool's counts against what its blocks say one by one. */
void bf_assert_pool_consistent(const kvp_pool_t *p);

/* out[i] = base + i. */
void bf_tokens(uint32_t *out, size_t n, uint32_t base);

/* Expected sequence hashes of tokens under lora_name (NULL: none). Returns
 * the number of full blocks. */
size_t bf_hashes(const uint32_t *tokens, size_t n, const char *lora_name, uint64_t *out,
                 size_t cap);

/* A manager with bf_layout(), asserting success; rec may be NULL. */
kvp_blockmgr_t *bf_mgr(uint32_t g1, uint32_t g2, int offload, uint32_t min_hits, bf_rec_t *rec);

/* kvp_seq_create + kvp_seq_allocate, both asserted to succeed. */
kvp_seq_t *bf_seq(kvp_blockmgr_t *bm, const uint32_t *tokens, size_t n, const char *lora_name,
                  int32_t lora_id);

/* The G1 block id holding seq hash h (asserted to exist). */
uint32_t bf_lookup(kvp_blockmgr_t *bm, int tier, uint64_t h);

/* Number of G1 blocks of s (0 before allocate), and its i-th block id. */
size_t bf_nblocks(const kvp_seq_t *s);
uint32_t bf_blk(const kvp_seq_t *s, size_t i);

kvp_pool_t *bf_g1(kvp_blockmgr_t *bm);

/* Asserts G1's active/free/cached counts and its consistency. */
void bf_expect_g1_counts(kvp_blockmgr_t *bm, uint32_t active, uint32_t free_, uint32_t cached);

/* 1 when h is registered in tier. */
int bf_registered(kvp_blockmgr_t *bm, int tier, uint64_t h);

/* Asserts kvp_seq_hashes(s) == want[0..n-1]. */
void bf_hashes_equal(const kvp_seq_t *s, const uint64_t *want, size_t n);

#endif
