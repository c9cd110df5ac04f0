/* The index's hard memory cap ([index] max_memory, max_locations; issue 27).
 *
 * Past either bound the coldest G1/G2 locations are dropped (the index's
 * LRU walk, kvp__index_evict) down to 63/64 of it, so one walk serves many
 * inserts. G3/G4 locations are the tiering engine's and never dropped:
 * when they alone exceed the cap, the index stays over it and says so.
 * Every drop is counted, logged (one line per eviction round) and reaches
 * the store as a removal; the headroom is a metric.
 *
 * With max_memory the index is reserved at start for the blocks that many
 * bytes hold, so the map and the record pool never grow past the cap.
 *
 * Thread: the advisor's loop thread (it owns the index). */
#ifndef KVP_ADVISOR_CAP_H
#define KVP_ADVISOR_CAP_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

typedef struct kvp__adv_cap_s {
  uint64_t max_memory;    /* bytes, 0: none */
  uint64_t max_locations; /* 0: none */
  uint64_t evicted;       /* locations dropped, in all */
  uint64_t rounds;        /* eviction rounds */
  uint64_t stuck;         /* rounds that could not get under (G3/G4 alone over it) */
} kvp__adv_cap_t;

/* Sets the bounds and reserves the index for max_memory. Returns 0 or the
 * index's KVP_ENOMEM / KVP_ENOSPC. */
int kvp__adv_cap_init(kvp__adv_cap_t *c, kvp__index_t *ix, uint64_t max_memory,
                      uint64_t max_locations);

/* Enforces the bounds: returns the locations dropped (0 when under). */
size_t kvp__adv_cap_check(kvp__adv_cap_t *c, kvp__index_t *ix);

/* What is left before the bound: bytes below max_memory, locations below
 * max_locations (negative when over; 0 when that bound is not set). */
int64_t kvp__adv_cap_headroom_bytes(const kvp__adv_cap_t *c, const kvp__index_t *ix);
int64_t kvp__adv_cap_headroom_locations(const kvp__adv_cap_t *c, const kvp__index_t *ix);

#endif
