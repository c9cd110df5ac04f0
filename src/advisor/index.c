/* Advisor block index; see index.h. */
#include "advisor/index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

enum { NODE_DIRTY = 1, NODE_LOCS = 2 };

/* 40 bytes. parent == hash means no parent. */
typedef struct node_s {
  uint64_t hash;
  uint64_t parent;
  float freq;
  uint32_t hits;
  uint32_t last_access_s; /* since KVP__ADV_EPOCH_S */
  uint32_t loc_head;      /* first location; free list link when free */
  uint32_t bytes;         /* saturated at UINT32_MAX */
  uint16_t tokens;        /* saturated at UINT16_MAX */
  uint16_t flags;
} node_t;

/* 20 bytes. wt = worker << 3 | tier. */
typedef struct loc_s {
  uint32_t node;
  uint32_t next; /* next location of the same block; free list link */
  uint32_t lru_prev, lru_next;
  uint16_t wt;
  uint16_t volume;
} loc_t;

typedef struct name_s {
  char *name;
  uint32_t dp_rank;
} name_t;

struct kvp__adv_index_s {
  uint32_t *slots; /* node index, 0 = empty */
  size_t cap;      /* power of two */
  size_t mask;
  node_t *nodes; /* [0] unused */
  size_t nnodes, node_cap, node_free, blocks;
  loc_t *locs; /* [0] unused */
  size_t nlocs, loc_cap, loc_free, locations;
  uint32_t lru_head[5], lru_tail[5]; /* head = most recent */
  size_t tier_locs[5];
  uint64_t tier_bytes[5];
  name_t *workers;
  size_t nworkers;
  name_t *volumes; /* [0] = "" */
  size_t nvolumes;
  uint64_t *dirty;
  size_t ndirty, dirty_cap;
  kvp__adv_gone_t *gone; /* locations removed since the last take */
  size_t ngone, gone_cap;
  int track_dirty;
  double half_life_s;
};

static inline size_t slot_of(uint64_t h, size_t mask) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

static inline uint16_t loc_worker(const loc_t *l) {
  return (uint16_t)(l->wt >> 3);
}

static inline int loc_tier(const loc_t *l) {
  return l->wt & 7;
}

static uint32_t secs_of(uint64_t ms) {
  uint64_t s = ms / 1000;
  return s <= KVP__ADV_EPOCH_S ? 0 : (uint32_t)(s - KVP__ADV_EPOCH_S);
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

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  /* 1.5x: the slack of a pool is part of the published memory figure. */
  size_t n = *cap ? *cap : (need > 16 ? need : 16);
  while (n < need)
    n += n / 2;
  void *q = realloc(*p, n * elem);
  if (q == NULL)
    return KVP_ENOMEM;
  *p = q;
  *cap = n;
  hint_huge(q, n * elem);
  return 0;
}

int kvp__adv_index_create(kvp__adv_index_t **out, size_t cap_hint, double half_life_s) {
  kvp__adv_index_t *ix = calloc(1, sizeof *ix);
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
  ix->volumes = calloc(1, sizeof *ix->volumes);
  if (ix->volumes == NULL || (ix->volumes[0].name = strdup("")) == NULL)
    goto fail;
  ix->nvolumes = 1;
  ix->track_dirty = 1;
  ix->half_life_s = half_life_s > 0 ? half_life_s : 3600;
  *out = ix;
  return 0;
fail:
  kvp__adv_index_destroy(ix);
  return rc;
}

void kvp__adv_index_destroy(kvp__adv_index_t *ix) {
  if (ix == NULL)
    return;
  for (size_t i = 0; i < ix->nworkers; i++)
    free(ix->workers[i].name);
  for (size_t i = 0; i < ix->nvolumes; i++)
    free(ix->volumes[i].name);
  free(ix->workers);
  free(ix->volumes);
  free(ix->slots);
  free(ix->nodes);
  free(ix->locs);
  free(ix->dirty);
  free(ix->gone);
  free(ix);
}

