/* Embedded block manager (DESIGN.md, "Block manager").
 *
 * The library an inference worker embeds to own its KV-cache blocks, modelled
 * on Dynamo's KVBM block pools and vLLM's prefix-caching block pool:
 *
 *   layout    a block is [num_layers][page_size x inner_dim] elements;
 *   storage   where a pool's bytes live (system heap now; pinned or device
 *             memory later, behind the same kvp_storage_ops_t);
 *   pool      one per tier (G1, G2): a fixed number of blocks, an active set
 *             (referenced by sequences) and an inactive set (never-used
 *             blocks, then registered blocks cached in LRU order);
 *   block     Reset -> Partial -> Complete -> Registered, reference counted;
 *   sequence  prompt tokens -> chained sequence hashes -> blocks, prefix hits
 *             shared, decode appends, free;
 *   manager   the pools of one worker plus offload G1 -> G2 and onboarding
 *             G2 -> G1, emitting Stored/Removed/Accessed/Cleared events
 *             through a kvp_event_sink_t (the publisher is one).
 *
 * Not thread-safe: one scheduler thread owns a manager, its pools and its
 * sequences (as in vLLM). The sink it feeds may be thread-safe (the
 * publisher's is).
 *
 * Events of one call: a call that evicts (kvp_seq_allocate, _append, _free
 * under write-through) queues its evictions and offloads and emits them
 * coalesced before anything else it emits: one Removed G2 (G2's own
 * evictions), Stored G2 for the offloaded blocks (one event per chain), one
 * Removed G1. A block moving G1 -> G2 is thus Stored in G2 before it is
 * Removed from G1, never absent from both. Then kvp_seq_allocate emits
 * Accessed G1 (the shared prefix), Accessed G2 (the onboarded blocks) and
 * Stored G1 (the blocks it registered, one event per run). Replaying the
 * events in order always gives the registered sets (kvp_blockmgr_snapshot).
 *
 * Sink failures: an event is emitted after the state change it describes is
 * done, so an operation never fails because its event could not be queued.
 * A sink error is counted (kvp_blockmgr_stats.event_errors) and the operation
 * returns as it would have; the publisher already marks such a loss as a gap
 * and repairs it with a snapshot (kvp_blockmgr_snapshot).
 */
#ifndef KVPLANE_BLOCKMGR_H
#define KVPLANE_BLOCKMGR_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/blockpool.h"
#include "kvplane/event.h"
#include "kvplane/layout.h"
#include "kvplane/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Manager ----------------------------------------------------------- */

typedef struct kvp_blockmgr_s kvp_blockmgr_t;

typedef enum kvp_offload_e {
  KVP_OFFLOAD_ON_EVICT = 0,      /* copy a block to G2 when G1 evicts it (default) */
  KVP_OFFLOAD_WRITE_THROUGH = 1, /* copy to G2 as soon as its data is final: when
                                    the last sequence holding it releases it
                                    (the engine may still be computing a block
                                    at registration), not at eviction */
  KVP_OFFLOAD_NONE = 2,          /* never: G2 stays empty */
} kvp_offload_t;

typedef struct kvp_blockmgr_opts_s {
  kvp_layout_t layout;
  uint32_t g1_blocks; /* >= 1; g1_blocks + g2_blocks < 2^31 */
  uint32_t g2_blocks; /* 0: no host tier */
  kvp_storage_t g1_storage;
  kvp_storage_t g2_storage;
  int offload;               /* kvp_offload_t */
  uint32_t offload_min_hits; /* frequency filter: offload only blocks with at
                                least this many prefix hits; 0 admits all */
  kvp_event_sink_t sink;     /* emit NULL: no events */
  /* G3 and G4 (include/kvplane/volume.h), both optional, neither owned. A
   * block evicted from G2 is offloaded to g3 (the frequency filter
   * applies) by g3_threads worker threads, off the scheduler thread; it is
   * announced Stored in G3 only once the put succeeded, and a failed or
   * dropped put (queue of g3_queue blocks full) loses only the copy. A
   * prefix lookup that misses G1 and G2 reads the next blocks from g3 (the
   * blocks this manager put there), then from g4 (shared, read only),
   * straight into G1 blocks, verified; they are announced Accessed in their
   * tier. Requires G1 in system memory. */
  struct kvp_volume_s *g3;
  struct kvp_volume_s *g4;
  const char *volume_ns; /* key namespace in the volumes; default "default" */
  uint32_t g3_threads;   /* default 1 */
  uint32_t g3_queue;     /* blocks waiting to be put, each a copy; default 64 */
  uint32_t g3_min_hits;  /* frequency filter for G3: a G2 victim goes only with at
                            least this many prefix hits (0 admits all) */
  int g3_wait;           /* queue full: 0 drops the copy (counted), 1 makes the
                            scheduler wait for room (replays faster than real
                            time that want every block in G3) */
} kvp_blockmgr_opts_t;

