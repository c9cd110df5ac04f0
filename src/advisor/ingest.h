/* Advisor ingest: applies decoded event batches to the index (DESIGN.md,
 * "Advisor").
 *
 * Per (worker, dp rank) it tracks the epoch and the last applied event id:
 *   - events with an id at or below the last applied one are duplicates
 *     (JetStream redelivery, a replay) and are skipped;
 *   - a batch whose first id jumps past last + 1, or that carries
 *     dropped_events > 0, is a gap: the batch is still applied, and a resync
 *     is requested (the worker answers with a Snapshot per tier);
 *   - the first batch of a worker or epoch that does not start at event id 1
 *     means the advisor does not know the worker's state: resync as well;
 *   - a higher epoch means the worker restarted: its G1/G2 locations from
 *     the old epoch are dropped (G3/G4 blocks outlive the process); a lower
 *     epoch is a straggler from before the restart and is skipped. Epochs
 *     are compared as numbers, so publishers must make them increase (the
 *     publisher uses its start time);
 *   - a worker silent for longer than the heartbeat timeout is marked down
 *     and its G1/G2 locations are dropped (the time and the number are kept
 *     in its state for the workers table); when it speaks again they are
 *     cleared and a resync is requested because its G1/G2 set is no longer
 *     known.
 * The events of this process's own tiering worker in its current epoch
 * (kvp__index_set_source) are followed by id but not applied: the engine
 * applied them as it announced them.
 * Snapshot chunks (snapshot_id, chunk 0..n, last) are staged and replace the
 * worker's set for that tier when the last chunk arrives; a chunk out of
 * order discards the staging and asks for a new resync.
 *
 * Not thread-safe: the advisor's loop thread owns it. */
#ifndef KVP_ADVISOR_INGEST_H
#define KVP_ADVISOR_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "store/store.h"
#include "kvplane/event.h"
#include "kvplane/wire.h"

typedef struct kvp__adv_ingest_s kvp__adv_ingest_t;

/* Called when a worker must resend its state. reason is "gap", "unknown",
 * "down", "epoch" or "snapshot". Runs on the caller's thread, inside apply
 * or tick. */
typedef void (*kvp__adv_resync_fn)(void *ctx, const char *worker, uint32_t dp_rank, uint64_t epoch,
                                   const char *reason);

typedef struct kvp__adv_ingest_opts_s {
  uint64_t heartbeat_timeout_ms; /* 0: workers are never marked down */
  uint64_t resync_retry_ms;      /* resend an unanswered resync after this */
  kvp__adv_resync_fn resync;     /* may be NULL */
  void *resync_ctx;
  /* Told of each applied Accessed event's hashes and tier (the tiering
   * engine prefetches behind G4 hits); may be NULL. Same thread as resync. */
  void (*accessed)(void *ctx, int tier, const uint64_t *hashes, size_t n);
  void *accessed_ctx;
  /* A partitioned advisor: the batches of worker _advisor (an unpartitioned
   * tiering advisor of the namespace, whose events the servers' mapping
   * puts in a partition's stream) are counted and ignored. Its objects are
   * under the namespace's own key namespace, which no partitioned worker
   * reads and a partitioned advisor sweeps (docs/SCALE.md, "Switching a
   * tiering deployment to partitions"): no router is sent to them.
   * Also the [partitions] count: a message on kvplane.pev.<ns>.<p>.<worker>
   * whose worker is not in partition p by this count (kvp_partition_of) is
   * counted as mispartitioned and skipped, with an error naming both: the
   * servers' mapping was made for another count (0: not partitioned). */
  uint32_t partitions;
} kvp__adv_ingest_opts_t;

/* Counters, all monotonic. */
typedef struct kvp__adv_ingest_counters_s {
  uint64_t messages; /* messages handed to kvp__adv_ingest_message */
  uint64_t batches;  /* batches applied (heartbeats included) */
  uint64_t heartbeats;
  uint64_t events;        /* events applied */
  uint64_t block_events;  /* hashes in applied events */
  uint64_t malformed;     /* messages that failed to decode */
  uint64_t oversized;     /* of which: over the size limits */
  uint64_t bad_events;    /* decoded events that could not be applied */
  uint64_t duplicates;    /* events skipped as already applied */
  uint64_t stale;         /* batches from an older epoch */
  uint64_t unpartitioned; /* batches of an unpartitioned _advisor ignored (opts.partitions) */
  uint64_t own;           /* events of this process's tiering engine, applied at the source */
  uint64_t gaps;
  uint64_t resyncs;         /* resync requests sent */
  uint64_t snapshots;       /* snapshots completed */
  uint64_t epochs;          /* worker restarts seen */
  uint64_t downs;           /* workers marked down */
  uint64_t unknown_removes; /* removes of blocks or locations not indexed */
  uint64_t foreign; /* messages on a subject outside kvplane.ev.<ns>.<worker> (not decoded) */
  uint64_t mispartitioned; /* messages whose partition by the servers' mapping is not the
                            * worker's by opts.partitions (not decoded) */
  uint64_t spoofed;        /* batches whose worker or namespace disagrees with their subject */
  uint64_t by_type[6];     /* events applied, by KVP_EV_* type ([0] unused); they sum to events */
} kvp__adv_ingest_counters_t;

