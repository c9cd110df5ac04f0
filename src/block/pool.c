/* A tier pool: block records, the state machine, reference counts, the
 * inactive lists (free blocks, cached blocks in LRU order) and the hash table
 * from sequence hash to registered block. */
#include <stdlib.h>
#include <string.h>

#include "block/pool.h"
#include "kvplane/status.h"

/* ---- free stack ---- */

static void free_push(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  x->where = KVP__FREE;
  x->link = p->free_head;
  p->free_head = b;
  p->nfree++;
}

/* Takes b, the top of the free stack, off it. */
static void free_pop(kvp_pool_t *p, uint32_t b) {
  p->free_head = p->blk[b].link;
  p->nfree--;
}

/* ---- LRU ring of cached blocks ---- */

static uint32_t ring_next(const kvp_pool_t *p, uint32_t i) {
  return i + 1 == p->rcap ? 0 : i + 1;
}

static int ring_live(const kvp_pool_t *p, uint32_t i) {
  const kvp__blk_t *x = &p->blk[p->ring[i]];
  return x->where == KVP__CACHED && x->link == i;
}

/* Drops the stale entries, keeping the order of the live ones. In place:
 * the write index never passes the read index. */
static void ring_compact(kvp_pool_t *p) {
  uint32_t r = p->rhead, w = p->rhead, live = 0;
  for (uint32_t k = 0; k < p->rcount; k++, r = ring_next(p, r)) {
    if (!ring_live(p, r))
      continue;
    uint32_t b = p->ring[r];
    p->ring[w] = b;
    p->blk[b].link = w;
    w = ring_next(p, w);
    live++;
  }
  p->rtail = w;
  p->rcount = live;
}

/* b becomes the most recently used cached block. */
static inline void ring_push(kvp_pool_t *p, uint32_t b) {
  if (__builtin_expect(p->rcount == p->rcap, 0))
    ring_compact(p); /* at most n live entries, rcap >= n + n/2 */
  uint32_t t = p->rtail;
  p->rtail = ring_next(p, t);
  p->rcount++;
  p->ring[t] = b;
  p->blk[b].link = t;
  p->blk[b].where = KVP__CACHED;
}

/* The least recently used cached block, taken off the ring (still marked
 * cached), or KVP__NIL when none is cached. Pool fields are read into
 * locals once: stores to records could alias them. */
static inline uint32_t ring_pop(kvp_pool_t *p) {
  const uint32_t *ring = p->ring;
  const kvp__blk_t *blk = p->blk;
  uint32_t i = p->rhead, n = p->rcount, rcap = p->rcap, b = KVP__NIL;

  while (n > 0) {
    uint32_t at = i;
    uint32_t e = ring[at];
    i = i + 1 == rcap ? 0 : i + 1;
    n--;
    if (blk[e].where == KVP__CACHED && blk[e].link == at) {
      b = e;
      break;
    }
  }
  p->rhead = i;
  p->rcount = n;
  return b;
}

/* The ring index k entries after i. */
static uint32_t ring_at(const kvp_pool_t *p, uint32_t i, uint32_t k) {
  uint32_t j = i + k;
  return j >= p->rcap ? j - p->rcap : j;
}

/* ---- hash table ---- */

static uint64_t slot_next(const kvp_pool_t *p, uint64_t i) {
  return i + 1 == p->nslots ? 0 : i + 1;
}

/* Probes for h once: returns the block holding it, or KVP__NIL with *slot
 * the empty slot that ends its cluster, where it would go. */
static uint32_t map_probe(const kvp_pool_t *p, uint64_t h, uint64_t *slot) {
  uint64_t tag = kvp__pool_tag(h), i = kvp__pool_home(p, tag), e;
  uint32_t b;

  while ((e = p->slots[i]) != 0) {
    if (kvp__pool_slot_is(p, e, tag, &b) && p->blk[b].hash == h)
      return b;
    i = slot_next(p, i);
  }
  *slot = i;
  return KVP__NIL;
}

/* Puts block b under h at slot (from map_probe). */
static void map_put(kvp_pool_t *p, uint64_t slot, uint64_t h, uint32_t b) {
  p->slots[slot] = kvp__pool_slot(p, kvp__pool_tag(h), b);
}

/* The slot holding `want`, which is in the table. */
static uint64_t map_find_slot(const kvp_pool_t *p, uint64_t tag, uint64_t want) {
  uint64_t i = kvp__pool_home(p, tag);
  while (p->slots[i] != want)
    i = slot_next(p, i);
  return i;
}

