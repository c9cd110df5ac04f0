/* The pool's hot paths, inline: what kvp_seq_allocate, its evictions and
 * offloads and kvp_seq_free do per block compiles into the manager's own
 * loops instead of a call per step (pool.c, and through bm.h the manager's
 * files, include this). Private, like pool.h. */
#ifndef KVP_BLOCK_POOL_HOT_H
#define KVP_BLOCK_POOL_HOT_H

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "block/pool.h"
#include "kvplane/status.h"

/* Drops the stale entries of a full ring, keeping the order of the live
 * ones (pool.c; rare). */
void kvp__ring_compact(kvp_pool_t *p);

/* ---- free stack ---- */

static inline void kvp__free_push(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  x->where = KVP__FREE;
  x->link = p->free_head;
  p->free_head = b;
  p->nfree++;
}

/* Takes b, the top of the free stack, off it. */
static inline void kvp__free_pop(kvp_pool_t *p, uint32_t b) {
  p->free_head = p->blk[b].link;
  p->nfree--;
}

/* ---- LRU ring of cached blocks ---- */

static inline uint32_t kvp__ring_next(const kvp_pool_t *p, uint32_t i) {
  return (i + 1) & p->rmask;
}

/* b becomes the most recently used cached block. */
static inline void kvp__ring_push(kvp_pool_t *p, uint32_t b) {
  if (__builtin_expect(p->rcount + 1 == p->rcap, 0))
    kvp__ring_compact(p); /* at most n live entries, rcap >= n + n/4 + 16 */
  uint32_t t = p->rtail;
  p->rtail = kvp__ring_next(p, t);
  p->rcount++;
  p->ring[t] = b;
  p->blk[b].link = t;
  p->blk[b].where = KVP__CACHED;
}

/* Whether ring entry `at`, holding block e, is live (not left stale). */
static inline int kvp__ring_live(const kvp__blk_t *blk, uint32_t e, uint32_t at) {
  return blk[e].where == KVP__CACHED && blk[e].link == at;
}

/* The least recently used cached block, taken off the ring (still marked
 * cached), or KVP__NIL when none is cached; then the ring is empty and the
 * prefetch cursors (kvp__prefetch_victims), which the pop went past, are
 * set back to the head. Pool fields are read into locals once: stores to
 * records could alias them. */
static inline uint32_t kvp__ring_pop(kvp_pool_t *p) {
  const uint32_t *ring = p->ring;
  const kvp__blk_t *blk = p->blk;
  uint32_t i = p->rhead, mask = p->rmask, b = KVP__NIL;
  uint64_t n = p->rcount;

  while (n > 0) {
    uint32_t at = i;
    uint32_t e = ring[at];
    i = (i + 1) & mask;
    n--;
    if (kvp__ring_live(blk, e, at)) {
      b = e;
      break;
    }
  }
  p->rhead = i;
  p->rcount = n;
  if (b == KVP__NIL)
    p->pf_rec = p->pf_grp = i;
  return b;
}

/* ---- hash table ---- */

/* Probes for h once: returns the block holding it, or KVP__NIL with *slot
 * the first empty slot of its probe sequence, where it would go; then
 * *twin says whether an entry of the other tier (a shared table) under h's
 * tag was seen, that is, whether the other tier may hold h. */
static inline uint32_t kvp__map_probe(const kvp_pool_t *p, uint64_t h, uint64_t *slot, int *twin) {
  uint64_t tag = kvp__pool_tag(h), g = kvp__pool_home(p, tag), free_at = UINT64_MAX;
  uint64_t key = tag << 32 | p->tbit;
  uint8_t t = kvp__grp_byte(tag);
  int seen = 0;

  for (uint64_t left = p->ngroups;;) {
    const kvp__grp_t *G = &p->grp[g];
    uint64_t c = kvp__grp_ctrl(G), e;
    uint32_t b = kvp__grp_find(p, G, c, t, key, h, &seen);
    if (b != KVP__NIL)
      return b;
    if (free_at == UINT64_MAX && (e = kvp__grp_empty(c)) != 0)
      free_at = kvp__grp_pos(g, e);
    if (G->over == 0 || --left == 0)
      break;
    g = kvp__grp_next(p, g);
  }
  /* Absent. Every group searched was full: the first one after them with
   * room takes it (the table is at most half full, so after a pass over
   * every group free_at is set). */
  while (free_at == UINT64_MAX) {
    uint64_t e;
    g = kvp__grp_next(p, g);
    if ((e = kvp__grp_empty(kvp__grp_ctrl(&p->grp[g]))) != 0)
      free_at = kvp__grp_pos(g, e);
  }
  *slot = free_at;
  *twin = seen;
  return KVP__NIL;
}

