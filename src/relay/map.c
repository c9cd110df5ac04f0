/* Relay tables (map.h): media, spec kinds, the engine-to-kvplane map. */
#include "relay/map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/array.h"
#include "common/map64.h"
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

int kvp__relay_kind_class(const char *kind, size_t len) {
  static const struct {
    const char *n;
    int index;
  } t[] = {
      {"full_attention", 1},
      {"full", 1},
      {"FullAttentionSpec", 1},
      {"mla_attention", 1},
      {"mla", 1},
      {"MLAAttentionSpec", 1},
      {"sink_full_attention", 1},
      {"SinkFullAttentionSpec", 1},
      {"sliding_window", 0},
      {"SlidingWindowSpec", 0},
      {"sliding_window_mla", 0},
      {"SlidingWindowMLASpec", 0},
      {"chunked_local_attention", 0},
      {"ChunkedLocalAttentionSpec", 0},
      {"mamba", 0},
      {"MambaSpec", 0},
      {"cross_attention", 0},
      {"CrossAttentionSpec", 0},
      {"encoder_only_attention", 0},
      {"EncoderOnlyAttentionSpec", 0},
  };
  if (len == 0)
    return 1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strlen(t[i].n) == len && memcmp(t[i].n, kind, len) == 0)
      return t[i].index;
  return -1;
}

/* Entries in a doubly linked LRU list by index; a common/map64 maps the
 * engine's hash to its entry. */
typedef struct ent_s {
  uint64_t key, val, parent;
  uint32_t prev, next;                   /* LRU list */
  uint16_t copies[KVP__RELAY_MAP_TIERS]; /* references per tier G1..G4 */
  uint8_t native, has_parent;
} ent_t;

#define NIL UINT32_MAX

struct kvp_relay_map_s {
  size_t cap, n;
  ent_t *ent; /* entries in use or freed: nent of them, grown up to cap */
  size_t nent, ent_cap;
  kvp__map64_t idx;    /* engine hash -> entry index */
  uint32_t head, tail; /* head: most recent */
  uint32_t free_top;   /* freed entries linked through next */
};

/* The index starts small and grows while it is more than half full, so
 * at most to two slots per entry of the cap: a map holding a few thousand
 * hashes stays in cache (a lookup in a table sized for the cap, 8 MiB at
 * the default, was a cache miss per block-event), and its memory follows
 * what it holds. */
#define MAP_FIRST_ENTRIES 512

int kvp__relay_map_create(size_t cap, kvp_relay_map_t **out) {
  *out = NULL;
  if (cap == 0 || cap > (1u << 30))
    return KVP_EINVAL;
  kvp_relay_map_t *m = calloc(1, sizeof *m);
  if (!m)
    return KVP_ENOMEM;
  m->cap = cap;
  kvp__map64_init(&m->idx, cap < MAP_FIRST_ENTRIES ? cap : MAP_FIRST_ENTRIES);
  kvp__relay_map_clear(m);
  *out = m;
  return 0;
}

void kvp__relay_map_destroy(kvp_relay_map_t *m) {
  if (!m)
    return;
  free(m->ent);
  kvp__map64_free(&m->idx);
  free(m);
}

