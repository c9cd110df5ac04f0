/* The one 64-bit-key hash map of the code base: uint64_t key -> uint64_t
 * value, for every table that is not a measured hot path with its own
 * tuned copy (block/map.h, the index's map in index/index.c).
 *
 *   kvp__map64_t m;
 *   kvp__map64_init(&m, 0);
 *   if ((rc = kvp__map64_put(&m, hash, parent)) != 0) goto out;
 *   if (kvp__map64_get(&m, hash, &parent) == 0) ...
 *   kvp__map64_free(&m);
 *
 * Open addressing with linear probing and backward-shift deletion (no
 * tombstones); slots hold key and value side by side, so a probe reads one
 * cache line. The capacity is a power of two, at least 16 slots, and
 * doubles when a put would fill more than half of it; it never shrinks
 * below the capacity init asked for (clear keeps it, free releases it).
 *
 * Every uint64_t is a valid key, 0 and UINT64_MAX included: a slot whose
 * key is 0 is empty, and key 0 itself lives beside the table (a flag and
 * its value), so sequence hashes of any value are handled alike.
 *
 * Not thread-safe: callers hold their own lock. A pointer from find, and
 * iteration order, are valid until the next put, del, clear or free. */
#ifndef KVP_COMMON_MAP64_H
#define KVP_COMMON_MAP64_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/status.h"

typedef struct kvp__map64_slot_s {
  uint64_t key; /* 0: empty */
  uint64_t val;
} kvp__map64_slot_t;

typedef struct kvp__map64_s {
  kvp__map64_slot_t *slot; /* cap slots, or NULL before the first put */
  size_t cap;              /* 0 or a power of two */
  size_t n;                /* keys in slot[] (key 0 not counted) */
  size_t min_cap;          /* the floor set by init */
  unsigned shift;          /* 64 - log2(cap) */
  int has_zero;
  uint64_t zero_val;
} kvp__map64_t;

/* Makes an empty map that will hold `expect` keys without growing (0: the
 * 16-slot minimum). Allocates nothing: the table is made by the first put.
 * Returns 0, or KVP_ETOOBIG when expect cannot be a table's size. */
int kvp__map64_init(kvp__map64_t *m, size_t expect);

/* Releases the table; the map is then empty and usable again (as after
 * init with the same expect). Accepts a zeroed map. */
void kvp__map64_free(kvp__map64_t *m);

/* Inserts key or replaces its value. Returns 0, or KVP_ENOMEM when the
 * table had to grow and could not; the map is then unchanged. */
int kvp__map64_put(kvp__map64_t *m, uint64_t key, uint64_t val);

/* Removes key. Returns 0 with *val set (when val is not NULL) to what it
 * held, or KVP_ENOENT when key was absent. Never allocates. */
int kvp__map64_del(kvp__map64_t *m, uint64_t key, uint64_t *val);

/* Removes every key and keeps the capacity (one memset when not empty). */
void kvp__map64_clear(kvp__map64_t *m);

/* Bytes the map holds on the heap. */
size_t kvp__map64_bytes(const kvp__map64_t *m);

/* Iteration: starting from *it = 0, each call returns 1 with the next key
 * and its value (either pointer may be NULL), or 0 at the end. Each key is
 * seen once, key 0 first; the map must not change during a walk. */
int kvp__map64_next(const kvp__map64_t *m, size_t *it, uint64_t *key, uint64_t *val);

static inline size_t kvp__map64_count(const kvp__map64_t *m) {
  return m->n + (size_t)m->has_zero;
}

/* The home slot of key: Fibonacci hashing of the key with its high half
 * folded in, so keys that differ only in their top bits spread too. */
static inline size_t kvp__map64_home(const kvp__map64_t *m, uint64_t key) {
  return (size_t)(((key ^ (key >> 32)) * UINT64_C(0x9e3779b97f4a7c15)) >> m->shift);
}

/* The value of key, writable in place, or NULL when absent. */
static inline uint64_t *kvp__map64_find(kvp__map64_t *m, uint64_t key) {
  if (key == 0)
    return m->has_zero ? &m->zero_val : NULL;
  if (m->n == 0)
    return NULL;
  size_t mask = m->cap - 1;
  for (size_t s = kvp__map64_home(m, key);; s = (s + 1) & mask) {
    if (m->slot[s].key == key)
      return &m->slot[s].val;
    if (m->slot[s].key == 0)
      return NULL;
  }
}

/* Returns 0 with *val set (when val is not NULL), or KVP_ENOENT. */
static inline int kvp__map64_get(const kvp__map64_t *m, uint64_t key, uint64_t *val) {
  const uint64_t *v = kvp__map64_find((kvp__map64_t *)m, key);
  if (v == NULL)
    return KVP_ENOENT;
  if (val != NULL)
    *val = *v;
  return 0;
}

#endif
