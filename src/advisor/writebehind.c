/* Write-behind and the ack state machine; see writebehind.h. */
#include "advisor/writebehind.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <nats/nats.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"

/* --- the ack state machine ------------------------------------------------ */

void kvp__adv_acks_init(kvp__adv_acks_t *a, void (*ack)(void *), void (*release)(void *)) {
  a->pending = a->writing = NULL;
  a->ack = ack;
  a->release = release;
}

kvp__adv_ack_state_t kvp__adv_acks_state(const kvp__adv_acks_t *a) {
  if (a->writing != NULL)
    return a->pending != NULL ? KVP__ACK_WRITING_APPLIED : KVP__ACK_WRITING;
  return a->pending != NULL ? KVP__ACK_APPLIED : KVP__ACK_IDLE;
}

const char *kvp__adv_ack_state_name(kvp__adv_ack_state_t s) {
  static const char *const names[] = {"idle", "applied", "writing", "writing+applied"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

void kvp__adv_acks_applied(kvp__adv_acks_t *a, void *msg) {
  /* Acking the newer message acks the older one too (ack-all). */
  if (a->pending != NULL)
    a->release(a->pending);
  a->pending = msg;
}

void kvp__adv_acks_flush_started(kvp__adv_acks_t *a) {
  assert(a->writing == NULL);
  a->writing = a->pending;
  a->pending = NULL;
}

void kvp__adv_acks_flush_committed(kvp__adv_acks_t *a) {
  if (a->writing != NULL) {
    /* Committed: the server may now forget everything up to here. */
    a->ack(a->writing);
    a->writing = NULL;
  }
}

void kvp__adv_acks_flush_failed(kvp__adv_acks_t *a) {
  if (a->writing == NULL)
    return;
  if (a->pending == NULL)
    a->pending = a->writing;
  else
    a->release(a->writing); /* the newer pending message acks it too */
  a->writing = NULL;
}

void kvp__adv_acks_sync_committed(kvp__adv_acks_t *a) {
  assert(a->writing == NULL);
  if (a->pending != NULL) {
    a->ack(a->pending);
    a->pending = NULL;
  }
}

void kvp__adv_acks_destroy(kvp__adv_acks_t *a) {
  if (a->pending != NULL)
    a->release(a->pending);
  if (a->writing != NULL)
    a->release(a->writing);
  a->pending = a->writing = NULL;
}

/* --- write-behind ------------------------------------------------------------ */

static void ack_msg(void *msg) {
  natsMsg_Ack(msg, NULL);
  natsMsg_Destroy(msg);
}

static void release_msg(void *msg) {
  natsMsg_Destroy(msg);
}

void kvp__adv_wb_init(kvp__adv_wb_t *wb, uv_loop_t *loop, kvp__store_t *st, kvp__index_t *ix,
                      kvp__adv_ingest_t *ing, uint64_t committed_seq) {
  memset(wb, 0, sizeof *wb);
  wb->loop = loop;
  wb->store = st;
  wb->ix = ix;
  wb->ing = ing;
  wb->committed_seq = committed_seq;
  static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                  0.25,  0.5,    1,     2.5,  5,     10};
  kvp__prom_hist_init(&wb->flush_seconds, bounds, sizeof bounds / sizeof bounds[0]);
  for (int i = 0; i < KVP__ADV_MAX_OWNED; i++)
    kvp__adv_acks_init(&wb->acks[i], ack_msg, release_msg);
}

void kvp__adv_wb_set_parts(kvp__adv_wb_t *wb, const kvp__adv_partset_t *parts,
                           const uint64_t *applied, const uint64_t *committed) {
  wb->parts = parts;
  wb->applied = applied;
  for (int i = 0; i < parts->n; i++)
    wb->committed_pos[i] = committed[i];
}

void kvp__adv_wb_slot_moved(kvp__adv_wb_t *wb, int slot, int n, int insert, uint64_t committed) {
  /* Idle and synced: every ack state machine is IDLE, so moving them
   * moves nothing but their callbacks. */
  if (insert) {
    memmove(&wb->committed_pos[slot + 1], &wb->committed_pos[slot],
            (size_t)(n - slot) * sizeof *wb->committed_pos);
    wb->committed_pos[slot] = committed;
  } else {
    memmove(&wb->committed_pos[slot], &wb->committed_pos[slot + 1],
            (size_t)(n - slot - 1) * sizeof *wb->committed_pos);
  }
}

/* Slots with acks: every owned partition, or the one stream. */
static int nslots(const kvp__adv_wb_t *wb) {
  return wb->parts != NULL ? wb->parts->n : 1;
}

void kvp__adv_wb_applied(kvp__adv_wb_t *wb, int slot, void *msg) {
  kvp__adv_acks_applied(&wb->acks[slot], msg);
}

/* The positions of the flush being prepared: each slot's applied one. */
static int set_positions(kvp__adv_wb_t *wb, kvp__store_flush_t *fl) {
  if (wb->parts == NULL || wb->parts->count == 0)
    return 0;
  memcpy(wb->inflight_pos, wb->applied, (size_t)wb->parts->n * sizeof *wb->applied);
  return kvp__store_flush_set_positions(fl, wb->parts->p, wb->inflight_pos, (size_t)wb->parts->n);
}

int kvp__adv_wb_busy(const kvp__adv_wb_t *wb) {
  return wb->inflight != NULL;
}

static void committed(kvp__adv_wb_t *wb, size_t nblocks, uint64_t seq, uint64_t t0) {
  wb->flushes++;
  wb->last_flush_ms = kvp__unix_ms();
  wb->last_flush_blocks = nblocks;
  wb->committed_seq = seq;
  if (wb->parts != NULL)
    memcpy(wb->committed_pos, wb->inflight_pos, (size_t)wb->parts->n * sizeof *wb->inflight_pos);
  double secs = (double)(kvp__now_ns() - t0) / 1e9;
  kvp__prom_hist_observe(&wb->flush_seconds, secs);
  kvp_log_debug("advisor: flush: %zu blocks, sequence %" PRIu64 ", %.1f ms", nblocks, seq,
                secs * 1e3);
}

static void write_work(uv_work_t *req) {
  kvp__adv_wb_t *wb = req->data;
  wb->write_rc = kvp__store_write(wb->store, wb->inflight);
}

static void write_after(uv_work_t *req, int status) {
  kvp__adv_wb_t *wb = req->data;
  if (status == 0 && wb->write_rc == 0) {
    committed(wb, kvp__store_flush_blocks(wb->inflight), wb->inflight_seq, wb->inflight_t0);
    for (int i = 0; i < nslots(wb); i++)
      kvp__adv_acks_flush_committed(&wb->acks[i]);
    if (wb->fresh != NULL)
      kvp__adv_fresh_flush_committed(wb->fresh, wb->last_flush_ms);
    kvp__store_flush_free(wb->inflight);
  } else {
    /* The changes go back to the index; the next flush writes them. */
    wb->flush_errors++;
    kvp__index_rows_restore(wb->ix, kvp__store_flush_rows(wb->inflight));
    kvp__store_flush_free(wb->inflight);
    for (int i = 0; i < nslots(wb); i++)
      kvp__adv_acks_flush_failed(&wb->acks[i]);
    if (wb->fresh != NULL)
      kvp__adv_fresh_flush_failed(wb->fresh);
  }
  wb->inflight = NULL;
  if (wb->on_idle != NULL)
    wb->on_idle(wb->idle_ctx);
}

void kvp__adv_wb_start(kvp__adv_wb_t *wb, uint64_t applied_seq) {
  if (wb->inflight != NULL)
    return;
  kvp__store_worker_t *rows = NULL;
  size_t nrows = 0;
  int rc;
  wb->inflight_t0 = kvp__now_ns();
  kvp__index_rows_t ixrows;
  if ((rc = kvp__adv_ingest_worker_rows(wb->ing, &rows, &nrows)) == 0 &&
      (rc = kvp__index_rows_take(wb->ix, kvp__store_volumes_written(wb->store), &ixrows)) == 0 &&
      (rc = kvp__store_prepare(wb->store, &ixrows, rows, nrows, applied_seq, &wb->inflight)) != 0)
    kvp__index_rows_restore(wb->ix, &ixrows);
  free(rows);
  if (rc == 0 && (rc = set_positions(wb, wb->inflight)) != 0) {
    kvp__index_rows_restore(wb->ix, kvp__store_flush_rows(wb->inflight));
    kvp__store_flush_free(wb->inflight);
  }
  if (rc != 0) {
    wb->flush_errors++;
    wb->inflight = NULL;
    return;
  }
  wb->inflight_seq = applied_seq;
  for (int i = 0; i < nslots(wb); i++)
    kvp__adv_acks_flush_started(&wb->acks[i]);
  if (wb->fresh != NULL)
    kvp__adv_fresh_flush_started(wb->fresh);
  wb->req.data = wb;
  if (uv_queue_work(wb->loop, &wb->req, write_work, write_after) != 0) {
    write_work(&wb->req);
    write_after(&wb->req, 0);
  }
}

int kvp__adv_wb_sync(kvp__adv_wb_t *wb, uint64_t applied_seq) {
  size_t n = 0;
  uint64_t t0 = kvp__now_ns();
  int rc;

  kvp__store_worker_t *rows = NULL;
  size_t nrows = 0;
  assert(wb->inflight == NULL);
  kvp__store_flush_t *fl = NULL;
  kvp__index_rows_t ixrows;
  if ((rc = kvp__adv_ingest_worker_rows(wb->ing, &rows, &nrows)) == 0 &&
      (rc = kvp__index_rows_take(wb->ix, kvp__store_volumes_written(wb->store), &ixrows)) == 0 &&
      (rc = kvp__store_prepare(wb->store, &ixrows, rows, nrows, applied_seq, &fl)) != 0)
    kvp__index_rows_restore(wb->ix, &ixrows);
  free(rows);
  if (rc == 0 && ((rc = set_positions(wb, fl)) != 0 || (rc = kvp__store_write(wb->store, fl)) != 0))
    kvp__index_rows_restore(wb->ix, kvp__store_flush_rows(fl));
  if (fl != NULL)
    n = kvp__store_flush_blocks(fl);
  kvp__store_flush_free(fl);
  if (rc != 0) {
    wb->flush_errors++;
    return rc;
  }
  committed(wb, n, applied_seq, t0);
  for (int i = 0; i < nslots(wb); i++)
    kvp__adv_acks_sync_committed(&wb->acks[i]);
  if (wb->fresh != NULL) {
    kvp__adv_fresh_flush_started(wb->fresh);
    kvp__adv_fresh_flush_committed(wb->fresh, wb->last_flush_ms);
  }
  return 0;
}

void kvp__adv_wb_destroy(kvp__adv_wb_t *wb) {
  for (int i = 0; i < KVP__ADV_MAX_OWNED; i++)
    kvp__adv_acks_destroy(&wb->acks[i]);
}