void kvp__relay_map_clear(kvp_relay_map_t *m) {
  kvp__map64_clear(&m->idx);
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

static void remove_ent(kvp_relay_map_t *m, uint32_t i) {
  unlink_ent(m, i);
  kvp__map64_del(&m->idx, m->ent[i].key, NULL);
  m->ent[i].next = m->free_top;
  m->free_top = i;
  m->n--;
}

static void copy_add(ent_t *e, int tier) {
  if (tier >= 1 && tier <= KVP__RELAY_MAP_TIERS && e->copies[tier - 1] < UINT16_MAX)
    e->copies[tier - 1]++;
}

int kvp__relay_map_put(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp, int tier, int native) {
  return kvp__relay_map_put_child(m, engine, kvp, tier, native, -1, 0);
}

int kvp__relay_map_put_child(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp, int tier,
                             int native, int has_parent, uint64_t parent) {
  int evicted = 0;
  uint64_t *at = kvp__map64_find(&m->idx, engine);
  if (at != NULL) {
    uint32_t i = (uint32_t)*at;
    if (has_parent >= 0 || m->ent[i].val != kvp) {
      m->ent[i].has_parent = has_parent > 0;
      m->ent[i].parent = parent;
    }
    m->ent[i].val = kvp;
    m->ent[i].native = native != 0;
    copy_add(&m->ent[i], tier);
    unlink_ent(m, i);
    push_front(m, i);
    return 0;
  }
  if (m->n == m->cap) {
    remove_ent(m, m->tail);
    evicted = 1;
  }
  uint32_t i;
  if (m->free_top != NIL) {
    i = m->free_top;
    m->free_top = m->ent[i].next;
  } else {
    if (KVP_ARRAY_RESERVE(m->ent, m->ent_cap, m->nent + 1, 1024) != 0)
      return evicted; /* out of memory: not mapped (removals pass the engine's hash) */
    i = (uint32_t)m->nent++;
  }
  if (kvp__map64_put(&m->idx, engine, i) != 0) {
    m->ent[i].next = m->free_top; /* out of memory: not mapped, as above */
    m->free_top = i;
    return evicted;
  }
  ent_t *e = &m->ent[i];
  memset(e->copies, 0, sizeof e->copies);
  e->key = engine;
  e->val = kvp;
  e->native = native != 0;
  e->has_parent = has_parent > 0;
  e->parent = parent;
  copy_add(e, tier);
  push_front(m, i);
  m->n++;
  return evicted;
}

int kvp__relay_map_get(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp) {
  const uint64_t *at = kvp__map64_find(&m->idx, engine);
  if (at == NULL)
    return 0;
  uint32_t i = (uint32_t)*at;
  *kvp = m->ent[i].val;
  unlink_ent(m, i);
  push_front(m, i);
  return m->ent[i].native ? 2 : 1;
}

int kvp__relay_map_drop(kvp_relay_map_t *m, uint64_t engine, int tier, int64_t remaining,
                        uint64_t *kvp) {
  const uint64_t *at = kvp__map64_find(&m->idx, engine);
  if (at == NULL)
    return -1;
  uint32_t i = (uint32_t)*at;
  ent_t *e = &m->ent[i];
  *kvp = e->val;
  int left = 0;
  if (tier >= 1 && tier <= KVP__RELAY_MAP_TIERS) {
    uint16_t *c = &e->copies[tier - 1];
    if (remaining >= 0)
      *c = remaining > UINT16_MAX ? UINT16_MAX : (uint16_t)remaining;
    else if (*c > 0)
      (*c)--;
    left = *c;
  }
  for (int t = 0; t < KVP__RELAY_MAP_TIERS; t++)
    if (e->copies[t])
      return left;
  remove_ent(m, i);
  return left;
}

int kvp__relay_map_take(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp) {
  const uint64_t *at = kvp__map64_find(&m->idx, engine);
  if (at == NULL)
    return 0;
  uint32_t i = (uint32_t)*at;
  *kvp = m->ent[i].val;
  remove_ent(m, i);
  return 1;
}

size_t kvp__relay_map_tier(const kvp_relay_map_t *m, int tier, uint64_t *out, uint64_t *parents) {
  size_t n = 0;
  if (tier < 1 || tier > KVP__RELAY_MAP_TIERS)
    return 0;
  for (uint32_t i = m->head; i != NIL; i = m->ent[i].next)
    if (m->ent[i].copies[tier - 1]) {
      if (parents)
        parents[n] = m->ent[i].has_parent ? m->ent[i].parent : m->ent[i].val;
      out[n++] = m->ent[i].val;
    }
  return n;
}

size_t kvp__relay_map_export(const kvp_relay_map_t *m, kvp_relay_map_rec_t *out) {
  size_t n = 0;
  for (uint32_t i = m->tail; i != NIL; i = m->ent[i].prev, n++) {
    const ent_t *e = &m->ent[i];
    memset(&out[n], 0, sizeof out[n]);
    out[n].engine = e->key;
    out[n].kvp = e->val;
    memcpy(out[n].copies, e->copies, sizeof e->copies);
    out[n].flags =
        (e->native ? KVP__RELAY_REC_NATIVE : 0) | (e->has_parent ? KVP__RELAY_REC_PARENT : 0);
    out[n].parent = e->parent;
  }
  return n;
}

size_t kvp__relay_map_import(kvp_relay_map_t *m, const kvp_relay_map_rec_t *rec, size_t n) {
  size_t in = 0;
  for (size_t k = 0; k < n; k++) {
    kvp__relay_map_put_child(m, rec[k].engine, rec[k].kvp, 0,
                             (rec[k].flags & KVP__RELAY_REC_NATIVE) != 0,
                             (rec[k].flags & KVP__RELAY_REC_PARENT) != 0, rec[k].parent);
    const uint64_t *at = kvp__map64_find(&m->idx, rec[k].engine);
    if (at == NULL)
      continue; /* out of memory */
    memcpy(m->ent[*at].copies, rec[k].copies, sizeof rec[k].copies);
    in++;
  }
  return in;
}
