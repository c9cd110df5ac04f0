/* Private view of a tier pool, shared by the pool, the manager and
 * sequences. The public API is in include/kvplane/blockmgr.h. */
#ifndef KVP_BLOCK_POOL_H
#define KVP_BLOCK_POOL_H

#include <stdint.h>
#include <string.h>

#include "kvplane/blockmgr.h"

#define KVP__NIL UINT32_MAX

/* For the steps of the per-block loops that GCC would otherwise keep as
 * functions of their own (a prologue and epilogue per block). */
#define KVP__HOT static inline __attribute__((always_inline))

/* Most blocks in a pool, and in the pools sharing one hash table: block
 * ids + 1 fit in 31 bits of a slot (and the table's groups, 2 slots per
 * block over 7 per group, stay below 2^32 for the home-group multiply). */
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
  uint8_t mark : 1; /* scratch for one manager call, 0 outside it */
  uint8_t twin : 1; /* registered, in a shared table: the other tier may hold its hash too */
  uint8_t loc;      /* registered: where its table entry is (kvp__loc_of), or KVP__LOC_FAR */
} kvp__blk_t;
_Static_assert(sizeof(kvp__blk_t) == 32, "a block record is 32 bytes, two to a cache line");

/* A registered block's record says where its table entry is: the group's
 * distance from the hash's home along the probe sequence (up to
 * KVP__LOC_DMAX) and the slot in it, so that removing or moving the entry
 * stores to a known address instead of loading the group to search it
 * (the block's hash gives the home). Entries further away (rare) are
 * searched: KVP__LOC_FAR. */
#define KVP__LOC_FAR 0xffu
#define KVP__LOC_DMAX 30u

/* A group of the hash table (struct kvp_pool_s): one cache line. */
#define KVP__GROUP_SLOTS 7
typedef struct kvp__grp_s {
  uint8_t ctrl[KVP__GROUP_SLOTS]; /* per slot: 0 empty, else 0x80 | tag & 0x7f */
  uint8_t over; /* entries that passed this group full; saturates, then stays, at 255 */
  uint64_t slot[KVP__GROUP_SLOTS];
} kvp__grp_t;

struct kvp_pool_s {
  int tier;
  uint32_t n;
  kvp__blk_t *blk;
  /* Hash table: open addressing over groups of KVP__GROUP_SLOTS slots, one
   * cache line each (kvp__grp_t), probed group after group from a home
   * group. A slot is tag << 32 | tier bit << 31 | (block + 1), where the tag
   * is 32 bits of the hash multiplied by a 64-bit odd constant (so hashes
   * from an engine with little entropy in some bits still spread); the home
   * group is the tag mapped onto [0, ngroups) by a multiply. Each slot has
   * a control byte, 0 when empty, else 0x80 | 7 bits of the tag: one
   * 64-bit load and a few arithmetic steps find the slots of a group that
   * may hold a hash, with no loop over slots and no record read until a tag
   * matches. A group's overflow count says how many entries passed it full
   * on their way from home; a search stops at the first group with none,
   * or after every group: counts are upper bounds (one stays raised while
   * an entry that passed it lives, and a saturated one stays at 255), so a
   * table could have every count raised.
   * Deletion clears the slot and takes the entry off the counts of the
   * groups it passed: entries never move, so a slot index stays valid
   * while its entry lives. The tier bit (tbit) lets the G1 and G2 pools of
   * a block manager share one table (owns_slots in G1 only): a hash's G1
   * and G2 entries share a probe sequence, so the G2 lookup after a G1 miss
   * reads a line already loaded, and an offload moves the G1 entry to the
   * G2 block by rewriting one slot. Sized at 2 slots per block of the pools
   * using the table (at most half full), 64/7 x 2 = 18.3 bytes per block. */
  kvp__grp_t *grp;
  uint64_t ngroups;
  uint32_t tbit; /* this pool's tier bit in a slot: 0, or 1u << 31 */
  int owns_slots;
  struct kvp_pool_s *peer; /* the other pool using the same table, or NULL */
  /* LRU order of cached blocks: a ring of block ids in the order they were
   * cached, oldest at rhead. A block leaving the cached set (a prefix hit, an
   * eviction) or cached again leaves its old entry behind, stale: an entry
   * at index i is live only when its block is cached with link == i. Pops
   * skip stale entries; a ring about to fill is compacted in place (so it is
   * never full: a prefetch cursor's distance from the head is then
   * unambiguous, kvp__prefetch_victims). Reading victims
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
  uint32_t pf_rec, pf_grp; /* ring index up to which victims' records / slots were prefetched */
  uint32_t pf_bytes;       /* bytes of each victim prefetched with its slot (set by the manager) */
  /* Told of a cached block evicted by kvp__pool_put_cached before its bytes
   * and record are overwritten (the manager offloads G2 victims to G3);
   * NULL: nobody. */
  void (*on_victim)(void *ctx, const struct kvp_pool_s *p, uint32_t block);
  void *victim_ctx;
};

