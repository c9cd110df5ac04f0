/* A live move's adds and drops (rebalance.c's header, docs/SCALE.md,
 * "Moving a partition"), with their slow steps off the loop thread so the
 * loop goes on answering match and stats queries all along:
 *
 *   start    loop: the dropped partitions leave "owned" (parts_view skips
 *            their slots: no match or stats reply lists them from now on,
 *            so a gathering client takes them from another advisor or
 *            reports them missing, and the merge ignores their rows this
 *            advisor still has in its index); their tiering stops (the
 *            engine is idle here); no flush starts until the move ends
 *   pause    a libuv worker: the fetch threads end (joined; a fetch in
 *            flight waits up to 500 ms for messages)
 *   flush    loop, then the write-behind's own worker: the inbox is
 *            applied, and what was applied is written and acked by the
 *            write-behind, as every flush (kvp__adv_wb_start)
 *   move     a libuv worker, the store's only user until it ends (no flush
 *            runs, the loop never touches the database): per dropped p, in
 *            one transaction the rows of p's workers, the blocks no one
 *            else holds and p's position leave the database, then p's
 *            durable consumer is deleted (JetStream API calls); per added
 *            p, its position is read and its consumer made after it,
 *            outside the slots (kvp__adv_consumer_make)
 *   finish   loop, once the tiering engine is idle too: p's workers leave
 *            the index and the ingest (index work: the index is the loop
 *            thread's only), the slots move, the added ones are listed
 *            under "catching_up" until caught up, the request's tier and
 *            untier are applied, the fetch threads start again, the reply
 *            goes.
 * Nothing reaches the database between the flush and the move, so a kill -9
 * anywhere leaves p's rows and position all there (the flush's position:
 * restarted, the advisor resumes p after it) or all gone (p, still owned
 * by the configuration, is read again from the stream's start). A stop
 * during a move waits for it (kvp__adv_shutdown_inputs). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/advisor_impl.h"
#include "advisor/rebalance.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

enum { PAUSING, FLUSHING, MOVING, DONE, FORGETTING };

/* Index records gone over per slice of the dropped workers' forget: a few
 * ms of loop time each (kvp__index_drop_some). */
#define SLICE_RECORDS 32768

struct kvp__adv_move_s {
  uv_work_t req;
  kvp_advisor_t *adv;
  natsMsg *msg;
  kvp__adv_parts_req_t r;
  int stage;
  uint64_t flush_errors, t0;
  int ndrop, nadd, nmade;
  uint32_t drop_p[KVP__ADV_MAX_OWNED], add_p[KVP__ADV_MAX_OWNED];
  int drop_slot[KVP__ADV_MAX_OWNED], drop_rc[KVP__ADV_MAX_OWNED];
  uint8_t was_tiered[KVP__ADV_MAX_OWNED];
  size_t dropped[KVP__ADV_MAX_OWNED];
  uint64_t add_pos[KVP__ADV_MAX_OWNED];
  kvp__adv_fetch_t made[KVP__ADV_MAX_OWNED];
  uint8_t marks[65536]; /* the index ids of the dropped workers */
  size_t next, forgot_locs;
  uint64_t finish_ns, slice_ns; /* the loop's longest steps: finish, a slice */
  int rc;
  char err[512];
};

typedef struct gone_s {
  uint32_t p, count;
} gone_t;

static int keep_not_in(void *ctx, const char *worker) {
  const gone_t *g = ctx;
  return strcmp(worker, "_advisor") == 0 || kvp_partition_of(worker, g->count) != g->p;
}

/* The move ends: the reply goes, the advisor's stop goes on if it waits. */
static void end(kvp__adv_move_t *m) {
  kvp_advisor_t *adv = m->adv;
  if (m->rc != 0)
    kvp_log_warn("advisor: rebalance request failed: %s", m->err);
  adv->move = NULL;
  if (!adv->stopped) {
    char rerr[256];
    if (kvp__adv_consumer_resume(adv->consumer, rerr, sizeof rerr) != 0) {
      kvp_log_error("advisor: rebalance: the fetch threads do not start again: %s", rerr);
      if (m->rc == 0) {
        snprintf(m->err, sizeof m->err, "%s", rerr);
        m->rc = KVP_ECONN;
      }
    }
  }
  kvp__adv_parts_reply(adv, m->msg, m->rc, m->err);
  natsMsg_Destroy(m->msg);
  int stopped = adv->stopped;
  free(m);
  if (stopped)
    kvp__adv_shutdown_inputs(adv);
}