/* Puts block b under h at slot (an empty slot from map_probe): the groups
 * between h's home and the slot's, all full when probed, count it as
 * passing them. Sets b's loc. */
static inline void kvp__map_put(kvp_pool_t *p, uint64_t slot, uint64_t h, uint32_t b) {
  uint64_t tag = kvp__pool_tag(h), home = kvp__pool_home(p, tag), to = slot >> 3;
  kvp__grp_t *G = &p->grp[to];

  for (uint64_t g = home; g != to; g = kvp__grp_next(p, g))
    if (p->grp[g].over < 255)
      p->grp[g].over++;
  G->ctrl[slot & 7] = kvp__grp_byte(tag);
  G->slot[slot & 7] = kvp__pool_slot(p, tag, b);
  p->blk[b].loc = kvp__loc_of(p, home, slot);
}

/* The slot index holding `want`, which is in the table under tag. */
static inline uint64_t kvp__map_find_slot(const kvp_pool_t *p, uint64_t tag, uint64_t want) {
  uint8_t t = kvp__grp_byte(tag);

  for (uint64_t g = kvp__pool_home(p, tag);; g = kvp__grp_next(p, g)) {
    const kvp__grp_t *G = &p->grp[g];
    for (uint64_t m = kvp__grp_match(kvp__grp_ctrl(G), t); m; m &= m - 1)
      if (G->slot[__builtin_ctzll(m) >> 3] == want)
        return kvp__grp_pos(g, m);
  }
}

/* The slot index of registered block b (hash h) of p: from its loc, with
 * no load of the table, unless the entry is far from home. */
static inline uint64_t kvp__map_slot_of(const kvp_pool_t *p, uint64_t h, uint32_t b) {
  uint64_t tag = kvp__pool_tag(h);
  uint8_t loc = p->blk[b].loc;
  uint64_t i = loc != KVP__LOC_FAR ? kvp__loc_slot(p, kvp__pool_home(p, tag), loc)
                                   : kvp__map_find_slot(p, tag, kvp__pool_slot(p, tag, b));
  assert(*kvp__grp_slot(p, i) == kvp__pool_slot(p, tag, b));
  return i;
}

/* Empties slot i, holding an entry under hash h, taking it off the
 * overflow counts of the groups it passed: when it is in h's home group,
 * two stores and no load. No entry moves. A saturated count stays:
 * searches then go on past that group, which costs time, never a wrong
 * answer. */
static inline void kvp__map_delete_at(kvp_pool_t *p, uint64_t i, uint64_t h) {
  uint64_t to = i >> 3;
  kvp__grp_t *G = &p->grp[to];

  for (uint64_t g = kvp__pool_home(p, kvp__pool_tag(h)); g != to; g = kvp__grp_next(p, g))
    if (p->grp[g].over < 255)
      p->grp[g].over--;
  G->ctrl[i & 7] = 0;
  G->slot[i & 7] = 0;
}

static inline void kvp__map_delete(kvp_pool_t *p, uint64_t h, uint32_t b) {
  kvp__map_delete_at(p, kvp__map_slot_of(p, h, b), h);
}

/* ---- records ---- */

/* A block's record back to Reset: no hash, no parent, no hits. */
static inline void kvp__clear_record(kvp_pool_t *p, kvp__blk_t *x) {
  kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
  x->hash = x->parent = 0;
  x->has_parent = 0;
  x->twin = 0;
  x->loc = KVP__LOC_FAR;
  x->hits = 0;
}

