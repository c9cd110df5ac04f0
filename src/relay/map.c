/* Relay tables (map.h). */
#include "relay/map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/array.h"
#include "kvplane/status.h"

static void media_set(kvp_relay_media_t *m, const char *name, size_t len, int tier) {
  for (size_t i = 0; i < m->n; i++)
    if (strlen(m->e[i].name) == len && strncasecmp(m->e[i].name, name, len) == 0) {
      m->e[i].tier = tier;
      return;
    }
  if (m->n < KVP_RELAY_MEDIA_MAX) {
    memcpy(m->e[m->n].name, name, len);
    m->e[m->n].name[len] = 0;
    m->e[m->n++].tier = tier;
  }
}

void kvp__relay_media_default(kvp_relay_media_t *m) {
  static const struct {
    const char *n;
    int t;
  } d[] = {{"GPU", 1},     {"CPU", 2},          {"CPU_PINNED", 2},
           {"DISK", 3},    {"STORAGE", 3},      {"SHARED_STORAGE", 3},
           {"NVME", 3},    {"OBJECT_STORE", 4}, {"REMOTE", 4},
           {"EXTERNAL", 4}};
  m->n = 0;
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
    media_set(m, d[i].n, strlen(d[i].n), d[i].t);
}

int kvp__relay_media_parse(kvp_relay_media_t *m, const char *spec, char *err, size_t errlen) {
  const char *p = spec;
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    size_t nlen = eq ? (size_t)(eq - p) : 0;
    int ok = eq && nlen > 0 && nlen < 32 && len - nlen == 3 && (eq[1] == 'G' || eq[1] == 'g') &&
             eq[2] >= '1' && eq[2] <= '4';
    if (!ok || m->n >= KVP_RELAY_MEDIA_MAX) {
      if (err)
        snprintf(err, errlen, "--media: bad entry \"%.*s\" (want NAME=G1..G4)", (int)len, p);
      return KVP_ECONFIG;
    }
    media_set(m, p, nlen, eq[2] - '0');
    p = end ? end + 1 : NULL;
  }
  return 0;
}

int kvp__relay_media_tier(const kvp_relay_media_t *m, const char *name, size_t len) {
  if (len == 0)
    return 1;
  for (size_t i = 0; i < m->n; i++)
    if (strlen(m->e[i].name) == len && strncasecmp(m->e[i].name, name, len) == 0)
      return m->e[i].tier;
  return 0;
}

/* Open addressing with backward-shift deletion; entries in a doubly linked
 * LRU list by index. */
typedef struct ent_s {
  uint64_t key, val;
  uint32_t prev, next; /* LRU list */
  uint32_t slot;       /* where it sits in the table */
} ent_t;

#define NIL UINT32_MAX

struct kvp_relay_map_s {
  size_t cap, n;
  ent_t *ent; /* entries in use or freed: nent of them, grown up to cap */
  size_t nent, ent_cap;
  uint32_t *table; /* mask + 1 slots: entry index or NIL */
  size_t mask, max_slots;
  uint32_t head, tail; /* head: most recent */
  uint32_t free_top;   /* freed entries linked through next */
};

static size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= UINT64_C(0xff51afd7ed558ccd);
  k ^= k >> 33;
  return (size_t)k;
}

/* The table starts small and doubles while it is more than half full, up
 * to two slots per entry of the cap: a map holding a few thousand hashes
 * stays in cache (a lookup in a table sized for the cap, 8 MiB at the
 * default, was a cache miss per block-event), and its memory follows what
 * it holds. */
#define MAP_MIN_SLOTS 1024

int kvp__relay_map_create(size_t cap, kvp_relay_map_t **out) {
  *out = NULL;
  if (cap == 0 || cap > (1u << 30))
    return KVP_EINVAL;
  kvp_relay_map_t *m = calloc(1, sizeof *m);
  if (!m)
    return KVP_ENOMEM;
  size_t max_slots = 1;
  while (max_slots < cap * 2)
    max_slots <<= 1;
  m->cap = cap;
  m->max_slots = max_slots;
  m->mask = (max_slots < MAP_MIN_SLOTS ? max_slots : MAP_MIN_SLOTS) - 1;
  m->table = malloc((m->mask + 1) * sizeof *m->table);
  if (!m->table) {
    kvp__relay_map_destroy(m);
    return KVP_ENOMEM;
  }
  kvp__relay_map_clear(m);
  *out = m;
  return 0;
}

void kvp__relay_map_destroy(kvp_relay_map_t *m) {
  if (!m)
    return;
  free(m->ent);
  free(m->table);
  free(m);
}

void kvp__relay_map_clear(kvp_relay_map_t *m) {
  memset(m->table, 0xff, (m->mask + 1) * sizeof *m->table);
  m->nent = 0;
  m->free_top = NIL;
  m->head = m->tail = NIL;
  m->n = 0;
}