/* Before anything changed in the database or the slots: the dropped
 * partitions are owned again (and tiered again once they may be). */
static void undo(kvp__adv_move_t *m, int rc, const char *why) {
  kvp_advisor_t *adv = m->adv;
  m->rc = rc;
  snprintf(m->err, sizeof m->err, "%s", why);
  for (int i = 0; i < m->ndrop; i++) {
    adv->leaving[m->drop_slot[i]] = 0;
    if (m->was_tiered[i])
      kvp__adv_tier_soon(adv, m->drop_p[i]);
  }
  end(m);
}

static void move_work(uv_work_t *req) {
  kvp__adv_move_t *m = req->data;
  kvp_advisor_t *adv = m->adv;
  for (int i = 0; i < m->ndrop; i++) {
    gone_t g = {m->drop_p[i], adv->parts.count};
    m->drop_rc[i] =
        kvp__store_drop_workers(adv->store, keep_not_in, &g, &m->drop_p[i], 1, &m->dropped[i]);
    kvp__adv_consumer_retire(adv->consumer, m->drop_slot[i]);
  }
  for (int i = 0; i < m->nadd && m->rc == 0; i++) {
    if (kvp__store_position(adv->store, m->add_p[i], &m->add_pos[i]) != 0) {
      m->rc = KVP_EDB;
      snprintf(m->err, sizeof m->err, "partition %" PRIu32 ": its position cannot be read",
               m->add_p[i]);
    } else if ((m->rc = kvp__adv_consumer_make(adv->consumer, adv->parts.count, m->add_p[i],
                                               m->add_pos[i], adv->db_id, &m->made[i], m->err,
                                               sizeof m->err)) == 0) {
      m->nmade++;
    }
  }
  /* All added or none: the ones made before a failure give up their
   * durable consumers too, which would stay on the server unused. */
  if (m->rc != 0) {
    for (int i = 0; i < m->nmade; i++)
      kvp__adv_consumer_discard(adv->consumer, &m->made[i]);
    m->nmade = 0;
  }
}

static void move_after(uv_work_t *req, int status) {
  kvp__adv_move_t *m = req->data;
  (void)status;
  m->stage = DONE;
  kvp__adv_move_poll(m->adv);
}

static void flushed(void *ctx) {
  kvp__adv_move_t *m = ctx;
  kvp_advisor_t *adv = m->adv;
  adv->wb.on_idle = NULL;
  adv->wb.idle_ctx = NULL;
  if (adv->wb.flush_errors != m->flush_errors) {
    undo(m, KVP_EDB, "the flush before the change failed");
    return;
  }
  if (adv->stopped) {
    undo(m, KVP_ECLOSED, "the advisor is stopping");
    return;
  }
  m->stage = MOVING;
  m->req.data = m;
  if (uv_queue_work(&adv->loop, &m->req, move_work, move_after) != 0) {
    move_work(&m->req);
    move_after(&m->req, 0);
  }
}

static void pause_work(uv_work_t *req) {
  kvp__adv_move_t *m = req->data;
  kvp__adv_consumer_pause(m->adv->consumer);
}

static void pause_after(uv_work_t *req, int status) {
  kvp__adv_move_t *m = req->data;
  kvp_advisor_t *adv = m->adv;
  (void)status;
  if (adv->stopped) {
    undo(m, KVP_ECLOSED, "the advisor is stopping");
    return;
  }
  /* Quiet: no fetch thread pushes; everything pushed is applied, then
   * written and acked by one flush, so the slots can move after it. */
  kvp__adv_drain(adv);
  m->stage = FLUSHING;
  m->flush_errors = adv->wb.flush_errors;
  adv->wb.on_idle = flushed;
  adv->wb.idle_ctx = m;
  kvp__adv_wb_start(&adv->wb, adv->applied_seq);
  if (m->stage == FLUSHING && !kvp__adv_wb_busy(&adv->wb)) {
    adv->wb.on_idle = NULL; /* not started: nothing was taken */
    adv->wb.idle_ctx = NULL;
    undo(m, KVP_EDB, "the flush before the change failed");
  }
}

