/* Advisor queries (kvplane.api.<ns>.match and .stats): request bytes in,
 * JSON reply out. Formats are documented in include/kvplane/client.h. */
#ifndef KVP_ADVISOR_API_H
#define KVP_ADVISOR_API_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "kvplane/client.h"

/* Parses a match request into *hashes (malloc'd, caller frees) and *n.
 * Returns 0, KVP_EPROTO (with err set) or KVP_ETOOBIG. */
int kvp__adv_api_parse_match(const void *data, size_t len, uint64_t **hashes, size_t *n, char *err,
                             size_t errlen);

/* Where an answer comes from, carried by match and stats replies so that a
 * client gathering the answers of several advisors (scatter-gather) knows
 * which partitions each covers and how fresh it is:
 *   "partitions": {"count": C, "owned": [p, ...], "positions": [seq, ...]}
 * count 0: not partitioned (owned [0], the one stream's position). */
typedef struct kvp__adv_api_where_s {
  uint32_t count;
  int n;
  const uint32_t *owned;     /* n */
  const uint64_t *positions; /* n: last applied stream sequence per owned partition */
  const char *advisor;       /* the answering advisor's consumer name */
  int ready;                 /* caught up with the streams since start */
  /* Partitions added by a live rebalance and still catching up: not in
   * owned (the answer does not cover them yet), listed as "catching_up"
   * in "partitions" with the messages they wait for. */
  const uint32_t *catching;
  const uint64_t *behind;
  int ncatching;
  uint64_t ready_ms; /* how long that took, ms after start */
} kvp__adv_api_where_t;

/* Adds "partitions" (and "advisor") to the reply object o; no-op when w
 * is NULL. */
void kvp__adv_api_add_where(void *o, const kvp__adv_api_where_t *w);

/* Answers a match request; *reply is a malloc'd NUL-terminated JSON text
 * (an {"error": ...} object for a bad request). Returns 0 or KVP_ENOMEM. */
int kvp__adv_api_match(const kvp__index_t *ix, const void *data, size_t len, char **reply);

/* The same with w (may be NULL) in the reply. */
int kvp__adv_api_match_at(const kvp__index_t *ix, const kvp__adv_api_where_t *w, const void *data,
                          size_t len, char **reply);

/* Figures the stats reply carries beyond the index and ingest counters. */
typedef struct kvp__adv_api_extra_s {
  const char *ns;
  const char *mode;
  uint64_t stream_seq;    /* last applied */
  uint64_t committed_seq; /* last committed to the database */
  uint64_t flushes;
  uint64_t flush_errors;
  uint64_t last_flush_ms; /* Unix ms */
  uint64_t last_flush_blocks;
  uint64_t queue_dropped;
  size_t dirty;
  uint64_t history_dropped; /* tier_history samples lost (store.h) */
  uint64_t uptime_ms;
  uint64_t apply_lag_ms, apply_lag_max_ms; /* freshness.h */
  uint64_t flush_lag_ms, flush_lag_max_ms;
  uint64_t pending_ms;
  /* The index's cap (cap.h) and the database load at start. */
  uint64_t max_memory, max_locations, memory_used;
  int64_t headroom_bytes, headroom_locations;
  uint64_t evicted, evict_rounds, load_ms;
  const struct kvp__tier_stats_s *tier; /* NULL without tiering */
  const struct kvp__tier_vol_stats_s *tier_vols;
  size_t ntier_vols;
  double high_watermark, low_watermark;
  const uint32_t *tiered; /* partitioned: the partitions tiered here ("tiering.partitions") */
  size_t ntiered;
  const kvp__adv_api_where_t *where; /* may be NULL */
  /* Partitioned with tiering: the tiering leases wanted here, a JSON
   * array ("tiering.leases", lease.h) taken by the reply; NULL: none. */
  struct json_t *leases;
  int leases_held;
  /* Partitioned with tiering leases: the namespace's lease (key "all")
   * and what its holder deleted under <ns> ("tiering.legacy");
   * ns_lease_holder NULL: not partitioned, or no leases. */
  int ns_lease;
  const char *ns_lease_holder;
} kvp__adv_api_extra_t;

/* The stats reply, malloc'd JSON. Returns 0 or KVP_ENOMEM. */
int kvp__adv_api_stats(const kvp__index_t *ix, const kvp__adv_ingest_t *ing,
                       const kvp__adv_api_extra_t *x, char **reply);

#endif
