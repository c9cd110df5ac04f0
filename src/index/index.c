/* Advisor block index: the map, the block records and every update
 * (index.h). Location lists and shapes are in locs.c, worker and volume
 * names in names.c (over intern.c), the change log in changelog.c, the
 * queries in query.c, the memory cap in evict.c.
 * Why this file is long: the map and the two record arrays change together
 * in every update (create, free, rehash, resize), and split apart they would
 * each need the others' invariants.
 * Thread: the advisor's loop thread. */
#include "index/index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "index/index_impl.h"
#include "common/array.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

/* The map's fill (LOAD_NUM / LOAD_DEN, index_impl.h) is at most 0.7. A
 * 64-block match's p99 was the maximum of 64 probe runs, and at 0.5 the
 * runs' length cost it less than their bytes saved (kvp-bench match at 1M,
 * 2 copies, p99 over the plain lookups' p99: 0.5 1.20-1.23, 0.6 1.38-1.44,
 * 0.7 1.62-1.84; at 0.8 the p99 doubled). Since a match follows chains
 * through consecutive records (query.c) it probes the map once per run of
 * a chain, not per block: at 0.7, 16M locations, one copy, its p99 is 0.42
 * of 64 plain lookups' (1.08 with the blocks stored out of chain order),
 * and the map costs 5.7 B per block instead of 8. */

/* The largest figure: 128M locations at one copy per block. */
_Static_assert(KVP__INDEX_MAX_BLOCKS >= (1u << 27), "2^27 blocks fit the slot's record id");
_Static_assert(sizeof(node_t) == 16 && sizeof(meta_t) == 14, "DESIGN.md's record bytes");
_Static_assert(NODE_PARENT_SIDE < 32, "the flags fit their 5 bits");

static uint32_t secs_of(uint64_t ms) {
  uint64_t s = ms / 1000;
  return s <= KVP__INDEX_EPOCH_S ? 0 : (uint32_t)(s - KVP__INDEX_EPOCH_S);
}

/* Big tables are read at random: transparent huge pages spare a TLB miss
 * per access (the kernel may ignore the hint). */
void kvp__index_hint_huge(void *p, size_t bytes) {
  const uintptr_t huge = 2u << 20;
  uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1),
            end = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (bytes >= 2 * huge && end > start)
    madvise((void *)start, end - start, MADV_HUGEPAGE);
}

/* Both halves of the records to cap records. On failure the halves that
 * were moved stay valid (with their contents) and node_cap is unchanged. */
static int resize_records(kvp__index_t *ix, size_t cap) {
  node_t *nodes = realloc(ix->nodes, cap * sizeof *nodes);
  if (nodes == NULL)
    return KVP_ENOMEM;
  ix->nodes = nodes;
  meta_t *meta = realloc(ix->meta, cap * sizeof *meta);
  if (meta == NULL)
    return KVP_ENOMEM;
  ix->meta = meta;
  ix->node_cap = cap;
  kvp__index_hint_huge(ix->nodes, cap * sizeof *nodes);
  kvp__index_hint_huge(ix->meta, cap * sizeof *meta);
  return 0;
}

/* Room for need records. 1.5x: the slack is part of the published memory
 * figure (and pages never touched are not resident). */
static inline int grow_nodes(kvp__index_t *ix, size_t need) {
  if (need <= ix->node_cap)
    return 0; /* the common case stays inline: no call per new block */
  size_t cap = ix->node_cap + ix->node_cap / 2;
  if (cap < need)
    cap = need > 16 ? need : 16;
  return resize_records(ix, cap);
}

static size_t cap_for(size_t blocks) {
  size_t cap = blocks / LOAD_NUM * LOAD_DEN + LOAD_DEN;
  return cap < 16 ? 16 : cap;
}

