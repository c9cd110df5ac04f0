/* The index's memory cap (index.h): dropping the coldest G1/G2 locations,
 * and the bytes the live content needs. Thread: the advisor's loop thread.
 *
 * The cap is the advisor's ([index] max_memory, max_locations); the index
 * only offers the walk that picks what goes and the figure it is held to. */
#include <stdlib.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/status.h"

/* Map bytes per block at the map's highest fill. */
#define MAP_BYTES_PER_BLOCK (4.0 * LOAD_DEN / LOAD_NUM)

size_t kvp__index_memory_used(const kvp__index_t *ix) {
  return sizeof *ix + (size_t)((double)ix->blocks * (RECORD_BYTES + MAP_BYTES_PER_BLOCK)) +
         kvp__map64_bytes(&ix->parents) + ix->slab_used * sizeof *ix->slab +
         kvp__index_changelog_memory(&ix->log) + kvp__index_intern_memory(&ix->workers) +
         kvp__index_intern_memory(&ix->volumes) +
         ix->shapes.cap * (sizeof *ix->shapes.key + sizeof *ix->shapes.ref) +
         ix->shapes.map_cap * sizeof *ix->shapes.map;
}

size_t kvp__index_blocks_for(size_t bytes) {
  return (size_t)((double)bytes / (RECORD_BYTES + MAP_BYTES_PER_BLOCK));
}

size_t kvp__index_evict(kvp__index_t *ix, unsigned tier_mask, size_t n, kvp__index_evict_fn fn,
                        void *ctx) {
  size_t dropped = 0;
  if (n == 0)
    return 0;
  uint64_t *keys = malloc(n * sizeof *keys);
  if (keys == NULL)
    return 0;
  size_t k = kvp__index_lru_keys(ix, tier_mask, keys, n);
  for (size_t i = 0; i < k; i++) {
    if (i > 0 && keys[i] == keys[i - 1])
      continue; /* a block with two locations in the tiers: taken once */
    uint32_t nd = (uint32_t)(keys[i] & 0xffffffffu);
    size_t cnt, before = dropped;
    uint64_t h = ix->nodes[nd].hash;
    (void)kvp__index_locs(ix, nd, &cnt);
    for (size_t j = cnt; j-- > 0;) {
      uint32_t l = kvp__index_locs(ix, nd, &cnt)[j];
      if (!(tier_mask & (1u << LOC_TIER(l))))
        continue;
      if (fn)
        fn(ctx, h, LOC_WORKER(l), LOC_TIER(l));
      kvp__index_loc_remove(ix, nd, j);
      dropped++;
    }
    if (dropped != before)
      kvp__index_settle_node(ix, nd);
  }
  free(keys);
  return dropped;
}
