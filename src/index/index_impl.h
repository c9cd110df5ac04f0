/* What the parts of the advisor's index share (index.h is the interface):
 * the layout of block records, location lists and the map, and the inline
 * map lookups that the updates (index.c, locs.c) and the queries (query.c)
 * run per hash. DESIGN.md, "Advisor", has the arithmetic of the bytes.
 *
 * Private to src/index. Thread: the advisor's loop thread, like the index. */
#ifndef KVP_INDEX_INDEX_IMPL_H
#define KVP_INDEX_INDEX_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/map64.h"
#include "index/changelog.h"
#include "index/index.h"
#include "index/intern.h"

enum {
  NODE_LIVE = 1,  /* the record holds a block (else it is on the free list) */
  NODE_DIRTY = 2, /* listed in the change log */
  NODE_LOCS = 4,  /* its locations changed since the last take */
  /* Where its parent is (neither: it has none). A chain comes in one event
   * and its blocks get consecutive records, so most parents are the block
   * of the record before: a flag, not 8 bytes. */
  NODE_PARENT_PREV = 8,  /* the block of record n - 1 */
  NODE_PARENT_SIDE = 16, /* ix->parents, by the block's hash */
};

/* A location is one u32: worker << 19 | tier << 16 | volume. Workers fit
 * 13 bits (KVP__INDEX_MAX_WORKERS), tiers 3, volumes 16. No location is 0
 * (tiers are 1..4), and none has tier 7: the record uses both. */
#define LOC_MAKE(w, t, v) ((uint32_t)(w) << 19 | (uint32_t)(t) << 16 | (uint32_t)(v))
#define LOC_WT(l) ((l) >> 16) /* worker << 3 | tier */
#define LOC_WORKER(l) ((uint16_t)((l) >> 19))
#define LOC_TIER(l) ((int)(((l) >> 16) & 7))
#define LOC_VOLUME(l) ((uint16_t)((l)&0xffff))

/* Slab chunk classes: class c holds 4 << c locations. An overflowed block
 * keeps its chunk's offset in loc[0] and in loc[1] the mark (tier 7), the
 * class (bits 19-23) and the count (24 bits: 0-15 and 24-31). */
#define OVF_CLASSES 24
#define OVF_MARK (7u << 16)
#define OVF_MAX_COUNT ((1u << 24) - 1)

static inline int kvp__index_is_ovf(uint32_t loc1) {
  return (loc1 & OVF_MARK) == OVF_MARK;
}
static inline uint32_t kvp__index_ovf_make(unsigned c, size_t cnt) {
  return (uint32_t)(cnt >> 16) << 24 | (uint32_t)c << 19 | OVF_MARK | (uint32_t)(cnt & 0xffff);
}
static inline unsigned kvp__index_ovf_class(uint32_t loc1) {
  return (loc1 >> 19) & 31;
}
static inline size_t kvp__index_ovf_count(uint32_t loc1) {
  return (size_t)(loc1 >> 24) << 16 | (loc1 & 0xffff);
}

/* A block record is split in two arrays indexed by the same record id.
 * What a lookup reads, 16 bytes (four to a cache line, never across two):
 * the hash and two inline locations (0 = none), or the slab chunk. */
typedef struct node_s {
  uint64_t hash;
  uint32_t loc[2];
} node_t;

/* And the rest, 14 bytes, packed (no padding to 16: 2 B per block of an
 * index that is mostly records), read by updates, kvp__index_get with a
 * block and the LRU walk. The hit count shares a word with the flags and
 * saturates at META_HITS_MAX. The parent is in the flags (NODE_PARENT_*);
 * a free record's free list links are in its node's loc[0] and loc[1]. */
#define META_HITS_MAX ((1u << 27) - 1)
typedef struct __attribute__((packed)) meta_s {
  float freq;
  uint32_t last_access_s; /* since KVP__INDEX_EPOCH_S */
  uint32_t hits : 27;     /* saturating */
  uint32_t flags : 5;     /* NODE_* */
  uint16_t shape;         /* interned (tokens, bytes) */
} meta_t;

#define RECORD_BYTES (sizeof(node_t) + sizeof(meta_t))

/* Interned (tokens, bytes) pairs with reference counts: blocks of one model
 * all have the same size, so a u16 id stands in for 6 bytes per block. */
typedef struct shapes_s {
  uint64_t *key; /* by id: tokens << 32 | bytes */
  uint32_t *ref; /* by id: blocks using it (0 = free id) */
  size_t n, cap; /* ids 0 .. n - 1 given */
  uint32_t *map; /* open addressing, id + 1, 0 = empty; 2x n at least */
  size_t map_cap;
  size_t live;
} shapes_t;