/* Evictions come in runs from the LRU end, and what one waits for is loads:
 * the victim's record, its hash slot, its bytes. The victims to come are
 * the next ring entries: when fewer than half a burst of them are
 * prefetched, kvp__prefetch_burst (pool.c) tops them up to a burst. The
 * cursor pf_grp is a ring index. Ahead of the head it is at most rcount
 * entries from it; behind (a pop skipped past it), more, since the ring is
 * never full (rcount < rcap). Pops that are not followed by this check
 * (kvp_pool_evict_all's) end with one finding the ring empty, which resets
 * the cursors (kvp__ring_pop). Stale entries make these hints, never
 * errors. */
void kvp__prefetch_burst(kvp_pool_t *p);

static inline void kvp__prefetch_victims(kvp_pool_t *p) {
  uint32_t d = (p->pf_grp - p->rhead) & p->rmask;
  uint64_t n = p->rcount;

  if (d > n || (d < KVP__BURST / 2 && d < n))
    kvp__prefetch_burst(p);
}

/* Host blocks up to this many bytes, a multiple of 16, are copied inline
 * (kvp__copy_raw); others go through memcpy. */
#define KVP__SMALL_COPY 256

typedef unsigned char kvp__v16_t __attribute__((vector_size(16)));

/* Copies block sb of src to block db of dst, both valid, of one layout (a
 * manager's pools): kvp_pool_copy_block without the checks. */
static inline int kvp__copy_raw(kvp_pool_t *dst, uint32_t db, const kvp_pool_t *src, uint32_t sb) {
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

/* Takes the least recently used cached block out of the cached set: its
 * record (hash, parent, hits, lora_id) and its hash-table entry stay as they
 * were, for the caller to read and then drop (kvp__pool_unmap) or move
 * (kvp__pool_put_cached). The block must then go through kvp__pool_reuse.
 * Returns KVP__NIL when no block is cached. Counts an eviction. */
static inline uint32_t kvp__pool_pop_lru(kvp_pool_t *p) {
  uint32_t b = kvp__ring_pop(p);

  if (b == KVP__NIL)
    return KVP__NIL;
  kvp__prefetch_victims(p);
  p->blk[b].where = KVP__ACTIVE; /* in transit: neither cached nor counted active */
  p->ncached--;
  p->evictions++;
  return b;
}

/* Removes block b's hash-table entry. */
static inline void kvp__pool_unmap(kvp_pool_t *p, uint32_t b) {
  kvp__map_delete(p, p->blk[b].hash, b);
}

/* A block from kvp__pool_pop_lru, its entry gone, becomes active: Reset,
 * one reference, its record cleared. */
static inline void kvp__pool_reuse(kvp_pool_t *p, uint32_t b) {
  kvp__blk_t *x = &p->blk[b];
  kvp__clear_record(p, x);
  x->refs = 1;
  x->lora_id = 0;
  p->nactive++;
}

/* Registers block x (b) under seq_hash, or finds the block that holds it
 * already (*existing, KVP_EEXIST; x unchanged). */
static inline int kvp__register_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b, uint64_t seq_hash,
                                     const uint64_t *parent, uint32_t *existing) {
  uint64_t slot = 0;
  uint32_t other;
  int twin = 0;

  if ((other = kvp__map_probe(p, seq_hash, &slot, &twin)) != KVP__NIL) {
    if (existing)
      *existing = other;
    return KVP_EEXIST;
  }
  kvp__map_put(p, slot, seq_hash, b);
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
  int rc = kvp__register_held(p, x, block, seq_hash, parent, existing);
  if (rc == 0)
    x->lora_id = lora_id;
  return rc;
}

/* Drops a reference of held block x (b); the last one caches or frees it. */
static inline void kvp__release_held(kvp_pool_t *p, kvp__blk_t *x, uint32_t b) {
  if (--x->refs > 0)
    return;
  p->nactive--;
  if (x->state == KVP_BLOCK_REGISTERED) {
    p->ncached++;
    kvp__ring_push(p, b);
  } else {
    kvp__pool_set_state(p, x, KVP_BLOCK_RESET);
    kvp__free_push(p, b);
  }
}

