/* Advisor block index: the map, the node and location pools, the LRU lists
 * and every update (index.h). Worker and volume names are in names.c (over
 * intern.c), the change log in changelog.c, the queries in query.c.
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

static uint32_t secs_of(uint64_t ms) {
  uint64_t s = ms / 1000;
  return s <= KVP__INDEX_EPOCH_S ? 0 : (uint32_t)(s - KVP__INDEX_EPOCH_S);
}

/* Big tables are read at random: transparent huge pages spare a TLB miss
 * per access (the kernel may ignore the hint). */
static void hint_huge(void *p, size_t bytes) {
  const uintptr_t huge = 2u << 20;
  uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1),
            end = ((uintptr_t)p + bytes) & ~(huge - 1);
  if (bytes >= 2 * huge && end > start)
    madvise((void *)start, end - start, MADV_HUGEPAGE);
}

/* Room for need elements in a pool. 1.5x: the slack of a pool is part of
 * the published memory figure; the first allocation is exactly the size
 * asked for (the create hint). */
static inline int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0; /* the common case stays inline: no call per new location */
  size_t old = *cap;
  int rc = kvp__array_reserve(p, cap, need, elem, need > 16 ? need : 16, KVP_ARRAY_HALF);
  if (rc == 0 && *cap != old)
    hint_huge(*p, *cap * elem);
  return rc;
}

int kvp__index_create(size_t cap_hint, double half_life_s, kvp__index_t **out) {
  kvp__index_t *ix = calloc(1, sizeof *ix);
  size_t cap = 16;
  int rc = KVP_ENOMEM;

  *out = NULL;
  if (ix == NULL)
    return KVP_ENOMEM;
  while (cap * 7 < cap_hint * 10)
    cap *= 2;
  ix->slots = calloc(cap, sizeof *ix->slots);
  if (ix->slots == NULL)
    goto fail;
  hint_huge(ix->slots, cap * sizeof *ix->slots);
  ix->cap = cap;
  ix->mask = cap - 1;
  ix->nnodes = 1;
  ix->nlocs = 1;
  if (grow((void **)&ix->nodes, &ix->node_cap, cap_hint + 1, sizeof(node_t)) != 0)
    goto fail;
  if (grow((void **)&ix->locs, &ix->loc_cap, cap_hint + 1, sizeof(loc_t)) != 0)
    goto fail;
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
  free(ix->slots);
  free(ix->nodes);
  free(ix->locs);
  free(ix);
}

/* --- map --------------------------------------------------------------- */

/* The index keeps its own map rather than common/map64: a slot is 4 bytes
 * (node index and a hash tag, filled to 0.7) where map64's is 16 (key and
 * value, filled to 0.5), and the tag spares most node loads on a probe.
 * Measured with map64 in its place (hash -> node index, same prefetches;
 * scripts/abba.sh 6, kvp-bench ingest and match, median B/A and range):
 * ingest.block_events_per_s 0.87 (0.73-1.32), match.p50_us 1.23
 * (0.95-1.45), match.p99_us 1.19 (1.12-1.35), match.index_bytes_per_location
 * 62.4 -> 81.6 B (1.31), match.rss_bytes_per_block 1.34; the unit test's
 * 200k-location index went from 70.5 to 101.9 B per location, past its
 * 72 B bound. */

