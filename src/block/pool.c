/* A tier pool: the checked public API (include/kvplane/blockpool.h) over
 * the block records, the free stack, the LRU ring (lru.h) and the hash
 * table (map.h); the state machine and reference counts. The manager's
 * unchecked steps are inline, in pool.h. */
#include <stdlib.h>
#include <string.h>

#include "block/pool.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

/* ---- states ---- */

/* Moves an inactive block to the active set. A cached block's ring entry
 * goes stale; a free block must be the top of the free stack (the only
 * free block ever activated). */
static void activate(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  if (x->where == KVP__FREE) {
    kvp__pool_free_pop(p, b);
  } else {
    p->ncached--;
  }
  x->where = KVP__ACTIVE;
  p->nactive++;
}

/* A cached block, already off the ring or left there stale -> Reset, out
 * of the hash table, onto the free stack. */
static void evict(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  p->ncached--;
  kvp__map_delete(&p->map, x->hash, b);
  kvp__pool_clear_record(p, x);
  p->evictions++;
  kvp__pool_free_push(p, b);
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
  /* A table of its own holds at least this pool's blocks (map.h bounds it). */
  if (share == NULL && (table_blocks < o->num_blocks || table_blocks > KVP__MAP_MAX_BLOCKS))
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
  p->blk = kvp__resident_alloc((size_t)p->n * sizeof *p->blk, 64);
  p->owns_map = share == NULL;
  if (p->blk != NULL && share != NULL)
    kvp__map_share(&p->map, &share->map, p->blk);
  else if (p->blk != NULL)
    kvp__map_create(&p->map, table_blocks, p->blk); /* bounds checked: fails only for memory */
  if (p->blk == NULL || p->map.grp == NULL || kvp__lru_create(&p->lru, p->n) != 0 ||
      p->storage.ops->alloc(p->storage.ctx, p->bytes, p->layout.alignment, (void **)&p->base) !=
          0) {
    p->base = NULL;
    kvp_pool_destroy(p);
    return KVP_ENOMEM;
  }
  /* Pushed last to first, so blocks are first handed out in address order. */
  p->free_head = KVP__NIL;
  for (uint32_t b = p->n; b-- > 0;)
    kvp__pool_free_push(p, b);
  p->nstate[KVP_BLOCK_RESET] = p->n;
  if (share != NULL) { /* linked only once nothing can fail */
    p->peer = share;
    share->peer = p;
  }
  *out = p;
  return 0;
}

void kvp_pool_destroy(kvp_pool_t *p) {
  if (p == NULL)
    return;
  if (p->base)
    p->storage.ops->free(p->storage.ctx, p->base, p->bytes);
  if (p->owns_map)
    kvp__map_free(&p->map);
  kvp__lru_free(&p->lru);
  free(p->blk);
  free(p);
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

int kvp_block_register(kvp_pool_t *p, uint32_t block, uint64_t seq_hash, const uint64_t *parent,
                       uint32_t *existing) {
  kvp__blk_t *x = held(p, block);

  if (x == NULL)
    return KVP_EINVAL;
  if (x->state != KVP_BLOCK_COMPLETE)
    return KVP_ESTATE;
  int rc = kvp__pool_register_held(p, x, block, seq_hash, parent, existing);
  /* The table owner's (G1's) block under the same hash must learn that
   * this tier holds it now (kvp__blk_t.twin). */
  if (rc == 0 && p->peer && !p->owns_map) {
    uint32_t o = kvp__pool_find(p->peer, seq_hash);
    if (o != KVP__NIL)
      kvp__pool_set_twin(p->peer, o);
  }
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

int kvp_pool_release(kvp_pool_t *p, uint32_t block) {
  kvp__blk_t *x = held(p, block);

  if (x == NULL)
    return KVP_EINVAL;
  kvp__pool_release_held(p, x, block);
  return 0;
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
  while ((b = kvp__lru_pop(&p->lru, p->blk)) != KVP__NIL) {
    evict(p, b);
    n++;
  }
  return n;
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
  if (db >= dst->n || sb >= src->n || dst->block_stride != src->block_stride ||
      dst->layer_stride != src->layer_stride)
    return KVP_EINVAL;
  return kvp__pool_copy_raw(dst, db, src, sb);
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
  return (size_t)p->n * sizeof(kvp__blk_t) + (p->owns_map ? kvp__map_bytes(&p->map) : 0) +
         kvp__lru_bytes(&p->lru) + sizeof *p;
}

size_t kvp__pool_list_registered(const kvp_pool_t *p, uint64_t *hashes, uint64_t *parents,
                                 size_t cap) {
  size_t k = 0;
  for (uint32_t b = 0; b < p->n && k < cap; b++) {
    const kvp__blk_t *x = &p->blk[b];
    if (x->state != KVP_BLOCK_REGISTERED)
      continue;
    hashes[k] = x->hash;
    parents[k] = x->has_parent ? x->parent : x->hash;
    k++;
  }
  return k;
}