struct kvp__index_s {
  uint32_t *slots;   /* tag | node index, 0 = empty */
  size_t cap;        /* any size: slots are picked by multiply-shift */
  unsigned idx_bits; /* of a slot, the record id's (the rest is tag) */
  uint32_t idx_mask;
  node_t *nodes; /* [0] unused; the hot half of each record */
  meta_t *meta;  /* the other half, same ids */
  size_t nnodes, node_cap, blocks;
  /* Free records, oldest first (doubly linked through their node's loc[0]
   * and loc[1]): a cold chain's records, freed together, hold the next
   * chain in order again (NODE_PARENT_PREV, the match's chain path; the
   * choice is index.c's free_take). */
  size_t node_free, node_free_tail;
  uint32_t last_stored; /* the record kvp__index_store wrote last */
  uint32_t *slab;       /* overflowed location lists; [0] unused */
  size_t slab_n, slab_cap, slab_used;
  uint32_t slab_free[OVF_CLASSES];
  size_t locations;
  size_t tier_locs[5];
  uint64_t tier_bytes[5];
  shapes_t shapes;
  kvp__index_intern_t workers;
  kvp__index_intern_t volumes;    /* [0] = "" */
  kvp__map64_t parents;           /* hash -> parent of the blocks flagged NODE_PARENT_SIDE */
  kvp__map64_t sources;           /* worker -> epoch applied at its source (names.c) */
  struct kvp__index_bulk_s *bulk; /* during a bulk load (parents.c), else NULL */
  kvp__index_changelog_t log;
  int track_dirty;
  double half_life_s;
};

static inline size_t kvp__index_slot_of(uint64_t h, size_t cap) {
  return (size_t)((((h * 0x9e3779b97f4a7c15ull) >> 32) * (uint64_t)cap) >> 32);
}

static inline size_t kvp__index_next(size_t s, size_t cap) {
  return s + 1 == cap ? 0 : s + 1;
}

/* The map's highest fill (index.c says why 0.7). */
#define LOAD_NUM 7
#define LOAD_DEN 10

/* A slot holds a node index in its low idx_bits bits and the top bits of
 * the block's hash above them (the tag), so probing skips most foreign
 * nodes without loading them. 0 is an empty slot (node 0 is never used).
 * The ids take what the map's size needs: a map of cap slots holds at most
 * cap * LOAD_NUM / LOAD_DEN blocks, and record ids never pass the most
 * blocks held, so bit_width of that (at most 28 bits) holds any id and the
 * rest is tag: 11 bits at 1M blocks, 4 at 2^27. A rehash, which reads every record's
 * hash anyway, re-tags the slots. */
#define IDX_MAX_BITS 28

static inline unsigned kvp__index_idx_bits(size_t cap) {
  unsigned b = 1;
  while (b < IDX_MAX_BITS && (cap / LOAD_DEN * LOAD_NUM + LOAD_NUM) >> b)
    b++;
  return b;
}

static inline uint32_t kvp__index_tag_of(const kvp__index_t *ix, uint64_t h) {
  return (uint32_t)(h >> (32 + ix->idx_bits)) << ix->idx_bits;
}

/* The node of hash h, probing from slot s (its home slot), or 0. */
static inline uint32_t kvp__index_find_at(const kvp__index_t *ix, uint64_t h, size_t s) {
  uint32_t tag = kvp__index_tag_of(ix, h), mask = ix->idx_mask;
  for (;; s = kvp__index_next(s, ix->cap)) {
    uint32_t v = ix->slots[s];
    if (v == 0)
      return 0;
    if ((v & ~mask) == tag && ix->nodes[v & mask].hash == h)
      return v & mask;
  }
}

/* The node of hash h, or 0. */
static inline uint32_t kvp__index_find(const kvp__index_t *ix, uint64_t h) {
  uint32_t tag = kvp__index_tag_of(ix, h), mask = ix->idx_mask;
  for (size_t s = kvp__index_slot_of(h, ix->cap);; s = kvp__index_next(s, ix->cap)) {
    uint32_t v = ix->slots[s];
    if (v == 0)
      return 0;
    if ((v & ~mask) == tag && ix->nodes[v & mask].hash == h)
      return v & mask;
  }
}

/* The first node whose tag matches, probing from slot s: right almost
 * always, for prefetching. */
static inline uint32_t kvp__index_candidate_at(const kvp__index_t *ix, uint64_t h, size_t s) {
  uint32_t tag = kvp__index_tag_of(ix, h), mask = ix->idx_mask;
  for (;; s = kvp__index_next(s, ix->cap)) {
    uint32_t v = ix->slots[s];
    if (v == 0 || (v & ~mask) == tag)
      return v & mask;
  }
}

