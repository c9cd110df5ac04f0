/* A tier pool as the block manager sees it: the pool composes the block
 * records (record.h), the hash table (map.h), the LRU ring (lru.h) and a
 * free stack, and offers the manager the operations below; the manager's
 * files (blockmgr.c, seq.c, events.c, tiers.c) use these and never the
 * pool's fields. The public, checked API is include/kvplane/blockpool.h
 * (pool.c). Private to src/block.
 *
 * The operations that run per block of a sequence (find, pop, register,
 * release, offload) are inline, and forced inline where GCC would keep
 * them out of line: they compile into the manager's loops instead of a call
 * per step. Single-threaded, like the manager: the caller serializes. */
#ifndef KVP_BLOCK_POOL_H
#define KVP_BLOCK_POOL_H

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "block/lru.h"
#include "block/map.h"
#include "block/record.h"
#include "kvplane/blockpool.h"
#include "kvplane/status.h"

/* Most blocks in a pool, and in the pools sharing one table. */
#define KVP__POOL_MAX_BLOCKS KVP__MAP_MAX_BLOCKS

/* Told of a cached block evicted by kvp__pool_put_cached, with its record
 * and its bytes, before they are overwritten (the manager offloads G2
 * victims to G3). */
typedef void (*kvp__victim_fn)(void *ctx, const kvp_pool_evicted_t *ev, const void *bytes);

struct kvp_pool_s {
  int tier;
  uint32_t n;
  kvp__blk_t *blk;
  kvp__map_t map;     /* this pool's view of the table (owns_map: its own) */
  kvp__lru_t lru;     /* cached blocks */
  uint32_t free_head; /* free blocks, a stack linked through link */
  int owns_map;
  struct kvp_pool_s *peer; /* the other pool using the same table, or NULL */
  kvp_layout_t layout;
  size_t block_stride, layer_stride;
  kvp_storage_t storage;
  int system; /* storage is kvp_storage_system() */
  unsigned char *base;
  size_t bytes;
  uint32_t nstate[4];
  uint32_t nactive, nfree, ncached;
  uint64_t evictions;
  kvp__victim_fn on_victim; /* NULL: nobody */
  void *victim_ctx;
};

/* Creates pool o, its hash table sized for table_blocks blocks (o's and
 * those of the pools that will share it; at least o->num_blocks), or, with
 * share set, using share's table as its second view. Otherwise as
 * kvp_pool_create. (pool.c) */
int kvp__pool_create(const kvp_pool_opts_t *o, uint64_t table_blocks, kvp_pool_t *share,
                     kvp_pool_t **out);

/* Whether a storage is kvp_storage_system() (copies are a memcpy).
 * (layout.c) */
int kvp__storage_is_system(const kvp_storage_t *s);

/* Copies the hash and parent of each Registered block, in block order,
 * into hashes[k] and parents[k] (a root's parent is its own hash), up to
 * cap of them. Returns how many. (pool.c) */
size_t kvp__pool_list_registered(const kvp_pool_t *p, uint64_t *hashes, uint64_t *parents,
                                 size_t cap);

/* ---- settings, read-outs ---- */

/* Evictions prefetch the first `bytes` bytes of each victim to come. */
static inline void kvp__pool_set_prefetch_bytes(kvp_pool_t *p, uint32_t bytes) {
  p->lru.pf_bytes = bytes;
}

static inline void kvp__pool_set_victim_hook(kvp_pool_t *p, kvp__victim_fn fn, void *ctx) {
  p->on_victim = fn;
  p->victim_ctx = ctx;
}

static inline int kvp__pool_is_system(const kvp_pool_t *p) {
  return p->system;
}

/* Blocks the pool could hand out now: free, or cached (evictable). */
static inline size_t kvp__pool_available(const kvp_pool_t *p) {
  return (size_t)p->nfree + p->ncached;
}

static inline int kvp__pool_has_free(const kvp_pool_t *p) {
  return p->free_head != KVP__NIL;
}

/* Whether any block is referenced. */
static inline int kvp__pool_busy(const kvp_pool_t *p) {
  return p->nactive > 0;
}

static inline uint32_t kvp__pool_registered(const kvp_pool_t *p) {
  return p->nstate[KVP_BLOCK_REGISTERED];
}

/* Block b's record, to read (hash, parent, lora_id, hits). */
static inline const kvp__blk_t *kvp__pool_rec(const kvp_pool_t *p, uint32_t b) {
  return &p->blk[b];
}