/* Empties slot i, keeping every entry reachable from its home. */
static inline void map_delete_at(kvp_pool_t *p, uint64_t i) {
  uint64_t j, s;

  /* Backward shift: an entry later in the cluster moves into the hole at i
   * unless its home slot lies cyclically in (i, j]. */
  for (j = slot_next(p, i); (s = p->slots[j]) != 0; j = slot_next(p, j)) {
    uint64_t home = kvp__pool_home(p, s >> 32);
    if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
      p->slots[i] = s;
      i = j;
    }
  }
  p->slots[i] = 0;
}

static inline void map_delete(kvp_pool_t *p, uint64_t h, uint32_t b) {
  uint64_t tag = kvp__pool_tag(h);
  map_delete_at(p, map_find_slot(p, tag, kvp__pool_slot(p, tag, b)));
}

/* ---- states ---- */

/* Moves an inactive block to the active set. A cached block's ring entry
 * goes stale; a free block must be the top of the free stack (the only
 * free block ever activated). */
static void activate(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  if (x->where == KVP__FREE) {
    free_pop(p, b);
  } else {
    p->ncached--;
  }
  x->where = KVP__ACTIVE;
  p->nactive++;
}

/* A cached block, already off the ring or left there stale -> Reset, out
 * of the hash table, onto the free stack. */
/* A block's record back to Reset: no hash, no parent, no hits. */
static inline void clear_record(kvp_pool_t *p, kvp__blk_t *x) {
  kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
  x->hash = x->parent = 0;
  x->has_parent = 0;
  x->hits = 0;
}

static void evict(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  p->ncached--;
  map_delete(p, x->hash, b);
  clear_record(p, x);
  p->evictions++;
  free_push(p, b);
}

/* Evictions come in runs from the LRU end, and what one waits for is loads:
 * the victim's record, its hash slot. The victims to come are the next ring
 * entries, so start those loads a few evictions early: the records
 * KVP__LOOKAHEAD_REC entries ahead, the hash slot of the entry
 * KVP__LOOKAHEAD ahead (its record was prefetched earlier). p->ahead keeps
 * that entry's block for the manager, which prefetches what it will do with
 * it (kvp__bm_take_g1). Stale entries make these hints, never errors. */
static inline void prefetch_victims(kvp_pool_t *p) {
  uint32_t n = p->rcount, h = p->rhead, v = KVP__NIL;
  if (n > KVP__LOOKAHEAD_REC)
    __builtin_prefetch(&p->blk[p->ring[ring_at(p, h, KVP__LOOKAHEAD_REC)]]);
  if (n > KVP__LOOKAHEAD) {
    v = p->ring[ring_at(p, h, KVP__LOOKAHEAD)];
    kvp__pool_prefetch(p, p->blk[v].hash);
  }
  p->ahead = v;
}

/* kvp_pool_copy_block, inline for the offload path. */
static inline int copy_block(kvp_pool_t *dst, uint32_t db, const kvp_pool_t *src, uint32_t sb) {
  if (db >= dst->n || sb >= src->n || dst->block_stride != src->block_stride ||
      dst->layer_stride != src->layer_stride)
    return KVP_EINVAL;
  unsigned char *d = dst->base + (size_t)db * dst->block_stride;
  const unsigned char *from = src->base + (size_t)sb * src->block_stride;
  if (dst->system && src->system) { /* the common host-to-host case, inline */
    memcpy(d, from, dst->block_stride);
    return 0;
  }
  return dst->storage.ops->copy(dst->storage.ctx, d, &src->storage, from, dst->block_stride);
}

/* ---- public ---- */

int kvp_pool_create(const kvp_pool_opts_t *o, kvp_pool_t **out) {
  return kvp__pool_create(o, o ? o->num_blocks : 0, NULL, out);
}