/* Zeroes o and sets the defaults (offload on eviction, no filter). */
void kvp_blockmgr_opts_init(kvp_blockmgr_opts_t *o);

/* Returns 0 with *out set, KVP_EINVAL / KVP_ETOOBIG for bad options (a bad
 * layout, g1_blocks 0, an unknown offload policy; KVP_ETOOBIG for 2^31 or
 * more blocks in G1 and G2 together), KVP_ENOTSUP for volumes with G1 not
 * in system memory, or KVP_ENOMEM. */
int kvp_blockmgr_create(const kvp_blockmgr_opts_t *o, kvp_blockmgr_t **out);

/* Frees the manager, its pools and every sequence not yet freed (their
 * handles become invalid). Emits nothing. NULL is accepted. */
void kvp_blockmgr_destroy(kvp_blockmgr_t *bm);

/* Replaces the event sink (emit NULL: no events). For embedders whose sink
 * needs the manager first, such as a publisher whose snapshot callback is
 * the manager's: create the manager, open the publisher, then set the sink
 * before the first sequence. */
void kvp_blockmgr_set_sink(kvp_blockmgr_t *bm, kvp_event_sink_t sink);

/* Waits until every G2 victim queued for G3 is put (or failed); their
 * events are emitted by then. A no-op without G3. */
void kvp_blockmgr_drain(kvp_blockmgr_t *bm);

/* The pool of a tier (G1, or G2 when configured), or NULL. For block
 * addresses and introspection; changing its state behind the manager's
 * back voids the manager's invariants. */
kvp_pool_t *kvp_blockmgr_pool(kvp_blockmgr_t *bm, int tier);

/* Drops every cached block of every tier and emits AllBlocksCleared (all
 * tiers). Returns 0, or KVP_EBUSY (nothing changed) while a sequence holds
 * blocks. */
int kvp_blockmgr_reset(kvp_blockmgr_t *bm);

/* The registered set of a tier: malloc'd arrays the caller frees (both NULL
 * when the set is empty), parents[i] == hashes[i] when the block has no
 * parent. Returns 0, KVP_ETIER for a tier the manager does not have, or
 * KVP_ENOMEM. */
int kvp_blockmgr_snapshot(kvp_blockmgr_t *bm, int tier, uint64_t **hashes, uint64_t **parents,
                          size_t *n);

/* kvp_blockmgr_snapshot in the shape of the publisher's kvp_snapshot_fn,
 * with the manager as ctx. */
int kvp_blockmgr_snapshot_fn(void *bm, int tier, uint64_t **hashes, uint64_t **parents, size_t *n);

typedef struct kvp_blockmgr_stats_s {
  kvp_pool_counts_t g1, g2;   /* g2.capacity 0 when there is no G2 */
  uint64_t sequences;         /* live sequences */
  uint64_t lookups;           /* full blocks looked up by kvp_seq_allocate */
  uint64_t hits_g1;           /* found registered in G1 */
  uint64_t hits_g2;           /* found only in G2 and onboarded */
  uint64_t onboards;          /* blocks copied G2 -> G1 */
  uint64_t offloads;          /* blocks copied G1 -> G2 */
  uint64_t offloads_filtered; /* times the frequency filter kept a block out of
                                 G2: at eviction, or under write-through each
                                 time the block was cached again */
  uint64_t dedups;            /* filled blocks whose hash was registered already */
  uint64_t events;            /* events emitted */
  uint64_t event_errors;      /* events the sink refused */
  double hit_rate;            /* (hits_g1 + hits_g2 + hits_g3 + hits_g4) / lookups, 0 when
                                 no lookups */
  size_t metadata_bytes;      /* pools' metadata (kvp_pool_metadata_bytes), both tiers */
  /* G3/G4 (0 without volumes). */
  uint64_t g3_blocks;           /* blocks this manager holds in G3 */
  uint64_t offloads_g3;         /* blocks put to G3 */
  uint64_t offloads_g3_failed;  /* puts that failed (the copy is lost, counted) */
  uint64_t offloads_g3_dropped; /* G2 victims not queued: queue full */
  uint64_t hits_g3, hits_g4;    /* blocks onboarded from G3 / G4 into G1 */
  uint64_t lower_gone;          /* G3 blocks no longer there (moved by the advisor) */
  uint64_t lower_corrupt;       /* reads that failed verification: misses, never served */
  uint64_t offloads_g3_full;    /* G2 victims not put: G3 would pass its capacity (stat) */
} kvp_blockmgr_stats_t;

