/* The tiering engine's job (engine_impl.h): the moves' I/O and journal on
 * libuv's thread pool, their completion back on the loop thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"
#include "store/journal.h"

/* --- the job (thread pool) --------------------------------------------------- */

/* Reads block hash from v into *buf (grown as needed), verified. */
static int read_block(kvp_volume_t *v, const char *ns, uint64_t hash, void **buf, size_t *cap,
                      kvp_frame_t *meta, char *err, size_t errlen) {
  int rc = kvp_volume_get_block(v, ns, hash, meta, *buf, *cap, err, errlen);
  if (rc == KVP_ETOOBIG) {
    void *p = realloc(*buf, (size_t)meta->payload_len);
    if (p == NULL)
      return KVP_ENOMEM;
    *buf = p;
    *cap = (size_t)meta->payload_len;
    rc = kvp_volume_get_block(v, ns, hash, meta, *buf, *cap, err, errlen);
  }
  return rc;
}

/* The I/O of one op; the journal is written around it by kvp__tier_job_work. */
static void do_io(kvp__tier_engine_t *e, op_t *o, void **a, size_t *acap, void **b, size_t *bcap) {
  vol_t *from = &e->vols[o->from], *to = kvp__tier_is_copy(o->kind) ? &e->vols[o->to] : NULL;
  kvp_frame_t m, back;

  /* A volume that went offline in this job is not tried again in it: one
   * failure, not one per move (the loop re-checks it each round). */
  const vol_t *off = __atomic_load_n(&from->offline_job, __ATOMIC_RELAXED)       ? from
                     : to && __atomic_load_n(&to->offline_job, __ATOMIC_RELAXED) ? to
                                                                                 : NULL;
  if (off != NULL) {
    o->rc = KVP_EOFFLINE;
    o->skipped = 1;
    o->blame = (uint32_t)(off - e->vols);
    snprintf(o->err, sizeof o->err, "skipped: volume %s is offline", off->name);
    return;
  }
  o->blame = o->from;
  if (o->kind == OP_SCRUB) {
    kvp__tier_scrub_list(e, o);
    return;
  }
  if (o->kind == OP_COMPACT) {
    kvp__tier_compact_run(e, o);
    return;
  }
  if (o->kind < 0 || o->kind == KVP__TIER_EVICT) {
    o->rc = kvp_volume_delete(from->v, e->ns, o->hash, o->err, sizeof o->err);
    if (o->rc == KVP_ENOENT)
      o->rc = 0; /* gone already: the goal */
    if (o->rc == KVP_EOFFLINE)
      __atomic_store_n(&from->offline_job, 1, __ATOMIC_RELAXED);
    return;
  }
  o->rc = read_block(from->v, e->ns, o->hash, a, acap, &m, o->err, sizeof o->err);
  o->src_missing = o->rc == KVP_ENOENT;
  if (o->rc == KVP_ECORRUPT) {
    /* Quarantine, once: the bad copy goes, so that nothing serves or plans
     * it again (the loop drops its location). */
    char why[256], del[256];
    snprintf(why, sizeof why, "%s", o->err);
    int drc = kvp_volume_delete(from->v, e->ns, o->hash, del, sizeof del);
    snprintf(o->err, sizeof o->err, "quarantined: %.160s%s%.60s", why,
             drc != 0 && drc != KVP_ENOENT ? "; its delete failed: " : "",
             drc != 0 && drc != KVP_ENOENT ? del : "");
    o->quarantined = 1;
    return;
  }
  if (o->rc == 0) {
    o->blame = o->to;
    o->rc = kvp_volume_put_block(to->v, e->ns, &m, *a, o->err, sizeof o->err);
  }
  /* Committed means the destination's frame was read back and verified. */
  if (o->rc == 0)
    o->rc = read_block(to->v, e->ns, o->hash, b, bcap, &back, o->err, sizeof o->err);
  if (o->rc == 0 && back.checksum != m.checksum) {
    snprintf(o->err, sizeof o->err, "volume %s: block %016" PRIx64 " read back differs", to->name,
             o->hash);
    o->rc = KVP_ECORRUPT;
  }
  if (o->rc == KVP_EOFFLINE)
    __atomic_store_n(&e->vols[o->blame].offline_job, 1, __ATOMIC_RELAXED);
  if (o->rc == 0) {
    o->bytes = m.payload_len;
  } else if (o->rc != KVP_ENOENT && o->blame == o->to) {
    char ignore[256];
    kvp_volume_delete(to->v, e->ns, o->hash, ignore, sizeof ignore); /* a partial copy */
  }
}

/* The job: the journal in transactions around the I/O (queued, then
 * copying, then the moves' outcomes in batches of BATCH_MOVES or BATCH_MS),
 * so that a crash at any point leaves rows that open can resume or roll
 * back. Each batch, once journaled, is applied to the index by the loop
 * (kvp__tier_job_progress) while the job goes on. */
