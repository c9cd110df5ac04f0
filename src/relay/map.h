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

/* engine hash -> kvplane identity, its parent's and its copies: at most cap engine
 * hashes, the least recently used first to go. Each entry keeps the
 * kvplane hash the relay published for the engine's block (or the engine's
 * own hash, marked native) and a reference count of its copies per tier, so
 * that a copy is keyed by (engine hash, medium's tier): a block stored in G1
 * and G2 and removed from G1 stays mapped for its G2 copy. An entry goes
 * when its last copy does. */
typedef struct kvp_relay_map_s kvp_relay_map_t;

#define KVP__RELAY_MAP_TIERS 4 /* G1..G4 */

/* Returns 0 with *out set, KVP_EINVAL for a cap outside 1..2^30, or
 * KVP_ENOMEM; *out is NULL on failure. */
int kvp__relay_map_create(size_t cap, kvp_relay_map_t **out);
/* NULL is accepted. */
void kvp__relay_map_destroy(kvp_relay_map_t *m);
/* One more copy of engine in tier (1..4; 0 records the identity only), with
 * identity kvp (native: kvp is the engine's own hash); marks it as recent.
 * A new identity replaces the old one. Returns 1 when an entry was evicted
 * to make room, else 0. */
int kvp__relay_map_put(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp, int tier, int native);
/* The same, recording the identity's parent (the kvplane hash the block
 * chains to, as published) when has_parent is 1, no parent when 0, and
 * keeping what the entry had when -1 (kvp__relay_map_put). */
int kvp__relay_map_put_child(kvp_relay_map_t *m, uint64_t engine, uint64_t kvp, int tier,
                             int native, int has_parent, uint64_t parent);
/* 1 with *kvp set to a kvplane identity, 2 with *kvp set to a native one
 * (both marked as recent), or 0 when engine is not mapped. */
int kvp__relay_map_get(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp);
/* A copy of engine in tier went: remaining < 0 drops one reference, else
 * the count becomes remaining (upstream's remaining_copy_counts). Returns
 * -1 when engine is not mapped, else the references left in that tier,
 * with *kvp set (the entry goes when no tier holds a copy any more). */
int kvp__relay_map_drop(kvp_relay_map_t *m, uint64_t engine, int tier, int64_t remaining,
                        uint64_t *kvp);
/* Removes the entry with every copy; 1 with *kvp set when it was there, or 0. */
int kvp__relay_map_take(kvp_relay_map_t *m, uint64_t engine, uint64_t *kvp);
/* The identities with a copy in tier (1..4), written to out (room for
 * kvp__relay_map_size(m) of them), and when parents is not NULL each one's
 * parent to parents (the identity itself for none, as snapshots carry it);
 * returns how many. */
size_t kvp__relay_map_tier(const kvp_relay_map_t *m, int tier, uint64_t *out, uint64_t *parents);
/* One entry as the relay's state file keeps it. */
typedef struct kvp_relay_map_rec_s {
  uint64_t engine, kvp;
  uint16_t copies[KVP__RELAY_MAP_TIERS];
  uint64_t flags; /* KVP__RELAY_REC_NATIVE, KVP__RELAY_REC_PARENT */
  uint64_t parent;
} kvp_relay_map_rec_t;
#define KVP__RELAY_REC_NATIVE 1u
#define KVP__RELAY_REC_PARENT 2u

/* Writes every entry to out (room for kvp__relay_map_size(m)), least
 * recently used first; returns how many. */
size_t kvp__relay_map_export(const kvp_relay_map_t *m, kvp_relay_map_rec_t *out);
/* Adds the records in order (the last one becomes the most recent);
 * returns how many went in (beyond cap the oldest are evicted). */
size_t kvp__relay_map_import(kvp_relay_map_t *m, const kvp_relay_map_rec_t *rec, size_t n);
void kvp__relay_map_clear(kvp_relay_map_t *m);
size_t kvp__relay_map_size(const kvp_relay_map_t *m);

#endif
