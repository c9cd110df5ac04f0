/* Block pools and block states: the advanced API under the block manager
 * (kvplane/blockmgr.h). A manager owns its pools; most embedders use the
 * manager and sequences only, and reach a pool through kvp_blockmgr_pool()
 * for block addresses (kvp_pool_block_layer) and counts. Changing a
 * manager's pool behind its back voids the manager's invariants: these calls
 * are for tools, tests and engines that manage a pool on their own.
 *
 * Not thread-safe: one thread owns a pool. */
#ifndef KVPLANE_BLOCKPOOL_H
#define KVPLANE_BLOCKPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/layout.h"
#include "kvplane/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_block_state_e {
  KVP_BLOCK_RESET = 0,      /* no contents; free */
  KVP_BLOCK_PARTIAL = 1,    /* being filled by one sequence */
  KVP_BLOCK_COMPLETE = 2,   /* full, not yet visible to prefix lookups */
  KVP_BLOCK_REGISTERED = 3, /* hashed and visible to prefix lookups */
} kvp_block_state_t;

/* "reset", "partial", "complete", "registered", or "?". */
const char *kvp_block_state_name(int state);

typedef struct kvp_pool_s kvp_pool_t;

typedef struct kvp_pool_opts_s {
  int tier;              /* KVP_TIER_G1 or KVP_TIER_G2 */
  uint32_t num_blocks;   /* 1 .. 2^31 - 1 */
  kvp_layout_t layout;   /* must pass kvp_layout_check */
  kvp_storage_t storage; /* ops NULL: system */
} kvp_pool_opts_t;

/* Creates a pool with every block Reset and never used. Returns 0 with *out
 * set, KVP_EINVAL / KVP_ETIER / KVP_ETOOBIG for bad options, or KVP_ENOMEM
 * (the storage could not allocate num_blocks * block_stride bytes). */
int kvp_pool_create(const kvp_pool_opts_t *o, kvp_pool_t **out);

/* Frees the pool and its storage. NULL is accepted. */
void kvp_pool_destroy(kvp_pool_t *p);

/* What kvp_pool_alloc had to evict to find a block. */
typedef struct kvp_pool_evicted_s {
  int evicted;          /* 1 when the block came from the cached set */
  uint64_t hash;        /* its sequence hash */
  int has_parent;       /* 0 for the first block of a sequence */
  uint64_t parent_hash; /* its parent's sequence hash */
  uint32_t hits;        /* its prefix hits (carried along when a block moves
                           between tiers; a decoded block found registered
                           already counts as one) */
  int32_t lora_id;      /* LoRA id of the sequence that registered it */
} kvp_pool_evicted_t;

/* Takes a block for writing with one reference, in state Reset: a
 * never-used (or reset) block first, otherwise the least recently used
 * cached block, which is evicted: it leaves the prefix cache and *ev
 * (may be NULL) says which hash it held. The evicted block's bytes are left
 * in place so the caller can copy them elsewhere before writing. Returns 0,
 * or KVP_ENOSPC when every block is referenced (the pool is unchanged). */
int kvp_pool_alloc(kvp_pool_t *p, uint32_t *block, kvp_pool_evicted_t *ev);

/* State transitions of a referenced block. Each returns 0, KVP_EINVAL for a
 * block id out of range or a block with no reference, or KVP_ESTATE when the
 * block is not in the state the transition starts from; nothing changes on
 * error. */
int kvp_block_init_sequence(kvp_pool_t *p, uint32_t block); /* Reset -> Partial */
int kvp_block_commit(kvp_pool_t *p, uint32_t block);        /* Partial -> Complete */
int kvp_block_abort(kvp_pool_t *p, uint32_t block);         /* Partial|Complete -> Reset */

/* Complete -> Registered under seq_hash (parent NULL: the first block of a
 * sequence). Returns KVP_EEXIST, with *existing (may be NULL) set to the
 * block that holds seq_hash already, when the hash is registered in this
 * pool: the caller shares that block (kvp_pool_acquire) and aborts its own,
 * so a hash maps to one block per tier. Otherwise as above. */
int kvp_block_register(kvp_pool_t *p, uint32_t block, uint64_t seq_hash, const uint64_t *parent,
                       uint32_t *existing);

/* Finds the registered block holding seq_hash. Returns 0 with *block set, or
 * KVP_ENOENT. Does not change LRU order or counts. */
int kvp_pool_lookup(const kvp_pool_t *p, uint64_t seq_hash, uint32_t *block);

/* Takes a reference on a registered block; a cached block leaves the
 * inactive set. Returns 0, KVP_EINVAL, or KVP_ESTATE when the block is not
 * registered. */
int kvp_pool_acquire(kvp_pool_t *p, uint32_t block);

/* Drops a reference. At zero a registered block joins the inactive set as
 * the most recently used cached block; a block in any other state is reset
 * (Partial/Complete -> Reset) and freed. Returns 0 or KVP_EINVAL (out of
 * range, or no reference to drop). */
int kvp_pool_release(kvp_pool_t *p, uint32_t block);

/* Evicts a cached block (Registered, no reference -> Reset, freed) without
 * waiting for LRU order. Returns 0, KVP_EINVAL, KVP_EBUSY when it is
 * referenced, or KVP_ESTATE when it is not registered. */
int kvp_pool_evict(kvp_pool_t *p, uint32_t block);

/* Evicts every cached block. Returns how many were evicted. */
size_t kvp_pool_evict_all(kvp_pool_t *p);

/* Introspection of one block: state, reference count, hash (0 unless
 * registered), prefix hits. Out-of-range ids give -1 / 0. */
int kvp_pool_block_state(const kvp_pool_t *p, uint32_t block);
uint32_t kvp_pool_block_refs(const kvp_pool_t *p, uint32_t block);
uint64_t kvp_pool_block_hash(const kvp_pool_t *p, uint32_t block);

/* Address of one layer of one block, for the engine to read or write KV data
 * (a device address for device storage). NULL when out of range. */
void *kvp_pool_block_layer(kvp_pool_t *p, uint32_t block, uint32_t layer);

/* Copies the bytes of block sb of pool src into block db of pool dst (same
 * layout) through dst's storage. Returns 0, KVP_EINVAL, or the storage's
 * error. */
int kvp_pool_copy_block(kvp_pool_t *dst, uint32_t db, const kvp_pool_t *src, uint32_t sb);

typedef struct kvp_pool_counts_s {
  int tier;
  uint32_t capacity;
  uint32_t state[4];  /* blocks per kvp_block_state_t */
  uint32_t active;    /* blocks with a reference */
  uint32_t inactive;  /* blocks without one: free + cached */
  uint32_t free;      /* inactive and Reset */
  uint32_t cached;    /* inactive and Registered (evictable) */
  uint64_t evictions; /* cached blocks evicted, by alloc, evict or evict_all */
} kvp_pool_counts_t;

void kvp_pool_counts(const kvp_pool_t *p, kvp_pool_counts_t *c);

/* Metadata bytes the pool holds per block (block records and the hash
 * table), not counting the blocks' KV bytes. */
size_t kvp_pool_metadata_bytes(const kvp_pool_t *p);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_BLOCKPOOL_H */
