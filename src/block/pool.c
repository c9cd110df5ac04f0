/* A tier pool: block records, the state machine, reference counts, the
 * inactive lists (free blocks, cached blocks in LRU order) and the hash table
 * from sequence hash to registered block. */
#include <stdlib.h>
#include <string.h>

#include "block/pool_hot.h"
#include "kvplane/status.h"

/* ---- LRU ring of cached blocks ---- */

/* Drops the stale entries, keeping the order of the live ones. In place:
 * the write index never passes the read index. */
void kvp__ring_compact(kvp_pool_t *p) {
  uint32_t r = p->rhead, w = p->rhead;
  uint64_t live = 0;
  for (uint64_t k = 0; k < p->rcount; k++, r = kvp__ring_next(p, r)) {
    if (!kvp__ring_live(p->blk, p->ring[r], r))
      continue;
    uint32_t b = p->ring[r];
    p->ring[w] = b;
    p->blk[b].link = w;
    w = kvp__ring_next(p, w);
    live++;
  }
  p->rtail = w;
  p->rcount = live;
  p->pf_rec = p->pf_grp = p->rhead; /* entries moved: prefetch them again */
}

/* Tops up the victims prefetched to a burst: the hash slots and the first
 * pf_bytes bytes of live entries (whose records were prefetched a burst
 * earlier), and the records a burst further on. pf_grp and pf_rec remember
 * how far each went, so that an entry is prefetched once even when pops
 * skip stale entries; behind the head (pops went past them), they start
 * again from it. Out of line: it runs once every half burst of evictions. */
void kvp__prefetch_burst(kvp_pool_t *p) {
  const uint32_t *ring = p->ring;
  const kvp__blk_t *blk = p->blk;
  uint32_t head = p->rhead, mask = p->rmask, g = p->pf_grp, r = p->pf_rec;
  uint32_t dg = (g - head) & mask, dr = (r - head) & mask;
  uint64_t n = p->rcount;
  uint32_t grp_to = (uint32_t)(n < KVP__BURST ? n : KVP__BURST);
  uint32_t rec_to = (uint32_t)(n < 2 * KVP__BURST ? n : 2 * KVP__BURST);
  size_t stride = p->block_stride, bytes = p->pf_bytes;

  if (dg > n)
    g = head, dg = 0;
  if (dr > n)
    r = head, dr = 0;
  for (; dr < rec_to; dr++, r = (r + 1) & mask)
    __builtin_prefetch(&blk[ring[r]]);
  for (; dg < grp_to; dg++, g = (g + 1) & mask) {
    uint32_t e = ring[g];
    if (!kvp__ring_live(blk, e, g))
      continue;
    kvp__pool_prefetch(p, blk[e].hash);
    for (size_t k = 0; k < bytes; k += 64)
      __builtin_prefetch(p->base + (size_t)e * stride + k);
  }
  p->pf_rec = r;
  p->pf_grp = g;
}

/* ---- states ---- */

/* Moves an inactive block to the active set. A cached block's ring entry
 * goes stale; a free block must be the top of the free stack (the only
 * free block ever activated). */
static void activate(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  if (x->where == KVP__FREE) {
    kvp__free_pop(p, b);
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
  kvp__map_delete(p, x->hash, b);
  kvp__clear_record(p, x);
  p->evictions++;
  kvp__free_push(p, b);
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
    p->grp = share->grp;
    p->ngroups = share->ngroups;
    p->tbit = KVP__SLOT_TBIT;
  } else {
    /* Block ids + 1 need 31 bits; the home-group multiply ngroups < 2^32. */
    if (table_blocks < p->n || table_blocks > KVP__POOL_MAX_BLOCKS) {
      free(p);
      return KVP_EINVAL;
    }
    p->ngroups = (table_blocks * 2 + KVP__GROUP_SLOTS - 1) / KVP__GROUP_SLOTS;
    p->owns_slots = 1;
    p->grp = kvp__resident_alloc(p->ngroups * sizeof *p->grp, 64);
  }
  /* A power of two, so that ring indices wrap by a mask; at least n/4 + 16
   * more than the n live entries there can be, so that a compaction frees
   * at least that many. Up to 2^32 (rmask all ones, uint32_t indices wrap
   * by themselves). */
  p->rcap = 16;
  while (p->rcap < (uint64_t)p->n + p->n / 4 + 16)
    p->rcap *= 2;
  p->rmask = (uint32_t)(p->rcap - 1);
  p->blk = kvp__resident_alloc((size_t)p->n * sizeof *p->blk, 64);
  p->ring = kvp__resident_alloc((size_t)p->rcap * sizeof *p->ring, 64);
  if (p->blk == NULL || p->grp == NULL || p->ring == NULL ||
      p->storage.ops->alloc(p->storage.ctx, p->bytes, p->layout.alignment, (void **)&p->base) !=
          0) {
    p->base = NULL;
    kvp_pool_destroy(p);
    return KVP_ENOMEM;
  }
  /* Pushed last to first, so blocks are first handed out in address order. */
  p->free_head = KVP__NIL;
  for (uint32_t b = p->n; b-- > 0;)
    kvp__free_push(p, b);
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
  if (p->owns_slots)
    free(p->grp);
  free(p->ring);
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
  int rc = kvp__register_held(p, x, block, seq_hash, parent, existing);
  /* The table owner's (G1's) block under the same hash must learn that
   * this tier holds it now (kvp__blk_t.twin). */
  if (rc == 0 && p->peer && !p->owns_slots) {
    uint32_t o = kvp__pool_find(p->peer, seq_hash);
    if (o != KVP__NIL)
      p->peer->blk[o].twin = 1;
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
  kvp__release_held(p, x, block);
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
  while ((b = kvp__ring_pop(p)) != KVP__NIL) {
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
  return kvp__copy_raw(dst, db, src, sb);
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
  return (size_t)p->n * sizeof(kvp__blk_t) +
         (p->owns_slots ? (size_t)p->ngroups * sizeof *p->grp : 0) +
         (size_t)p->rcap * sizeof *p->ring + sizeof *p;
}