static int rehash(kvp__index_t *ix, size_t cap) {
  uint32_t *slots = calloc(cap, sizeof *slots);
  if (slots == NULL)
    return KVP_ENOMEM;
  hint_huge(slots, cap * sizeof *slots);
  for (size_t i = 0; i < ix->cap; i++) {
    uint32_t v = ix->slots[i];
    if (v == 0)
      continue;
    size_t s = kvp__index_slot_of(ix->nodes[v & IDX_MASK].hash, cap - 1);
    while (slots[s] != 0)
      s = (s + 1) & (cap - 1);
    slots[s] = v;
  }
  free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  ix->mask = cap - 1;
  return 0;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void unmap(kvp__index_t *ix, uint64_t h) {
  size_t s = kvp__index_slot_of(h, ix->mask);
  while (ix->slots[s] == 0 || ix->nodes[ix->slots[s] & IDX_MASK].hash != h)
    s = (s + 1) & ix->mask;
  for (size_t j = (s + 1) & ix->mask;; j = (j + 1) & ix->mask) {
    uint32_t v = ix->slots[j];
    if (v == 0)
      break;
    size_t home = kvp__index_slot_of(ix->nodes[v & IDX_MASK].hash, ix->mask);
    /* Move v back into the hole when its home is not in (s, j]. */
    if (((j - home) & ix->mask) >= ((j - s) & ix->mask)) {
      ix->slots[s] = v;
      s = j;
    }
  }
  ix->slots[s] = 0;
}

static void touch_node(kvp__index_t *ix, uint32_t n, uint16_t extra) {
  node_t *nd = &ix->nodes[n];
  if (!ix->track_dirty)
    return;
  nd->flags |= extra;
  if (nd->flags & NODE_DIRTY)
    return;
  /* On ENOMEM the block stays clean in the store until its next change. */
  if (kvp__index_changelog_mark(&ix->log, nd->hash) == 0)
    nd->flags |= NODE_DIRTY;
}

static int node_new(kvp__index_t *ix, uint64_t h, uint32_t *out) {
  uint32_t n;
  if ((ix->blocks + 1) * 10 > ix->cap * 7 && rehash(ix, ix->cap * 2) != 0)
    return KVP_ENOMEM;
  if (ix->node_free) {
    n = (uint32_t)ix->node_free;
    ix->node_free = ix->nodes[n].loc_head;
  } else {
    if (ix->nnodes > IDX_MASK)
      return KVP_ENOSPC;
    if (grow((void **)&ix->nodes, &ix->node_cap, ix->nnodes + 1, sizeof(node_t)) != 0)
      return KVP_ENOMEM;
    n = (uint32_t)ix->nnodes++;
  }
  memset(&ix->nodes[n], 0, sizeof(node_t));
  ix->nodes[n].hash = h;
  ix->nodes[n].parent = h;
  size_t s = kvp__index_slot_of(h, ix->mask);
  while (ix->slots[s] != 0)
    s = (s + 1) & ix->mask;
  ix->slots[s] = kvp__index_tag_of(h) | n;
  ix->blocks++;
  *out = n;
  return 0;
}

static void node_free(kvp__index_t *ix, uint32_t n) {
  uint64_t h = ix->nodes[n].hash;
  unmap(ix, h);
  if (ix->track_dirty && !(ix->nodes[n].flags & NODE_DIRTY))
    kvp__index_changelog_mark(&ix->log, h);
  ix->nodes[n].flags = 0;
  ix->nodes[n].loc_head = (uint32_t)ix->node_free;
  ix->node_free = n;
  ix->blocks--;
}

/* --- locations and LRU -------------------------------------------------- */

static void lru_unlink(kvp__index_t *ix, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = kvp__index_loc_tier(lc);
  if (lc->lru_prev)
    ix->locs[lc->lru_prev].lru_next = lc->lru_next;
  else
    ix->lru_head[t] = lc->lru_next;
  if (lc->lru_next)
    ix->locs[lc->lru_next].lru_prev = lc->lru_prev;
  else
    ix->lru_tail[t] = lc->lru_prev;
  lc->lru_prev = lc->lru_next = 0;
}

static void lru_push(kvp__index_t *ix, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = kvp__index_loc_tier(lc);
  lc->lru_prev = 0;
  lc->lru_next = ix->lru_head[t];
  if (ix->lru_head[t])
    ix->locs[ix->lru_head[t]].lru_prev = l;
  else
    ix->lru_tail[t] = l;
  ix->lru_head[t] = l;
}

static int loc_add(kvp__index_t *ix, uint32_t n, uint16_t worker, int tier, uint16_t volume) {
  uint16_t wt = (uint16_t)(worker << 3 | tier);
  for (uint32_t l = ix->nodes[n].loc_head; l; l = ix->locs[l].next) {
    if (ix->locs[l].wt == wt && ix->locs[l].volume == volume) {
      lru_unlink(ix, l);
      lru_push(ix, l);
      return 0;
    }
  }
  uint32_t l;
  if (ix->loc_free) {
    l = (uint32_t)ix->loc_free;
    ix->loc_free = ix->locs[l].next;
  } else {
    if (ix->nlocs >= UINT32_MAX ||
        grow((void **)&ix->locs, &ix->loc_cap, ix->nlocs + 1, sizeof(loc_t)) != 0)
      return KVP_ENOMEM;
    l = (uint32_t)ix->nlocs++;
  }
  loc_t *lc = &ix->locs[l];
  lc->node = n;
  lc->wt = wt;
  lc->volume = volume;
  lc->next = ix->nodes[n].loc_head;
  ix->nodes[n].loc_head = l;
  lru_push(ix, l);
  ix->locations++;
  ix->tier_locs[tier]++;
  ix->tier_bytes[tier] += ix->nodes[n].bytes;
  return 1;
}

static void record_gone(kvp__index_t *ix, uint64_t h, const loc_t *lc) {
  if (!ix->track_dirty)
    return;
  /* On ENOMEM the row stays in the store until the block is deleted. */
  kvp__index_gone_t g = {.hash = h,
                         .worker = kvp__index_loc_worker(lc),
                         .volume = lc->volume,
                         .tier = (uint8_t)kvp__index_loc_tier(lc)};
  (void)kvp__index_changelog_gone(&ix->log, &g);
}

/* Unlinks location l (whose predecessor in the block's list is prev, 0 when
 * l is the head) and frees it. */
static void loc_del(kvp__index_t *ix, uint32_t n, uint32_t prev, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = kvp__index_loc_tier(lc);
  record_gone(ix, ix->nodes[n].hash, lc);
  lru_unlink(ix, l);
  if (prev)
    ix->locs[prev].next = lc->next;
  else
    ix->nodes[n].loc_head = lc->next;
  ix->locations--;
  ix->tier_locs[t]--;
  ix->tier_bytes[t] -= ix->nodes[n].bytes;
  lc->wt = 0;
  lc->node = 0;
  lc->next = (uint32_t)ix->loc_free;
  ix->loc_free = l;
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
    if ((rc = node_new(ix, hash, &n)) != 0)
      return rc;
    created = 1;
  }
  node_t *nd = &ix->nodes[n];
  if (has_parent)
    nd->parent = parent;
  uint32_t b32 = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
  if (b32 != nd->bytes && nd->loc_head) {
    /* Keep the per-tier byte totals exact when a size changes. */
    for (uint32_t l = nd->loc_head; l; l = ix->locs[l].next) {
      int t = kvp__index_loc_tier(&ix->locs[l]);
      ix->tier_bytes[t] = ix->tier_bytes[t] - nd->bytes + b32;
    }
  }
  nd->bytes = b32;
  nd->tokens = tokens > UINT16_MAX ? UINT16_MAX : (uint16_t)tokens;
  nd->last_access_s = secs_of(now_ms);
  if ((rc = loc_add(ix, n, worker, tier, volume)) < 0) {
    if (created)
      node_free(ix, n);
    return rc;
  }
  touch_node(ix, n, rc == 1 ? NODE_LOCS : 0);
  return 0;
}

