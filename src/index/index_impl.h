/* What the parts of the advisor's index share (index.h is the interface):
 * the layout of nodes, locations and the map, and the inline map lookups
 * that the updates (index.c) and the queries (query.c) both run per hash.
 *
 * Private to src/advisor/index.c and query.c. Thread: the advisor's loop
 * thread, like the index. */
#ifndef KVP_INDEX_INDEX_IMPL_H
#define KVP_INDEX_INDEX_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "index/changelog.h"
#include "index/index.h"
#include "index/intern.h"

enum { NODE_DIRTY = 1, NODE_LOCS = 2 };

/* 40 bytes. parent == hash means no parent. */
typedef struct node_s {
  uint64_t hash;
  uint64_t parent;
  float freq;
  uint32_t hits;
  uint32_t last_access_s; /* since KVP__INDEX_EPOCH_S */
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

struct kvp__index_s {
  uint32_t *slots; /* tag | node index, 0 = empty */
  size_t cap;      /* power of two */
  size_t mask;
  node_t *nodes; /* [0] unused */
  size_t nnodes, node_cap, node_free, blocks;
  loc_t *locs; /* [0] unused */
  size_t nlocs, loc_cap, loc_free, locations;
  uint32_t lru_head[5], lru_tail[5]; /* head = most recent */
  size_t tier_locs[5];
  uint64_t tier_bytes[5];
  kvp__index_intern_t workers;
  kvp__index_intern_t volumes; /* [0] = "" */
  kvp__index_changelog_t log;
  int track_dirty;
  double half_life_s;
};

static inline size_t kvp__index_slot_of(uint64_t h, size_t mask) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

static inline uint16_t kvp__index_loc_worker(const loc_t *l) {
  return (uint16_t)(l->wt >> 3);
}

static inline int kvp__index_loc_tier(const loc_t *l) {
  return l->wt & 7;
}

/* A slot holds a node index in its low IDX_BITS bits and the top bits of
 * the block's hash above them, so probing skips most foreign nodes without
 * loading them. 0 is an empty slot (node 0 is never used). */
#define IDX_BITS 27
#define IDX_MASK ((1u << IDX_BITS) - 1)

static inline uint32_t kvp__index_tag_of(uint64_t h) {
  return (uint32_t)(h >> (64 - (32 - IDX_BITS))) << IDX_BITS;
}

/* The node of hash h, or 0. */
static inline uint32_t kvp__index_find(const kvp__index_t *ix, uint64_t h) {
  uint32_t tag = kvp__index_tag_of(h);
  for (size_t s = kvp__index_slot_of(h, ix->mask);; s = (s + 1) & ix->mask) {
    uint32_t v = ix->slots[s];
    if (v == 0)
      return 0;
    if ((v & ~IDX_MASK) == tag && ix->nodes[v & IDX_MASK].hash == h)
      return v & IDX_MASK;
  }
}

/* The first node whose tag matches: right almost always, for prefetching. */
static inline uint32_t kvp__index_candidate(const kvp__index_t *ix, uint64_t h) {
  uint32_t tag = kvp__index_tag_of(h);
  for (size_t s = kvp__index_slot_of(h, ix->mask);; s = (s + 1) & ix->mask) {
    uint32_t v = ix->slots[s];
    if (v == 0 || (v & ~IDX_MASK) == tag)
      return v & IDX_MASK;
  }
}

#endif