/* kvp_pool_release of each of blocks[0..n), which the caller holds, last
 * first, without the checks. */
static inline void kvp__pool_release_own(kvp_pool_t *p, const uint32_t *blocks, size_t n) {
  for (size_t i = n; i-- > 0;)
    kvp__release_held(p, &p->blk[blocks[i]], blocks[i]);
}

#define KVP__NO_MOVE UINT64_MAX
/* Copies block sb of src into a block of p taken as kvp_pool_alloc would
 * (a free block, else the LRU cached one, whose hash goes to *evicted_hash
 * with *evicted = 1; *block is the block taken) and leaves it Registered
 * under hash and cached, most recently used; in one step, for offload.
 * p and src have one layout (a manager's pools: the copy is unchecked).
 * hash must not be registered in p. With move a slot (src shares p's
 * table, sb is mapped under hash at that slot, from kvp__pool_pair), sb's
 * entry becomes the new block's: sb is no longer found in src; with
 * KVP__NO_MOVE, sb is left alone. Returns 0, KVP_ENOSPC (every block
 * referenced), or the copy's error (the block taken stays free, sb stays
 * mapped). */
KVP__HOT int kvp__pool_put_cached(kvp_pool_t *p, const kvp_pool_t *src, uint32_t sb, uint64_t hash,
                                  const uint64_t *parent, uint32_t hits, int32_t lora_id,
                                  uint64_t move, int *evicted, uint64_t *evicted_hash,
                                  uint32_t *block) {
  uint32_t b = p->free_head;
  kvp__blk_t *x;
  int rc = 0;

  *evicted = 0;
  if (b != KVP__NIL) {
    kvp__free_pop(p, b);
    kvp__pool_set_state(p, &p->blk[b], KVP_BLOCK_REGISTERED);
  } else {
    if ((b = kvp__pool_pop_lru(p)) == KVP__NIL) {
      *block = KVP__NIL;
      return KVP_ENOSPC;
    }
    *evicted = 1;
    *evicted_hash = p->blk[b].hash;
    if (p->on_victim != NULL)
      p->on_victim(p->victim_ctx, p, b);
    kvp__map_delete(p, p->blk[b].hash, b); /* Registered still, under the new hash below */
  }
  *block = b;
  x = &p->blk[b];
  if ((rc = kvp__copy_raw(p, b, src, sb)) != 0) {
    kvp__clear_record(p, x);
    kvp__free_push(p, b);
    return rc;
  }
  x->refs = 0;
  x->hash = hash;
  x->has_parent = parent != NULL;
  x->parent = parent ? *parent : 0;
  x->hits = (uint16_t)(hits < KVP__HITS_MAX ? hits : KVP__HITS_MAX);
  x->lora_id = lora_id;
  uint64_t tag = kvp__pool_tag(hash), slot = 0;
  x->twin = 0; /* only a G1 record's twin is read (kvp__bm_take_g1) */
  if (move != KVP__NO_MOVE) {
    /* sb's entry becomes b's, in place (entries never move, so the
     * eviction above left it where the caller found it): one store. */
    assert(*kvp__grp_slot(p, move) == kvp__pool_slot(src, tag, sb));
    *kvp__grp_slot(p, move) = kvp__pool_slot(p, tag, b);
    x->loc = kvp__loc_of(p, kvp__pool_home(p, tag), move);
  } else {
    int twin;
    kvp__map_probe(p, hash, &slot, &twin); /* absent: the caller checked */
    kvp__map_put(p, slot, hash, b);
  }
  p->ncached++;
  kvp__ring_push(p, b);
  return 0;
}

/* Makes a cached block the most recently used one. */
static inline void kvp__pool_touch(kvp_pool_t *p, uint32_t b) {
  if (p->blk[b].where == KVP__CACHED)
    kvp__ring_push(p, b); /* the old entry goes stale */
}

#endif
