/* The shared 64-bit-key hash map; see map64.h. */
#include "common/map64.h"

#include <stdlib.h>
#include <string.h>

#define MIN_CAP 16

/* The smallest table (a power of two, at least MIN_CAP) that holds n keys
 * at most half full, or 0 when there is none. */
static size_t cap_for(size_t n) {
  size_t cap = MIN_CAP;
  while (cap / 2 < n) {
    if (cap > SIZE_MAX / 2 / sizeof(kvp__map64_slot_t))
      return 0;
    cap *= 2;
  }
  return cap;
}

static unsigned shift_for(size_t cap) {
  unsigned bits = 0;
  while (((size_t)1 << bits) < cap)
    bits++;
  return 64 - bits;
}

int kvp__map64_init(kvp__map64_t *m, size_t expect) {
  memset(m, 0, sizeof *m);
  m->min_cap = cap_for(expect);
  return m->min_cap ? 0 : KVP_ETOOBIG;
}

void kvp__map64_free(kvp__map64_t *m) {
  size_t min_cap = m->min_cap;
  free(m->slot);
  memset(m, 0, sizeof *m);
  m->min_cap = min_cap;
}

/* Moves every key into a table of cap slots. Returns 0 or KVP_ENOMEM with
 * the map unchanged. */
static int rehash(kvp__map64_t *m, size_t cap) {
  kvp__map64_slot_t *old = m->slot, *t = calloc(cap, sizeof *t);
  size_t ocap = m->cap;

  if (t == NULL)
    return KVP_ENOMEM;
  m->slot = t;
  m->cap = cap;
  m->shift = shift_for(cap);
  for (size_t i = 0; i < ocap; i++) {
    if (old[i].key == 0)
      continue;
    size_t s = kvp__map64_home(m, old[i].key);
    while (t[s].key != 0)
      s = (s + 1) & (cap - 1);
    t[s] = old[i];
  }
  free(old);
  return 0;
}

int kvp__map64_put(kvp__map64_t *m, uint64_t key, uint64_t val) {
  if (key == 0) {
    m->has_zero = 1;
    m->zero_val = val;
    return 0;
  }
  if (m->cap == 0 && rehash(m, m->min_cap ? m->min_cap : MIN_CAP) != 0) /* 0: a zeroed map */
    return KVP_ENOMEM;
  size_t mask = m->cap - 1, s = kvp__map64_home(m, key);
  for (; m->slot[s].key != 0; s = (s + 1) & mask)
    if (m->slot[s].key == key) {
      m->slot[s].val = val;
      return 0;
    }
  if ((m->n + 1) * 2 > m->cap) {
    /* Growing only for a new key: a replace never fails. */
    if (m->cap > SIZE_MAX / 2 / sizeof *m->slot || rehash(m, m->cap * 2) != 0)
      return KVP_ENOMEM;
    mask = m->cap - 1;
    for (s = kvp__map64_home(m, key); m->slot[s].key != 0; s = (s + 1) & mask)
      ;
  }
  m->slot[s].key = key;
  m->slot[s].val = val;
  m->n++;
  return 0;
}

int kvp__map64_del(kvp__map64_t *m, uint64_t key, uint64_t *val) {
  if (key == 0) {
    if (!m->has_zero)
      return KVP_ENOENT;
    if (val != NULL)
      *val = m->zero_val;
    m->has_zero = 0;
    return 0;
  }
  if (m->n == 0)
    return KVP_ENOENT;
  size_t mask = m->cap - 1, s = kvp__map64_home(m, key);
  while (m->slot[s].key != key) {
    if (m->slot[s].key == 0)
      return KVP_ENOENT;
    s = (s + 1) & mask;
  }
  if (val != NULL)
    *val = m->slot[s].val;
  /* Backward shift: a key after the hole moves into it when its home is
   * not in (hole, j], so every key stays reachable from its home. */
  for (size_t j = (s + 1) & mask; m->slot[j].key != 0; j = (j + 1) & mask) {
    size_t home = kvp__map64_home(m, m->slot[j].key);
    if (((j - home) & mask) >= ((j - s) & mask)) {
      m->slot[s] = m->slot[j];
      s = j;
    }
  }
  m->slot[s].key = 0;
  m->n--;
  return 0;
}

void kvp__map64_clear(kvp__map64_t *m) {
  if (m->n > 0)
    memset(m->slot, 0, m->cap * sizeof *m->slot);
  m->n = 0;
  m->has_zero = 0;
}

size_t kvp__map64_bytes(const kvp__map64_t *m) {
  return m->cap * sizeof *m->slot;
}

int kvp__map64_next(const kvp__map64_t *m, size_t *it, uint64_t *key, uint64_t *val) {
  size_t i = *it;
  /* *it: 0 before key 0, then 1 + the next slot to look at. */
  if (i == 0) {
    *it = 1;
    if (m->has_zero) {
      if (key != NULL)
        *key = 0;
      if (val != NULL)
        *val = m->zero_val;
      return 1;
    }
    i = 1;
  }
  for (; i - 1 < m->cap; i++)
    if (m->slot[i - 1].key != 0) {
      if (key != NULL)
        *key = m->slot[i - 1].key;
      if (val != NULL)
        *val = m->slot[i - 1].val;
      *it = i + 1;
      return 1;
    }
  *it = i;
  return 0;
}