int kvp__index_remove(kvp__index_t *ix, uint64_t hash, uint16_t worker, int tier, uint16_t volume) {
  uint32_t n = kvp__index_find(ix, hash), prev = 0;
  int found = 0;

  if (n == 0)
    return KVP_ENOENT;
  for (uint32_t l = ix->nodes[n].loc_head; l;) {
    loc_t *lc = &ix->locs[l];
    uint32_t next = lc->next;
    if (kvp__index_loc_worker(lc) == worker && kvp__index_loc_tier(lc) == tier &&
        (volume == KVP__INDEX_NO_VOLUME || lc->volume == volume)) {
      loc_del(ix, n, prev, l);
      found = 1;
    } else {
      prev = l;
    }
    l = next;
  }
  if (!found)
    return KVP_ENOENT;
  if (ix->nodes[n].loc_head == 0)
    node_free(ix, n);
  else
    touch_node(ix, n, 0);
  return 0;
}

int kvp__index_access(kvp__index_t *ix, uint64_t hash, int tier, uint32_t hits, uint64_t now_ms) {
  uint32_t n = kvp__index_find(ix, hash);
  if (n == 0)
    return KVP_ENOENT;
  node_t *nd = &ix->nodes[n];
  uint32_t now_s = secs_of(now_ms);
  double age = now_s > nd->last_access_s ? (double)(now_s - nd->last_access_s) : 0;
  nd->freq = (float)(nd->freq * exp2(-age / ix->half_life_s) + hits);
  nd->hits = nd->hits + hits < nd->hits ? UINT32_MAX : nd->hits + hits;
  nd->last_access_s = now_s;
  for (uint32_t l = nd->loc_head; l; l = ix->locs[l].next) {
    if (tier == 0 || kvp__index_loc_tier(&ix->locs[l]) == tier) {
      lru_unlink(ix, l);
      lru_push(ix, l);
    }
  }
  touch_node(ix, n, 0);
  return 0;
}

