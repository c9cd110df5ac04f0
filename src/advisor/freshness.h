/* Freshness: how far the advisor's view is behind the workers, measured from
 * each batch's timestamp (set by the publisher when it emits the batch) to
 * the moment the batch was applied to the index (answerable by match) and
 * to the moment the flush holding its changes committed in SQLite.
 *
 * Clocks: batch timestamps are the worker's wall clock, so across machines
 * the figures include the clock offset; a negative lag (a worker clock
 * ahead) counts as 0.
 *
 * An observer (tests and kvp-bench pipeline) may be told of every applied
 * batch and every committed flush; flushes are identified by the count of
 * batches applied when they started, so a batch numbered n is in SQLite once
 * a committed flush reports a mark >= n.
 *
 * Threads: the advisor's loop thread only. */
#ifndef KVP_ADVISOR_FRESHNESS_H
#define KVP_ADVISOR_FRESHNESS_H

#include <stdint.h>

#include "advisor/advisor.h"

typedef struct kvp__adv_observer_s {
  /* Batch number n (1, 2, ...) of block_events hashes, emitted at batch_ms,
   * was applied at now_ms. */
  void (*applied)(void *ctx, uint64_t n, uint64_t batch_ms, uint64_t now_ms, uint64_t block_events);
  /* Every batch numbered <= mark is committed in SQLite as of now_ms. */
  void (*committed)(void *ctx, uint64_t mark, uint64_t now_ms);
  void *ctx;
} kvp__adv_observer_t;

typedef struct kvp__adv_fresh_s {
  uint64_t batches;      /* batches applied so far (the mark) */
  uint64_t apply_lag_ms; /* of the last applied batch */
  uint64_t apply_lag_max_ms;
  uint64_t flush_lag_ms; /* commit time minus the oldest batch of the last flush */
  uint64_t flush_lag_max_ms;
  uint64_t unflushed_oldest_ms; /* emit time of the oldest batch not in a flush; 0: none */
  uint64_t inflight_oldest_ms;  /* the same for the running flush */
  uint64_t inflight_mark;
  kvp__adv_observer_t obs; /* callbacks may be NULL */
} kvp__adv_fresh_t;

/* Before kvp_advisor_run (the observer then runs on the loop thread): tells
 * obs of every applied batch and committed flush, for tests and kvp-bench
 * pipeline. */
void kvp__advisor_observe(kvp_advisor_t *adv, const kvp__adv_observer_t *obs);

/* A batch emitted at batch_ms with block_events hashes was applied at now_ms. */
void kvp__adv_fresh_applied(kvp__adv_fresh_t *f, uint64_t batch_ms, uint64_t now_ms,
                            uint64_t block_events);

/* A flush took every change applied so far. */
void kvp__adv_fresh_flush_started(kvp__adv_fresh_t *f);

/* The flush that started last committed at now_ms. */
void kvp__adv_fresh_flush_committed(kvp__adv_fresh_t *f, uint64_t now_ms);

/* The flush that started last failed: its batches are unflushed again. */
void kvp__adv_fresh_flush_failed(kvp__adv_fresh_t *f);

/* How long the oldest batch not yet committed in SQLite (applied, or in the
 * running flush) has waited at now_ms; 0 when every applied batch is
 * committed. The SQLite lag an operator sees right now. */
uint64_t kvp__adv_fresh_pending_ms(const kvp__adv_fresh_t *f, uint64_t now_ms);

#endif