int kvp__pool_create(const kvp_pool_opts_t *o, uint64_t table_blocks, kvp_pool_t *share,
                     kvp_pool_t **out) {
  kvp_pool_t *p;
  int rc;

  *out = NULL;
  if (o == NULL)
    return KVP_EINVAL;
  if (o->tier != KVP_TIER_G1 && o->tier != KVP_TIER_G2)
    return KVP_ETIER;
  if (o->num_blocks == 0 || o->num_blocks > KVP__POOL_MAX_BLOCKS)
    return KVP_EINVAL;
  if ((rc = kvp_layout_check(&o->layout)) != 0)
    return rc;
  if ((p = calloc(1, sizeof *p)) == NULL)
    return KVP_ENOMEM;
  p->tier = o->tier;
  p->n = o->num_blocks;
  p->layout = o->layout;
  if (p->layout.alignment == 0)
    p->layout.alignment = 64;
  p->layer_stride = kvp_layout_layer_stride(&p->layout);
  p->block_stride = kvp_layout_block_stride(&p->layout);
  p->storage = o->storage.ops ? o->storage : kvp_storage_system();
  p->system = kvp__storage_is_system(&p->storage);
  if ((uint64_t)p->n > SIZE_MAX / p->block_stride) {
    free(p);
    return KVP_ETOOBIG;
  }
  p->bytes = (size_t)p->n * p->block_stride;
  if (share != NULL) {
    p->slots = share->slots;
    p->nslots = share->nslots;
    p->tbit = KVP__SLOT_TBIT;
  } else {
    /* Block ids and the home-slot multiply need nslots < 2^32. */
    if (table_blocks < p->n || table_blocks > KVP__POOL_MAX_BLOCKS) {
      free(p);
      return KVP_EINVAL;
    }
    p->nslots = table_blocks * 2;
    p->owns_slots = 1;
    p->slots = kvp__resident_alloc(p->nslots * sizeof *p->slots, 64);
  }
  p->rcap = p->n + p->n / 2 + 16;
  p->blk = kvp__resident_alloc((size_t)p->n * sizeof *p->blk, 64);
  p->ring = kvp__resident_alloc((size_t)p->rcap * sizeof *p->ring, 64);
  if (p->blk == NULL || p->slots == NULL || p->ring == NULL ||
      p->storage.ops->alloc(p->storage.ctx, p->bytes, p->layout.alignment, (void **)&p->base) !=
          0) {
    p->base = NULL;
    kvp_pool_destroy(p);
    return KVP_ENOMEM;
  }
  /* Pushed last to first, so blocks are first handed out in address order. */
  p->free_head = KVP__NIL;
  for (uint32_t b = p->n; b-- > 0;)
    free_push(p, b);
  p->nstate[KVP_BLOCK_RESET] = p->n;
  p->ahead = KVP__NIL;
  *out = p;
  return 0;
}

void kvp_pool_destroy(kvp_pool_t *p) {
  if (p == NULL)
    return;
  if (p->base)
    p->storage.ops->free(p->storage.ctx, p->base, p->bytes);
  if (p->owns_slots)
    free(p->slots);
  free(p->ring);
  free(p->blk);
  free(p);
}

uint32_t kvp__pool_pop_lru(kvp_pool_t *p) {
  uint32_t b = ring_pop(p);

  if (b == KVP__NIL)
    return KVP__NIL;
  prefetch_victims(p);
  p->blk[b].where = KVP__ACTIVE; /* in transit: neither cached nor counted active */
  p->ncached--;
  p->evictions++;
  return b;
}

void kvp__pool_unmap(kvp_pool_t *p, uint32_t b) {
  map_delete(p, p->blk[b].hash, b);
}

void kvp__pool_reuse(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  clear_record(p, x);
  x->refs = 1;
  x->lora_id = 0;
  p->nactive++;
}

/* What kvp_pool_alloc reports of the block it evicts (popped, not reused). */
static void evicted_from(const kvp_pool_t *p, uint32_t b, kvp_pool_evicted_t *ev) {
  const kvp__blk_t *x = &p->blk[b];
  ev->evicted = 1;
  ev->hash = x->hash;
  ev->has_parent = x->has_parent;
  ev->parent_hash = x->parent;
  ev->hits = x->hits;
  ev->lora_id = x->lora_id;
}

int kvp_pool_alloc(kvp_pool_t *p, uint32_t *block, kvp_pool_evicted_t *ev) {
  uint32_t b = p->free_head;

  if (ev)
    ev->evicted = 0;
  if (b != KVP__NIL) {
    activate(p, b);
    kvp__blk_t *x = &p->blk[b];
    x->refs = 1;
    x->hits = 0;
    x->lora_id = 0;
  } else {
    if ((b = kvp__pool_pop_lru(p)) == KVP__NIL)
      return KVP_ENOSPC;
    if (ev)
      evicted_from(p, b, ev);
    kvp__pool_unmap(p, b);
    kvp__pool_reuse(p, b);
  }
  *block = b;
  return 0;
}