int kvp__adv_index_worker(kvp__adv_index_t *ix, const char *name, uint32_t dp_rank, uint16_t *id) {
  if (!kvp_subject_token_valid(name))
    return KVP_EINVAL;
  for (size_t i = 0; i < ix->nworkers; i++) {
    if (ix->workers[i].dp_rank == dp_rank && strcmp(ix->workers[i].name, name) == 0) {
      *id = (uint16_t)i;
      return 0;
    }
  }
  if (ix->nworkers >= KVP__ADV_MAX_WORKERS)
    return KVP_ENOSPC;
  name_t *w = realloc(ix->workers, (ix->nworkers + 1) * sizeof *w);
  if (w == NULL)
    return KVP_ENOMEM;
  ix->workers = w;
  if ((w[ix->nworkers].name = strdup(name)) == NULL)
    return KVP_ENOMEM;
  w[ix->nworkers].dp_rank = dp_rank;
  *id = (uint16_t)ix->nworkers++;
  return 0;
}

const char *kvp__adv_index_worker_name(const kvp__adv_index_t *ix, uint16_t id, uint32_t *dp_rank) {
  if (id >= ix->nworkers)
    return NULL;
  if (dp_rank)
    *dp_rank = ix->workers[id].dp_rank;
  return ix->workers[id].name;
}

size_t kvp__adv_index_worker_count(const kvp__adv_index_t *ix) {
  return ix->nworkers;
}

int kvp__adv_index_volume(kvp__adv_index_t *ix, const char *name, uint16_t *id) {
  if (name == NULL || name[0] == '\0') {
    *id = 0;
    return 0;
  }
  if (strlen(name) > 255)
    return KVP_EINVAL;
  for (size_t i = 1; i < ix->nvolumes; i++) {
    if (strcmp(ix->volumes[i].name, name) == 0) {
      *id = (uint16_t)i;
      return 0;
    }
  }
  if (ix->nvolumes >= KVP__ADV_MAX_VOLUMES)
    return KVP_ENOSPC;
  name_t *v = realloc(ix->volumes, (ix->nvolumes + 1) * sizeof *v);
  if (v == NULL)
    return KVP_ENOMEM;
  ix->volumes = v;
  if ((v[ix->nvolumes].name = strdup(name)) == NULL)
    return KVP_ENOMEM;
  *id = (uint16_t)ix->nvolumes++;
  return 0;
}

const char *kvp__adv_index_volume_name(const kvp__adv_index_t *ix, uint16_t id) {
  return id < ix->nvolumes ? ix->volumes[id].name : NULL;
}

size_t kvp__adv_index_volume_count(const kvp__adv_index_t *ix) {
  return ix->nvolumes;
}

/* --- map --------------------------------------------------------------- */

/* A slot holds a node index in its low IDX_BITS bits and the top bits of
 * the block's hash above them, so probing skips most foreign nodes without
 * loading them. 0 is an empty slot (node 0 is never used). */
#define IDX_BITS 27
#define IDX_MASK ((1u << IDX_BITS) - 1)

static inline uint32_t tag_of(uint64_t h) {
  return (uint32_t)(h >> (64 - (32 - IDX_BITS))) << IDX_BITS;
}

static uint32_t find(const kvp__adv_index_t *ix, uint64_t h) {
  uint32_t tag = tag_of(h);
  for (size_t s = slot_of(h, ix->mask);; s = (s + 1) & ix->mask) {
    uint32_t v = ix->slots[s];
    if (v == 0)
      return 0;
    if ((v & ~IDX_MASK) == tag && ix->nodes[v & IDX_MASK].hash == h)
      return v & IDX_MASK;
  }
}

/* The first node whose tag matches: right almost always, for prefetching. */
static uint32_t candidate(const kvp__adv_index_t *ix, uint64_t h) {
  uint32_t tag = tag_of(h);
  for (size_t s = slot_of(h, ix->mask);; s = (s + 1) & ix->mask) {
    uint32_t v = ix->slots[s];
    if (v == 0 || (v & ~IDX_MASK) == tag)
      return v & IDX_MASK;
  }
}

