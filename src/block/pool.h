/* Private view of a tier pool, shared by the pool, the manager and
 * sequences. The public API is in include/kvplane/blockmgr.h. */
#ifndef KVP_BLOCK_POOL_H
#define KVP_BLOCK_POOL_H

#include <stdint.h>

#include "kvplane/blockmgr.h"

#define KVP__NIL UINT32_MAX

/* Most blocks in a pool, and in the pools sharing one hash table: block
 * ids + 1 fit in 31 bits of a slot, and 2 slots per block stay below 2^32
 * for the home-slot multiply. */
#define KVP__POOL_MAX_BLOCKS 0x7fffffffu

/* Where a block is: referenced, free (Reset, unreferenced), or cached
 * (Registered, unreferenced, evictable). */
enum { KVP__ACTIVE = 0, KVP__FREE = 1, KVP__CACHED = 2 };

#define KVP__HITS_MAX 0xffffu

/* One block's metadata: 32 bytes, two to a cache line. */
typedef struct kvp__blk_s {
  uint64_t hash;   /* sequence hash, when registered */
  uint64_t parent; /* parent's sequence hash, when has_parent */
  uint32_t link;   /* cached: ring index of its latest LRU entry; free: next free block */
  uint32_t refs;
  int32_t lora_id;
  uint16_t hits;     /* prefix hits in this tier, saturating at KVP__HITS_MAX */
  uint8_t state : 3; /* kvp_block_state_t */
  uint8_t where : 2; /* KVP__ACTIVE / FREE / CACHED */
  uint8_t has_parent : 1;
  uint8_t mark; /* scratch for one kvp_seq_allocate scan, 0 outside it */
} kvp__blk_t;

struct kvp_pool_s {
  int tier;
  uint32_t n;
  kvp__blk_t *blk;
  /* Open-addressing hash table, linear probing, deletion by backward
   * shift (no tombstones). A slot is tag << 32 | tier bit << 31 | (block +
   * 1), 0 when empty, where the tag is 32 bits of the hash multiplied by a
   * 64-bit odd constant (so hashes from an engine with little entropy in
   * some bits still spread); the home slot is the tag mapped onto [0,
   * nslots) by a multiply (no power-of-two size), so probes and deletions
   * read no block record until a tag matches. The tier bit (tbit) lets the
   * G1 and G2 pools of a block manager share one table (owns_slots in G1
   * only): a hash's G1 and G2 entries share a cluster, so the G2 lookup
   * after a G1 miss reads lines already loaded, and an offload moves the
   * G1 entry to the G2 block by rewriting one slot. nslots = 2 x the
   * blocks of the pools using the table: at most half full, so clusters and
   * backward shifts stay short, at 16 bytes per block. */
  uint64_t *slots;
  uint64_t nslots;
  uint32_t tbit; /* this pool's tier bit in a slot: 0, or 1u << 31 */
  int owns_slots;
  /* LRU order of cached blocks: a ring of block ids in the order they were
   * cached, oldest at rhead. A block leaving the cached set (a prefix hit, an
   * eviction) or cached again leaves its old entry behind, stale: an entry
   * at index i is live only when its block is cached with link == i. Pops
   * skip stale entries; a full ring is compacted in place. Reading victims
   * from an array rather than a linked list lets evictions prefetch the
   * records of victims to come without chasing pointers. */
  uint32_t *ring;
  uint64_t rcap, rcount;        /* rcap: a power of two, at least n + n/4 + 16 */
  uint32_t rmask, rhead, rtail; /* rmask = rcap - 1: indices wrap by a mask */
  uint32_t free_head;           /* free blocks, a stack linked through link */
  kvp_layout_t layout;
  size_t block_stride, layer_stride;
  kvp_storage_t storage;
  int system; /* storage is kvp_storage_system() */
  unsigned char *base;
  size_t bytes;
  uint32_t nstate[4];
  uint32_t nactive, nfree, ncached;
  uint64_t evictions;
  uint32_t ahead; /* after an eviction: a victim a few evictions ahead (a hint), or KVP__NIL */
};

/* The tag of a hash: the high half of hash * 2^64/phi, which depends on
 * every bit of the hash. */
