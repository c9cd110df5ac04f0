/* Queries of the advisor's index: prefix match, block lookup, LRU walk
 * (index.h). They read and never change the index. Thread: the advisor's
 * loop thread. */
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

#define MATCH_BATCH 64

int kvp__index_match(const kvp__index_t *ix, const uint64_t *hashes, size_t n,
                     kvp__index_match_t *out, size_t cap, size_t *nrows) {
  uint32_t nodes[MATCH_BATCH];
  size_t rows = 0;
  int rc = 0;

  for (size_t base = 0; base < n; base += MATCH_BATCH) {
    size_t m = n - base < MATCH_BATCH ? n - base : MATCH_BATCH;
    /* Misses dominate: issue every slot load first, then every node load,
     * so the memory system works on them in parallel. */
    for (size_t i = 0; i < m; i++)
      __builtin_prefetch(&ix->slots[kvp__index_slot_of(hashes[base + i], ix->mask)]);
    for (size_t i = 0; i < m; i++)
      __builtin_prefetch(&ix->nodes[kvp__index_candidate(ix, hashes[base + i])]);
    for (size_t i = 0; i < m; i++) {
      nodes[i] = kvp__index_find(ix, hashes[base + i]);
      if (nodes[i])
        __builtin_prefetch(&ix->locs[ix->nodes[nodes[i]].loc_head]);
    }
    for (size_t i = 0; i < m; i++) {
      size_t pos = base + i, extended = 0;
      if (nodes[i] == 0)
        goto out;
      for (uint32_t l = ix->nodes[nodes[i]].loc_head; l; l = ix->locs[l].next) {
        const loc_t *lc = &ix->locs[l];
        uint16_t w = kvp__index_loc_worker(lc);
        uint8_t t = (uint8_t)kvp__index_loc_tier(lc);
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

static void fill_block(const kvp__index_t *ix, const node_t *nd, kvp__index_block_t *b) {
  b->hash = nd->hash;
  b->parent = nd->parent;
  b->tokens = nd->tokens;
  b->bytes = nd->bytes;
  b->last_access_ms =
      nd->last_access_s ? ((uint64_t)nd->last_access_s + KVP__INDEX_EPOCH_S) * 1000 : 0;
  b->hits = nd->hits;
  b->freq = nd->freq;
  (void)ix;
}

int kvp__index_get(const kvp__index_t *ix, uint64_t hash, kvp__index_block_t *b,
                   kvp__index_loc_t *locs, size_t cap, size_t *nlocs) {
  uint32_t n = kvp__index_find(ix, hash);
  size_t k = 0;
  if (n == 0)
    return KVP_ENOENT;
  if (b)
    fill_block(ix, &ix->nodes[n], b);
  for (uint32_t l = ix->nodes[n].loc_head; l; l = ix->locs[l].next, k++) {
    if (k < cap) {
      locs[k].worker = kvp__index_loc_worker(&ix->locs[l]);
      locs[k].tier = (uint8_t)kvp__index_loc_tier(&ix->locs[l]);
      locs[k].volume = ix->locs[l].volume;
    }
  }
  if (nlocs)
    *nlocs = k;
  return 0;
}

size_t kvp__index_lru(const kvp__index_t *ix, int tier, uint64_t *hashes, size_t cap) {
  size_t k = 0;
  if (tier < KVP_TIER_G1 || tier > KVP_TIER_G4)
    return 0;
  for (uint32_t l = ix->lru_tail[tier]; l && k < cap; l = ix->locs[l].lru_prev)
    hashes[k++] = ix->nodes[ix->locs[l].node].hash;
  return k;
}
