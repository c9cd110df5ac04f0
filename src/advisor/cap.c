/* The index's hard memory cap; see cap.h. Loop thread. */
#include "advisor/cap.h"

#include <inttypes.h>

#include "common/log.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

#define G12_MASK (1u << KVP_TIER_G1 | 1u << KVP_TIER_G2)

int kvp__adv_cap_init(kvp__adv_cap_t *c, kvp__index_t *ix, uint64_t max_memory,
                      uint64_t max_locations) {
  c->max_memory = max_memory;
  c->max_locations = max_locations;
  c->evicted = c->rounds = c->stuck = 0;
  if (max_memory == 0)
    return 0;
  size_t blocks = kvp__index_blocks_for((size_t)max_memory);
  return kvp__index_reserve(ix, blocks > KVP__INDEX_MAX_BLOCKS ? KVP__INDEX_MAX_BLOCKS : blocks);
}

static int over(const kvp__adv_cap_t *c, const kvp__index_t *ix, uint64_t mem_bound,
                uint64_t loc_bound) {
  kvp__index_stats_t st;
  if (c->max_locations) {
    kvp__index_stats(ix, &st);
    if (st.locations > loc_bound)
      return 1;
  }
  return c->max_memory && kvp__index_memory_used(ix) > mem_bound;
}

size_t kvp__adv_cap_check(kvp__adv_cap_t *c, kvp__index_t *ix) {
  if ((c->max_memory == 0 && c->max_locations == 0) ||
      !over(c, ix, c->max_memory, c->max_locations))
    return 0;
  /* Down to 63/64 of the bound: a walk over the records per 1/64 of the
   * cap, not per insert. */
  uint64_t mem_low = c->max_memory - c->max_memory / 64;
  uint64_t loc_low = c->max_locations - c->max_locations / 64;
  size_t dropped = 0;
  for (int pass = 0; pass < 8 && over(c, ix, mem_low, loc_low); pass++) {
    kvp__index_stats_t st;
    kvp__index_stats(ix, &st);
    size_t want = 0;
    if (c->max_locations && st.locations > loc_low)
      want = st.locations - (size_t)loc_low;
    if (c->max_memory) {
      size_t used = kvp__index_memory_used(ix);
      if (used > mem_low && st.locations) {
        /* Bytes over -> locations, at the current bytes per location. */
        size_t per = used / st.locations + 1, n = (size_t)(used - mem_low) / per + 1;
        want = n > want ? n : want;
      }
    }
    size_t n = kvp__index_evict(ix, G12_MASK, want, NULL, NULL);
    dropped += n;
    if (n == 0)
      break; /* nothing left in G1/G2 (or no memory for the walk) */
  }
  c->evicted += dropped;
  c->rounds++;
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  if (over(c, ix, c->max_memory, c->max_locations)) {
    c->stuck++;
    kvp_log_warn("advisor: index over its cap ([index] max_memory %" PRIu64
                 " B, max_locations %" PRIu64 ") with %zu locations, %zu in G3/G4, "
                 "which are never dropped: %zu G1/G2 locations dropped",
                 c->max_memory, c->max_locations, st.locations,
                 st.tier_locations[KVP_TIER_G3] + st.tier_locations[KVP_TIER_G4], dropped);
  } else {
    kvp_log_info("advisor: index at its cap: the %zu coldest G1/G2 locations dropped "
                 "(%" PRIu64 " in all); %zu locations, %zu bytes in use",
                 dropped, c->evicted, st.locations, kvp__index_memory_used(ix));
  }
  return dropped;
}

int64_t kvp__adv_cap_headroom_bytes(const kvp__adv_cap_t *c, const kvp__index_t *ix) {
  if (c->max_memory == 0)
    return 0;
  return (int64_t)c->max_memory - (int64_t)kvp__index_memory_used(ix);
}

int64_t kvp__adv_cap_headroom_locations(const kvp__adv_cap_t *c, const kvp__index_t *ix) {
  if (c->max_locations == 0)
    return 0;
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  return (int64_t)c->max_locations - (int64_t)st.locations;
}