int kvp__adv_move_start(kvp_advisor_t *adv, natsMsg *msg, const kvp__adv_parts_req_t *r) {
  kvp__adv_partset_t *ps = &adv->parts;
  kvp__adv_move_t *m = calloc(1, sizeof *m);
  if (m == NULL)
    return KVP_ENOMEM;
  m->adv = adv;
  m->r = *r;
  m->t0 = kvp__now_ns();
  for (int i = 0; i < r->ndrop; i++) {
    int slot = kvp__adv_partset_slot(ps, r->drop[i]);
    if (slot >= 0) {
      m->drop_slot[m->ndrop] = slot;
      m->drop_p[m->ndrop++] = r->drop[i];
    }
  }
  for (int i = 0; i < r->nadd; i++)
    if (kvp__adv_partset_slot(ps, r->add[i]) < 0)
      m->add_p[m->nadd++] = r->add[i];
  if (m->ndrop == 0 && m->nadd == 0) {
    free(m);
    return KVP_ENOENT; /* nothing to move */
  }
  m->msg = msg;
  uint32_t t[KVP_PARTITIONS_MAX];
  size_t nt = adv->tier != NULL ? kvp__tier_engine_tiered(adv->tier, t, KVP_PARTITIONS_MAX) : 0;
  for (int i = 0; i < m->ndrop; i++) {
    uint32_t p = m->drop_p[i];
    char err[256];
    adv->leaving[m->drop_slot[i]] = 1;
    for (size_t k = 0; k < nt && k < KVP_PARTITIONS_MAX; k++)
      m->was_tiered[i] |= t[k] == p;
    for (int k = 0; k < adv->ntier_wait; k++)
      m->was_tiered[i] |= adv->tier_wait[k] == p;
    kvp__adv_tier_not_soon(adv, p); /* added and dropped before it caught up */
    if (adv->tier != NULL && kvp__tier_engine_partition(adv->tier, p, 0, err, sizeof err) != 0)
      kvp_log_warn("advisor: rebalance: %s", err);
  }
  kvp_log_info("advisor: rebalance: %d partition(s) to drop, %d to add; queries go on being "
               "answered meanwhile",
               m->ndrop, m->nadd);
  adv->move = m;
  m->stage = PAUSING;
  m->req.data = m;
  if (uv_queue_work(&adv->loop, &m->req, pause_work, pause_after) != 0) {
    pause_work(&m->req);
    pause_after(&m->req, 0);
  }
  return 0;
}

static void forget_slice(uv_timer_t *h) {
  kvp_advisor_t *adv = h->data;
  kvp__adv_move_t *m = adv->move;
  /* Every tier (0xff): the workers leave the index. Not as changes for
   * the next flush: their rows left the database in the move's
   * transaction (written again, 937,500 deletes took the loop 0.3 s to
   * prepare in tests/scale/test_scale_move.c). Tracking is on again before
   * anything else runs on the loop. */
  uint64_t t0 = kvp__now_ns();
  kvp__index_track_dirty(adv->ix, 0);
  int done = kvp__index_drop_some(adv->ix, m->marks, sizeof m->marks, 0xffu, &m->next,
                                  SLICE_RECORDS, &m->forgot_locs);
  kvp__index_track_dirty(adv->ix, 1);
  if (kvp__now_ns() - t0 > m->slice_ns)
    m->slice_ns = kvp__now_ns() - t0;
  if (!done) {
    /* 1 ms, not 0: a timer started again at 0 from its own callback runs
     * again before the loop polls (libuv 1.4x's uv__run_timers), which
     * would make the slices one long step. */
    uv_timer_start(h, forget_slice, 1, 0);
    return;
  }
  kvp_log_info("advisor: rebalance: done in %.1f ms (%zu locations left the index); the loop's "
               "longest steps: %.1f ms (finish), %.1f ms (a slice of the index's)",
               (double)(kvp__now_ns() - m->t0) / 1e6, m->forgot_locs, (double)m->finish_ns / 1e6,
               (double)m->slice_ns / 1e6);
  end(m);
}