/* The tag of a hash: the high half of hash * 2^64/phi, which depends on
 * every bit of the hash. */
static inline uint64_t kvp__pool_tag(uint64_t h) {
  return (h * UINT64_C(0x9e3779b97f4a7c15)) >> 32;
}

/* The home group of a tag. */
static inline uint64_t kvp__pool_home(const kvp_pool_t *p, uint64_t tag) {
  return (tag * p->ngroups) >> 32;
}

/* The loc (kvp__blk_t) of slot index i for a hash whose home group is
 * home. */
static inline uint8_t kvp__loc_of(const kvp_pool_t *p, uint64_t home, uint64_t i) {
  uint64_t g = i >> 3, d = g >= home ? g - home : g + p->ngroups - home;
  return d <= KVP__LOC_DMAX ? (uint8_t)(d << 3 | (i & 7)) : (uint8_t)KVP__LOC_FAR;
}

/* The slot index that loc (not KVP__LOC_FAR) names for home. */
static inline uint64_t kvp__loc_slot(const kvp_pool_t *p, uint64_t home, uint8_t loc) {
  uint64_t g = home + (loc >> 3);
  if (g >= p->ngroups)
    g -= p->ngroups;
  return g << 3 | (loc & 7);
}

/* The group after g, cyclically. */
static inline uint64_t kvp__grp_next(const kvp_pool_t *p, uint64_t g) {
  return g + 1 == p->ngroups ? 0 : g + 1;
}

/* The control byte of a tag. */
static inline uint8_t kvp__grp_byte(uint64_t tag) {
  return (uint8_t)(0x80 | (tag & 0x7f));
}

/* A group's control bytes as one word, byte k at bits 8k..8k+7 (byte 7 is
 * the overflow count). */
static inline uint64_t kvp__grp_ctrl(const kvp__grp_t *g) {
  uint64_t c;
  memcpy(&c, g, 8); /* ctrl[7] and over, the group's first 8 bytes */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  c = __builtin_bswap64(c);
#endif
  return c;
}

#define KVP__GRP_LOW 0x0001010101010101ull  /* bit 0 of bytes 0..6 */
#define KVP__GRP_HIGH 0x0080808080808080ull /* bit 7 of bytes 0..6 */

/* The slots of control word c whose byte is t, as bit 7 of their byte:
 * exact (bytes are compared whole, with no borrow between them). */
static inline uint64_t kvp__grp_match(uint64_t c, uint8_t t) {
  uint64_t x = c ^ (KVP__GRP_LOW * t);
  uint64_t nonzero = ((x & 0x7f7f7f7f7f7f7f7full) + 0x7f7f7f7f7f7f7f7full) | x;
  return ~nonzero & KVP__GRP_HIGH;
}

/* The empty slots of control word c, as bit 7 of their byte. */
static inline uint64_t kvp__grp_empty(uint64_t c) {
  return ~c & KVP__GRP_HIGH;
}

/* The slot index (group << 3 | slot) of the lowest slot in mask m. */
static inline uint64_t kvp__grp_pos(uint64_t g, uint64_t m) {
  return g << 3 | (uint64_t)(__builtin_ctzll(m) >> 3);
}

/* The slot at index i. */
static inline uint64_t *kvp__grp_slot(const kvp_pool_t *p, uint64_t i) {
  return &p->grp[i >> 3].slot[i & 7];
}

#define KVP__SLOT_TBIT 0x80000000u

/* The slot of block b under tag in p. */
static inline uint64_t kvp__pool_slot(const kvp_pool_t *p, uint64_t tag, uint32_t b) {
  return tag << 32 | p->tbit | (b + 1);
}

/* The slot value's bits other than the block: tag and tier bit. */
#define KVP__SLOT_KEY (~(uint64_t)0x7fffffff)

/* The block in slot value s. */
static inline uint32_t kvp__slot_block(uint64_t s) {
  return (uint32_t)(s & 0x7fffffff) - 1;
}

/* The block of p holding h among the slots of group G (control word c)
 * whose byte is t and whose key (tag << 32 | p's tier bit) is key, or
 * KVP__NIL. With twin set, *twin |= whether a slot matched has the other
 * tier's key (the other pool of a shared table may hold h). */