size_t kvp__relay_map_size(const kvp_relay_map_t *m) {
  return m->n;
}

static void unlink_ent(kvp_relay_map_t *m, uint32_t i) {
  ent_t *e = &m->ent[i];
  if (e->prev != NIL)
    m->ent[e->prev].next = e->next;
  else
    m->head = e->next;
  if (e->next != NIL)
    m->ent[e->next].prev = e->prev;
  else
    m->tail = e->prev;
}

static void push_front(kvp_relay_map_t *m, uint32_t i) {
  ent_t *e = &m->ent[i];
  e->prev = NIL;
  e->next = m->head;
  if (m->head != NIL)
    m->ent[m->head].prev = i;
  m->head = i;
  if (m->tail == NIL)
    m->tail = i;
}

static size_t find(const kvp_relay_map_t *m, uint64_t key) {
  size_t s = mix(key) & m->mask;
  while (m->table[s] != NIL) {
    if (m->ent[m->table[s]].key == key)
      return s;
    s = (s + 1) & m->mask;
  }
  return SIZE_MAX;
}

/* Empties slot s and shifts the following cluster back. */
static void slot_delete(kvp_relay_map_t *m, size_t s) {
  size_t j = s;
  m->table[s] = NIL;
  for (;;) {
    j = (j + 1) & m->mask;
    if (m->table[j] == NIL)
      return;
    size_t home = mix(m->ent[m->table[j]].key) & m->mask;
    /* can the entry at j move to the hole at s? */
    if (((j - home) & m->mask) >= ((j - s) & m->mask)) {
      m->table[s] = m->table[j];
      m->ent[m->table[s]].slot = (uint32_t)s;
      m->table[j] = NIL;
      s = j;
    }
  }
}

static void remove_ent(kvp_relay_map_t *m, uint32_t i) {
  unlink_ent(m, i);
  slot_delete(m, m->ent[i].slot);
  m->ent[i].next = m->free_top;
  m->free_top = i;
  m->n--;
}

/* Doubles the table and puts every entry back. Returns 0 or KVP_ENOMEM
 * (the table stays as it was). */
static int grow(kvp_relay_map_t *m) {
  size_t slots = (m->mask + 1) * 2;
  uint32_t *t = malloc(slots * sizeof *t);
  if (!t)
    return KVP_ENOMEM;
  memset(t, 0xff, slots * sizeof *t);
  for (uint32_t i = m->head; i != NIL; i = m->ent[i].next) {
    size_t s = mix(m->ent[i].key) & (slots - 1);
    while (t[s] != NIL)
      s = (s + 1) & (slots - 1);
    t[s] = i;
    m->ent[i].slot = (uint32_t)s;
  }
  free(m->table);
  m->table = t;
  m->mask = slots - 1;
  return 0;
}

int kvp__relay_map_put(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp) {
  int evicted = 0;
  size_t s = find(m, engine);
  if (s != SIZE_MAX) {
    uint32_t i = m->table[s];
    m->ent[i].val = kvp;
    unlink_ent(m, i);
    push_front(m, i);
    return 0;
  }
  if (m->n == m->cap) {
    remove_ent(m, m->tail);
    evicted = 1;
  } else if ((m->n + 1) * 2 > m->mask + 1 && m->mask + 1 < m->max_slots && grow(m) != 0) {
    return evicted; /* out of memory: not mapped (removals pass the engine's hash) */
  }
  uint32_t i;
  if (m->free_top != NIL) {
    i = m->free_top;
    m->free_top = m->ent[i].next;
  } else {
    if (KVP_ARRAY_RESERVE(m->ent, m->ent_cap, m->nent + 1, 1024) != 0)
      return evicted;
    i = (uint32_t)m->nent++;
  }
  s = mix(engine) & m->mask;
  while (m->table[s] != NIL)
    s = (s + 1) & m->mask;
  m->table[s] = i;
  m->ent[i].key = engine;
  m->ent[i].val = kvp;
  m->ent[i].slot = (uint32_t)s;
  push_front(m, i);
  m->n++;
  return evicted;
}

int kvp__relay_map_get(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp) {
  size_t s = find(m, engine);
  if (s == SIZE_MAX)
    return 0;
  uint32_t i = m->table[s];
  *kvp = m->ent[i].val;
  unlink_ent(m, i);
  push_front(m, i);
  return 1;
}

int kvp__relay_map_take(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp) {
  size_t s = find(m, engine);
  if (s == SIZE_MAX)
    return 0;
  uint32_t i = m->table[s];
  *kvp = m->ent[i].val;
  remove_ent(m, i);
  return 1;
}