static void finish(kvp__adv_move_t *m) {
  kvp_advisor_t *adv = m->adv;
  uint64_t t0 = kvp__now_ns();
  kvp__adv_partset_t *ps = &adv->parts;
  memset(adv->leaving, 0, sizeof adv->leaving);
  for (int i = 0; i < m->ndrop; i++) {
    uint32_t p = m->drop_p[i];
    int slot = kvp__adv_partset_slot(ps, p);
    gone_t g = {p, ps->count};
    if (m->drop_rc[i] != 0)
      kvp_log_warn("advisor: rebalance: the rows of partition %" PRIu32 " were not dropped "
                   "(%s); they go at the next start",
                   p, kvp_strerror(m->drop_rc[i]));
    size_t forgot = kvp__adv_ingest_forget(adv->ing, keep_not_in, &g, m->marks, sizeof m->marks);
    kvp__adv_consumer_remove(adv->consumer, slot);
    kvp__adv_wb_slot_moved(&adv->wb, slot, ps->n, 0, 0);
    memmove(&ps->p[slot], &ps->p[slot + 1], (size_t)(ps->n - slot - 1) * sizeof *ps->p);
    memmove(&adv->applied_pos[slot], &adv->applied_pos[slot + 1],
            (size_t)(ps->n - slot - 1) * sizeof *adv->applied_pos);
    ps->n--;
    kvp_log_info("advisor: rebalance: partition %" PRIu32 " dropped (%zu workers' rows, %zu "
                 "workers' state; their locations leave the index in slices)",
                 p, m->dropped[i], forgot);
  }
  for (int i = 0; i < m->nmade; i++) {
    uint32_t p = m->add_p[i];
    uint64_t pos = m->add_pos[i];
    int slot = 0;
    while (slot < ps->n && ps->p[slot] < p)
      slot++;
    if (m->rc == 0 && (m->rc = kvp__adv_consumer_insert(adv->consumer, slot, &m->made[i], m->err,
                                                        sizeof m->err)) == 0) {
      kvp__adv_wb_slot_moved(&adv->wb, slot, ps->n, 1, pos);
      memmove(&ps->p[slot + 1], &ps->p[slot], (size_t)(ps->n - slot) * sizeof *ps->p);
      memmove(&adv->applied_pos[slot + 1], &adv->applied_pos[slot],
              (size_t)(ps->n - slot) * sizeof *adv->applied_pos);
      ps->p[slot] = p;
      adv->applied_pos[slot] = pos;
      ps->n++;
      /* Tiered once caught up (kvp__adv_parts_poll), when this advisor
       * tiers every partition it owns. */
      if (adv->tier != NULL && adv->tier_all)
        kvp__adv_tier_soon(adv, p);
      kvp_log_info("advisor: rebalance: partition %" PRIu32 " added, consumed after stream "
                   "sequence %" PRIu64,
                   p, pos);
    } else {
      natsSubscription_Destroy(m->made[i].sub); /* not placed: its input goes */
    }
  }
  if (m->rc == 0 && adv->tier != NULL)
    m->rc = kvp__adv_apply_tiering(adv, &m->r, m->err, sizeof m->err);
  adv->applied_seq = 0;
  for (int i = 0; i < ps->n; i++)
    adv->applied_seq += adv->applied_pos[i];
  /* The dropped workers' locations leave the index in slices, the loop
   * answering between them: no reply lists their partitions any more. The
   * fetch threads start again and the reply goes once they are gone (a
   * partition added back would find its workers' new locations dropped). */
  m->stage = FORGETTING;
  m->finish_ns = kvp__now_ns() - t0;
  uv_timer_start(&adv->move_timer, forget_slice, 0, 0);
}

void kvp__adv_move_poll(kvp_advisor_t *adv) {
  kvp__adv_move_t *m = adv->move;
  if (m != NULL && m->stage == DONE && (adv->tier == NULL || !kvp__tier_engine_busy(adv->tier)))
    finish(m);
}
