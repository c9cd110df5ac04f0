/* The blocks' parents (index_impl.h, NODE_PARENT_*), and the renumbering
 * after a bulk load that puts chains back in record order (index.h).
 *
 * The renumbering is three linear passes over the records, each random
 * access in them independent of the others and prefetched some records
 * ahead. (Walking up each block's parents, one map probe waiting for the
 * one before, it took 4 s of a 10.4 s rows load at 8M blocks: kvp-bench
 * load, DESIGN.md "The index's bytes".)
 *
 *  1. Each block's parent looked up in the map; the first child seen of a
 *     parent becomes its follower, every other block heads a run. Done
 *     while the rows load, 64 blocks at a time, for the blocks whose
 *     parent is loaded already (the loading thread waits for SQLite's
 *     reader most of the time), and at the end for the rest.
 *  2. The runs (a head, its follower, the follower's ...) laid out one
 *     after another, LANES of them walked side by side so that LANES
 *     follower loads are in flight at once.
 *  3. The records gathered into new arrays in that order, the parents set
 *     (a run's head: the side table; the others: the record before), the
 *     map's slots renamed.
 *
 * A chain is one run; where chains share a prefix, the first one seen goes
 * on from it and the others are runs of their own. Records in a cycle of
 * parents (bad rows) head no run: a last serial pass lays them out from
 * anywhere in the cycle.
 * Thread: the index owner's. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/status.h"

#define AHEAD 16
#define LANES 16
#define QUEUE 64
#define HEAD 0x80000000u   /* link.next: this block heads a run */
#define LINKED 0x40000000u /* link.next: this block's parent was looked up */
#define NEXT(x) ((x) & ~(HEAD | LINKED))

typedef struct link_s {
  uint32_t next; /* the follower (0: none) | HEAD | LINKED */
  uint32_t id;   /* the new record id (0: not placed yet) */
} link_t;

typedef struct kvp__index_bulk_s {
  uint64_t *parent; /* by record id; 0: none */
  link_t *link;     /* by record id */
  size_t cap;
  uint32_t queue[QUEUE]; /* loaded, parent not looked up yet */
  size_t nq;
  int relink; /* a record was freed: the links made so far are void */
} bulk_t;

uint64_t kvp__index_bulk_parent(const kvp__index_t *ix, uint32_t n) {
  const bulk_t *b = ix->bulk;
  return n < b->cap && b->parent[n] ? b->parent[n] : ix->nodes[n].hash;
}

void kvp__index_bulk_forget(kvp__index_t *ix, uint32_t n) {
  if (n < ix->bulk->cap)
    ix->bulk->parent[n] = 0;
  ix->bulk->relink = 1;
}

void kvp__index_bulk_free(kvp__index_t *ix) {
  if (ix->bulk == NULL)
    return;
  free(ix->bulk->parent);
  free(ix->bulk->link);
  free(ix->bulk);
  ix->bulk = NULL;
}

static int bulk_grow(bulk_t *b, size_t need) {
  if (need <= b->cap)
    return 0;
  size_t cap = need > b->cap + b->cap / 2 ? need : b->cap + b->cap / 2;
  uint64_t *p = realloc(b->parent, cap * sizeof *p);
  if (p == NULL)
    return KVP_ENOMEM;
  b->parent = p;
  link_t *l = realloc(b->link, cap * sizeof *l);
  if (l == NULL)
    return KVP_ENOMEM;
  b->link = l;
  memset(p + b->cap, 0, (cap - b->cap) * sizeof *p);
  memset(l + b->cap, 0, (cap - b->cap) * sizeof *l);
  b->cap = cap;
  return 0;
}

/* Pass 1 for record r (live, its parent lookup prefetched): final 0 leaves
 * a block whose parent is not loaded yet for later. */
static inline void link_one(const kvp__index_t *ix, bulk_t *b, uint32_t r, int final) {
  link_t *lk = b->link;
  uint64_t p = b->parent[r];
  uint32_t q = p != 0 && p != ix->nodes[r].hash ? kvp__index_find(ix, p) : 0;
  if (q == 0 && !final && p != 0 && p != ix->nodes[r].hash)
    return;
  if (q != 0 && NEXT(lk[q].next) == 0)
    lk[q].next |= r;
  else
    lk[r].next |= HEAD;
  lk[r].next |= LINKED;
}