static inline int kvp__pool_is_cached(const kvp_pool_t *p, uint32_t b) {
  return p->blk[b].where == KVP__CACHED;
}

static inline uint32_t kvp__pool_refs(const kvp_pool_t *p, uint32_t b) {
  return p->blk[b].refs;
}

/* The bit each record lends to the pool's owner (the manager's scratch:
 * blocks met in one call, G2 blocks whose Stored event is queued). The
 * pool never reads or writes it; it is 0 when a pool is created. It lives
 * in the record because the owner tests it when the record's line is
 * loaded anyway. */
static inline int kvp__pool_lent(const kvp_pool_t *p, uint32_t b) {
  return p->blk[b].lent;
}

static inline void kvp__pool_lend(kvp_pool_t *p, uint32_t b, int v) {
  p->blk[b].lent = (uint8_t)(v != 0);
}

/* ---- lookups ---- */

/* The block registered under h, or KVP__NIL. */
static inline uint32_t kvp__pool_find(const kvp_pool_t *p, uint64_t h) {
  return kvp__map_find(&p->map, h);
}

/* For a pass over hashes[0, n) at index i: keeps their table lines
 * prefetched a burst ahead (pf: 0 before the pass). */
static inline void kvp__pool_prefetch_ahead(const kvp_pool_t *p, const uint64_t *hashes, size_t n,
                                            size_t i, size_t *pf) {
  kvp__map_prefetch_ahead(&p->map, hashes, n, i, pf);
}

/* Prefetches the first line of block b's bytes. */
static inline void kvp__pool_prefetch_block(const kvp_pool_t *p, uint32_t b) {
  __builtin_prefetch(p->base + (size_t)b * p->block_stride);
}

/* ---- records ---- */

/* Sets a block's state, keeping the per-state counts. */
static inline void kvp__pool_set_state(kvp_pool_t *p, kvp__blk_t *x, int state) {
  p->nstate[x->state]--;
  p->nstate[state]++;
  x->state = (uint8_t)state;
}

/* A prefix hit on block b, counted up to KVP__HITS_MAX. */
static inline void kvp__pool_hit(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  if (x->hits < KVP__HITS_MAX)
    x->hits++;
}

/* Block b starts with `hits` (an onboarded copy keeps its count). */
static inline void kvp__pool_set_hits(kvp_pool_t *p, uint32_t b, uint32_t hits) {
  p->blk[b].hits = (uint16_t)(hits < KVP__HITS_MAX ? hits : KVP__HITS_MAX);
}

/* Registered block b of the table's owner: the other pool holds its hash
 * too now, so its eviction must look there (kvp__pool_slot_and_peer). */
static inline void kvp__pool_set_twin(kvp_pool_t *p, uint32_t b) {
  p->blk[b].twin = 1;
}

/* A block's record back to Reset: no hash, no parent, no hits. */
static inline void kvp__pool_clear_record(kvp_pool_t *p, kvp__blk_t *x) {
  kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
  x->hash = x->parent = 0;
  x->has_parent = 0;
  x->twin = 0;
  x->loc = KVP__LOC_FAR;
  x->hits = 0;
}

/* ---- free stack ---- */

static inline void kvp__pool_free_push(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  x->where = KVP__FREE;
  x->link = p->free_head;
  p->free_head = b;
  p->nfree++;
}

/* Takes b, the top of the free stack, off it. */
static inline void kvp__pool_free_pop(kvp_pool_t *p, uint32_t b) {
  p->free_head = p->blk[b].link;
  p->nfree--;
}

/* ---- bytes ---- */

/* Host blocks up to this many bytes, a multiple of 16, are copied inline
 * (kvp__pool_copy_raw); others go through memcpy. */
#define KVP__SMALL_COPY 256

typedef unsigned char kvp__v16_t __attribute__((vector_size(16)));

/* Copies block sb of src to block db of dst, both valid, of one layout (a
 * manager's pools): kvp_pool_copy_block without the checks. */
static inline int kvp__pool_copy_raw(kvp_pool_t *dst, uint32_t db, const kvp_pool_t *src,
                                     uint32_t sb) {
  size_t n = dst->block_stride;
  unsigned char *d = dst->base + (size_t)db * n;
  const unsigned char *from = src->base + (size_t)sb * n;

  if (!(dst->system && src->system))
    return dst->storage.ops->copy(dst->storage.ctx, d, &src->storage, from, n);
  /* Host to host, the common case: a few 16-byte moves beat a call into
   * memcpy for small blocks. */
  if (n <= KVP__SMALL_COPY && n % 64 == 0) {
    for (size_t k = 0; k < n; k += 64) {
      kvp__v16_t v[4];
      memcpy(v, from + k, 64);
      memcpy(d + k, v, 64);
    }
  } else if (n <= KVP__SMALL_COPY && n % 16 == 0) {
    for (size_t k = 0; k < n; k += 16) {
      kvp__v16_t v;
      memcpy(&v, from + k, 16);
      memcpy(d + k, &v, 16);
    }
  } else {
    memcpy(d, from, n);
  }
  return 0;
}