static inline uint32_t kvp__grp_find(const kvp_pool_t *p, const kvp__grp_t *G, uint64_t c,
                                     uint8_t t, uint64_t key, uint64_t h, int *twin) {
  for (uint64_t m = kvp__grp_match(c, t); m; m &= m - 1) {
    uint64_t s = G->slot[__builtin_ctzll(m) >> 3];
    uint32_t b = kvp__slot_block(s);
    if ((s & KVP__SLOT_KEY) == key && p->blk[b].hash == h)
      return b;
    if (twin)
      *twin |= (s & KVP__SLOT_KEY) == (key ^ KVP__SLOT_TBIT);
  }
  return KVP__NIL;
}

static inline uint32_t kvp__pool_find(const kvp_pool_t *p, uint64_t h) {
  uint64_t tag = kvp__pool_tag(h), g = kvp__pool_home(p, tag);
  uint64_t key = tag << 32 | p->tbit;
  uint8_t t = kvp__grp_byte(tag);

  for (uint64_t left = p->ngroups;;) {
    const kvp__grp_t *G = &p->grp[g];
    uint32_t b = kvp__grp_find(p, G, kvp__grp_ctrl(G), t, key, h, NULL);
    if (b != KVP__NIL || G->over == 0 || --left == 0)
      return b;
    g = kvp__grp_next(p, g);
  }
}

/* Random lines (table groups, and the records and bytes of victims to
 * come) are prefetched in bursts, issued back to back, not one at a time
 * between steps of work: passes over a sequence's hashes keep half a burst
 * to a burst and a half of KVP__BURST ahead, 32 lines at a time
 * (kvp__burst_due); evictions keep up to a burst ahead, topped up when
 * fewer than half are (kvp__prefetch_victims). Why bursts: a prefetch
 * cannot retire before its address is translated, so one per step keeps
 * about one TLB walk in flight behind a reorder window full of work; a
 * burst puts them in flight together. `kvp-bench prefetch` measures the
 * difference; its figures are in the README's table. */
#ifndef KVP__BURST
#define KVP__BURST 32
#endif
_Static_assert(KVP__BURST >= 2, "KVP__BURST / 2 lines ahead must be at least one");

static inline void kvp__pool_prefetch(const kvp_pool_t *p, uint64_t h) {
  __builtin_prefetch(&p->grp[kvp__pool_home(p, kvp__pool_tag(h))]);
}

/* For a pass at index i over n items, *pf being how far prefetches went
 * (0 before the pass): whether the next burst is due, that is, fewer than
 * half a burst of the items after i are prefetched; then the burst is
 * [*from, *pf), *pf advanced past it. */
static inline int kvp__burst_due(size_t n, size_t i, size_t *pf, size_t *from) {
  if (*pf < i)
    *pf = i;
  if (*pf >= n || *pf - i >= KVP__BURST / 2)
    return 0;
  *from = *pf;
  *pf = *pf + KVP__BURST < n ? *pf + KVP__BURST : n;
  return 1;
}

/* For a pass over hashes[0, n) at index i: keeps the home groups of the
 * hashes after i prefetched, a burst at a time (kvp__burst_due). */
static inline void kvp__pool_prefetch_ahead(const kvp_pool_t *p, const uint64_t *hashes, size_t n,
                                            size_t i, size_t *pf) {
  size_t k;

  if (kvp__burst_due(n, i, pf, &k))
    for (; k < *pf; k++)
      kvp__pool_prefetch(p, hashes[k]);
}

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
 * returns b's slot index and sets *other to p2's block under h (KVP__NIL
 * when none), from one pass over h's probe sequence. */
static inline uint64_t kvp__pool_pair(const kvp_pool_t *p1, const kvp_pool_t *p2, uint64_t h,
                                      uint32_t b, uint32_t *other) {
  uint64_t tag = kvp__pool_tag(h), g = kvp__pool_home(p1, tag), mine = UINT64_MAX;
  uint64_t want = kvp__pool_slot(p1, tag, b), key2 = tag << 32 | p2->tbit;
  uint8_t t = kvp__grp_byte(tag);

  *other = KVP__NIL;
  for (uint64_t left = p1->ngroups;;) {
    const kvp__grp_t *G = &p1->grp[g];
    for (uint64_t m = kvp__grp_match(kvp__grp_ctrl(G), t); m; m &= m - 1) {
      uint64_t s = G->slot[__builtin_ctzll(m) >> 3];
      uint32_t o = kvp__slot_block(s);
      if (s == want)
        mine = kvp__grp_pos(g, m);
      else if ((s & KVP__SLOT_KEY) == key2 && p2->blk[o].hash == h)
        *other = o;
    }
    if (G->over == 0 || --left == 0 || (mine != UINT64_MAX && *other != KVP__NIL))
      return mine;
    g = kvp__grp_next(p1, g);
  }
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