static void link_queued(kvp__index_t *ix) {
  bulk_t *b = ix->bulk;
  for (size_t i = 0; i < b->nq; i++) {
    uint64_t p = b->parent[b->queue[i]];
    if (p != 0)
      __builtin_prefetch(&ix->slots[kvp__index_slot_of(p, ix->cap)]);
  }
  for (size_t i = 0; i < b->nq; i++) {
    uint64_t p = b->parent[b->queue[i]];
    if (p != 0) {
      uint32_t c = kvp__index_candidate(ix, p);
      __builtin_prefetch(&ix->nodes[c]);
      __builtin_prefetch(&b->link[c], 1);
    }
  }
  for (size_t i = 0; i < b->nq; i++) {
    uint32_t r = b->queue[i]; /* queued twice: linked once */
    if ((ix->meta[r].flags & NODE_LIVE) && !(b->link[r].next & LINKED))
      link_one(ix, b, r, 0);
  }
  b->nq = 0;
}

void kvp__index_parents_del(kvp__index_t *ix, uint64_t h) {
  kvp__map64_t *m = &ix->parents, small;
  (void)kvp__map64_del(m, h, NULL);
  /* The table never shrinks by itself: a burst of side parents (chains
   * stored out of record order, then freed) would hold its peak for good.
   * Below an eighth full it is built again at its size (a quarter full),
   * so it costs what it holds and the rebuild, O(its size), comes after
   * as many deletions. */
  if (m->cap <= 1024 || kvp__map64_count(m) * 8 >= m->cap ||
      kvp__map64_init(&small, kvp__map64_count(m) * 2) != 0)
    return;
  size_t it = 0;
  uint64_t k, v;
  while (kvp__map64_next(m, &it, &k, &v))
    if (kvp__map64_put(&small, k, v) != 0) {
      kvp__map64_free(&small);
      return; /* no room: the big one stays */
    }
  kvp__map64_free(m);
  *m = small;
}

int kvp__index_set_parent(kvp__index_t *ix, uint32_t n, uint64_t p) {
  meta_t *md = &ix->meta[n];
  uint64_t h = ix->nodes[n].hash;
  bulk_t *b = ix->bulk;
  if (b != NULL) {
    if (bulk_grow(b, ix->node_cap > n ? ix->node_cap : (size_t)n + 1) != 0)
      return KVP_ENOMEM;
    if (b->link[n].next & LINKED)
      b->relink = 1; /* its parent changes after it was linked */
    b->parent[n] = p;
    b->queue[b->nq++] = n;
    if (b->nq == QUEUE)
      link_queued(ix);
    return 0;
  }
  /* A free record's hash is 0, and no block's parent is 0 here. */
  int prev = p != h && p != 0 && n > 1 && ix->nodes[n - 1].hash == p;
  if (p != h && !prev && kvp__map64_put(&ix->parents, h, p) != 0)
    return KVP_ENOMEM;
  if ((p == h || prev) && (md->flags & NODE_PARENT_SIDE))
    kvp__index_parents_del(ix, h);
  md->flags =
      (uint8_t)((md->flags & ~(NODE_PARENT_PREV | NODE_PARENT_SIDE)) | (p == h ? 0
                                                                        : prev ? NODE_PARENT_PREV
                                                                               : NODE_PARENT_SIDE));
  return 0;
}

int kvp__index_bulk_begin(kvp__index_t *ix) {
  bulk_t *b = calloc(1, sizeof *b);
  if (b == NULL || bulk_grow(b, ix->node_cap > ix->nnodes ? ix->node_cap : ix->nnodes) != 0) {
    if (b != NULL) {
      free(b->parent);
      free(b->link);
    }
    free(b);
    return KVP_ENOMEM;
  }
  /* The parents of what is there already go aside too. */
  for (size_t n = 1; n < ix->nnodes; n++)
    if (ix->meta[n].flags & NODE_LIVE) {
      b->parent[n] = kvp__index_parent_of(ix, (uint32_t)n);
      ix->meta[n].flags &= (uint8_t) ~(NODE_PARENT_PREV | NODE_PARENT_SIDE);
    }
  kvp__map64_clear(&ix->parents);
  ix->bulk = b;
  return 0;
}