/* The record of a referenced block, or NULL. */
static kvp__blk_t *held(kvp_pool_t *p, uint32_t b) {
  if (b >= p->n || p->blk[b].refs == 0)
    return NULL;
  return &p->blk[b];
}

/* Moves a referenced block to state `to` from one of the states in `from`
 * (a bit per state). */
static int transition(kvp_pool_t *p, uint32_t block, unsigned from, int to) {
  kvp__blk_t *x = held(p, block);
  if (x == NULL)
    return KVP_EINVAL;
  if (!(from & (1u << x->state)))
    return KVP_ESTATE;
  kvp__pool_set_state(p, x, to);
  return 0;
}

int kvp_block_init_sequence(kvp_pool_t *p, uint32_t block) {
  return transition(p, block, 1u << KVP_BLOCK_RESET, KVP_BLOCK_PARTIAL);
}

int kvp_block_commit(kvp_pool_t *p, uint32_t block) {
  return transition(p, block, 1u << KVP_BLOCK_PARTIAL, KVP_BLOCK_COMPLETE);
}

int kvp_block_abort(kvp_pool_t *p, uint32_t block) {
  return transition(p, block, 1u << KVP_BLOCK_PARTIAL | 1u << KVP_BLOCK_COMPLETE, KVP_BLOCK_RESET);
}

/* Registers block x (b) under seq_hash, or finds the block that holds it
 * already (*existing, KVP_EEXIST; x unchanged). */
static inline int register_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b, uint64_t seq_hash,
                                const uint64_t *parent, uint32_t *existing) {
  uint64_t slot;
  uint32_t other;

  if ((other = map_probe(p, seq_hash, &slot)) != KVP__NIL) {
    if (existing)
      *existing = other;
    return KVP_EEXIST;
  }
  map_put(p, slot, seq_hash, b);
  x->hash = seq_hash;
  x->has_parent = parent != NULL;
  x->parent = parent ? *parent : 0;
  kvp__pool_set_state(p, x, KVP_BLOCK_REGISTERED);
  return 0;
}

int kvp_block_register(kvp_pool_t *p, uint32_t block, uint64_t seq_hash, const uint64_t *parent,
                       uint32_t *existing) {
  kvp__blk_t *x = held(p, block);

  if (x == NULL)
    return KVP_EINVAL;
  if (x->state != KVP_BLOCK_COMPLETE)
    return KVP_ESTATE;
  return register_held(p, x, block, seq_hash, parent, existing);
}

int kvp__pool_register_own(kvp_pool_t *p, uint32_t block, uint64_t seq_hash, const uint64_t *parent,
                           int32_t lora_id, uint32_t *existing) {
  kvp__blk_t *x = &p->blk[block];
  int rc = register_held(p, x, block, seq_hash, parent, existing);
  if (rc == 0)
    x->lora_id = lora_id;
  return rc;
}

int kvp_pool_lookup(const kvp_pool_t *p, uint64_t seq_hash, uint32_t *block) {
  uint32_t b = kvp__pool_find(p, seq_hash);
  if (b == KVP__NIL)
    return KVP_ENOENT;
  *block = b;
  return 0;
}

int kvp_pool_acquire(kvp_pool_t *p, uint32_t block) {
  kvp__blk_t *x;

  if (block >= p->n)
    return KVP_EINVAL;
  x = &p->blk[block];
  if (x->state != KVP_BLOCK_REGISTERED)
    return KVP_ESTATE;
  if (x->refs == UINT32_MAX)
    return KVP_EINVAL;
  if (x->refs++ == 0)
    activate(p, block);
  return 0;
}

/* Drops a reference of held block x (b); the last one caches or frees it. */
static inline void release_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b) {
  if (--x->refs > 0)
    return;
  p->nactive--;
  if (x->state == KVP_BLOCK_REGISTERED) {
    p->ncached++;
    ring_push(p, b);
  } else {
    kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
    free_push(p, b);
  }
}

int kvp_pool_release(kvp_pool_t *p, uint32_t block) {
  kvp__blk_t *x = held(p, block);

  if (x == NULL)
    return KVP_EINVAL;
  release_held(p, x, block);
  return 0;
}

void kvp__pool_release_own(kvp_pool_t *p, const uint32_t *blocks, size_t n) {
  for (size_t i = n; i-- > 0;)
    release_held(p, &p->blk[blocks[i]], blocks[i]);
}