/* The persistent part of a worker's state (the store's workers table). */
typedef struct kvp__adv_worker_state_s {
  uint16_t id; /* index worker id */
  uint64_t epoch;
  uint64_t last_event_id;
  uint64_t last_seen_ms;
  int known; /* last_event_id is meaningful */
  int down;
  /* While down: when the heartbeat timeout marked it down (Unix ms) and how
   * many G1/G2 locations that dropped; both 0 while it is up. */
  uint64_t down_at_ms;
  uint64_t locations_dropped;
} kvp__adv_worker_state_t;

/* Live rebalancing: every worker for which keep(ctx, name) returns 0
 * leaves the ingest's state and the index. Its index id is marked in
 * marks (ids below nmarks) for the caller to drop its locations in slices
 * (kvp__index_drop_some, every tier); an id past nmarks, or every one
 * with marks NULL, has its locations dropped at once (as changes the next
 * flush writes). Returns the number of workers with state that were
 * forgotten. */
size_t kvp__adv_ingest_forget(kvp__adv_ingest_t *ing, int (*keep)(void *ctx, const char *worker),
                              void *ctx, uint8_t *marks, size_t nmarks);

/* Creates an ingest over ix (borrowed; must outlive it). Returns 0 or
 * KVP_ENOMEM. */
int kvp__adv_ingest_create(kvp__index_t *ix, const kvp__adv_ingest_opts_t *opts,
                           kvp__adv_ingest_t **out);

/* Frees it; NULL is accepted. */
void kvp__adv_ingest_destroy(kvp__adv_ingest_t *ing);

/* Applies one decoded batch at time now_ms. Returns 0, KVP_EINVAL for a
 * batch without a valid worker id, or KVP_ENOMEM; bad events inside a batch
 * are counted and skipped. */
int kvp__adv_ingest_apply(kvp__adv_ingest_t *ing, const kvp_batch_t *b, uint64_t now_ms);

/* Decodes len bytes with lim and applies them. A message that does not
 * decode is counted (malformed, oversized) and its code returned; it
 * changes nothing. */
int kvp__adv_ingest_message(kvp__adv_ingest_t *ing, const uint8_t *buf, size_t len,
                            const kvp_wire_limits_t *lim, uint64_t now_ms);

/* The same for a message that arrived on subject: the subject must be
 * kvplane.ev.<ns>.<worker> of this advisor's namespace ns (else it is
 * counted as foreign, not decoded, and KVP_EPROTO returned), and the batch
 * must name that worker and, if it carries one, that namespace (else it is
 * counted as spoofed, not applied, and KVP_EAUTH returned). The identity of
 * a sender is its subject, which NATS permissions restrict; the payload is
 * only believed when it agrees. */
int kvp__adv_ingest_message_on(kvp__adv_ingest_t *ing, const char *subject, const char *ns,
                               const uint8_t *buf, size_t len, const kvp_wire_limits_t *lim,
                               uint64_t now_ms);

/* Periodic work: marks silent workers down, resends unanswered resyncs. */
void kvp__adv_ingest_tick(kvp__adv_ingest_t *ing, uint64_t now_ms);

const kvp__adv_ingest_counters_t *kvp__adv_ingest_counters(const kvp__adv_ingest_t *ing);

/* The timestamp_ms of the last batch a message call applied (returned 0);
 * 0 before any. */
uint64_t kvp__adv_ingest_last_batch_ms(const kvp__adv_ingest_t *ing);

/* Worker states, for the store: count, and the i-th one (0 <= i < count). */
size_t kvp__adv_ingest_worker_count(const kvp__adv_ingest_t *ing);
int kvp__adv_ingest_worker_get(const kvp__adv_ingest_t *ing, size_t i, kvp__adv_worker_state_t *st);

/* Restores a worker's state loaded from the store. Returns 0 or KVP_ENOMEM. */
int kvp__adv_ingest_worker_set(kvp__adv_ingest_t *ing, const kvp__adv_worker_state_t *st);

/* The workers table's rows for a store flush: *rows (malloc'd, the caller
 * frees it; NULL when *n is 0) gets one row per known worker, its name
 * borrowed from the index. Returns 0 or KVP_ENOMEM. */
int kvp__adv_ingest_worker_rows(const kvp__adv_ingest_t *ing, kvp__store_worker_t **rows,
                                size_t *n);

/* A kvp__store_worker_fn for kvp__store_load (ctx: the ingest): interns the
 * row's worker in the index and restores its state. A row whose name the
 * index refuses is skipped. Returns 0 or KVP_ENOMEM. */
int kvp__adv_ingest_load_worker(void *ctx, const kvp__store_worker_t *w);

/* Number of workers currently up. */
size_t kvp__adv_ingest_workers_up(const kvp__adv_ingest_t *ing);

#endif
