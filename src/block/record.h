/* A block's record: what a tier pool keeps of each of its blocks, read by
 * the pool's hash table (map.h: hash, loc) and LRU ring (lru.h: link,
 * where) and by the pool itself (pool.h). Private to src/block. */
#ifndef KVP_BLOCK_RECORD_H
#define KVP_BLOCK_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define KVP__NIL UINT32_MAX

/* For the steps of the per-block loops that GCC would otherwise keep as
 * functions of their own (a prologue and epilogue per block). */
#define KVP__HOT static inline __attribute__((always_inline))

/* Where a block is: referenced, free (Reset, unreferenced), or cached
 * (Registered, unreferenced, evictable). */
enum { KVP__ACTIVE = 0, KVP__FREE = 1, KVP__CACHED = 2 };

#define KVP__HITS_MAX 0xffffu

/* One block's metadata: 32 bytes, two to a cache line. */
typedef struct kvp__blk_s {
  uint64_t hash;   /* sequence hash, when registered */
  uint64_t parent; /* parent's sequence hash, when has_parent */
  uint32_t link;   /* cached: ring index of its latest LRU entry; free: next free block */
  uint32_t refs;
  int32_t lora_id;
  uint16_t hits;     /* prefix hits in this tier, saturating at KVP__HITS_MAX */
  uint8_t state : 3; /* kvp_block_state_t */
  uint8_t where : 2; /* KVP__ACTIVE / FREE / CACHED */
  uint8_t has_parent : 1;
  uint8_t lent : 1; /* the pool's owner's, never read or written by the pool (kvp__pool_lent) */
  uint8_t twin : 1; /* registered, in a shared table: the other tier may hold its hash too */
  uint8_t loc;      /* registered: where its table entry is (map.h), or KVP__LOC_FAR */
} kvp__blk_t;
_Static_assert(sizeof(kvp__blk_t) == 32, "a block record is 32 bytes, two to a cache line");

/* A registered block's record says where its table entry is: the group's
 * distance from the hash's home along the probe sequence (up to
 * KVP__LOC_DMAX) and the slot in it, so that removing or moving the entry
 * stores to a known address instead of loading the group to search it
 * (the block's hash gives the home). Entries further away (rare) are
 * searched: KVP__LOC_FAR. */
#define KVP__LOC_FAR 0xffu
#define KVP__LOC_DMAX 30u

/* Random lines (table groups, and the records and bytes of victims to
 * come) are prefetched in bursts, issued back to back, not one at a time
 * between steps of work: passes over a sequence's hashes keep half a burst
 * to a burst and a half of KVP__BURST ahead, 32 lines at a time
 * (kvp__burst_due); evictions keep up to a burst ahead, topped up when
 * fewer than half are (lru.h, kvp__lru_prefetch_victims). Why bursts: a
 * prefetch cannot retire before its address is translated, so one per
 * step keeps about one TLB walk in flight behind a reorder window full of
 * work; a burst puts them in flight together. `kvp-bench prefetch`
 * measures the difference; its figures are in the README's table. */
#ifndef KVP__BURST
#define KVP__BURST 32
#endif
_Static_assert(KVP__BURST >= 2, "KVP__BURST / 2 lines ahead must be at least one");

/* For a pass at index i over n items, *pf being how far prefetches went
 * (0 before the pass): whether the next burst is due, that is, fewer than
 * half a burst of the items after i are prefetched; then the burst is
 * [*from, *pf), *pf advanced past it. */
static inline int kvp__burst_due(size_t n, size_t i, size_t *pf, size_t *from) {
  if (*pf < i)
    *pf = i;
  if (*pf >= n || *pf - i >= KVP__BURST / 2)
    return 0;
  *from = *pf;
  *pf = *pf + KVP__BURST < n ? *pf + KVP__BURST : n;
  return 1;
}

/* Zeroed, touched memory (huge-page hinted when 2 MiB or more) for a pool's
 * records, table and ring and the system storage's blocks; freed with
 * free(). NULL when out of memory. (layout.c) */
void *kvp__resident_alloc(size_t bytes, size_t alignment);

#endif