size_t kvp__index_drop(kvp__index_t *ix, uint16_t worker, unsigned tier_mask) {
  size_t dropped = 0;
  /* A linear pass over the pool: drops are rare (restart, silence, clear). */
  for (size_t l = 1; l < ix->nlocs; l++) {
    loc_t *lc = &ix->locs[l];
    if (lc->node == 0 || kvp__index_loc_worker(lc) != worker ||
        !(tier_mask & (1u << kvp__index_loc_tier(lc))))
      continue;
    uint32_t n = lc->node, prev = 0;
    for (uint32_t p = ix->nodes[n].loc_head; p != l; p = ix->locs[p].next)
      prev = p;
    loc_del(ix, n, prev, (uint32_t)l);
    dropped++;
    if (ix->nodes[n].loc_head == 0)
      node_free(ix, n);
    else
      touch_node(ix, n, 0);
  }
  return dropped;
}

void kvp__index_prefetch(const kvp__index_t *ix, const uint64_t *hashes, size_t n) {
  /* Two passes so the slot loads of the first overlap, then the node loads
   * of the second: the apply loop that follows finds them in cache. */
  for (size_t i = 0; i < n; i++)
    __builtin_prefetch(&ix->slots[kvp__index_slot_of(hashes[i], ix->mask)]);
  for (size_t i = 0; i < n; i++) {
    uint32_t nd = kvp__index_candidate(ix, hashes[i]);
    if (nd)
      __builtin_prefetch(&ix->nodes[nd]);
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t nd = kvp__index_candidate(ix, hashes[i]);
    if (nd && ix->nodes[nd].hash == hashes[i] && ix->nodes[nd].loc_head)
      __builtin_prefetch(&ix->locs[ix->nodes[nd].loc_head]);
  }
}

int kvp__index_load_block(kvp__index_t *ix, const kvp__index_block_t *b) {
  uint32_t n = kvp__index_find(ix, b->hash);
  int rc;
  if (n == 0 && (rc = node_new(ix, b->hash, &n)) != 0)
    return rc;
  node_t *nd = &ix->nodes[n];
  nd->parent = b->parent;
  nd->tokens = b->tokens > UINT16_MAX ? UINT16_MAX : (uint16_t)b->tokens;
  nd->bytes = b->bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)b->bytes;
  nd->last_access_s = secs_of(b->last_access_ms);
  nd->hits = b->hits;
  nd->freq = (float)b->freq;
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
  int rc = loc_add(ix, n, loc->worker, loc->tier, loc->volume);
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
  st->memory_bytes = sizeof *ix + ix->cap * sizeof *ix->slots + ix->node_cap * sizeof(node_t) +
                     ix->loc_cap * sizeof(loc_t) + kvp__index_changelog_memory(&ix->log) +
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
  node_t *nd = &ix->nodes[n];
  if (!(nd->flags & NODE_DIRTY))
    return KVP__INDEX_CH_SKIP; /* listed twice: deleted, then created again */
  uint32_t what = KVP__INDEX_CH_BLOCK | ((nd->flags & NODE_LOCS) ? KVP__INDEX_CH_LOCS : 0);
  nd->flags &= (uint16_t) ~(NODE_DIRTY | NODE_LOCS);
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
