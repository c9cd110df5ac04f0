/* A simulated worker's KV cache for trace replays (kvplane-sim).
 *
 * Two fixed-capacity LRU tiers, G1 and G2, keyed by sequence hash. Looking up
 * a request's blocks in order models a prefix-caching engine: a G1 hit is an
 * access, a G2-only hit is onboarded to G1, a miss is computed and stored in
 * G1; a block evicted from G1 is offloaded to G2, and G2 evicts its least
 * recently used block. Every change is emitted as a KV event through a sink
 * (consecutive new blocks of one request as one Stored event with the parent
 * hash). Not thread-safe: one worker thread owns a cache. */
#ifndef KVP_SIM_SIMCACHE_H
#define KVP_SIM_SIMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/event.h"

typedef struct kvp_simcache_s kvp_simcache_t;

typedef struct kvp_simcache_figures_s {
  uint64_t g1_hits, g2_hits, misses, g1_evictions, g2_evictions;
  size_t g1_blocks, g2_blocks;
} kvp_simcache_figures_t;

/* Creates a cache with the given tier capacities (blocks, >= 1) emitting to
 * sink. Returns 0, KVP_EINVAL or KVP_ENOMEM. */
int kvp_simcache_create(kvp_simcache_t **out, size_t g1_blocks, size_t g2_blocks,
                        uint32_t block_tokens, uint64_t block_bytes, kvp_event_sink_t sink);

void kvp_simcache_destroy(kvp_simcache_t *c);

/* Serves one request whose blocks have the sequence hashes seq[0..n). Returns
 * 0 or the first error of the sink (the cache state stays consistent). */
int kvp_simcache_request(kvp_simcache_t *c, const uint64_t *seq, size_t n);

/* Registered set of a tier, in the shape of kvp_snapshot_fn: malloc'd arrays
 * the caller frees; parents[i] == hashes[i] when the block has no parent.
 * Returns 0, KVP_ETIER for tiers other than G1/G2, or KVP_ENOMEM. */
int kvp_simcache_snapshot(void *cache, int tier, uint64_t **hashes, uint64_t **parents, size_t *n);

void kvp_simcache_figures(const kvp_simcache_t *c, kvp_simcache_figures_t *f);

#endif