void kvp__tier_job_work(uv_work_t *req) {
  kvp__tier_engine_t *e = req->data;
  void *a = NULL, *b = NULL;
  size_t acap = 0, bcap = 0;
  uint64_t now = kvp__unix_ms();

  kvp__journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++) {
    op_t *o = &e->ops[i];
    if (o->kind >= 0)
      o->journal_id =
          kvp__journal_insert(e->db, o->hash, e->vols[o->from].tier, e->vols[o->from].name,
                              kvp__tier_is_copy(o->kind) ? e->vols[o->to].tier : 0,
                              kvp__tier_is_copy(o->kind) ? e->vols[o->to].name : "", o->bytes, now);
  }
  kvp__journal_commit(e->db);
  kvp__journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++)
    if (kvp__tier_is_copy(e->ops[i].kind))
      kvp__journal_set(e->db, e->ops[i].journal_id, "copying", NULL);
  kvp__journal_commit(e->db);
  size_t done = 0;
  uint64_t batch_ms = kvp__unix_ms();
  for (size_t i = 0; i < e->nops; i++) {
    do_io(e, &e->ops[i], &a, &acap, &b, &bcap);
    if (i + 1 < e->nops && i + 1 - done < BATCH_MOVES && kvp__unix_ms() - batch_ms < BATCH_MS)
      continue;
    /* A batch's outcomes are journaled, then handed to the loop, which
     * applies them to the index while the job goes on. */
    kvp__journal_begin(e->db);
    for (size_t k = done; k <= i; k++) {
      const op_t *o = &e->ops[k];
      const char *state = o->rc != 0                   ? "failed"
                          : kvp__tier_is_copy(o->kind) ? "committed"
                                                       : "source_deleted";
      kvp__journal_set(e->db, o->journal_id, state, o->rc ? o->err : NULL);
    }
    kvp__journal_commit(e->db);
    done = i + 1;
    batch_ms = kvp__unix_ms();
    __atomic_store_n(&e->ready, done, __ATOMIC_RELEASE);
    if (e->async_ready && done < e->nops)
      uv_async_send(&e->async);
  }
  free(a);
  free(b);
}

/* Tells workers and routers (and this advisor, through the stream) about a
 * move, as worker _advisor: Stored in the destination once the copy is
 * verified, Removed from the source once it is deleted. The publisher is
 * thread-safe and drops rather than blocks the loop when its queue is full
 * (counted). */
void kvp__tier_publish(kvp__tier_engine_t *e, int type, const vol_t *v, const op_t *o) {
  if (e->pub == NULL)
    return;
  int rc = type == KVP_EV_STORED
               ? kvp_publisher_stored(e->pub, v->tier, v->name, o->has_parent ? &o->parent : NULL,
                                      &o->hash, 1, o->tokens, o->bytes, 0)
               : kvp_publisher_removed(e->pub, v->tier, v->name, &o->hash, 1);
  if (rc == 0)
    e->published++;
  else
    e->publish_errors++;
}

/* The pend entry of a source delete that ran: done (removed by
 * kvp__tier_pend_compact) when it succeeded, due again when it failed. */
static void pend_done(kvp__tier_engine_t *e, const op_t *o) {
  pend_t *p = &e->pend[o->pend];
  if (o->rc == 0)
    p->done = 1;
  else
    p->deleting = 0;
}

/* A failed move: the volume whose operation failed backs off (moves into
 * it when it was the destination or is full, out of it when it was the
 * source), exponentially per failure in a row; an offline one takes no
 * moves until a round finds its identity back. Warnings are rate-limited
 * per volume. */
static void failed(kvp__tier_engine_t *e, op_t *o, uint64_t now) {
  vol_t *from = &e->vols[o->from], *v = &e->vols[o->blame];
  const char *what = o->kind < 0 ? "source delete" : kvp__tier_kind_name(o->kind);

  if (o->skipped) {
    e->st.skipped++;
    return;
  }
  e->st.failed++;
  if (o->rc == KVP_ENOSPC)
    v->st.failed_full++;
  else
    from->st.failed_other++;
  if (o->rc == KVP_EOFFLINE) {
    if (!v->offline)
      kvp_log_warn("tiering: volume %s is offline, no moves into or out of it until its "
                   "identity is back: %s",
                   v->name, o->err);
    v->offline = 1;
    v->st.offline = 1;
    return;
  }
  int out = o->blame == o->from && o->rc != KVP_ENOSPC;
  uint64_t *until = out ? &v->out_until_ms : &v->backoff_until_ms;
  /* The failures of one job count once: they are one outage, not many. */
  if (*until <= now) {
    uint32_t shift = v->fails < 16 ? v->fails : 16;
    uint64_t ms = (o->rc == KVP_ENOSPC ? BACKOFF_FULL_MS : BACKOFF_BASE_MS) << shift;
    *until = now + (ms < BACKOFF_CAP_MS ? ms : BACKOFF_CAP_MS);
    v->fails++;
  }
  uint64_t ms = *until - now;
  kvp__tier_vol_warn(v, now,
                     "tiering: %s of block %016" PRIx64 " from %s failed: %s (no moves %s %s "
                     "for %" PRIu64 " ms)",
                     what, o->hash, from->name, o->err, out ? "out of" : "into", v->name, ms);
}

