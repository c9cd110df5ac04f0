/* The tiering engine's job (engine_impl.h): the moves' I/O and journal on
 * libuv's thread pool (in parallel lanes, one per destination volume, up
 * to max_parallel), their completion back on the loop thread.
 * Why this file is long: an op's life (its I/O, its journal batch, the lanes that
 * run it, its outcome applied on the loop) is one sequence that reads
 * best in one place; split, do_io and commit_batch would be exported for
 * one caller each. */
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
  /* A partition (unpartitioned: the namespace) this advisor may no longer
   * tier (its lease is gone): not tried, before anything is written. */
  if (e->gate != NULL && o->kind != OP_COMPACT &&
      !e->gate(e->gate_ctx, e->partitions > 0 ? e->parts[o->part].p : 0)) {
    o->rc = KVP_EBUSY;
    o->skipped = 1;
    o->blame = o->from;
    if (e->partitions > 0)
      snprintf(o->err, sizeof o->err, "skipped: partition %u's tiering lease is not held here",
               (unsigned)e->parts[o->part].p);
    else
      snprintf(o->err, sizeof o->err, "skipped: the namespace's tiering lease is not held here");
    return;
  }
  o->blame = o->from;
  if (o->kind == OP_ORPHAN && o->adopt) {
    /* Adopted only with a valid frame; a bad one is deleted like any
     * orphan. */
    o->rc =
        read_block(from->v, kvp__tier_ns(e, o->part), o->hash, a, acap, &m, o->err, sizeof o->err);
    if (o->rc == 0) {
      o->adopted = 1;
      o->bytes = m.payload_len + KVP_FRAME_HEADER;
      o->parent = m.parent;
      o->has_parent = m.has_parent;
      return;
    }
    if (o->rc != KVP_ECORRUPT) {
      if (o->rc == KVP_EOFFLINE)
        __atomic_store_n(&from->offline_job, 1, __ATOMIC_RELAXED);
      return;
    }
  }
  if (o->kind == OP_SCRUB_BAD) {
    /* The scrub read this copy and its frame failed: quarantined, once
     * (gone already: a move quarantined it meanwhile). */
    char del[256], why[256];
    snprintf(why, sizeof why, "%s", o->err);
    int drc = kvp_volume_delete(from->v, kvp__tier_ns(e, o->part), o->hash, del, sizeof del);
    if (drc == KVP_EOFFLINE)
      __atomic_store_n(&from->offline_job, 1, __ATOMIC_RELAXED);
    o->rc = drc == 0 ? KVP_ECORRUPT : drc;
    o->quarantined = drc == 0;
    if (drc == 0)
      snprintf(o->err, sizeof o->err,
               "quarantined: scrub: its frame failed verification (the pass's first: %.160s)", why);
    else if (drc == KVP_ENOENT)
      snprintf(o->err, sizeof o->err, "quarantined already");
    else
      snprintf(o->err, sizeof o->err, "scrub quarantine: %.200s", del);
    return;
  }
  if (o->kind == OP_COMPACT) {
    kvp__tier_compact_run(e, o);
    return;
  }
  if (o->kind < 0 || o->kind == KVP__TIER_EVICT) {
    o->rc = kvp_volume_delete(from->v, kvp__tier_ns(e, o->part), o->hash, o->err, sizeof o->err);
    if (o->rc == KVP_ENOENT)
      o->rc = 0; /* gone already: the goal */
    if (o->rc == KVP_EOFFLINE)
      __atomic_store_n(&from->offline_job, 1, __ATOMIC_RELAXED);
    return;
  }
  o->rc =
      read_block(from->v, kvp__tier_ns(e, o->part), o->hash, a, acap, &m, o->err, sizeof o->err);
  o->src_missing = o->rc == KVP_ENOENT;
  if (o->rc == KVP_ECORRUPT) {
    /* Quarantine, once: the bad copy goes, so that nothing serves or plans
     * it again (the loop drops its location). */
    char why[256], del[256];
    snprintf(why, sizeof why, "%s", o->err);
    int drc = kvp_volume_delete(from->v, kvp__tier_ns(e, o->part), o->hash, del, sizeof del);
    snprintf(o->err, sizeof o->err, "quarantined: %.160s%s%.60s", why,
             drc != 0 && drc != KVP_ENOENT ? "; its delete failed: " : "",
             drc != 0 && drc != KVP_ENOENT ? del : "");
    o->quarantined = 1;
    return;
  }
  if (o->rc == 0) {
    o->blame = o->to;
    o->rc = kvp_volume_put_block(to->v, kvp__tier_ns(e, o->part), &m, *a, o->err, sizeof o->err);
  }
  /* Committed means the destination's frame was read back and verified. */
  if (o->rc == 0)
    o->rc =
        read_block(to->v, kvp__tier_ns(e, o->part), o->hash, b, bcap, &back, o->err, sizeof o->err);
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
    kvp_volume_delete(to->v, kvp__tier_ns(e, o->part), o->hash, ignore,
                      sizeof ignore); /* a partial copy */
  }
}

