/* The hash table from sequence hash to registered block, for the pools of
 * a block manager. Private to src/block; the pool (pool.h) owns one view
 * of it and is the only caller outside this file and map.c.
 *
 * Open addressing over groups of KVP__GROUP_SLOTS slots, one cache line
 * each (kvp__grp_t), probed group after group from a home group. A slot is
 * tag << 32 | tier bit << 31 | (block + 1), where the tag is 32 bits of the
 * hash multiplied by a 64-bit odd constant (so hashes from an engine with
 * little entropy in some bits still spread); the home group is the tag
 * mapped onto [0, ngroups) by a multiply. Each slot has a control byte, 0
 * when empty, else 0x80 | 7 bits of the tag: one 64-bit load and a few
 * arithmetic steps find the slots of a group that may hold a hash, with no
 * loop over slots and no record read until a tag matches. A group's
 * overflow count says how many entries passed it full on their way from
 * home; a search stops at the first group with none, or after every group:
 * counts are upper bounds (one stays raised while an entry that passed it
 * lives, and a saturated one stays at 255), so a table could have every
 * count raised.
 *
 * Deletion clears the slot and takes the entry off the counts of the groups
 * it passed: entries never move, so a slot index stays valid while its
 * entry lives. The tier bit lets the G1 and G2 pools of a block manager
 * share one table: each has a view (kvp__map_t) with its own records and
 * tier bit over the same groups. A hash's G1 and G2 entries share a probe
 * sequence, so the G2 lookup after a G1 miss reads a line already loaded,
 * and an offload moves the G1 entry to the G2 block by rewriting one slot
 * (kvp__map_move). Sized at 2 slots per block of the views sharing it (at
 * most half full), 64/7 x 2 = 18.3 bytes per block.
 *
 * Everything here is forced inline: these steps run once or more per block
 * of every sequence, and the speed of the manager's loops comes from their
 * compiling into those loops. */
#ifndef KVP_BLOCK_MAP_H
#define KVP_BLOCK_MAP_H

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "block/record.h"

/* Most blocks in the views sharing one table: block ids + 1 fit in 31 bits
 * of a slot (and the groups, 2 slots per block over 7 per group, stay
 * below 2^32 for the home-group multiply). */
#define KVP__MAP_MAX_BLOCKS 0x7fffffffu

/* A group of the table: one cache line. */
#define KVP__GROUP_SLOTS 7
typedef struct kvp__grp_s {
  uint8_t ctrl[KVP__GROUP_SLOTS]; /* per slot: 0 empty, else 0x80 | tag & 0x7f */
  uint8_t over; /* entries that passed this group full; saturates, then stays, at 255 */
  uint64_t slot[KVP__GROUP_SLOTS];
} kvp__grp_t;

/* One pool's view of a table: the groups (shared or not), the records its
 * slots name, and its tier bit. */
typedef struct kvp__map_s {
  kvp__grp_t *grp;
  uint64_t ngroups;
  kvp__blk_t *blk;
  uint32_t tbit; /* 0, or KVP__SLOT_TBIT for the second view of a shared table */
} kvp__map_t;

#define KVP__SLOT_TBIT 0x80000000u

/* The slot value's bits other than the block: tag and tier bit. */
#define KVP__SLOT_KEY (~(uint64_t)0x7fffffff)

/* Allocates m's groups for table_blocks blocks (1..KVP__MAP_MAX_BLOCKS),
 * its records being blk. Returns 0, KVP_EINVAL or KVP_ENOMEM. (map.c) */
int kvp__map_create(kvp__map_t *m, uint64_t table_blocks, kvp__blk_t *blk);

/* m becomes the second view of owner's table, for the records blk. */
void kvp__map_share(kvp__map_t *m, const kvp__map_t *owner, kvp__blk_t *blk);

/* Frees the groups of a view made by kvp__map_create (not of a shared
 * view). */
void kvp__map_free(kvp__map_t *m);

/* Bytes of m's groups. */
static inline uint64_t kvp__map_bytes(const kvp__map_t *m) {
  return m->ngroups * sizeof(kvp__grp_t);
}

/* The tag of a hash: the high half of hash * 2^64/phi, which depends on
 * every bit of the hash. */
static inline uint64_t kvp__map_tag(uint64_t h) {
  return (h * UINT64_C(0x9e3779b97f4a7c15)) >> 32;
}

/* The home group of a tag. */
static inline uint64_t kvp__map_home(const kvp__map_t *m, uint64_t tag) {
  return (tag * m->ngroups) >> 32;
}

/* The loc (kvp__blk_t) of slot index i for a hash whose home group is
 * home. */
static inline uint8_t kvp__map_loc_of(const kvp__map_t *m, uint64_t home, uint64_t i) {
  uint64_t g = i >> 3, d = g >= home ? g - home : g + m->ngroups - home;
  return d <= KVP__LOC_DMAX ? (uint8_t)(d << 3 | (i & 7)) : (uint8_t)KVP__LOC_FAR;
}

