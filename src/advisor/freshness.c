/* Freshness figures of the advisor (see freshness.h). */
#include "advisor/freshness.h"

static uint64_t lag(uint64_t from_ms, uint64_t to_ms) {
  return to_ms > from_ms ? to_ms - from_ms : 0;
}

static uint64_t oldest(uint64_t a, uint64_t b) {
  if (a == 0)
    return b;
  if (b == 0)
    return a;
  return a < b ? a : b;
}

void kvp__adv_fresh_applied(kvp__adv_fresh_t *f, uint64_t batch_ms, uint64_t now_ms,
                            uint64_t block_events) {
  f->batches++;
  /* A batch without a timestamp (0) is not measured; one from the future
   * counts from now. */
  if (batch_ms != 0) {
    f->apply_lag_ms = lag(batch_ms, now_ms);
    if (f->apply_lag_ms > f->apply_lag_max_ms)
      f->apply_lag_max_ms = f->apply_lag_ms;
    f->unflushed_oldest_ms = oldest(f->unflushed_oldest_ms, batch_ms < now_ms ? batch_ms : now_ms);
  }
  if (f->obs.applied != NULL)
    f->obs.applied(f->obs.ctx, f->batches, batch_ms, now_ms, block_events);
}

void kvp__adv_fresh_flush_started(kvp__adv_fresh_t *f) {
  f->inflight_oldest_ms = f->unflushed_oldest_ms;
  f->inflight_mark = f->batches;
  f->unflushed_oldest_ms = 0;
}

void kvp__adv_fresh_flush_committed(kvp__adv_fresh_t *f, uint64_t now_ms) {
  if (f->inflight_oldest_ms != 0) {
    f->flush_lag_ms = lag(f->inflight_oldest_ms, now_ms);
    if (f->flush_lag_ms > f->flush_lag_max_ms)
      f->flush_lag_max_ms = f->flush_lag_ms;
  }
  f->inflight_oldest_ms = 0;
  if (f->obs.committed != NULL)
    f->obs.committed(f->obs.ctx, f->inflight_mark, now_ms);
}

void kvp__adv_fresh_flush_failed(kvp__adv_fresh_t *f) {
  f->unflushed_oldest_ms = oldest(f->unflushed_oldest_ms, f->inflight_oldest_ms);
  f->inflight_oldest_ms = 0;
}

uint64_t kvp__adv_fresh_pending_ms(const kvp__adv_fresh_t *f, uint64_t now_ms) {
  uint64_t o = oldest(f->unflushed_oldest_ms, f->inflight_oldest_ms);
  return o ? lag(o, now_ms) : 0;
}