/* The parents kept aside, set in the records' present order. */
static int set_all(kvp__index_t *ix, const uint64_t *par, size_t n) {
  int rc = 0;
  for (size_t i = 1; i < n && rc == 0; i++)
    if (ix->meta[i].flags & NODE_LIVE)
      rc = kvp__index_set_parent(ix, (uint32_t)i, par[i] ? par[i] : ix->nodes[i].hash);
  return rc;
}

/* Pass 1 for the records not linked while loading. */
static void link_rest(kvp__index_t *ix, size_t n) {
  bulk_t *b = ix->bulk;
  const uint64_t *par = b->parent;
  link_t *lk = b->link;
  if (b->relink)
    memset(lk, 0, n * sizeof *lk);
  for (size_t r = 1; r < n; r++) {
    size_t a = r + 2 * AHEAD, c = r + AHEAD;
    if (a < n && par[a] != 0 && !(lk[a].next & LINKED))
      __builtin_prefetch(&ix->slots[kvp__index_slot_of(par[a], ix->cap)]);
    if (c < n && par[c] != 0 && !(lk[c].next & LINKED)) {
      uint32_t q = kvp__index_candidate(ix, par[c]);
      __builtin_prefetch(&ix->nodes[q]);
      __builtin_prefetch(&lk[q], 1);
    }
    if ((ix->meta[r].flags & NODE_LIVE) && !(lk[r].next & LINKED))
      link_one(ix, b, (uint32_t)r, 1);
  }
}

typedef struct lane_s {
  uint32_t cur;
  uint32_t *buf;
  size_t len, cap;
} lane_t;

static int lane_push(lane_t *l, uint32_t r) {
  if (l->len == l->cap) {
    size_t c = l->cap ? l->cap * 2 : 128;
    uint32_t *p = realloc(l->buf, c * sizeof *p);
    if (p == NULL)
      return KVP_ENOMEM;
    l->buf = p;
    l->cap = c;
  }
  l->buf[l->len++] = r;
  return 0;
}

/* Lane l's run, done: its records take the next ids (its head marked HEAD
 * in order[]). */
static void lane_flush(lane_t *l, link_t *lk, uint32_t *order, size_t *k) {
  for (size_t i = 0; i < l->len; i++) {
    lk[l->buf[i]].id = (uint32_t)*k;
    order[(*k)++] = l->buf[i] | (i == 0 ? HEAD : 0);
  }
  l->len = 0;
  l->cur = 0;
}

/* Pass 2: order[1 .. *k - 1] and link[].id. */
static int lay_out_runs(const kvp__index_t *ix, link_t *lk, uint32_t *order, size_t n, size_t *k) {
  lane_t lanes[LANES];
  size_t head = 1;
  int rc = 0, busy = 1;
  memset(lanes, 0, sizeof lanes);
  while (busy && rc == 0) {
    busy = 0;
    for (int i = 0; i < LANES && rc == 0; i++) {
      lane_t *l = &lanes[i];
      if (l->cur == 0) {
        while (head < n && !((ix->meta[head].flags & NODE_LIVE) && (lk[head].next & HEAD)))
          head++;
        if (head == n)
          continue;
        l->cur = (uint32_t)head++;
      }
      busy = 1;
      if ((rc = lane_push(l, l->cur)) != 0)
        break;
      uint32_t f = NEXT(lk[l->cur].next);
      if (f == 0) {
        lane_flush(l, lk, order, k);
      } else {
        l->cur = f;
        __builtin_prefetch(&lk[f], 1);
      }
    }
  }
  for (int i = 0; i < LANES; i++)
    free(lanes[i].buf);
  if (rc != 0)
    return rc;
  /* The cycles' records, from anywhere in each. */
  for (size_t r = 1; r < n; r++) {
    if (!(ix->meta[r].flags & NODE_LIVE) || lk[r].id != 0)
      continue;
    for (uint32_t c = (uint32_t)r; c != 0 && lk[c].id == 0; c = NEXT(lk[c].next)) {
      lk[c].id = (uint32_t)*k;
      order[(*k)++] = c | (c == r ? HEAD : 0);
    }
  }
  return 0;
}