static inline uint32_t kvp__index_candidate(const kvp__index_t *ix, uint64_t h) {
  uint32_t tag = kvp__index_tag_of(ix, h), mask = ix->idx_mask;
  for (size_t s = kvp__index_slot_of(h, ix->cap);; s = kvp__index_next(s, ix->cap)) {
    uint32_t v = ix->slots[s];
    if (v == 0 || (v & ~mask) == tag)
      return v & mask;
  }
}

/* The locations of a node and their number. */
static inline const uint32_t *kvp__index_locs(const kvp__index_t *ix, uint32_t n, size_t *cnt) {
  const node_t *nd = &ix->nodes[n];
  if (kvp__index_is_ovf(nd->loc[1])) {
    *cnt = kvp__index_ovf_count(nd->loc[1]);
    return &ix->slab[nd->loc[0]];
  }
  *cnt = nd->loc[0] == 0 ? 0 : nd->loc[1] == 0 ? 1 : 2;
  return nd->loc;
}

/* parents.c: the parent of live record n kept aside during a bulk load;
 * node_free's note that record n is gone during one; the bulk state freed
 * (kvp__index_destroy, when a load never ended). */
uint64_t kvp__index_bulk_parent(const kvp__index_t *ix, uint32_t n);
void kvp__index_bulk_forget(kvp__index_t *ix, uint32_t n);
void kvp__index_bulk_free(kvp__index_t *ix);

/* The parent of live record n: its own hash when it has none. */
static inline uint64_t kvp__index_parent_of(const kvp__index_t *ix, uint32_t n) {
  uint8_t f = ix->meta[n].flags;
  uint64_t p;
  if (ix->bulk != NULL)
    return kvp__index_bulk_parent(ix, n);
  if (f & NODE_PARENT_PREV)
    return ix->nodes[n - 1].hash;
  if ((f & NODE_PARENT_SIDE) && kvp__map64_get(&ix->parents, ix->nodes[n].hash, &p) == 0)
    return p;
  return ix->nodes[n].hash;
}

/* The block of record n as kvp__index_get gives it (query.c). */
void kvp__index_fill_block(const kvp__index_t *ix, uint32_t n, kvp__index_block_t *b);

/* index.c: asks for transparent huge pages over a big table. */
void kvp__index_hint_huge(void *p, size_t bytes);

/* parents.c: sets the parent of live record n (p == its hash: none): a
 * flag when it is the block of the record before, else an entry of the
 * side table; during a bulk load, kept aside by record id. Returns 0, or
 * KVP_ENOMEM (the parent unchanged). */
int kvp__index_set_parent(kvp__index_t *ix, uint32_t n, uint64_t p);

/* parents.c: h's entry out of the side table, which shrinks when it is
 * mostly empty. */
void kvp__index_parents_del(kvp__index_t *ix, uint64_t h);

/* locs.c: location lists and shapes. */
int kvp__index_loc_add(kvp__index_t *ix, uint32_t n, uint32_t loc);
void kvp__index_loc_del(kvp__index_t *ix, uint32_t n, size_t at);
void kvp__index_locs_free(kvp__index_t *ix, uint32_t n);
int kvp__index_shape_get(kvp__index_t *ix, uint32_t tokens, uint64_t bytes, uint16_t *id);
void kvp__index_shape_put(kvp__index_t *ix, uint16_t id);
size_t kvp__index_locs_memory(const kvp__index_t *ix);

/* index.c: removes the location at position at of node n (recorded as gone
 * for the store); then kvp__index_settle_node deletes the block if no
 * location is left, or marks it changed. */
void kvp__index_loc_remove(kvp__index_t *ix, uint32_t n, size_t at);
void kvp__index_settle_node(kvp__index_t *ix, uint32_t n);

/* tokens << 32 | bytes, saturated as the record keeps them. */
static inline uint64_t kvp__index_shape_key(uint32_t tokens, uint64_t bytes) {
  return (uint64_t)(tokens > UINT16_MAX ? UINT16_MAX : tokens) << 32 |
         (bytes > UINT32_MAX ? UINT32_MAX : bytes);
}

static inline uint32_t kvp__index_shape_bytes(const kvp__index_t *ix, uint16_t id) {
  return (uint32_t)ix->shapes.key[id];
}

static inline uint32_t kvp__index_shape_tokens(const kvp__index_t *ix, uint16_t id) {
  return (uint32_t)(ix->shapes.key[id] >> 32);
}

#endif