int kvp__index_create(size_t cap_hint, double half_life_s, kvp__index_t **out) {
  kvp__index_t *ix = calloc(1, sizeof *ix);
  size_t cap = cap_for(cap_hint);
  int rc = KVP_ENOMEM;

  *out = NULL;
  if (ix == NULL)
    return KVP_ENOMEM;
  ix->slots = calloc(cap, sizeof *ix->slots);
  if (ix->slots == NULL)
    goto fail;
  kvp__index_hint_huge(ix->slots, cap * sizeof *ix->slots);
  ix->cap = cap;
  ix->idx_bits = kvp__index_idx_bits(cap);
  ix->idx_mask = (1u << ix->idx_bits) - 1;
  ix->nnodes = 1;
  if (grow_nodes(ix, cap_hint + 1) != 0)
    goto fail;
  kvp__map64_init(&ix->parents, 0);
  kvp__map64_init(&ix->sources, 0);
  kvp__index_intern_init(&ix->workers, KVP__INDEX_MAX_WORKERS);
  kvp__index_intern_init(&ix->volumes, KVP__INDEX_MAX_VOLUMES);
  uint16_t none;
  if (kvp__index_intern_id(&ix->volumes, "", 0, 0, &none) != 0)
    goto fail;
  ix->track_dirty = 1;
  ix->half_life_s = half_life_s > 0 ? half_life_s : 3600;
  *out = ix;
  return 0;
fail:
  kvp__index_destroy(ix);
  return rc;
}

void kvp__index_destroy(kvp__index_t *ix) {
  if (ix == NULL)
    return;
  kvp__index_intern_free(&ix->workers);
  kvp__index_intern_free(&ix->volumes);
  kvp__index_changelog_free(&ix->log);
  kvp__map64_free(&ix->parents);
  kvp__map64_free(&ix->sources);
  kvp__index_bulk_free(ix); /* a bulk load that never ended */
  free(ix->slots);
  free(ix->nodes);
  free(ix->meta);
  free(ix->slab);
  free(ix->shapes.key);
  free(ix->shapes.ref);
  free(ix->shapes.map);
  free(ix);
}

/* --- map --------------------------------------------------------------- */

/* The index keeps its own map rather than common/map64: a slot is 4 bytes
 * (node index and a hash tag, filled to 0.7) where map64's is 16 (key and
 * value, filled to 0.5), and the tag spares most node loads on a probe. Its
 * size is any number of slots (multiply-shift picks the home slot), so a
 * table sized for what it holds is filled to 0.7, not 0.35..0.7 as a power
 * of two would be. */

static int rehash(kvp__index_t *ix, size_t cap) {
  uint32_t *slots = calloc(cap, sizeof *slots);
  if (slots == NULL)
    return KVP_ENOMEM;
  kvp__index_hint_huge(slots, cap * sizeof *slots);
  uint32_t old_mask = ix->idx_mask;
  ix->idx_bits = kvp__index_idx_bits(cap);
  ix->idx_mask = (1u << ix->idx_bits) - 1;
  for (size_t i = 0; i < ix->cap; i++) {
    uint32_t v = ix->slots[i];
    if (v == 0)
      continue;
    uint64_t h = ix->nodes[v & old_mask].hash;
    size_t s = kvp__index_slot_of(h, cap);
    while (slots[s] != 0)
      s = kvp__index_next(s, cap);
    slots[s] = kvp__index_tag_of(ix, h) | (v & old_mask);
  }
  free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  return 0;
}

int kvp__index_reserve(kvp__index_t *ix, size_t blocks) {
  if (blocks > KVP__INDEX_MAX_BLOCKS)
    return KVP_ENOSPC;
  if (blocks * LOAD_DEN > ix->cap * LOAD_NUM && rehash(ix, cap_for(blocks)) != 0)
    return KVP_ENOMEM;
  if (blocks + 1 <= ix->node_cap)
    return 0;
  /* Exactly what was asked for: a cap reserves its whole budget here. */
  return resize_records(ix, blocks + 1);
}