/* ---- the manager's steps ---- */

/* Takes the least recently used cached block out of the cached set: its
 * record (hash, parent, hits, lora_id) and its table entry stay as they
 * were, for the caller to read and then drop (kvp__pool_unmap,
 * kvp__pool_delete_at) or move (kvp__pool_put_cached). The block must then
 * go through kvp__pool_reuse. Returns KVP__NIL when no block is cached.
 * Counts an eviction. */
static inline uint32_t kvp__pool_pop_lru(kvp_pool_t *p) {
  uint32_t b = kvp__lru_pop(&p->lru, p->blk);

  if (b == KVP__NIL)
    return KVP__NIL;
  kvp__lru_prefetch_victims(&p->lru, &p->map, p->base, p->block_stride);
  p->blk[b].where = KVP__ACTIVE; /* in transit: neither cached nor counted active */
  p->ncached--;
  p->evictions++;
  return b;
}

/* Removes block b's table entry. */
static inline void kvp__pool_unmap(kvp_pool_t *p, uint32_t b) {
  kvp__map_delete(&p->map, p->blk[b].hash, b);
}

/* Registered block b of the table's owner (hash in its record): returns
 * the slot of its entry, and sets *other to the peer pool's block under
 * the same hash, or KVP__NIL. The peer is searched only when b's record
 * says it may hold the hash (twin); otherwise the record says where the
 * entry is, with no load of the table. */
static inline uint64_t kvp__pool_slot_and_peer(const kvp_pool_t *p, uint32_t b, uint32_t *other) {
  const kvp__blk_t *x = &p->blk[b];

  *other = KVP__NIL;
  if (x->twin && p->peer != NULL)
    return kvp__map_pair(&p->map, &p->peer->map, x->hash, b, other);
  return kvp__map_slot_of(&p->map, x->hash, b);
}

/* Empties table slot i, block b's entry (from kvp__pool_slot_and_peer). */
static inline void kvp__pool_delete_at(kvp_pool_t *p, uint64_t i, uint32_t b) {
  kvp__map_delete_at(&p->map, i, p->blk[b].hash);
}

/* A block from kvp__pool_pop_lru, its entry gone, becomes active: Reset,
 * one reference, its record cleared. */
static inline void kvp__pool_reuse(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  kvp__pool_clear_record(p, x);
  x->refs = 1;
  x->lora_id = 0;
  p->nactive++;
}

/* Registers block x (b) under seq_hash, or finds the block that holds it
 * already (*existing, KVP_EEXIST; x unchanged). */
static inline int kvp__pool_register_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b,
                                          uint64_t seq_hash, const uint64_t *parent,
                                          uint32_t *existing) {
  uint64_t slot = 0;
  uint32_t other;
  int twin = 0;

  if ((other = kvp__map_probe(&p->map, seq_hash, &slot, &twin)) != KVP__NIL) {
    if (existing)
      *existing = other;
    return KVP_EEXIST;
  }
  kvp__map_put(&p->map, slot, seq_hash, b);
  x->twin = (uint8_t)twin;
  x->hash = seq_hash;
  x->has_parent = parent != NULL;
  x->parent = parent ? *parent : 0;
  kvp__pool_set_state(p, x, KVP_BLOCK_REGISTERED);
  return 0;
}

/* kvp_block_register for a block the caller holds, Reset (just taken and
 * filled at once) or Complete, without the checks; on success the block
 * also gets lora_id. KVP_EEXIST (*existing) leaves the block as it was. */
static inline int kvp__pool_register_own(kvp_pool_t *p, uint32_t block, uint64_t seq_hash,
                                         const uint64_t *parent, int32_t lora_id,
                                         uint32_t *existing) {
  kvp__blk_t *x = &p->blk[block];
  int rc = kvp__pool_register_held(p, x, block, seq_hash, parent, existing);
  if (rc == 0)
    x->lora_id = lora_id;
  return rc;
}

