/* The LRU order of a pool's cached blocks, and the prefetching of the
 * victims to come. Private to src/block; the pool (pool.h) owns one and is
 * the only caller outside this file and lru.c.
 *
 * A ring of block ids in the order they were cached, oldest at head. A
 * block leaving the cached set (a prefix hit, an eviction) or cached again
 * leaves its old entry behind, stale: an entry at index i is live only when
 * its block's record says cached with link == i. Pops skip stale entries;
 * a ring about to fill is compacted in place (so it is never full: a
 * prefetch cursor's distance from the head is then unambiguous). Reading
 * victims from an array rather than a linked list lets evictions prefetch
 * the records of victims to come without chasing pointers.
 *
 * The hot steps are forced inline, like the table's (map.h). */
#ifndef KVP_BLOCK_LRU_H
#define KVP_BLOCK_LRU_H

#include <stdint.h>

#include "block/map.h"
#include "block/record.h"

typedef struct kvp__lru_s {
  uint32_t *ring;
  uint64_t cap, count;       /* cap: a power of two, at least n + n/4 + 16 */
  uint32_t mask, head, tail; /* mask = cap - 1: indices wrap by a mask */
  uint32_t pf_rec, pf_grp;   /* ring index up to which victims' records / slots were prefetched */
  uint32_t pf_bytes;         /* bytes of each victim prefetched with its slot */
} kvp__lru_t;

/* Allocates l's ring for a pool of n blocks. Returns 0 or KVP_ENOMEM.
 * (lru.c) */
int kvp__lru_create(kvp__lru_t *l, uint32_t n);

void kvp__lru_free(kvp__lru_t *l);

/* Bytes of l's ring. */
static inline uint64_t kvp__lru_bytes(const kvp__lru_t *l) {
  return l->cap * sizeof *l->ring;
}

/* Drops the stale entries of a full ring, keeping the order of the live
 * ones (lru.c; rare). */
void kvp__lru_compact(kvp__lru_t *l, kvp__blk_t *blk);

static inline uint32_t kvp__lru_next(const kvp__lru_t *l, uint32_t i) {
  return (i + 1) & l->mask;
}

/* Whether ring entry `at`, holding block e, is live (not left stale). */
static inline int kvp__lru_live(const kvp__blk_t *blk, uint32_t e, uint32_t at) {
  return blk[e].where == KVP__CACHED && blk[e].link == at;
}

/* b becomes the most recently used cached block. */
static inline void kvp__lru_push(kvp__lru_t *l, kvp__blk_t *blk, uint32_t b) {
  if (__builtin_expect(l->count + 1 == l->cap, 0))
    kvp__lru_compact(l, blk); /* at most n live entries, cap >= n + n/4 + 16 */
  uint32_t t = l->tail;
  l->tail = kvp__lru_next(l, t);
  l->count++;
  l->ring[t] = b;
  blk[b].link = t;
  blk[b].where = KVP__CACHED;
}

/* The least recently used cached block, taken off the ring (still marked
 * cached), or KVP__NIL when none is cached; then the ring is empty and the
 * prefetch cursors (kvp__lru_prefetch_victims), which the pop went past,
 * are set back to the head. Fields are read into locals once: stores to
 * records could alias them. */
static inline uint32_t kvp__lru_pop(kvp__lru_t *l, const kvp__blk_t *blk) {
  const uint32_t *ring = l->ring;
  uint32_t i = l->head, mask = l->mask, b = KVP__NIL;
  uint64_t n = l->count;

  while (n > 0) {
    uint32_t at = i;
    uint32_t e = ring[at];
    i = (i + 1) & mask;
    n--;
    if (kvp__lru_live(blk, e, at)) {
      b = e;
      break;
    }
  }
  l->head = i;
  l->count = n;
  if (b == KVP__NIL)
    l->pf_rec = l->pf_grp = i;
  return b;
}

/* Evictions come in runs from the LRU end, and what one waits for is loads:
 * the victim's record, its hash slot (in table m, whose records are the
 * ring's), its first pf_bytes bytes (block b at base + b * stride). The
 * victims to come are the next ring entries: when fewer than half a burst
 * of them are prefetched, kvp__lru_prefetch_burst (lru.c) tops them up to a
 * burst. The cursor pf_grp is a ring index. Ahead of the head it is at most
 * count entries from it; behind (a pop skipped past it), more, since the
 * ring is never full (count < cap). Pops that are not followed by this
 * check (kvp_pool_evict_all's) end with one finding the ring empty, which
 * resets the cursors (kvp__lru_pop). Stale entries make these hints, never
 * errors. */
void kvp__lru_prefetch_burst(kvp__lru_t *l, const kvp__map_t *m, const unsigned char *base,
                             size_t stride);

static inline void kvp__lru_prefetch_victims(kvp__lru_t *l, const kvp__map_t *m,
                                             const unsigned char *base, size_t stride) {
  uint32_t d = (l->pf_grp - l->head) & l->mask;
  uint64_t n = l->count;

  if (d > n || (d < KVP__BURST / 2 && d < n))
    kvp__lru_prefetch_burst(l, m, base, stride);
}

#endif