static size_t dist(size_t from, size_t to, size_t cap) {
  return to >= from ? to - from : to + cap - from;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void unmap(kvp__index_t *ix, uint64_t h) {
  size_t cap = ix->cap, s = kvp__index_slot_of(h, cap);
  uint32_t mask = ix->idx_mask;
  while (ix->slots[s] == 0 || ix->nodes[ix->slots[s] & mask].hash != h)
    s = kvp__index_next(s, cap);
  for (size_t j = kvp__index_next(s, cap);; j = kvp__index_next(j, cap)) {
    uint32_t v = ix->slots[j];
    if (v == 0)
      break;
    size_t home = kvp__index_slot_of(ix->nodes[v & mask].hash, cap);
    /* Move v back into the hole when its home is not in (s, j]. */
    if (dist(home, j, cap) >= dist(s, j, cap)) {
      ix->slots[s] = v;
      s = j;
    }
  }
  ix->slots[s] = 0;
}

static void touch_node(kvp__index_t *ix, uint32_t n, uint8_t extra) {
  meta_t *md = &ix->meta[n];
  if (!ix->track_dirty)
    return;
  md->flags |= extra;
  if (md->flags & NODE_DIRTY)
    return;
  /* On ENOMEM the block stays clean in the store until its next change. */
  if (kvp__index_changelog_mark(&ix->log, ix->nodes[n].hash) == 0)
    md->flags |= NODE_DIRTY;
}

/* A new record for hash h of the given shape (whose reference it takes). */
/* The free record to take for a block whose parent is record near (0:
 * not known): the one after near when it is free, so that a chain stored
 * again goes on in consecutive records (NODE_PARENT_PREV) whatever order
 * its records were freed in (an engine evicts a chain's tail first); else
 * the oldest free one, moved back to the first of the free records just
 * before it (a chain freed tail first leaves its last record at the head
 * of the list). Free records are free where their flags say so; the list
 * is doubly linked through loc[0] (next) and loc[1] (previous). */
#define BACK_MAX 64
static uint32_t free_take(kvp__index_t *ix, uint32_t near) {
  uint32_t n = (uint32_t)ix->node_free;
  if (near != 0 && near + 1 < ix->nnodes && !(ix->meta[near + 1].flags & NODE_LIVE)) {
    n = near + 1;
  } else {
    for (int k = 0; k < BACK_MAX && n > 1 && !(ix->meta[n - 1].flags & NODE_LIVE); k++)
      n--;
  }
  uint32_t next = ix->nodes[n].loc[0], prev = ix->nodes[n].loc[1];
  if (prev)
    ix->nodes[prev].loc[0] = next;
  else
    ix->node_free = next;
  if (next)
    ix->nodes[next].loc[1] = prev;
  else
    ix->node_free_tail = prev;
  return n;
}

static int node_new(kvp__index_t *ix, uint64_t h, uint16_t shape, uint32_t near, uint32_t *out) {
  uint32_t n;
  if ((ix->blocks + 1) * LOAD_DEN > ix->cap * LOAD_NUM && rehash(ix, ix->cap + ix->cap / 2) != 0)
    return KVP_ENOMEM;
  if (ix->node_free) {
    n = free_take(ix, near);
  } else {
    if (ix->nnodes > KVP__INDEX_MAX_BLOCKS)
      return KVP_ENOSPC;
    if (grow_nodes(ix, ix->nnodes + 1) != 0)
      return KVP_ENOMEM;
    n = (uint32_t)ix->nnodes++;
  }
  ix->nodes[n] = (node_t){.hash = h};
  ix->meta[n] = (meta_t){.shape = shape, .flags = NODE_LIVE};
  size_t s = kvp__index_slot_of(h, ix->cap);
  while (ix->slots[s] != 0)
    s = kvp__index_next(s, ix->cap);
  /* n <= blocks held at most <= the map's fill: within idx_bits
   * (index_impl.h). */
  ix->slots[s] = kvp__index_tag_of(ix, h) | n;
  ix->blocks++;
  *out = n;
  return 0;
}

static void node_free(kvp__index_t *ix, uint32_t n) {
  meta_t *md = &ix->meta[n];
  uint64_t h = ix->nodes[n].hash;
  /* The next record's parent was this block: it moves to the side table.
   * Should the table not grow, that block keeps no parent (the store's
   * row keeps it until the block's next change). */
  if (n + 1 < ix->nnodes && (ix->meta[n + 1].flags & NODE_PARENT_PREV)) {
    meta_t *next = &ix->meta[n + 1];
    next->flags &= (uint8_t)~NODE_PARENT_PREV;
    if (kvp__map64_put(&ix->parents, ix->nodes[n + 1].hash, h) == 0)
      next->flags |= NODE_PARENT_SIDE;
  }
  if (md->flags & NODE_PARENT_SIDE)
    kvp__index_parents_del(ix, h);
  if (ix->bulk != NULL)
    kvp__index_bulk_forget(ix, n);
  unmap(ix, h);
  if (ix->track_dirty && !(md->flags & NODE_DIRTY))
    kvp__index_changelog_mark(&ix->log, h);
  kvp__index_locs_free(ix, n);
  kvp__index_shape_put(ix, md->shape);
  md->flags = 0;
  ix->nodes[n] = (node_t){.hash = 0, .loc = {0, (uint32_t)ix->node_free_tail}};
  if (ix->node_free_tail)
    ix->nodes[ix->node_free_tail].loc[0] = n;
  else
    ix->node_free = n;
  ix->node_free_tail = n;
  ix->blocks--;
}

/* Gives node n the shape of (tokens, bytes), keeping the per-tier byte
 * totals exact when its size changes. */
static int set_shape(kvp__index_t *ix, uint32_t n, uint32_t tokens, uint64_t bytes) {
  uint16_t sh;
  int rc;
  /* The common case, the same size again: no lookup. */
  if (ix->shapes.key[ix->meta[n].shape] == kvp__index_shape_key(tokens, bytes))
    return 0;
  if ((rc = kvp__index_shape_get(ix, tokens, bytes, &sh)) != 0)
    return rc;
  meta_t *md = &ix->meta[n];
  uint16_t old = md->shape;
  if (sh == old) {
    kvp__index_shape_put(ix, sh);
    return 0;
  }
  uint32_t ob = kvp__index_shape_bytes(ix, old), nb = kvp__index_shape_bytes(ix, sh);
  size_t cnt;
  const uint32_t *l = kvp__index_locs(ix, n, &cnt);
  for (size_t i = 0; i < cnt; i++) {
    int t = LOC_TIER(l[i]);
    ix->tier_bytes[t] = ix->tier_bytes[t] - ob + nb;
  }
  md->shape = sh;
  kvp__index_shape_put(ix, old);
  return 0;
}

/* --- locations ---------------------------------------------------------- */

/* Adds a location to node n: 1 when added, 0 when it was there, or
 * KVP_ENOMEM. */
static int loc_add(kvp__index_t *ix, uint32_t n, uint32_t loc) {
  size_t cnt;
  const uint32_t *l = kvp__index_locs(ix, n, &cnt);
  for (size_t i = 0; i < cnt; i++)
    if (l[i] == loc)
      return 0;
  if (kvp__index_loc_add(ix, n, loc) != 0)
    return KVP_ENOMEM;
  int t = LOC_TIER(loc);
  ix->locations++;
  ix->tier_locs[t]++;
  ix->tier_bytes[t] += kvp__index_shape_bytes(ix, ix->meta[n].shape);
  return 1;
}

/* Removes the location at position at of node n, recording it as gone. */
void kvp__index_loc_remove(kvp__index_t *ix, uint32_t n, size_t at) {
  size_t cnt;
  uint32_t loc = kvp__index_locs(ix, n, &cnt)[at];
  int t = LOC_TIER(loc);
  if (ix->track_dirty) {
    /* On ENOMEM the row stays in the store until the block is deleted. */
    kvp__index_gone_t g = {.hash = ix->nodes[n].hash,
                           .worker = LOC_WORKER(loc),
                           .volume = LOC_VOLUME(loc),
                           .tier = (uint8_t)t};
    (void)kvp__index_changelog_gone(&ix->log, &g);
  }
  kvp__index_loc_del(ix, n, at);
  ix->locations--;
  ix->tier_locs[t]--;
  ix->tier_bytes[t] -= kvp__index_shape_bytes(ix, ix->meta[n].shape);
}

/* After locations of n went: deletes the block when none is left. */
void kvp__index_settle_node(kvp__index_t *ix, uint32_t n) {
  size_t cnt;
  (void)kvp__index_locs(ix, n, &cnt);
  if (cnt == 0)
    node_free(ix, n);
  else
    touch_node(ix, n, 0);
}

int kvp__index_store(kvp__index_t *ix, uint64_t hash, int has_parent, uint64_t parent,
                     uint16_t worker, int tier, uint16_t volume, uint32_t tokens, uint64_t bytes,
                     uint64_t now_ms) {
  uint32_t n;
  int created = 0, rc;

  if (tier < KVP_TIER_G1 || tier > KVP_TIER_G4)
    return KVP_ETIER;
  if (worker >= ix->workers.n || volume >= ix->volumes.n)
    return KVP_EINVAL;
  n = kvp__index_find(ix, hash);
  if (n == 0) {
    uint16_t sh;
    /* The block stored last is this one's parent in a chain stored in order. */
    uint32_t near =
        has_parent && ix->last_stored < ix->nnodes && ix->nodes[ix->last_stored].hash == parent
            ? ix->last_stored
            : 0;
    if ((rc = kvp__index_shape_get(ix, tokens, bytes, &sh)) != 0)
      return rc;
    if ((rc = node_new(ix, hash, sh, near, &n)) != 0) {
      kvp__index_shape_put(ix, sh);
      return rc;
    }
    created = 1;
  } else if ((rc = set_shape(ix, n, tokens, bytes)) != 0) {
    return rc;
  }
  if (has_parent && (rc = kvp__index_set_parent(ix, n, parent)) != 0) {
    if (created)
      node_free(ix, n);
    return rc;
  }
  meta_t *md = &ix->meta[n];
  md->last_access_s = secs_of(now_ms);
  if ((rc = loc_add(ix, n, LOC_MAKE(worker, tier, volume))) < 0) {
    if (created)
      node_free(ix, n);
    return rc;
  }
  touch_node(ix, n, rc == 1 ? NODE_LOCS : 0);
  ix->last_stored = n;
  return 0;
}

int kvp__index_remove(kvp__index_t *ix, uint64_t hash, uint16_t worker, int tier, uint16_t volume) {
  uint32_t n = kvp__index_find(ix, hash), want = LOC_MAKE(worker, tier, 0) >> 16;
  int found = 0;

  if (n == 0)
    return KVP_ENOENT;
  size_t cnt;
  (void)kvp__index_locs(ix, n, &cnt);
  /* Newest first, as the store has always seen removals. */
  for (size_t i = cnt; i-- > 0;) {
    uint32_t l = kvp__index_locs(ix, n, &cnt)[i];
    if (LOC_WT(l) == want && (volume == KVP__INDEX_NO_VOLUME || LOC_VOLUME(l) == volume)) {
      kvp__index_loc_remove(ix, n, i);
      found = 1;
    }
  }
  if (!found)
    return KVP_ENOENT;
  kvp__index_settle_node(ix, n);
  return 0;
}

int kvp__index_access(kvp__index_t *ix, uint64_t hash, int tier, uint32_t hits, uint64_t now_ms) {
  uint32_t n = kvp__index_find(ix, hash);
  (void)tier; /* recency is the block's: every tier's LRU order follows it */
  if (n == 0)
    return KVP_ENOENT;
  meta_t *md = &ix->meta[n];
  uint32_t now_s = secs_of(now_ms);
  double age = now_s > md->last_access_s ? (double)(now_s - md->last_access_s) : 0;
  md->freq = (float)(md->freq * exp2(-age / ix->half_life_s) + hits);
  md->hits = hits >= META_HITS_MAX - md->hits ? META_HITS_MAX : md->hits + hits;
  md->last_access_s = now_s;
  touch_node(ix, n, 0);
  return 0;
}

size_t kvp__index_drop(kvp__index_t *ix, uint16_t worker, unsigned tier_mask) {
  size_t dropped = 0;
  /* A linear pass over the records: drops are rare (restart, silence,
   * clear). */
  for (size_t n = 1; n < ix->nnodes; n++) {
    if (!(ix->meta[n].flags & NODE_LIVE))
      continue;
    size_t cnt, before = dropped;
    (void)kvp__index_locs(ix, (uint32_t)n, &cnt);
    for (size_t i = cnt; i-- > 0;) {
      uint32_t l = kvp__index_locs(ix, (uint32_t)n, &cnt)[i];
      if (LOC_WORKER(l) == worker && (tier_mask & (1u << LOC_TIER(l)))) {
        kvp__index_loc_remove(ix, (uint32_t)n, i);
        dropped++;
      }
    }
    if (dropped != before)
      kvp__index_settle_node(ix, (uint32_t)n);
  }
  return dropped;
}

int kvp__index_held(const kvp__index_t *ix, uint16_t worker, int tier, kvp__index_held_t **out,
                    size_t *n) {
  kvp__index_held_t *v = NULL;
  size_t k = 0, cap = 0;
  for (size_t nd = 1; nd < ix->nnodes; nd++) {
    if (!(ix->meta[nd].flags & NODE_LIVE))
      continue;
    size_t cnt;
    const uint32_t *l = kvp__index_locs(ix, (uint32_t)nd, &cnt);
    for (size_t i = 0; i < cnt; i++) {
      if (LOC_WORKER(l[i]) != worker || LOC_TIER(l[i]) != tier)
        continue;
      if (KVP_ARRAY_RESERVE(v, cap, k + 1, 256) != 0) {
        free(v);
        *out = NULL;
        *n = 0;
        return KVP_ENOMEM;
      }
      v[k++] = (kvp__index_held_t){.hash = ix->nodes[nd].hash, .volume = LOC_VOLUME(l[i])};
    }
  }
  *out = v;
  *n = k;
  return 0;
}

int kvp__index_drop_some(kvp__index_t *ix, const uint8_t *workers, size_t nworkers,
                         unsigned tier_mask, size_t *next, size_t max_records, size_t *dropped) {
  size_t n = *next ? *next : 1, end = n + max_records;
  for (; n < ix->nnodes && n < end; n++) {
    if (!(ix->meta[n].flags & NODE_LIVE))
      continue;
    size_t cnt, before = *dropped;
    (void)kvp__index_locs(ix, (uint32_t)n, &cnt);
    for (size_t i = cnt; i-- > 0;) {
      uint32_t l = kvp__index_locs(ix, (uint32_t)n, &cnt)[i];
      if (LOC_WORKER(l) < nworkers && workers[LOC_WORKER(l)] && (tier_mask & (1u << LOC_TIER(l)))) {
        kvp__index_loc_remove(ix, (uint32_t)n, i);
        (*dropped)++;
      }
    }
    if (*dropped != before)
      kvp__index_settle_node(ix, (uint32_t)n);
  }
  *next = n;
  return n >= ix->nnodes;
}

void kvp__index_prefetch(const kvp__index_t *ix, const uint64_t *hashes, size_t n) {
  /* Two passes so the slot loads of the first overlap, then the record
   * loads of the second: the apply loop that follows finds them in cache. */
  for (size_t i = 0; i < n; i++)
    __builtin_prefetch(&ix->slots[kvp__index_slot_of(hashes[i], ix->cap)]);
  for (size_t i = 0; i < n; i++) {
    uint32_t nd = kvp__index_candidate(ix, hashes[i]);
    if (nd) {
      __builtin_prefetch(&ix->nodes[nd]);
      __builtin_prefetch(&ix->meta[nd]); /* an update writes both halves */
    }
  }
}

int kvp__index_load_block(kvp__index_t *ix, const kvp__index_block_t *b) {
  uint32_t n = kvp__index_find(ix, b->hash);
  int rc;
  if (n == 0) {
    uint16_t sh;
    if ((rc = kvp__index_shape_get(ix, b->tokens, b->bytes, &sh)) != 0)
      return rc;
    if ((rc = node_new(ix, b->hash, sh, 0, &n)) != 0) {
      kvp__index_shape_put(ix, sh);
      return rc;
    }
  } else if ((rc = set_shape(ix, n, b->tokens, b->bytes)) != 0) {
    return rc;
  }
  if ((rc = kvp__index_set_parent(ix, n, b->parent)) != 0)
    return rc;
  meta_t *md = &ix->meta[n];
  md->last_access_s = secs_of(b->last_access_ms);
  md->hits = b->hits < META_HITS_MAX ? b->hits : META_HITS_MAX;
  md->freq = (float)b->freq;
  return 0;
}

int kvp__index_load_loc(kvp__index_t *ix, uint64_t hash, const kvp__index_loc_t *loc) {
  uint32_t n = kvp__index_find(ix, hash);
  if (n == 0)
    return KVP_ENOENT;
  if (loc->tier < KVP_TIER_G1 || loc->tier > KVP_TIER_G4)
    return KVP_ETIER;
  if (loc->worker >= ix->workers.n || loc->volume >= ix->volumes.n)
    return KVP_EINVAL;
  int rc = loc_add(ix, n, LOC_MAKE(loc->worker, loc->tier, loc->volume));
  return rc < 0 ? rc : 0;
}

void kvp__index_stats(const kvp__index_t *ix, kvp__index_stats_t *st) {
  memset(st, 0, sizeof *st);
  st->blocks = ix->blocks;
  st->locations = ix->locations;
  for (int t = 1; t <= KVP_TIER_MAX; t++) {
    st->tier_locations[t] = ix->tier_locs[t];
    st->tier_bytes[t] = ix->tier_bytes[t];
  }
  st->parents_side = kvp__map64_count(&ix->parents);
  st->memory_bytes = sizeof *ix + ix->cap * sizeof *ix->slots + ix->node_cap * RECORD_BYTES +
                     kvp__map64_bytes(&ix->parents) + kvp__index_locs_memory(ix) +
                     kvp__index_changelog_memory(&ix->log) +
                     kvp__index_intern_memory(&ix->workers) +
                     kvp__index_intern_memory(&ix->volumes);
}

void kvp__index_track_dirty(kvp__index_t *ix, int on) {
  ix->track_dirty = on;
}

/* --- change log (changelog.c) ------------------------------------------ */

/* What became of a listed block: see kvp__index_settle_fn. */
static uint32_t settle(void *ctx, uint64_t hash) {
  kvp__index_t *ix = ctx;
  uint32_t n = kvp__index_find(ix, hash);
  if (n == 0)
    return 0;
  meta_t *md = &ix->meta[n];
  if (!(md->flags & NODE_DIRTY))
    return KVP__INDEX_CH_SKIP; /* listed twice: deleted, then created again */
  uint32_t what = KVP__INDEX_CH_BLOCK | ((md->flags & NODE_LOCS) ? KVP__INDEX_CH_LOCS : 0);
  md->flags &= (uint8_t) ~(NODE_DIRTY | NODE_LOCS);
  return what;
}

int kvp__index_changes_take(kvp__index_t *ix, kvp__index_changes_t *ch) {
  return kvp__index_changelog_take(&ix->log, settle, ix, ch);
}

void kvp__index_changes_restore(kvp__index_t *ix, const kvp__index_changes_t *ch) {
  for (size_t i = 0; i < ch->ngone; i++)
    (void)kvp__index_changelog_gone(&ix->log, &ch->gone[i]);
  for (size_t i = 0; i < ch->nblocks; i++) {
    uint32_t n = kvp__index_find(ix, ch->blocks[i].hash);
    if (n)
      touch_node(ix, n, NODE_LOCS);
    else
      (void)kvp__index_changelog_mark(&ix->log, ch->blocks[i].hash);
  }
}

size_t kvp__index_dirty_count(const kvp__index_t *ix) {
  return kvp__index_changelog_count(&ix->log);
}
