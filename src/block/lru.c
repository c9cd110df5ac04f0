/* The LRU ring's rare paths: creation, compaction, and the burst of victim
 * prefetches (lru.h has the ring itself). */
#include <stdlib.h>

#include "block/lru.h"
#include "kvplane/status.h"

int kvp__lru_create(kvp__lru_t *l, uint32_t n) {
  memset(l, 0, sizeof *l);
  /* A power of two, so that indices wrap by a mask; at least n/4 + 16 more
   * than the n live entries there can be, so that a compaction frees at
   * least that many. Up to 2^32 (mask all ones, uint32_t indices wrap by
   * themselves). */
  l->cap = 16;
  while (l->cap < (uint64_t)n + n / 4 + 16)
    l->cap *= 2;
  l->mask = (uint32_t)(l->cap - 1);
  if ((l->ring = kvp__resident_alloc((size_t)l->cap * sizeof *l->ring, 64)) == NULL)
    return KVP_ENOMEM;
  return 0;
}

void kvp__lru_free(kvp__lru_t *l) {
  free(l->ring);
  l->ring = NULL;
}

/* In place: the write index never passes the read index. */
void kvp__lru_compact(kvp__lru_t *l, kvp__blk_t *blk) {
  uint32_t r = l->head, w = l->head;
  uint64_t live = 0;
  for (uint64_t k = 0; k < l->count; k++, r = kvp__lru_next(l, r)) {
    if (!kvp__lru_live(blk, l->ring[r], r))
      continue;
    uint32_t b = l->ring[r];
    l->ring[w] = b;
    blk[b].link = w;
    w = kvp__lru_next(l, w);
    live++;
  }
  l->tail = w;
  l->count = live;
  l->pf_rec = l->pf_grp = l->head; /* entries moved: prefetch them again */
}

/* Tops up the victims prefetched to a burst: the hash slots and the first
 * pf_bytes bytes of live entries (whose records were prefetched a burst
 * earlier), and the records a burst further on. pf_grp and pf_rec remember
 * how far each went, so that an entry is prefetched once even when pops
 * skip stale entries; behind the head (pops went past them), they start
 * again from it. Out of line: it runs once every half burst of evictions. */
void kvp__lru_prefetch_burst(kvp__lru_t *l, const kvp__map_t *m, const unsigned char *base,
                             size_t stride) {
  const uint32_t *ring = l->ring;
  const kvp__blk_t *blk = m->blk;
  uint32_t head = l->head, mask = l->mask, g = l->pf_grp, r = l->pf_rec;
  uint32_t dg = (g - head) & mask, dr = (r - head) & mask;
  uint64_t n = l->count;
  uint32_t grp_to = (uint32_t)(n < KVP__BURST ? n : KVP__BURST);
  uint32_t rec_to = (uint32_t)(n < 2 * KVP__BURST ? n : 2 * KVP__BURST);
  size_t bytes = l->pf_bytes;

  if (dg > n)
    g = head, dg = 0;
  if (dr > n)
    r = head, dr = 0;
  for (; dr < rec_to; dr++, r = (r + 1) & mask)
    __builtin_prefetch(&blk[ring[r]]);
  for (; dg < grp_to; dg++, g = (g + 1) & mask) {
    uint32_t e = ring[g];
    if (!kvp__lru_live(blk, e, g))
      continue;
    kvp__map_prefetch(m, blk[e].hash);
    for (size_t k = 0; k < bytes; k += 64)
      __builtin_prefetch(base + (size_t)e * stride + k);
  }
  l->pf_rec = r;
  l->pf_grp = g;
}