/* Journals the outcomes of ops[from, to) in one transaction, then hands
 * them to the loop, which applies them to the index while the job goes
 * on. */
static void commit_batch(kvp__tier_engine_t *e, size_t from, size_t to) {
  kvp__journal_begin(e->db);
  for (size_t k = from; k < to; k++) {
    const op_t *o = &e->ops[k];
    if (o->kind == OP_SOURCE_DELETE && o->skipped)
      continue; /* the move stays committed: its source is deleted later */
    const char *state = o->rc != 0                   ? "failed"
                        : kvp__tier_is_copy(o->kind) ? "committed"
                        : o->adopted                 ? "adopted"
                        : o->kind == OP_ORPHAN       ? "orphan_deleted"
                                                     : "source_deleted";
    kvp__journal_set(e->db, o->journal_id, state, o->rc ? o->err : NULL);
  }
  kvp__journal_commit(e->db);
  __atomic_store_n(&e->ready, to, __ATOMIC_RELEASE);
  if (e->async_ready && to < e->nops)
    uv_async_send(&e->async);
}

/* The lane of an op: the volume it writes (a copy's destination, a
 * delete's volume). One op per lane at a time. */
static uint32_t lane_of(const op_t *o) {
  return kvp__tier_is_copy(o->kind) ? o->to : o->from;
}

/* Parallel moves ([tiering] max_parallel): up to that many threads take
 * ops, each the earliest op of a lane no other thread is in, so moves into
 * different volumes overlap and a volume never has two at once. The job's
 * thread commits the outcomes in batches as the ops finish, in op order
 * (the loop applies a prefix of ops). */
typedef struct lanes_s {
  kvp__tier_engine_t *e;
  uv_mutex_t mu;
  uv_cond_t cv;
  uint32_t *next;                         /* per op: the next op of its lane, or UINT32_MAX */
  uint8_t *done;                          /* per op */
  uint32_t head[KVP__TIER_MAX_VOLUMES];   /* per lane: its first op not started */
  uint32_t inlane[KVP__TIER_MAX_VOLUMES]; /* per lane: ops in flight (at most 1) */
  size_t started, inflight;
} lanes_t;

static void lane_worker(void *arg) {
  lanes_t *l = arg;
  kvp__tier_engine_t *e = l->e;
  void *a = NULL, *b = NULL;
  size_t acap = 0, bcap = 0;

  uv_mutex_lock(&l->mu);
  while (l->started < e->nops) {
    uint32_t best = UINT32_MAX, lane = 0;
    for (uint32_t v = 0; v < e->nvols; v++)
      if (l->inlane[v] == 0 && l->head[v] < best) {
        best = l->head[v];
        lane = v;
      }
    if (best == UINT32_MAX) {
      uv_cond_wait(&l->cv, &l->mu);
      continue;
    }
    l->head[lane] = l->next[best];
    l->started++;
    l->inflight++;
    l->inlane[lane]++;
    if (l->inflight > __atomic_load_n(&e->par_peak, __ATOMIC_RELAXED))
      __atomic_store_n(&e->par_peak, (uint32_t)l->inflight, __ATOMIC_RELAXED);
    if (l->inlane[lane] > __atomic_load_n(&e->lane_peak, __ATOMIC_RELAXED))
      __atomic_store_n(&e->lane_peak, l->inlane[lane], __ATOMIC_RELAXED);
    uv_mutex_unlock(&l->mu);
    do_io(e, &e->ops[best], &a, &acap, &b, &bcap);
    uv_mutex_lock(&l->mu);
    l->done[best] = 1;
    l->inflight--;
    l->inlane[lane]--;
    uv_cond_broadcast(&l->cv);
  }
  uv_cond_broadcast(&l->cv);
  uv_mutex_unlock(&l->mu);
  free(a);
  free(b);
}