/* Pass 3: the records in their new order into nn and nm (free ones
 * dropped), with their parents; then the map's slots renamed. Returns 0,
 * or KVP_ENOMEM when the side table could not take a parent (that block
 * keeps none). */
static int gather(kvp__index_t *ix, const uint64_t *par, const link_t *lk, const uint32_t *order,
                  size_t k, node_t *nn, meta_t *nm) {
  int rc = 0;
  nn[0] = ix->nodes[0];
  nm[0] = ix->meta[0];
  for (size_t i = 1; i < k; i++) {
    if (i + AHEAD < k) {
      uint32_t o = order[i + AHEAD] & ~HEAD;
      __builtin_prefetch(&ix->nodes[o]);
      __builtin_prefetch(&ix->meta[o]);
    }
    uint32_t o = order[i] & ~HEAD;
    nn[i] = ix->nodes[o];
    nm[i] = ix->meta[o];
    nm[i].flags &= (uint8_t) ~(NODE_PARENT_PREV | NODE_PARENT_SIDE);
    if (!(order[i] & HEAD)) {
      nm[i].flags |= NODE_PARENT_PREV; /* its run's block before */
      continue;
    }
    uint64_t p = par[o];
    if (p == 0 || p == nn[i].hash)
      continue;
    if (kvp__map64_put(&ix->parents, nn[i].hash, p) == 0)
      nm[i].flags |= NODE_PARENT_SIDE;
    else
      rc = KVP_ENOMEM;
  }
  uint32_t mask = ix->idx_mask;
  for (size_t s = 0; s < ix->cap; s++) {
    if (s + AHEAD < ix->cap && ix->slots[s + AHEAD] != 0)
      __builtin_prefetch(&lk[ix->slots[s + AHEAD] & mask]);
    uint32_t v = ix->slots[s];
    if (v != 0)
      ix->slots[s] = (v & ~mask) | lk[v & mask].id;
  }
  return rc;
}

int kvp__index_bulk_end(kvp__index_t *ix) {
  bulk_t *b = ix->bulk;
  size_t n = ix->nnodes, k = 1;
  uint32_t *order = NULL;
  node_t *nn = NULL;
  meta_t *nm = NULL;
  int rc = KVP_ENOMEM;

  if (b == NULL)
    return 0;
  /* Records made without a parent (none), or no room for the rest. */
  if (bulk_grow(b, n) != 0)
    goto fallback;
  if (b->nq > 0 && !b->relink)
    link_queued(ix);
  order = malloc(n * sizeof *order);
  nn = malloc(ix->node_cap * sizeof *nn);
  nm = malloc(ix->node_cap * sizeof *nm);
  if (order == NULL || nn == NULL || nm == NULL)
    goto fallback;
  link_rest(ix, n);
  if (lay_out_runs(ix, b->link, order, n, &k) != 0)
    goto fallback;
  kvp__index_hint_huge(nn, ix->node_cap * sizeof *nn);
  kvp__index_hint_huge(nm, ix->node_cap * sizeof *nm);
  ix->bulk = NULL;
  rc = gather(ix, b->parent, b->link, order, k, nn, nm);
  free(ix->nodes);
  free(ix->meta);
  ix->nodes = nn;
  ix->meta = nm;
  nn = NULL;
  nm = NULL;
  ix->nnodes = k;
  ix->node_free = ix->node_free_tail = 0;
  ix->bulk = b;
  goto out;
fallback:
  /* No room to renumber: the parents where the records are. */
  ix->bulk = NULL;
  rc = set_all(ix, b->parent, n < b->cap ? n : b->cap);
  ix->bulk = b;
out:
  kvp__index_bulk_free(ix);
  free(order);
  free(nn);
  free(nm);
  /* The tables above are freed but glibc, its mmap threshold raised by the
   * big frees of the load, may keep their pages in the heap: give them back
   * (the load's peak, not the index, is what they were). */
  malloc_trim(0);
  return rc;
}
