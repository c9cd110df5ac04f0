/* KV events as C structs, and the event-sink interface (DESIGN.md, "Events
 * and wire format").
 *
 * The block manager emits kvp_event_t values through a kvp_event_sink_t; the
 * publisher is one such sink, a test recorder is another. The wire codec
 * (wire.h) turns batches of these events into kvplane.v1.EventBatch bytes and
 * back.
 */
#ifndef KVPLANE_EVENT_H
#define KVPLANE_EVENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tiers. Values are the wire values of kvplane.v1.Tier. */
typedef enum kvp_tier_e {
  KVP_TIER_ALL = 0, /* only in AllBlocksCleared: every tier */
  KVP_TIER_G1 = 1,  /* device memory */
  KVP_TIER_G2 = 2,  /* host memory */
  KVP_TIER_G3 = 3,  /* local or pooled SSD volume */
  KVP_TIER_G4 = 4,  /* remote blob store */
} kvp_tier_t;

#define KVP_TIER_MAX 4

/* "G1".."G4", "ALL", or "?" for anything else. */
const char *kvp_tier_name(int tier);

typedef enum kvp_event_type_e {
  KVP_EV_STORED = 1,
  KVP_EV_REMOVED = 2,
  KVP_EV_ACCESSED = 3,
  KVP_EV_CLEARED = 4,
  KVP_EV_SNAPSHOT = 5,
} kvp_event_type_t;

/* "stored", "removed", ... or "?". */
const char *kvp_event_type_name(int type);

/* One event. Pointers are borrowed: a sink that keeps an event beyond its
 * emit call copies what it needs. Which fields matter depends on type:
 *   STORED:   tier, volume, has_parent/parent_hash, hashes, block_tokens,
 *             block_bytes, lora_id, token_ids (optional, may be NULL),
 *             engine_native
 *   REMOVED:  tier, volume, hashes
 *   ACCESSED: tier, hashes, hit_counts (NULL = one hit each)
 *   CLEARED:  tier (KVP_TIER_ALL = every tier)
 *   SNAPSHOT: tier, volume, snapshot_id, chunk, last, hashes, parent_hashes
 *             (NULL, or parallel to hashes; an entry equal to its own hash
 *             means "no parent"), block_tokens, block_bytes
 */
typedef struct kvp_event_s {
  uint64_t event_id;  /* assigned by the publisher; 0 when not yet assigned */
  int type;           /* kvp_event_type_t */
  int tier;           /* kvp_tier_t */
  const char *volume; /* NULL or "" for G1/G2 */
  int has_parent;
  uint64_t parent_hash;
  const uint64_t *hashes;
  size_t nhashes;
  const uint32_t *hit_counts;
  const uint64_t *parent_hashes;
  uint32_t block_tokens;
  uint64_t block_bytes;
  int32_t lora_id;
  int engine_native; /* STORED: hashes are an engine's own (kvplane-relay), not kvplane's */
  const uint32_t *token_ids;
  size_t ntoken_ids;
  uint64_t snapshot_id;
  uint32_t chunk;
  int last;
} kvp_event_t;

/* A batch of events from one worker (kvplane.v1.EventBatch). */
typedef struct kvp_batch_s {
  const char *ns;        /* namespace; may be NULL */
  const char *worker_id; /* [A-Za-z0-9_-]+ */
  uint32_t dp_rank;
  uint64_t epoch;
  const char *model; /* may be NULL */
  uint64_t first_event_id;
  uint64_t timestamp_ms;
  uint64_t dropped_events; /* events lost before this batch (gap marker) */
  const kvp_event_t *events;
  size_t nevents; /* 0 = heartbeat */
} kvp_batch_t;

/* Where events go. emit returns 0, or a negative KVP_E* code that the emitter
 * passes back to its caller (a full publisher queue in drop mode returns
 * KVP_EOVERFLOW, for example). emit may be called from the thread that owns
 * the emitter only; a sink that must be thread-safe says so. */
typedef struct kvp_event_sink_s {
  int (*emit)(void *ctx, const kvp_event_t *ev);
  void *ctx;
} kvp_event_sink_t;

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_EVENT_H */