int kvp_pool_evict(kvp_pool_t *p, uint32_t block) {
  if (block >= p->n)
    return KVP_EINVAL;
  if (p->blk[block].refs > 0)
    return KVP_EBUSY;
  if (p->blk[block].state != KVP_BLOCK_REGISTERED)
    return KVP_ESTATE;
  evict(p, block); /* its ring entry goes stale */
  return 0;
}

size_t kvp_pool_evict_all(kvp_pool_t *p) {
  size_t n = 0;
  uint32_t b;
  while ((b = ring_pop(p)) != KVP__NIL) {
    evict(p, b);
    n++;
  }
  return n;
}

int kvp__pool_put_cached(kvp_pool_t *p, const kvp_pool_t *src, uint32_t sb, uint64_t hash,
                         const uint64_t *parent, uint32_t hits, int32_t lora_id, uint64_t move,
                         int *evicted, uint64_t *evicted_hash, uint32_t *block) {
  uint32_t b = p->free_head;
  kvp__blk_t *x;
  int rc = 0;

  *evicted = 0;
  if (b != KVP__NIL) {
    free_pop(p, b);
    kvp__pool_set_state(p, &p->blk[b], KVP_BLOCK_REGISTERED);
  } else {
    if ((b = kvp__pool_pop_lru(p)) == KVP__NIL) {
      *block = KVP__NIL;
      return KVP_ENOSPC;
    }
    *evicted = 1;
    *evicted_hash = p->blk[b].hash;
    map_delete(p, p->blk[b].hash, b); /* Registered still, under the new hash below */
  }
  *block = b;
  x = &p->blk[b];
  if ((rc = copy_block(p, b, src, sb)) != 0) {
    clear_record(p, x);
    free_push(p, b);
    return rc;
  }
  x->refs = 0;
  x->hash = hash;
  x->has_parent = parent != NULL;
  x->parent = parent ? *parent : 0;
  x->hits = (uint16_t)(hits < KVP__HITS_MAX ? hits : KVP__HITS_MAX);
  x->lora_id = lora_id;
  uint64_t tag = kvp__pool_tag(hash), slot;
  if (move != KVP__NO_MOVE) {
    /* sb's entry sits in hash's cluster: it becomes b's, in place. The
     * eviction above may have shifted it back within the cluster. */
    uint64_t from = kvp__pool_slot(src, tag, sb);
    if (p->slots[move] != from)
      move = map_find_slot(p, tag, from);
    p->slots[move] = kvp__pool_slot(p, tag, b);
  } else {
    map_probe(p, hash, &slot); /* absent: the caller checked */
    map_put(p, slot, hash, b);
  }
  p->ncached++;
  ring_push(p, b);
  return 0;
}

void kvp__pool_touch(kvp_pool_t *p, uint32_t b) {
  if (p->blk[b].where == KVP__CACHED)
    ring_push(p, b); /* the old entry goes stale */
}

int kvp_pool_block_state(const kvp_pool_t *p, uint32_t block) {
  return block < p->n ? p->blk[block].state : -1;
}

uint32_t kvp_pool_block_refs(const kvp_pool_t *p, uint32_t block) {
  return block < p->n ? p->blk[block].refs : 0;
}

uint64_t kvp_pool_block_hash(const kvp_pool_t *p, uint32_t block) {
  if (block >= p->n || p->blk[block].state != KVP_BLOCK_REGISTERED)
    return 0;
  return p->blk[block].hash;
}

void *kvp_pool_block_layer(kvp_pool_t *p, uint32_t block, uint32_t layer) {
  if (block >= p->n || layer >= p->layout.num_layers)
    return NULL;
  return p->base + (size_t)block * p->block_stride + (size_t)layer * p->layer_stride;
}

int kvp_pool_copy_block(kvp_pool_t *dst, uint32_t db, const kvp_pool_t *src, uint32_t sb) {
  return copy_block(dst, db, src, sb);
}

void kvp_pool_counts(const kvp_pool_t *p, kvp_pool_counts_t *c) {
  memset(c, 0, sizeof *c);
  c->tier = p->tier;
  c->capacity = p->n;
  memcpy(c->state, p->nstate, sizeof c->state);
  c->active = p->nactive;
  c->inactive = p->nfree + p->ncached;
  c->free = p->nfree;
  c->cached = p->ncached;
  c->evictions = p->evictions;
}

size_t kvp_pool_metadata_bytes(const kvp_pool_t *p) {
  return (size_t)p->n * sizeof(kvp__blk_t) + (p->owns_slots ? (size_t)p->nslots * 8 : 0) +
         (size_t)p->rcap * sizeof(uint32_t) + sizeof *p;
}