/* Runs the ops on nthreads threads by lane; returns 0, or KVP_ENOMEM when
 * they could not start (the caller then runs them in order). */
static int run_lanes(kvp__tier_engine_t *e, size_t nthreads) {
  lanes_t l = {.e = e};
  uv_thread_t th[KVP__TIER_MAX_VOLUMES];
  size_t nth = 0, done = 0;
  uint32_t tail[KVP__TIER_MAX_VOLUMES];

  l.next = malloc(e->nops * sizeof *l.next);
  l.done = calloc(e->nops, 1);
  if (l.next == NULL || l.done == NULL || uv_mutex_init(&l.mu) != 0) {
    free(l.next);
    free(l.done);
    return KVP_ENOMEM;
  }
  uv_cond_init(&l.cv);
  for (size_t v = 0; v < KVP__TIER_MAX_VOLUMES; v++)
    l.head[v] = tail[v] = UINT32_MAX;
  for (size_t i = 0; i < e->nops; i++) {
    uint32_t v = lane_of(&e->ops[i]);
    l.next[i] = UINT32_MAX;
    if (l.head[v] == UINT32_MAX)
      l.head[v] = (uint32_t)i;
    else
      l.next[tail[v]] = (uint32_t)i;
    tail[v] = (uint32_t)i;
  }
  for (; nth < nthreads; nth++)
    if (uv_thread_create(&th[nth], lane_worker, &l) != 0)
      break;
  if (nth == 0)
    lane_worker(&l); /* no thread: this one does the work */
  uint64_t batch_ms = kvp__unix_ms();
  uv_mutex_lock(&l.mu);
  while (done < e->nops) {
    size_t upto = done;
    while (upto < e->nops && l.done[upto])
      upto++;
    uint64_t now = kvp__unix_ms();
    if (upto == done ||
        (upto < e->nops && upto - done < BATCH_MOVES && now - batch_ms < BATCH_MS)) {
      uint64_t wait_ms = now - batch_ms < BATCH_MS ? BATCH_MS - (now - batch_ms) : 1;
      uv_cond_timedwait(&l.cv, &l.mu, wait_ms * 1000000ull);
      continue;
    }
    uv_mutex_unlock(&l.mu);
    commit_batch(e, done, upto);
    done = upto;
    batch_ms = kvp__unix_ms();
    uv_mutex_lock(&l.mu);
  }
  uv_mutex_unlock(&l.mu);
  for (size_t t = 0; t < nth; t++)
    uv_thread_join(&th[t]);
  uv_cond_destroy(&l.cv);
  uv_mutex_destroy(&l.mu);
  free(l.next);
  free(l.done);
  return 0;
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
    if (o->kind >= 0 || o->kind == OP_ORPHAN || o->kind == OP_SCRUB_BAD)
      o->journal_id =
          kvp__journal_insert(e->db, o->hash, e->vols[o->from].tier, e->vols[o->from].name,
                              kvp__tier_is_copy(o->kind) ? e->vols[o->to].tier : 0,
                              kvp__tier_is_copy(o->kind) ? e->vols[o->to].name : "",
                              kvp__tier_ns(e, o->part), o->bytes, now);
  }
  kvp__journal_commit(e->db);
  kvp__journal_begin(e->db);
  for (size_t i = 0; i < e->nops; i++)
    if (kvp__tier_is_copy(e->ops[i].kind))
      kvp__journal_set(e->db, e->ops[i].journal_id, "copying", NULL);
  kvp__journal_commit(e->db);
  /* Lanes: the volumes the ops write; more than one and max_parallel > 1:
   * in parallel. */
  uint64_t lanes = 0;
  for (size_t i = 0; i < e->nops; i++)
    lanes |= 1ull << lane_of(&e->ops[i]);
  size_t nlanes = (size_t)__builtin_popcountll(lanes);
  size_t nthreads = e->max_parallel < nlanes ? e->max_parallel : nlanes;
  if (nthreads > 1 && run_lanes(e, nthreads) == 0)
    return;
  size_t done = 0;
  uint64_t batch_ms = kvp__unix_ms();
  for (size_t i = 0; i < e->nops; i++) {
    do_io(e, &e->ops[i], &a, &acap, &b, &bcap);
    if (__atomic_load_n(&e->par_peak, __ATOMIC_RELAXED) == 0) {
      __atomic_store_n(&e->par_peak, 1, __ATOMIC_RELAXED);
      __atomic_store_n(&e->lane_peak, 1, __ATOMIC_RELAXED);
    }
    if (i + 1 < e->nops && i + 1 - done < BATCH_MOVES && kvp__unix_ms() - batch_ms < BATCH_MS)
      continue;
    commit_batch(e, done, i + 1);
    done = i + 1;
    batch_ms = kvp__unix_ms();
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
  kvp_publisher_t *pub = e->parts[o->part].pub; /* the worker of the block's partition */
  if (pub == NULL)
    return;
  int rc = type == KVP_EV_STORED
               ? kvp_publisher_stored(pub, v->tier, v->name, o->has_parent ? &o->parent : NULL,
                                      &o->hash, 1, o->tokens, o->bytes, 0)
               : kvp_publisher_removed(pub, v->tier, v->name, &o->hash, 1);
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

  /* A corrupt copy the scrub found may be an orphan: no location to drop,
   * no block lost. */
  int had = o->kind != OP_SCRUB_BAD || kvp__tier_located(e, o->hash, from, o->part);
  if (had) {
    kvp__tier_drop_locations(e, o->hash, from, o->part);
    kvp__tier_publish(e, KVP_EV_REMOVED, from, o);
  }
  e->st.quarantined++;
  from->st.quarantined++;
  int lost = had && (kvp__tier_get_block(e, o->hash, &b, &n) != 0 || n == 0);
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
    if (o->kind == OP_ORPHAN) {
      kvp__tier_scrub_applied(e, o);
      continue;
    }
    if (o->kind == OP_COMPACT) {
      kvp__tier_compact_apply(e, o);
      continue;
    }
    if (o->kind == OP_SCRUB_BAD && !o->quarantined) {
      if (o->rc != KVP_ENOENT)
        failed(e, o, now);
      continue;
    }
    if (o->kind == OP_SOURCE_DELETE)
      pend_done(e, o);
    if (o->rc != 0 && o->src_missing) {
      /* The index placed a block where it is not (a location replayed
       * after a crash, a block deleted behind the advisor's back): the
       * location goes, so the index heals where the engine looks. */
      kvp__tier_drop_locations(e, o->hash, from, o->part);
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
      kvp__tier_drop_locations(e, o->hash, from, o->part);
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
      kvp__tier_scrub_touched(e, o->hash, o->to);
      kvp__index_store(e->ix, o->hash, o->has_parent, o->parent, e->parts[o->part].worker_id,
                       to->tier, to->id, o->tokens, o->bytes, now);
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
      kvp__tier_pend_add(e, o->hash, now + e->grace_ms, o->from, o->part, o->journal_id);
    }
  }
}

void kvp__tier_job_progress(uv_async_t *h) {
  kvp__tier_engine_t *e = h->data;
  if (e->scrub_running && __atomic_load_n(&e->scrub_done, __ATOMIC_ACQUIRE))
    kvp__tier_scrub_finish(e);
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