/* The slot index that loc (not KVP__LOC_FAR) names for home. */
static inline uint64_t kvp__map_loc_slot(const kvp__map_t *m, uint64_t home, uint8_t loc) {
  uint64_t g = home + (loc >> 3);
  if (g >= m->ngroups)
    g -= m->ngroups;
  return g << 3 | (loc & 7);
}

/* The group after g, cyclically. */
static inline uint64_t kvp__grp_next(const kvp__map_t *m, uint64_t g) {
  return g + 1 == m->ngroups ? 0 : g + 1;
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
static inline uint64_t *kvp__map_slot_at(const kvp__map_t *m, uint64_t i) {
  return &m->grp[i >> 3].slot[i & 7];
}

/* The slot value of block b under tag in m. */
static inline uint64_t kvp__map_entry(const kvp__map_t *m, uint64_t tag, uint32_t b) {
  return tag << 32 | m->tbit | (b + 1);
}

/* The block in slot value s. */
static inline uint32_t kvp__slot_block(uint64_t s) {
  return (uint32_t)(s & 0x7fffffff) - 1;
}

/* The block of m holding h among the slots of group G (control word c)
 * whose byte is t and whose key (tag << 32 | m's tier bit) is key, or
 * KVP__NIL. With twin set, *twin |= whether a slot matched has the other
 * view's key (the other view may hold h). */
static inline uint32_t kvp__grp_find(const kvp__map_t *m, const kvp__grp_t *G, uint64_t c,
                                     uint8_t t, uint64_t key, uint64_t h, int *twin) {
  for (uint64_t k = kvp__grp_match(c, t); k; k &= k - 1) {
    uint64_t s = G->slot[__builtin_ctzll(k) >> 3];
    uint32_t b = kvp__slot_block(s);
    if ((s & KVP__SLOT_KEY) == key && m->blk[b].hash == h)
      return b;
    if (twin)
      *twin |= (s & KVP__SLOT_KEY) == (key ^ KVP__SLOT_TBIT);
  }
  return KVP__NIL;
}

/* The block of m registered under h, or KVP__NIL. */
static inline uint32_t kvp__map_find(const kvp__map_t *m, uint64_t h) {
  uint64_t tag = kvp__map_tag(h), g = kvp__map_home(m, tag);
  uint64_t key = tag << 32 | m->tbit;
  uint8_t t = kvp__grp_byte(tag);

  for (uint64_t left = m->ngroups;;) {
    const kvp__grp_t *G = &m->grp[g];
    uint32_t b = kvp__grp_find(m, G, kvp__grp_ctrl(G), t, key, h, NULL);
    if (b != KVP__NIL || G->over == 0 || --left == 0)
      return b;
    g = kvp__grp_next(m, g);
  }
}

/* Prefetches h's home group. */
static inline void kvp__map_prefetch(const kvp__map_t *m, uint64_t h) {
  __builtin_prefetch(&m->grp[kvp__map_home(m, kvp__map_tag(h))]);
}

/* For a pass over hashes[0, n) at index i: keeps the home groups of the
 * hashes after i prefetched, a burst at a time (kvp__burst_due). */
static inline void kvp__map_prefetch_ahead(const kvp__map_t *m, const uint64_t *hashes, size_t n,
                                           size_t i, size_t *pf) {
  size_t k;

  if (kvp__burst_due(n, i, pf, &k))
    for (; k < *pf; k++)
      kvp__map_prefetch(m, hashes[k]);
}

/* For block b of m1, mapped under h in the table m1 shares with m2:
 * returns b's slot index and sets *other to m2's block under h (KVP__NIL
 * when none), from one pass over h's probe sequence. */
static inline uint64_t kvp__map_pair(const kvp__map_t *m1, const kvp__map_t *m2, uint64_t h,
                                     uint32_t b, uint32_t *other) {
  uint64_t tag = kvp__map_tag(h), g = kvp__map_home(m1, tag), mine = UINT64_MAX;
  uint64_t want = kvp__map_entry(m1, tag, b), key2 = tag << 32 | m2->tbit;
  uint8_t t = kvp__grp_byte(tag);

  *other = KVP__NIL;
  for (uint64_t left = m1->ngroups;;) {
    const kvp__grp_t *G = &m1->grp[g];
    for (uint64_t k = kvp__grp_match(kvp__grp_ctrl(G), t); k; k &= k - 1) {
      uint64_t s = G->slot[__builtin_ctzll(k) >> 3];
      uint32_t o = kvp__slot_block(s);
      if (s == want)
        mine = kvp__grp_pos(g, k);
      else if ((s & KVP__SLOT_KEY) == key2 && m2->blk[o].hash == h)
        *other = o;
    }
    if (G->over == 0 || --left == 0 || (mine != UINT64_MAX && *other != KVP__NIL))
      return mine;
    g = kvp__grp_next(m1, g);
  }
}

/* Probes for h once: returns the block holding it, or KVP__NIL with *slot
 * the first empty slot of its probe sequence, where it would go; then
 * *twin says whether an entry of the other view under h's tag was seen,
 * that is, whether the other tier may hold h. */
static inline uint32_t kvp__map_probe(const kvp__map_t *m, uint64_t h, uint64_t *slot, int *twin) {
  uint64_t tag = kvp__map_tag(h), g = kvp__map_home(m, tag), free_at = UINT64_MAX;
  uint64_t key = tag << 32 | m->tbit;
  uint8_t t = kvp__grp_byte(tag);
  int seen = 0;

  for (uint64_t left = m->ngroups;;) {
    const kvp__grp_t *G = &m->grp[g];
    uint64_t c = kvp__grp_ctrl(G), e;
    uint32_t b = kvp__grp_find(m, G, c, t, key, h, &seen);
    if (b != KVP__NIL)
      return b;
    if (free_at == UINT64_MAX && (e = kvp__grp_empty(c)) != 0)
      free_at = kvp__grp_pos(g, e);
    if (G->over == 0 || --left == 0)
      break;
    g = kvp__grp_next(m, g);
  }
  /* Absent. Every group searched was full: the first one after them with
   * room takes it (the table is at most half full, so after a pass over
   * every group free_at is set). */
  while (free_at == UINT64_MAX) {
    uint64_t e;
    g = kvp__grp_next(m, g);
    if ((e = kvp__grp_empty(kvp__grp_ctrl(&m->grp[g]))) != 0)
      free_at = kvp__grp_pos(g, e);
  }
  *slot = free_at;
  *twin = seen;
  return KVP__NIL;
}

/* Puts block b under h at slot (an empty slot from kvp__map_probe): the
 * groups between h's home and the slot's, all full when probed, count it
 * as passing them. Sets b's loc. */
static inline void kvp__map_put(kvp__map_t *m, uint64_t slot, uint64_t h, uint32_t b) {
  uint64_t tag = kvp__map_tag(h), home = kvp__map_home(m, tag), to = slot >> 3;
  kvp__grp_t *G = &m->grp[to];

  for (uint64_t g = home; g != to; g = kvp__grp_next(m, g))
    if (m->grp[g].over < 255)
      m->grp[g].over++;
  G->ctrl[slot & 7] = kvp__grp_byte(tag);
  G->slot[slot & 7] = kvp__map_entry(m, tag, b);
  m->blk[b].loc = kvp__map_loc_of(m, home, slot);
}

/* The slot index holding `want`, which is in the table under tag. */
static inline uint64_t kvp__map_find_slot(const kvp__map_t *m, uint64_t tag, uint64_t want) {
  uint8_t t = kvp__grp_byte(tag);

  for (uint64_t g = kvp__map_home(m, tag);; g = kvp__grp_next(m, g)) {
    const kvp__grp_t *G = &m->grp[g];
    for (uint64_t k = kvp__grp_match(kvp__grp_ctrl(G), t); k; k &= k - 1)
      if (G->slot[__builtin_ctzll(k) >> 3] == want)
        return kvp__grp_pos(g, k);
  }
}

/* The slot index of registered block b (hash h) of m: from its loc, with
 * no load of the table, unless the entry is far from home. */
static inline uint64_t kvp__map_slot_of(const kvp__map_t *m, uint64_t h, uint32_t b) {
  uint64_t tag = kvp__map_tag(h);
  uint8_t loc = m->blk[b].loc;
  uint64_t i = loc != KVP__LOC_FAR ? kvp__map_loc_slot(m, kvp__map_home(m, tag), loc)
                                   : kvp__map_find_slot(m, tag, kvp__map_entry(m, tag, b));
  assert(*kvp__map_slot_at(m, i) == kvp__map_entry(m, tag, b));
  return i;
}

/* Empties slot i, holding an entry under hash h, taking it off the
 * overflow counts of the groups it passed: when it is in h's home group,
 * two stores and no load. No entry moves. A saturated count stays:
 * searches then go on past that group, which costs time, never a wrong
 * answer. */
static inline void kvp__map_delete_at(kvp__map_t *m, uint64_t i, uint64_t h) {
  uint64_t to = i >> 3;
  kvp__grp_t *G = &m->grp[to];

  for (uint64_t g = kvp__map_home(m, kvp__map_tag(h)); g != to; g = kvp__grp_next(m, g))
    if (m->grp[g].over < 255)
      m->grp[g].over--;
  G->ctrl[i & 7] = 0;
  G->slot[i & 7] = 0;
}

/* Removes registered block b's (hash h) entry. */
static inline void kvp__map_delete(kvp__map_t *m, uint64_t h, uint32_t b) {
  kvp__map_delete_at(m, kvp__map_slot_of(m, h, b), h);
}

/* The entry at slot i, block sb of view from under h, becomes block b's
 * of view m (both views of one table): one store, and b's loc. Entries
 * never move, so the slot is where the caller found it. */
static inline void kvp__map_move(kvp__map_t *m, uint64_t i, const kvp__map_t *from, uint32_t sb,
                                 uint64_t h, uint32_t b) {
  uint64_t tag = kvp__map_tag(h);

  assert(*kvp__map_slot_at(m, i) == kvp__map_entry(from, tag, sb));
  (void)from;
  (void)sb;
  *kvp__map_slot_at(m, i) = kvp__map_entry(m, tag, b);
  m->blk[b].loc = kvp__map_loc_of(m, kvp__map_home(m, tag), i);
}

#endif