static int rehash(kvp__adv_index_t *ix, size_t cap) {
  uint32_t *slots = calloc(cap, sizeof *slots);
  if (slots == NULL)
    return KVP_ENOMEM;
  hint_huge(slots, cap * sizeof *slots);
  for (size_t i = 0; i < ix->cap; i++) {
    uint32_t v = ix->slots[i];
    if (v == 0)
      continue;
    size_t s = slot_of(ix->nodes[v & IDX_MASK].hash, cap - 1);
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
static void unmap(kvp__adv_index_t *ix, uint64_t h) {
  size_t s = slot_of(h, ix->mask);
  while (ix->slots[s] == 0 || ix->nodes[ix->slots[s] & IDX_MASK].hash != h)
    s = (s + 1) & ix->mask;
  for (size_t j = (s + 1) & ix->mask;; j = (j + 1) & ix->mask) {
    uint32_t v = ix->slots[j];
    if (v == 0)
      break;
    size_t home = slot_of(ix->nodes[v & IDX_MASK].hash, ix->mask);
    /* Move v back into the hole when its home is not in (s, j]. */
    if (((j - home) & ix->mask) >= ((j - s) & ix->mask)) {
      ix->slots[s] = v;
      s = j;
    }
  }
  ix->slots[s] = 0;
}

static int mark_dirty(kvp__adv_index_t *ix, uint64_t h) {
  if (grow((void **)&ix->dirty, &ix->dirty_cap, ix->ndirty + 1, sizeof *ix->dirty) != 0)
    return KVP_ENOMEM;
  ix->dirty[ix->ndirty++] = h;
  return 0;
}

static void touch_node(kvp__adv_index_t *ix, uint32_t n, uint16_t extra) {
  node_t *nd = &ix->nodes[n];
  if (!ix->track_dirty)
    return;
  nd->flags |= extra;
  if (nd->flags & NODE_DIRTY)
    return;
  /* On ENOMEM the block stays clean in the store until its next change. */
  if (mark_dirty(ix, nd->hash) == 0)
    nd->flags |= NODE_DIRTY;
}

static int node_new(kvp__adv_index_t *ix, uint64_t h, uint32_t *out) {
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
  size_t s = slot_of(h, ix->mask);
  while (ix->slots[s] != 0)
    s = (s + 1) & ix->mask;
  ix->slots[s] = tag_of(h) | n;
  ix->blocks++;
  *out = n;
  return 0;
}

static void node_free(kvp__adv_index_t *ix, uint32_t n) {
  uint64_t h = ix->nodes[n].hash;
  unmap(ix, h);
  if (ix->track_dirty && !(ix->nodes[n].flags & NODE_DIRTY))
    mark_dirty(ix, h);
  ix->nodes[n].flags = 0;
  ix->nodes[n].loc_head = (uint32_t)ix->node_free;
  ix->node_free = n;
  ix->blocks--;
}

/* --- locations and LRU -------------------------------------------------- */

static void lru_unlink(kvp__adv_index_t *ix, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = loc_tier(lc);
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

static void lru_push(kvp__adv_index_t *ix, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = loc_tier(lc);
  lc->lru_prev = 0;
  lc->lru_next = ix->lru_head[t];
  if (ix->lru_head[t])
    ix->locs[ix->lru_head[t]].lru_prev = l;
  else
    ix->lru_tail[t] = l;
  ix->lru_head[t] = l;
}

static int loc_add(kvp__adv_index_t *ix, uint32_t n, uint16_t worker, int tier, uint16_t volume) {
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

static void record_gone(kvp__adv_index_t *ix, uint64_t h, const loc_t *lc) {
  if (!ix->track_dirty)
    return;
  /* On ENOMEM the row stays in the store until the block is deleted. */
  if (grow((void **)&ix->gone, &ix->gone_cap, ix->ngone + 1, sizeof *ix->gone) != 0)
    return;
  ix->gone[ix->ngone++] = (kvp__adv_gone_t){
      .hash = h, .worker = loc_worker(lc), .volume = lc->volume, .tier = (uint8_t)loc_tier(lc)};
}

/* Unlinks location l (whose predecessor in the block's list is prev, 0 when
 * l is the head) and frees it. */
static void loc_del(kvp__adv_index_t *ix, uint32_t n, uint32_t prev, uint32_t l) {
  loc_t *lc = &ix->locs[l];
  int t = loc_tier(lc);
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

int kvp__adv_index_store(kvp__adv_index_t *ix, uint64_t hash, int has_parent, uint64_t parent,
                         uint16_t worker, int tier, uint16_t volume, uint32_t tokens,
                         uint64_t bytes, uint64_t now_ms) {
  uint32_t n;
  int created = 0, rc;

  if (tier < KVP_TIER_G1 || tier > KVP_TIER_G4)
    return KVP_ETIER;
  if (worker >= ix->nworkers || volume >= ix->nvolumes)
    return KVP_EINVAL;
  n = find(ix, hash);
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
      int t = loc_tier(&ix->locs[l]);
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

int kvp__adv_index_remove(kvp__adv_index_t *ix, uint64_t hash, uint16_t worker, int tier,
                          uint16_t volume) {
  uint32_t n = find(ix, hash), prev = 0;
  int found = 0;

  if (n == 0)
    return KVP_ENOENT;
  for (uint32_t l = ix->nodes[n].loc_head; l;) {
    loc_t *lc = &ix->locs[l];
    uint32_t next = lc->next;
    if (loc_worker(lc) == worker && loc_tier(lc) == tier &&
        (volume == KVP__ADV_NO_VOLUME || lc->volume == volume)) {
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

int kvp__adv_index_access(kvp__adv_index_t *ix, uint64_t hash, int tier, uint32_t hits,
                          uint64_t now_ms) {
  uint32_t n = find(ix, hash);
  if (n == 0)
    return KVP_ENOENT;
  node_t *nd = &ix->nodes[n];
  uint32_t now_s = secs_of(now_ms);
  double age = now_s > nd->last_access_s ? (double)(now_s - nd->last_access_s) : 0;
  nd->freq = (float)(nd->freq * exp2(-age / ix->half_life_s) + hits);
  nd->hits = nd->hits + hits < nd->hits ? UINT32_MAX : nd->hits + hits;
  nd->last_access_s = now_s;
  for (uint32_t l = nd->loc_head; l; l = ix->locs[l].next) {
    if (tier == 0 || loc_tier(&ix->locs[l]) == tier) {
      lru_unlink(ix, l);
      lru_push(ix, l);
    }
  }
  touch_node(ix, n, 0);
  return 0;
}

size_t kvp__adv_index_drop(kvp__adv_index_t *ix, uint16_t worker, unsigned tier_mask) {
  size_t dropped = 0;
  /* A linear pass over the pool: drops are rare (restart, silence, clear). */
  for (size_t l = 1; l < ix->nlocs; l++) {
    loc_t *lc = &ix->locs[l];
    if (lc->node == 0 || loc_worker(lc) != worker || !(tier_mask & (1u << loc_tier(lc))))
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

void kvp__adv_index_prefetch(const kvp__adv_index_t *ix, const uint64_t *hashes, size_t n) {
  /* Two passes so the slot loads of the first overlap, then the node loads
   * of the second: the apply loop that follows finds them in cache. */
  for (size_t i = 0; i < n; i++)
    __builtin_prefetch(&ix->slots[slot_of(hashes[i], ix->mask)]);
  for (size_t i = 0; i < n; i++) {
    uint32_t nd = candidate(ix, hashes[i]);
    if (nd)
      __builtin_prefetch(&ix->nodes[nd]);
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t nd = candidate(ix, hashes[i]);
    if (nd && ix->nodes[nd].hash == hashes[i] && ix->nodes[nd].loc_head)
      __builtin_prefetch(&ix->locs[ix->nodes[nd].loc_head]);
  }
}

/* --- queries ------------------------------------------------------------ */

#define MATCH_BATCH 64

int kvp__adv_index_match(const kvp__adv_index_t *ix, const uint64_t *hashes, size_t n,
                         kvp__adv_match_t *out, size_t cap, size_t *nrows) {
  uint32_t nodes[MATCH_BATCH];
  size_t rows = 0;
  int rc = 0;

  for (size_t base = 0; base < n; base += MATCH_BATCH) {
    size_t m = n - base < MATCH_BATCH ? n - base : MATCH_BATCH;
    /* Misses dominate: issue every slot load first, then every node load,
     * so the memory system works on them in parallel. */
    for (size_t i = 0; i < m; i++)
      __builtin_prefetch(&ix->slots[slot_of(hashes[base + i], ix->mask)]);
    for (size_t i = 0; i < m; i++)
      __builtin_prefetch(&ix->nodes[candidate(ix, hashes[base + i])]);
    for (size_t i = 0; i < m; i++) {
      nodes[i] = find(ix, hashes[base + i]);
      if (nodes[i])
        __builtin_prefetch(&ix->locs[ix->nodes[nodes[i]].loc_head]);
    }
    for (size_t i = 0; i < m; i++) {
      size_t pos = base + i, extended = 0;
      if (nodes[i] == 0)
        goto out;
      for (uint32_t l = ix->nodes[nodes[i]].loc_head; l; l = ix->locs[l].next) {
        const loc_t *lc = &ix->locs[l];
        uint16_t w = loc_worker(lc);
        uint8_t t = (uint8_t)loc_tier(lc);
        size_t r;
        for (r = 0; r < rows; r++)
          if (out[r].worker == w && out[r].tier == t)
            break;
        if (r == rows) {
          if (pos != 0)
            continue; /* first seen after position 0: no prefix */
          if (rows == cap) {
            rc = KVP_ENOSPC;
            goto out;
          }
          out[rows++] = (kvp__adv_match_t){.worker = w, .tier = t, .length = 0};
        }
        /* Two volumes of one (worker, tier) must not count twice. */
        if (out[r].length == pos) {
          out[r].length = (uint64_t)pos + 1;
          extended++;
        }
      }
      if (extended == 0)
        goto out;
    }
  }
out:
  *nrows = rows;
  return rc;
}

static void fill_block(const kvp__adv_index_t *ix, const node_t *nd, kvp__adv_block_t *b) {
  b->hash = nd->hash;
  b->parent = nd->parent;
  b->tokens = nd->tokens;
  b->bytes = nd->bytes;
  b->last_access_ms =
      nd->last_access_s ? ((uint64_t)nd->last_access_s + KVP__ADV_EPOCH_S) * 1000 : 0;
  b->hits = nd->hits;
  b->freq = nd->freq;
  (void)ix;
}

int kvp__adv_index_get(const kvp__adv_index_t *ix, uint64_t hash, kvp__adv_block_t *b,
                       kvp__adv_loc_t *locs, size_t cap, size_t *nlocs) {
  uint32_t n = find(ix, hash);
  size_t k = 0;
  if (n == 0)
    return KVP_ENOENT;
  if (b)
    fill_block(ix, &ix->nodes[n], b);
  for (uint32_t l = ix->nodes[n].loc_head; l; l = ix->locs[l].next, k++) {
    if (k < cap) {
      locs[k].worker = loc_worker(&ix->locs[l]);
      locs[k].tier = (uint8_t)loc_tier(&ix->locs[l]);
      locs[k].volume = ix->locs[l].volume;
    }
  }
  if (nlocs)
    *nlocs = k;
  return 0;
}

int kvp__adv_index_load_block(kvp__adv_index_t *ix, const kvp__adv_block_t *b) {
  uint32_t n = find(ix, b->hash);
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

int kvp__adv_index_load_loc(kvp__adv_index_t *ix, uint64_t hash, const kvp__adv_loc_t *loc) {
  uint32_t n = find(ix, hash);
  if (n == 0)
    return KVP_ENOENT;
  if (loc->tier < KVP_TIER_G1 || loc->tier > KVP_TIER_G4)
    return KVP_ETIER;
  if (loc->worker >= ix->nworkers || loc->volume >= ix->nvolumes)
    return KVP_EINVAL;
  int rc = loc_add(ix, n, loc->worker, loc->tier, loc->volume);
  return rc < 0 ? rc : 0;
}

size_t kvp__adv_index_lru(const kvp__adv_index_t *ix, int tier, uint64_t *hashes, size_t cap) {
  size_t k = 0;
  if (tier < KVP_TIER_G1 || tier > KVP_TIER_G4)
    return 0;
  for (uint32_t l = ix->lru_tail[tier]; l && k < cap; l = ix->locs[l].lru_prev)
    hashes[k++] = ix->nodes[ix->locs[l].node].hash;
  return k;
}

void kvp__adv_index_stats(const kvp__adv_index_t *ix, kvp__adv_index_stats_t *st) {
  memset(st, 0, sizeof *st);
  st->blocks = ix->blocks;
  st->locations = ix->locations;
  for (int t = 1; t <= KVP_TIER_MAX; t++) {
    st->tier_locations[t] = ix->tier_locs[t];
    st->tier_bytes[t] = ix->tier_bytes[t];
  }
  st->memory_bytes = sizeof *ix + ix->cap * sizeof *ix->slots + ix->node_cap * sizeof(node_t) +
                     ix->loc_cap * sizeof(loc_t) + ix->dirty_cap * sizeof *ix->dirty +
                     ix->gone_cap * sizeof *ix->gone;
  for (size_t i = 0; i < ix->nworkers; i++)
    st->memory_bytes += sizeof(name_t) + strlen(ix->workers[i].name) + 1;
  for (size_t i = 0; i < ix->nvolumes; i++)
    st->memory_bytes += sizeof(name_t) + strlen(ix->volumes[i].name) + 1;
}

void kvp__adv_index_track_dirty(kvp__adv_index_t *ix, int on) {
  ix->track_dirty = on;
}

int kvp__adv_index_changes_take(kvp__adv_index_t *ix, kvp__adv_changes_t *ch) {
  size_t k = 0;
  memset(ch, 0, sizeof *ch);
  if (ix->ndirty && (ch->blocks = malloc(ix->ndirty * sizeof *ch->blocks)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < ix->ndirty; i++) {
    uint32_t n = find(ix, ix->dirty[i]);
    uint32_t what = 0;
    if (n) {
      node_t *nd = &ix->nodes[n];
      if (!(nd->flags & NODE_DIRTY))
        continue; /* listed twice: deleted, then created again */
      what = KVP__ADV_CH_BLOCK | ((nd->flags & NODE_LOCS) ? KVP__ADV_CH_LOCS : 0);
      nd->flags &= (uint16_t) ~(NODE_DIRTY | NODE_LOCS);
    }
    ch->blocks[k++] = (kvp__adv_change_t){.hash = ix->dirty[i], .what = what};
  }
  ch->nblocks = k;
  ch->gone = ix->gone;
  ch->ngone = ix->ngone;
  ix->gone = NULL;
  ix->ngone = ix->gone_cap = 0;
  ix->ndirty = 0;
  return 0;
}

void kvp__adv_index_changes_restore(kvp__adv_index_t *ix, const kvp__adv_changes_t *ch) {
  for (size_t i = 0; i < ch->ngone; i++)
    if (grow((void **)&ix->gone, &ix->gone_cap, ix->ngone + 1, sizeof *ix->gone) == 0)
      ix->gone[ix->ngone++] = ch->gone[i];
  for (size_t i = 0; i < ch->nblocks; i++) {
    uint32_t n = find(ix, ch->blocks[i].hash);
    if (n)
      touch_node(ix, n, NODE_LOCS);
    else
      mark_dirty(ix, ch->blocks[i].hash);
  }
}

void kvp__adv_changes_free(kvp__adv_changes_t *ch) {
  free(ch->blocks);
  free(ch->gone);
  memset(ch, 0, sizeof *ch);
}

size_t kvp__adv_index_dirty_count(const kvp__adv_index_t *ix) {
  return ix->ndirty;
}
