/* Queries of the advisor's index: prefix match, block lookup, LRU walk
 * (index.h). They read and never change the index. Thread: the advisor's
 * loop thread. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

#define MATCH_BATCH 64

int kvp__index_match(const kvp__index_t *ix, const uint64_t *hashes, size_t n,
                     kvp__index_match_t *out, size_t cap, size_t *nrows) {
  uint32_t nodes[MATCH_BATCH], prev = 0;
  size_t home[MATCH_BATCH], rows = 0;
  int rc = 0;

  for (size_t base = 0; base < n; base += MATCH_BATCH) {
    size_t m = n - base < MATCH_BATCH ? n - base : MATCH_BATCH, g = 0;
    if (base == 0 && n > 1) {
      /* The first block through the map, alone: its record says where
       * the chain's next ones may be. */
      if ((nodes[0] = prev = kvp__index_find(ix, hashes[0])) == 0)
        goto out;
      g = 1;
    }
    /* A chain comes in one event, and its new blocks get consecutive
     * records: while the record after the last one found holds the next
     * hash, it is that block (hashes are unique, a free record's is 0).
     * Contiguous records, four to a line, are read in order, without the
     * map; at the first one that is not, the map takes the rest. */
    while (prev != 0 && g < m && prev + 1 < ix->nnodes && hashes[base + g] != 0 &&
           ix->nodes[prev + 1].hash == hashes[base + g])
      nodes[g++] = ++prev;
    /* Misses dominate: issue every slot load first, then every record
     * load, so the memory system works on them in parallel. */
    for (size_t i = g; i < m; i++) {
      home[i] = kvp__index_slot_of(hashes[base + i], ix->cap);
      __builtin_prefetch(&ix->slots[home[i]]);
    }
    for (size_t i = g; i < m; i++)
      __builtin_prefetch(&ix->nodes[kvp__index_candidate_at(ix, hashes[base + i], home[i])]);
    for (size_t i = 0; i < m; i++) {
      if (i >= g)
        nodes[i] = kvp__index_find_at(ix, hashes[base + i], home[i]);
      if (nodes[i] && kvp__index_is_ovf(ix->nodes[nodes[i]].loc[1]))
        __builtin_prefetch(&ix->slab[ix->nodes[nodes[i]].loc[0]]);
    }
    prev = nodes[m - 1];
    for (size_t i = 0; i < m; i++) {
      size_t pos = base + i, extended = 0, cnt;
      if (nodes[i] == 0)
        goto out;
      const uint32_t *locs = kvp__index_locs(ix, nodes[i], &cnt);
      /* Newest location first, as the rows have always come. */
      for (size_t k = cnt; k-- > 0;) {
        uint16_t w = LOC_WORKER(locs[k]);
        uint8_t t = (uint8_t)LOC_TIER(locs[k]);
        size_t r;
        for (r = 0; r < rows; r++)
          if (out[r].worker == w && out[r].tier == t)
            break;
        if (r == rows) {
          if (pos != 0)
            continue; /* first seen after position 0: no prefix */
          if (rows == cap) {
            rc = KVP_ENOSPC;
            goto out;
          }
          out[rows++] = (kvp__index_match_t){.worker = w, .tier = t, .length = 0};
        }
        /* Two volumes of one (worker, tier) must not count twice. */
        if (out[r].length == pos) {
          out[r].length = (uint64_t)pos + 1;
          extended++;
        }
      }
      if (extended == 0)
        goto out;
    }
  }
out:
  *nrows = rows;
  return rc;
}

void kvp__index_fill_block(const kvp__index_t *ix, uint32_t n, kvp__index_block_t *b) {
  const meta_t *nd = &ix->meta[n];
  b->hash = ix->nodes[n].hash;
  b->parent = kvp__index_parent_of(ix, n);
  b->tokens = kvp__index_shape_tokens(ix, nd->shape);
  b->bytes = kvp__index_shape_bytes(ix, nd->shape);
  b->last_access_ms =
      nd->last_access_s ? ((uint64_t)nd->last_access_s + KVP__INDEX_EPOCH_S) * 1000 : 0;
  b->hits = nd->hits;
  b->freq = nd->freq;
}

int kvp__index_get(const kvp__index_t *ix, uint64_t hash, kvp__index_block_t *b,
                   kvp__index_loc_t *locs, size_t cap, size_t *nlocs) {
  uint32_t n = kvp__index_find(ix, hash);
  size_t cnt;
  if (n == 0)
    return KVP_ENOENT;
  if (b)
    kvp__index_fill_block(ix, n, b);
  const uint32_t *l = kvp__index_locs(ix, n, &cnt);
  /* Newest first. */
  for (size_t k = 0; k < cnt && k < cap; k++) {
    uint32_t v = l[cnt - 1 - k];
    locs[k].worker = LOC_WORKER(v);
    locs[k].tier = (uint8_t)LOC_TIER(v);
    locs[k].volume = LOC_VOLUME(v);
  }
  if (nlocs)
    *nlocs = cnt;
  return 0;
}

/* --- LRU: coldest first --------------------------------------------------- */

/* A key orders by last access (seconds), then by record id (creation
 * order until freed records are reused, then arbitrary). */
static inline uint64_t lru_key(const kvp__index_t *ix, size_t n) {
  return (uint64_t)ix->meta[n].last_access_s << 32 | (uint64_t)n;
}

static int cmp_key(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Max-heap of keys: the root is the warmest of the coldest kept so far. */
static void sift_down(uint64_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && h[l] > h[m])
      m = l;
    if (r < n && h[r] > h[m])
      m = r;
    if (m == i)
      return;
    uint64_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void sift_up(uint64_t *h, size_t i) {
  while (i > 0 && h[(i - 1) / 2] < h[i]) {
    uint64_t t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

size_t kvp__index_lru_keys(const kvp__index_t *ix, unsigned tier_mask, uint64_t *keys, size_t cap) {
  size_t k = 0;
  if (cap == 0)
    return 0;
  /* One pass over the records keeps the cap coldest locations in a heap
   * (the caller's array): no per-location LRU links to pay for. */
  for (size_t n = 1; n < ix->nnodes; n++) {
    if (!(ix->meta[n].flags & NODE_LIVE))
      continue;
    size_t cnt;
    const uint32_t *l = kvp__index_locs(ix, (uint32_t)n, &cnt);
    for (size_t i = 0; i < cnt; i++) {
      if (!(tier_mask & (1u << LOC_TIER(l[i]))))
        continue;
      uint64_t key = lru_key(ix, n);
      if (k < cap) {
        keys[k++] = key;
        sift_up(keys, k - 1);
      } else if (key < keys[0]) {
        keys[0] = key;
        sift_down(keys, k, 0);
      }
    }
  }
  qsort(keys, k, sizeof *keys, cmp_key);
  return k;
}

size_t kvp__index_lru(const kvp__index_t *ix, int tier, uint64_t *hashes, size_t cap) {
  if (tier < KVP_TIER_G1 || tier > KVP_TIER_G4 || ix->tier_locs[tier] == 0)
    return 0;
  size_t k = kvp__index_lru_keys(ix, 1u << tier, hashes, cap);
  for (size_t i = 0; i < k; i++)
    hashes[i] = ix->nodes[hashes[i] & 0xffffffffu].hash;
  return k;
}
