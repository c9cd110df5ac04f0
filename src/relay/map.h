/* Relay tables (DESIGN.md, "Engine adapters"): the engine medium -> kvplane
 * tier table, and the bounded per-worker map from an engine's block hash to
 * the kvplane sequence hash the relay published for it (LRU beyond cap). */
#ifndef KVP_RELAY_MAP_H
#define KVP_RELAY_MAP_H

#include <stddef.h>
#include <stdint.h>

#define KVP_RELAY_MEDIA_MAX 32

typedef struct kvp_relay_media_s {
  struct {
    char name[32];
    int tier;
  } e[KVP_RELAY_MEDIA_MAX];
  size_t n;
} kvp_relay_media_t;

/* The default table: GPU -> G1; CPU, CPU_PINNED -> G2; DISK, STORAGE,
 * SHARED_STORAGE, NVME -> G3; OBJECT_STORE, REMOTE, EXTERNAL -> G4. */
void kvp__relay_media_default(kvp_relay_media_t *m);

/* Adds or replaces entries from "NAME=G<n>[,NAME=G<n>...]" (case-insensitive
 * names). Returns 0 or KVP_ECONFIG (err names the bad entry). */
int kvp__relay_media_parse(kvp_relay_media_t *m, const char *spec, char *err, size_t errlen);

/* Tier of a medium (case-insensitive); len 0 (absent) is GPU. Returns the
 * tier, or 0 when unknown. */
int kvp__relay_media_tier(const kvp_relay_media_t *m, const char *name, size_t len);

/* kv_cache_spec_kind table (README, relay section): whose blocks are a
 * reusable token prefix. Returns 1 (index: full attention, MLA, sink full
 * attention; absent is full attention), 0 (skip by rule: sliding window,
 * chunked local attention, Mamba, cross attention, encoder-only) or -1 (a
 * kind this table does not know: skipped, never indexed). Exact names, as
 * upstream spells them, and their spec class names. */
int kvp__relay_kind_class(const char *kind, size_t len);

/* engine hash -> kvplane hash, at most cap entries; the least recently used
 * goes first. */
typedef struct kvp_relay_map_s kvp_relay_map_t;

/* Returns 0 with *out set, KVP_EINVAL for a cap outside 1..2^30, or
 * KVP_ENOMEM; *out is NULL on failure. */
int kvp__relay_map_create(size_t cap, kvp_relay_map_t **out);
/* NULL is accepted. */
void kvp__relay_map_destroy(kvp_relay_map_t *m);
/* Inserts or updates (and marks as recent). Returns 1 when an entry was
 * evicted to make room, else 0. */
int kvp__relay_map_put(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp);
/* 1 with *kvp set (and marked as recent), or 0. */
int kvp__relay_map_get(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp);
/* Removes; 1 with *kvp set when it was there, or 0. */
int kvp__relay_map_take(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp);
void kvp__relay_map_clear(kvp_relay_map_t *m);
size_t kvp__relay_map_size(const kvp_relay_map_t *m);

#endif
