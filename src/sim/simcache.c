/* Simulated two-tier LRU cache; see simcache.h. */
#include "sim/simcache.h"

#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"

#define NIL UINT32_MAX

/* One LRU tier: nodes in a fixed array, a doubly linked LRU list (head =
 * most recent), and a linear-probing index from hash to node. */
typedef struct tier_s {
  uint64_t *hash, *parent;
  uint32_t *prev, *next;
  uint32_t *slots; /* node index or NIL; capacity a power of two >= 2 * cap */
  size_t mask, cap, used;
  uint32_t head, tail, free_head;
} tier_t;

struct kvp_simcache_s {
  tier_t t[2];
  uint32_t block_tokens;
  uint64_t block_bytes;
  kvp_event_sink_t sink;
  kvp_simcache_figures_t fig;
  uint64_t *run; /* scratch for one Stored event */
  size_t run_cap;
};

static size_t slot_of(const tier_t *t, uint64_t h) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 20) & t->mask;
}

static int tier_init(tier_t *t, size_t cap) {
  size_t ns = 4;
  while (ns < 2 * cap)
    ns <<= 1;
  t->hash = malloc(cap * sizeof *t->hash);
  t->parent = malloc(cap * sizeof *t->parent);
  t->prev = malloc(cap * sizeof *t->prev);
  t->next = malloc(cap * sizeof *t->next);
  t->slots = malloc(ns * sizeof *t->slots);
  if (!t->hash || !t->parent || !t->prev || !t->next || !t->slots)
    return KVP_ENOMEM;
  memset(t->slots, 0xff, ns * sizeof *t->slots);
  t->mask = ns - 1;
  t->cap = cap;
  t->used = 0;
  t->head = t->tail = NIL;
  for (size_t i = 0; i < cap; i++)
    t->next[i] = i + 1 < cap ? (uint32_t)(i + 1) : NIL;
  t->free_head = 0;
  return 0;
}

static void tier_free(tier_t *t) {
  free(t->hash);
  free(t->parent);
  free(t->prev);
  free(t->next);
  free(t->slots);
}

static uint32_t find(const tier_t *t, uint64_t h) {
  for (size_t s = slot_of(t, h);; s = (s + 1) & t->mask) {
    uint32_t n = t->slots[s];
    if (n == NIL || t->hash[n] == h)
      return n;
  }
}

static void unlink_node(tier_t *t, uint32_t n) {
  if (t->prev[n] != NIL)
    t->next[t->prev[n]] = t->next[n];
  else
    t->head = t->next[n];
  if (t->next[n] != NIL)
    t->prev[t->next[n]] = t->prev[n];
  else
    t->tail = t->prev[n];
}

static void push_front(tier_t *t, uint32_t n) {
  t->prev[n] = NIL;
  t->next[n] = t->head;
  if (t->head != NIL)
    t->prev[t->head] = n;
  t->head = n;
  if (t->tail == NIL)
    t->tail = n;
}

/* Removes hash h's slot with backward-shift deletion (no tombstones). */
static void index_delete(tier_t *t, uint64_t h) {
  size_t i = slot_of(t, h);
  while (t->hash[t->slots[i]] != h)
    i = (i + 1) & t->mask;
  for (size_t j = (i + 1) & t->mask;; j = (j + 1) & t->mask) {
    uint32_t n = t->slots[j];
    if (n == NIL)
      break;
    size_t home = slot_of(t, t->hash[n]);
    /* Move n back into the hole when its home is not in (i, j]. */
    if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
      t->slots[i] = n;
      i = j;
    }
  }
  t->slots[i] = NIL;
}

static void touch(tier_t *t, uint32_t n) {
  unlink_node(t, n);
  push_front(t, n);
}

/* Evicts the LRU node of t into *hash and *parent. */
static void evict(tier_t *t, uint64_t *hash, uint64_t *parent) {
  uint32_t n = t->tail;
  *hash = t->hash[n];
  *parent = t->parent[n];
  unlink_node(t, n);
  index_delete(t, t->hash[n]);
  t->next[n] = t->free_head;
  t->free_head = n;
  t->used--;
}

static void insert(tier_t *t, uint64_t h, uint64_t parent) {
  uint32_t n = t->free_head;
  size_t s;
  t->free_head = t->next[n];
  t->hash[n] = h;
  t->parent[n] = parent;
  for (s = slot_of(t, h); t->slots[s] != NIL; s = (s + 1) & t->mask)
    ;
  t->slots[s] = n;
  push_front(t, n);
  t->used++;
}

static int emit(kvp_simcache_t *c, int type, int tier, const uint64_t *parent,
                const uint64_t *hashes, size_t n) {
  kvp_event_t ev = {.type = type,
                    .tier = tier,
                    .hashes = hashes,
                    .nhashes = n,
                    .block_tokens = c->block_tokens,
                    .block_bytes = c->block_bytes};
  if (parent) {
    ev.has_parent = 1;
    ev.parent_hash = *parent;
  }
  return c->sink.emit ? c->sink.emit(c->sink.ctx, &ev) : 0;
}