/* Drops a reference of held block x (b); the last one caches or frees it. */
static inline void kvp__pool_release_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b) {
  if (--x->refs > 0)
    return;
  p->nactive--;
  if (x->state == KVP_BLOCK_REGISTERED) {
    p->ncached++;
    kvp__lru_push(&p->lru, p->blk, b);
  } else {
    kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
    kvp__pool_free_push(p, b);
  }
}

/* kvp_pool_release of each of blocks[0..n), which the caller holds, last
 * first, without the checks. */
static inline void kvp__pool_release_own(kvp_pool_t *p, const uint32_t *blocks, size_t n) {
  for (size_t i = n; i-- > 0;)
    kvp__pool_release_held(p, &p->blk[blocks[i]], blocks[i]);
}

/* Tells the victim hook of cached block b, about to be overwritten. */
static inline void kvp__pool_tell_victim(const kvp_pool_t *p, uint32_t b) {
  const kvp__blk_t *x = &p->blk[b];
  kvp_pool_evicted_t ev = {.evicted = 1,
                           .hash = x->hash,
                           .has_parent = x->has_parent,
                           .parent_hash = x->parent,
                           .hits = x->hits,
                           .lora_id = x->lora_id};
  p->on_victim(p->victim_ctx, &ev, p->base + (size_t)b * p->block_stride);
}

#define KVP__NO_MOVE UINT64_MAX
/* Copies block sb of src into a block of p taken as kvp_pool_alloc would
 * (a free block, else the LRU cached one, whose hash goes to *evicted_hash
 * with *evicted = 1; *block is the block taken) and leaves it Registered
 * under sb's hash and cached, most recently used; in one step, for
 * offload. p and src have one layout (a manager's pools: the copy is
 * unchecked). The hash must not be registered in p. With move a slot (src
 * shares p's table, sb is mapped at that slot, from
 * kvp__pool_slot_and_peer), sb's entry becomes the new block's: sb is no
 * longer found in src; with KVP__NO_MOVE, sb is left alone. The new block
 * takes sb's parent, hits and lora_id. Returns 0, KVP_ENOSPC (every block
 * referenced), or the copy's error (the block taken stays free, sb stays
 * mapped). */
KVP__HOT int kvp__pool_put_cached(kvp_pool_t *p, const kvp_pool_t *src, uint32_t sb, uint64_t move,
                                  int *evicted, uint64_t *evicted_hash, uint32_t *block) {
  const kvp__blk_t *y = &src->blk[sb];
  uint64_t hash = y->hash;
  uint32_t b = p->free_head;
  kvp__blk_t *x;
  int rc = 0;

  *evicted = 0;
  if (b != KVP__NIL) {
    kvp__pool_free_pop(p, b);
    kvp__pool_set_state(p, &p->blk[b], KVP_BLOCK_REGISTERED);
  } else {
    if ((b = kvp__pool_pop_lru(p)) == KVP__NIL) {
      *block = KVP__NIL;
      return KVP_ENOSPC;
    }
    *evicted = 1;
    *evicted_hash = p->blk[b].hash;
    if (p->on_victim != NULL)
      kvp__pool_tell_victim(p, b);
    kvp__map_delete(&p->map, p->blk[b].hash, b); /* Registered still, under the new hash below */
  }
  *block = b;
  x = &p->blk[b];
  if ((rc = kvp__pool_copy_raw(p, b, src, sb)) != 0) {
    kvp__pool_clear_record(p, x);
    kvp__pool_free_push(p, b);
    return rc;
  }
  x->refs = 0;
  x->hash = hash;
  x->has_parent = y->has_parent;
  x->parent = y->parent;
  x->hits = y->hits;
  x->lora_id = y->lora_id;
  x->twin = 0; /* only the table owner's twin is read (kvp__pool_slot_and_peer) */
  if (move != KVP__NO_MOVE) {
    kvp__map_move(&p->map, move, &src->map, sb, hash, b);
  } else {
    uint64_t slot = 0;
    int twin;
    kvp__map_probe(&p->map, hash, &slot, &twin); /* absent: the caller checked */
    kvp__map_put(&p->map, slot, hash, b);
  }
  p->ncached++;
  kvp__lru_push(&p->lru, p->blk, b);
  return 0;
}

/* Makes a cached block the most recently used one. */
static inline void kvp__pool_touch(kvp_pool_t *p, uint32_t b) {
  if (p->blk[b].where == KVP__CACHED)
    kvp__lru_push(&p->lru, p->blk, b); /* the old entry goes stale */
}

#endif