void kvp_blockmgr_stats(const kvp_blockmgr_t *bm, kvp_blockmgr_stats_t *s);

/* ---- Sequences --------------------------------------------------------- */

typedef struct kvp_seq_s kvp_seq_t;

/* A request's token sequence. Hashes the full blocks of tokens at once
 * (hash.h, salted by lora_name when set; lora_id goes into Stored events);
 * the sequence keeps the hashes and the tokens of its trailing partial
 * block, not the whole prompt. Holds no blocks until kvp_seq_allocate.
 * Returns 0, KVP_EINVAL, or KVP_ENOMEM. */
int kvp_seq_create(kvp_blockmgr_t *bm, const uint32_t *tokens, size_t ntokens,
                   const char *lora_name, int32_t lora_id, kvp_seq_t **out);

/* A sequence from the sequence hashes of its full blocks, for engines that
 * hash their own blocks (vLLM's scheduler computes block hashes itself) and
 * for replays. The hashes must be chained under kvp_hash_seed(lora_name),
 * so that decode appends (hashed here) continue the chain. No partial tail.
 * Returns 0, KVP_EINVAL, or KVP_ENOMEM. */
int kvp_seq_create_hashed(kvp_blockmgr_t *bm, const uint64_t *hashes, size_t nhashes,
                          const char *lora_name, int32_t lora_id, kvp_seq_t **out);

/* Gives the sequence blocks for all its tokens: the longest prefix of its
 * full blocks found registered in G1 is shared (reference counted, Accessed
 * G1); blocks found only in G2 after that are onboarded (a new G1 block, the
 * bytes copied, Stored G1 + Accessed G2); the rest are new blocks, filled
 * ones registered (Stored G1, consecutive blocks in one event with the
 * parent hash), a trailing partial block left Partial. New blocks evict the
 * least recently used cached G1 blocks (Removed G1, and offload to G2 by
 * policy: Stored G2, with G2's own evictions as Removed G2).
 * Returns 0, KVP_EINVAL when already allocated, KVP_ENOSPC when G1 has too
 * few free or evictable blocks, or KVP_ENOMEM: on error the sequence, the
 * pools and the event stream are unchanged. */
int kvp_seq_allocate(kvp_seq_t *s);

/* Appends one decoded token. A new block is taken when the tail is full; a
 * block that fills is committed, hashed and registered (Stored G1; when its
 * hash is registered already the sequence shares that block instead).
 * Returns 0, KVP_EINVAL before kvp_seq_allocate, KVP_ENOSPC (no block for
 * a new tail) or KVP_ENOMEM; on error nothing changed and the token was not
 * appended. */
int kvp_seq_append(kvp_seq_t *s, uint32_t token);

/* Releases the sequence's blocks, last block first so a shared prefix
 * outlives its tails in the LRU order, and frees the sequence. Registered
 * blocks stay cached; partial ones are reset. NULL is accepted. */
void kvp_seq_free(kvp_seq_t *s);

size_t kvp_seq_num_tokens(const kvp_seq_t *s);

/* Tokens covered by prefix hits (G1 and G2) at allocation. */
size_t kvp_seq_cached_tokens(const kvp_seq_t *s);

/* The sequence's G1 block ids in order (*n of them; NULL before allocate). */
const uint32_t *kvp_seq_blocks(const kvp_seq_t *s, size_t *n);

/* Sequence hashes of its full blocks (*n of them). */
const uint64_t *kvp_seq_hashes(const kvp_seq_t *s, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_BLOCKMGR_H */