/* A copy that failed verification at the source, deleted by the job: its
 * location goes and is announced (Removed), once; one line says whether
 * the block is lost with it. The journal row says "quarantined: ...". */
static void quarantine(kvp__tier_engine_t *e, const op_t *o) {
  vol_t *from = &e->vols[o->from];
  kvp__index_block_t b;
  size_t n = 0;

  kvp__tier_drop_locations(e, o->hash, from);
  kvp__tier_publish(e, KVP_EV_REMOVED, from, o);
  e->st.quarantined++;
  from->st.quarantined++;
  int lost = kvp__tier_get_block(e, o->hash, &b, &n) != 0 || n == 0;
  if (lost)
    e->st.lost++;
  kvp_log_warn("tiering: block %016" PRIx64 " in %s failed verification and is quarantined "
               "(deleted, its location dropped)%s: %s",
               o->hash, from->name, lost ? "; it was the block's only copy: the block is lost" : "",
               o->err);
}

/* Applies the outcomes of ops[applied, upto) on the loop thread: the
 * index, the announcements, the counters. */
static void apply(kvp__tier_engine_t *e, size_t upto) {
  uint64_t now = kvp__unix_ms();
  for (; e->applied < upto; e->applied++) {
    op_t *o = &e->ops[e->applied];
    vol_t *from = &e->vols[o->from];
    if (o->kind == OP_SCRUB) {
      kvp__tier_scrub_apply(e, o);
      continue;
    }
    if (o->kind == OP_COMPACT) {
      kvp__tier_compact_apply(e, o);
      continue;
    }
    if (o->kind == OP_ORPHAN) {
      if (o->rc == 0)
        e->st.orphans_deleted++;
      else
        kvp__tier_vol_warn(from, now,
                           "tiering: scrub: deleting orphan %016" PRIx64 " in %s failed: %s",
                           o->hash, from->name, o->err);
      continue;
    }
    if (o->kind == OP_SOURCE_DELETE)
      pend_done(e, o);
    if (o->rc != 0 && o->src_missing) {
      /* The index placed a block where it is not (a location replayed
       * after a crash, a block deleted behind the advisor's back): the
       * location goes, so the index heals where the engine looks. */
      kvp__tier_drop_locations(e, o->hash, from);
      e->st.failed++;
      from->st.missing++;
      kvp_log_warn("tiering: block %016" PRIx64 " is not in %s: its location there is dropped",
                   o->hash, from->name);
      continue;
    }
    if (o->rc != 0 && o->quarantined) {
      quarantine(e, o);
      continue;
    }
    if (o->rc != 0) {
      failed(e, o, now);
      continue;
    }
    from->fails = 0;
    if (kvp__tier_is_copy(o->kind))
      e->vols[o->to].fails = 0;
    if (o->kind < 0 || o->kind == KVP__TIER_EVICT) {
      kvp__tier_drop_locations(e, o->hash, from);
      if (o->kind < 0)
        e->st.sources_deleted++;
      else {
        if (o->redundant)
          e->st.redundant++;
        else
          e->st.evicted++;
        from->st.evicted++;
      }
      kvp__tier_publish(e, KVP_EV_REMOVED, from, o);
    } else {
      vol_t *to = &e->vols[o->to];
      kvp__tier_publish(e, KVP_EV_STORED, to, o);
      kvp__index_store(e->ix, o->hash, o->has_parent, o->parent, e->advisor_worker, to->tier,
                       to->id, o->tokens, o->bytes, now);
      if (o->kind == KVP__TIER_DEMOTE)
        e->st.demoted++;
      else
        e->st.promoted++;
      if (o->kind == KVP__TIER_PREFETCH)
        e->st.prefetched++;
      from->st.moved_out++;
      from->st.bytes_out += o->bytes;
      to->st.moved_in++;
      to->st.bytes_in += o->bytes;
      e->st.bytes_moved += o->bytes;
      e->st.bytes_tiers[from->tier][to->tier] += o->bytes; /* volumes are G3 or G4 (conf.c) */
      kvp__tier_pend_add(e, o->hash, now + e->grace_ms, o->from, o->journal_id);
    }
  }
}

void kvp__tier_job_progress(uv_async_t *h) {
  kvp__tier_engine_t *e = h->data;
  if (e->busy) {
    size_t upto = __atomic_load_n(&e->ready, __ATOMIC_ACQUIRE);
    if (upto > e->applied) {
      apply(e, upto);
      e->st.batches++;
    }
  }
}

void kvp__tier_job_after(uv_work_t *req, int status) {
  kvp__tier_engine_t *e = req->data;

  (void)status;
  apply(e, e->nops);
  kvp__tier_pend_compact(e);
  kvp__tier_control_done(e);
  e->nops = 0;
  e->applied = 0;
  __atomic_store_n(&e->ready, 0, __ATOMIC_RELAXED);
  e->busy = 0;
  if (e->on_idle != NULL) {
    void (*f)(void *) = e->on_idle;
    e->on_idle = NULL;
    f(e->idle_ctx);
  }
}