static inline uint64_t kvp__pool_tag(uint64_t h) {
  return (h * UINT64_C(0x9e3779b97f4a7c15)) >> 32;
}

/* The home slot of a tag. */
static inline uint64_t kvp__pool_home(const kvp_pool_t *p, uint64_t tag) {
  return (tag * p->nslots) >> 32;
}

#define KVP__SLOT_TBIT 0x80000000u

/* The slot of block b under tag in p. */
static inline uint64_t kvp__pool_slot(const kvp_pool_t *p, uint64_t tag, uint32_t b) {
  return tag << 32 | p->tbit | (b + 1);
}

/* Whether slot s holds a block of p under tag; *b is that block. */
static inline int kvp__pool_slot_is(const kvp_pool_t *p, uint64_t s, uint64_t tag, uint32_t *b) {
  *b = ((uint32_t)s & ~KVP__SLOT_TBIT) - 1;
  return (s >> 32) == tag && ((uint32_t)s & KVP__SLOT_TBIT) == p->tbit;
}

static inline uint32_t kvp__pool_find(const kvp_pool_t *p, uint64_t h) {
  uint64_t tag = kvp__pool_tag(h);
  uint64_t i = kvp__pool_home(p, tag);

  for (;;) {
    uint64_t s = p->slots[i];
    uint32_t b;
    if (s == 0)
      return KVP__NIL;
    if (kvp__pool_slot_is(p, s, tag, &b) && p->blk[b].hash == h)
      return b;
    if (++i == p->nslots)
      i = 0;
  }
}

static inline void kvp__pool_prefetch(const kvp_pool_t *p, uint64_t h) {
  __builtin_prefetch(&p->slots[kvp__pool_home(p, kvp__pool_tag(h))]);
}

/* How far ahead in the LRU ring evictions prefetch records (RECORDS) and
 * what those records point to (KVP__LOOKAHEAD). */
#define KVP__LOOKAHEAD 4
#define KVP__LOOKAHEAD_REC 12

/* Zeroed, touched memory (huge-page hinted when 2 MiB or more) for a pool's
 * tables and the system storage's blocks; freed with free(). NULL when out
 * of memory. */
void *kvp__resident_alloc(size_t bytes, size_t alignment);

/* Creates pool o, its hash table sized for table_blocks blocks (o's and
 * those of the pools that will share it; at least o->num_blocks), or, with
 * share set, using share's table under the G2 tier bit. Otherwise as
 * kvp_pool_create. */
int kvp__pool_create(const kvp_pool_opts_t *o, uint64_t table_blocks, kvp_pool_t *share,
                     kvp_pool_t **out);

/* For G1 block b of p1, mapped under h in the table p1 shares with p2:
 * returns b's slot and sets *other to p2's block under h (KVP__NIL when
 * none), from one scan of h's cluster. */
static inline uint64_t kvp__pool_pair(const kvp_pool_t *p1, const kvp_pool_t *p2, uint64_t h,
                                      uint32_t b, uint32_t *other) {
  uint64_t tag = kvp__pool_tag(h), i = kvp__pool_home(p1, tag), mine = UINT64_MAX;
  uint64_t want = kvp__pool_slot(p1, tag, b), s;

  *other = KVP__NIL;
  while ((s = p1->slots[i]) != 0) {
    uint32_t o;
    if (s == want) {
      mine = i;
      if (*other != KVP__NIL)
        break;
    } else if (kvp__pool_slot_is(p2, s, tag, &o) && p2->blk[o].hash == h) {
      *other = o;
      if (mine != UINT64_MAX)
        break;
    }
    if (++i == p1->nslots)
      i = 0;
  }
  return mine;
}

/* Sets a block's state, keeping the per-state counts. */
static inline void kvp__pool_set_state(kvp_pool_t *p, kvp__blk_t *x, int state) {
  p->nstate[x->state]--;
  p->nstate[state]++;
  x->state = (uint8_t)state;
}

/* Whether a storage is kvp_storage_system() (copies are a memcpy). */
int kvp__storage_is_system(const kvp_storage_t *s);

#endif