/* Makes room in G2 and stores (h, parent) there. */
static int offload(kvp_simcache_t *c, uint64_t h, uint64_t parent) {
  tier_t *g2 = &c->t[1];
  uint64_t eh, ep;
  int rc;
  uint32_t n = find(g2, h);

  if (n != NIL) {
    touch(g2, n);
    return 0;
  }
  if (g2->used == g2->cap) {
    evict(g2, &eh, &ep);
    c->fig.g2_evictions++;
    if ((rc = emit(c, KVP_EV_REMOVED, KVP_TIER_G2, NULL, &eh, 1)) != 0)
      return rc;
  }
  insert(g2, h, parent);
  return emit(c, KVP_EV_STORED, KVP_TIER_G2, h == parent ? NULL : &parent, &h, 1);
}

/* Stores (h, parent) in G1, offloading the evicted block to G2. */
static int store_g1(kvp_simcache_t *c, uint64_t h, uint64_t parent) {
  tier_t *g1 = &c->t[0];
  uint64_t eh, ep;
  int rc;

  if (g1->used == g1->cap) {
    evict(g1, &eh, &ep);
    c->fig.g1_evictions++;
    if ((rc = emit(c, KVP_EV_REMOVED, KVP_TIER_G1, NULL, &eh, 1)) != 0)
      return rc;
    if ((rc = offload(c, eh, ep)) != 0)
      return rc;
  }
  insert(g1, h, parent);
  return 0;
}

static int flush_run(kvp_simcache_t *c, size_t *run_n, const uint64_t *parent) {
  int rc = *run_n ? emit(c, KVP_EV_STORED, KVP_TIER_G1, parent, c->run, *run_n) : 0;
  *run_n = 0;
  return rc;
}

int kvp_simcache_request(kvp_simcache_t *c, const uint64_t *seq, size_t n) {
  size_t run_n = 0;
  uint64_t run_parent = 0;
  int has_run_parent = 0, rc = 0;

  if (n > c->run_cap) {
    uint64_t *r = realloc(c->run, n * sizeof *r);
    if (r == NULL)
      return KVP_ENOMEM;
    c->run = r;
    c->run_cap = n;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    uint64_t h = seq[i], parent = i ? seq[i - 1] : seq[i];
    uint32_t node = find(&c->t[0], h);
    if (node != NIL) {
      c->fig.g1_hits++;
      touch(&c->t[0], node);
      rc = flush_run(c, &run_n, has_run_parent ? &run_parent : NULL);
      if (rc == 0)
        rc = emit(c, KVP_EV_ACCESSED, KVP_TIER_G1, NULL, &h, 1);
      continue;
    }
    if (find(&c->t[1], h) != NIL) {
      c->fig.g2_hits++;
      rc = emit(c, KVP_EV_ACCESSED, KVP_TIER_G2, NULL, &h, 1);
    } else {
      c->fig.misses++;
    }
    /* A new G1 block: it extends the current run of stored blocks. Evictions
     * it causes are emitted first, so the run is flushed before them. */
    if (c->t[0].used == c->t[0].cap && rc == 0)
      rc = flush_run(c, &run_n, has_run_parent ? &run_parent : NULL);
    if (rc == 0)
      rc = store_g1(c, h, parent);
    if (rc == 0) {
      if (run_n == 0) {
        has_run_parent = i > 0;
        run_parent = parent;
      }
      c->run[run_n++] = h;
    }
  }
  if (rc == 0)
    rc = flush_run(c, &run_n, has_run_parent ? &run_parent : NULL);
  return rc;
}

int kvp_simcache_create(kvp_simcache_t **out, size_t g1_blocks, size_t g2_blocks,
                        uint32_t block_tokens, uint64_t block_bytes, kvp_event_sink_t sink) {
  kvp_simcache_t *c;

  *out = NULL;
  if (g1_blocks == 0 || g2_blocks == 0 || g1_blocks >= NIL || g2_blocks >= NIL)
    return KVP_EINVAL;
  c = calloc(1, sizeof *c);
  if (c == NULL)
    return KVP_ENOMEM;
  c->block_tokens = block_tokens;
  c->block_bytes = block_bytes;
  c->sink = sink;
  if (tier_init(&c->t[0], g1_blocks) != 0 || tier_init(&c->t[1], g2_blocks) != 0) {
    kvp_simcache_destroy(c);
    return KVP_ENOMEM;
  }
  *out = c;
  return 0;
}

void kvp_simcache_destroy(kvp_simcache_t *c) {
  if (c == NULL)
    return;
  tier_free(&c->t[0]);
  tier_free(&c->t[1]);
  free(c->run);
  free(c);
}

int kvp_simcache_snapshot(void *cache, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  kvp_simcache_t *c = cache;
  const tier_t *t;
  size_t k = 0;

  if (tier != KVP_TIER_G1 && tier != KVP_TIER_G2)
    return KVP_ETIER;
  t = &c->t[tier - 1];
  *hashes = malloc((t->used ? t->used : 1) * sizeof **hashes);
  *parents = malloc((t->used ? t->used : 1) * sizeof **parents);
  if (*hashes == NULL || *parents == NULL) {
    free(*hashes);
    free(*parents);
    *hashes = *parents = NULL;
    return KVP_ENOMEM;
  }
  for (uint32_t i = t->head; i != NIL; i = t->next[i], k++) {
    (*hashes)[k] = t->hash[i];
    (*parents)[k] = t->parent[i];
  }
  *n = k;
  return 0;
}

void kvp_simcache_figures(const kvp_simcache_t *c, kvp_simcache_figures_t *f) {
  *f = c->fig;
  f->g1_blocks = c->t[0].used;
  f->g2_blocks = c->t[1].used;
}
