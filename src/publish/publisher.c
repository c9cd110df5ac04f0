/* Publisher lifecycle and the producer-side API: open, emit and its
 * shortcuts, poll (snapshots on the embedder's thread), flush, close,
 * figures. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "publish/pub.h"

static uint64_t unix_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void queue_full(void *ctx) {
  kvp__pub_wake(ctx);
}

int kvp_publisher_open(const kvp_publisher_opts_t *o, kvp_publisher_t **out, char *err,
                       size_t errlen) {
  char scratch[8];
  kvp_publisher_t *pub = NULL;
  pthread_condattr_t ca;
  int rc;

  if (err == NULL || errlen == 0) {
    err = scratch;
    errlen = sizeof scratch;
  }
  err[0] = '\0';
  if (out == NULL)
    return KVP_EINVAL;
  *out = NULL;
  if ((rc = kvp__pub_opts_check(o, err, errlen)) != 0)
    goto fail;
  rc = KVP_ENOMEM;
  pub = calloc(1, sizeof *pub);
  if (pub == NULL)
    goto fail;
  if ((rc = kvp__pub_opts_copy(pub, o)) != 0)
    goto fail_pub;
  pub->epoch = o->epoch ? o->epoch : unix_ns();
  pub->next_id = o->first_event_id ? o->first_event_id : 1;
  /* Both tokens were checked by kvp__pub_opts_check. */
  if ((rc = kvp_subject_events(pub->subject, sizeof pub->subject, pub->o.ns, pub->o.worker_id)) !=
          0 ||
      (rc = kvp_subject_resync(pub->ctl_subject, sizeof pub->ctl_subject, pub->o.ns,
                               pub->o.worker_id)) != 0)
    goto fail_strs;
  if ((rc = kvp__pubq_init(&pub->q, pub->o.queue_capacity, pub->o.overflow == KVP_OVERFLOW_DROP)) !=
      0)
    goto fail_strs;
  /* A producer that finds the queue full wakes the loop before it waits or
   * drops: with a window open the loop would otherwise sleep until its
   * max-delay timer (loop.c, kvp__pub_maybe_wake). */
  pub->q.on_full = queue_full;
  pub->q.on_full_ctx = pub;
  /* Producers wake the loop at half a batch's worth of queued events, or a
   * quarter of the queue, whichever is less, so it encodes well before the
   * queue fills; a queue under 8 events is too small to wait on. */
  pub->wake_at = pub->o.batch_max_events / 2;
  if (pub->wake_at > pub->q.cap / 4)
    pub->wake_at = pub->q.cap / 4;
  if (pub->wake_at < 2)
    pub->wake_at = 0;
  kvp__batch_init(&pub->batch, pub->o.coalesce);
  rc = KVP_ENOMEM;
  if (pthread_mutex_init(&pub->amu, NULL) != 0)
    goto fail_q;
  if (pthread_mutex_init(&pub->fmu, NULL) != 0)
    goto fail_amu;
  if (pthread_mutex_init(&pub->wmu, NULL) != 0) {
    pthread_mutex_destroy(&pub->fmu);
    goto fail_amu;
  }
  if (pthread_mutex_init(&pub->cmu, NULL) != 0 || pthread_cond_init(&pub->ccond, NULL) != 0) {
    pthread_mutex_destroy(&pub->wmu);
    pthread_mutex_destroy(&pub->fmu);
    goto fail_amu; /* a failed cmu/ccond init leaves nothing to destroy on Linux */
  }
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int crc = pthread_cond_init(&pub->fcond, &ca);
  pthread_condattr_destroy(&ca);
  if (crc != 0)
    goto fail_fmu;
  if (uv_loop_init(&pub->loop) != 0)
    goto fail_fcond;
  uv_async_init(&pub->loop, &pub->async, NULL);
  pub->async.data = pub;
  uv_timer_init(&pub->loop, &pub->delay_timer);
  pub->delay_timer.data = pub;
  uv_timer_init(&pub->loop, &pub->tick_timer);
  pub->tick_timer.data = pub;
  if ((rc = kvp__pub_connect(pub, err, errlen)) != 0)
    goto fail_loop;
  /* The async callback is set only now: before, a nats callback may wake a
   * loop that does not run yet, which is harmless. */
  pub->async.async_cb = kvp__pub_on_async;
  pthread_mutex_lock(&pub->wmu);
  pub->wake_ok = 1;
  pthread_mutex_unlock(&pub->wmu);
  if (uv_thread_create(&pub->thread, kvp__pub_loop_main, pub) != 0) {
    rc = KVP_ENOMEM;
    snprintf(err, errlen, "publisher: cannot start the loop thread");
    goto fail_conn;
  }
  *out = pub;
  return 0;
fail_conn:
  pthread_mutex_lock(&pub->wmu);
  pub->wake_ok = 0;
  pthread_mutex_unlock(&pub->wmu);
  kvp__pub_disconnect(pub);
fail_loop:
  uv_close((uv_handle_t *)&pub->async, NULL);
  uv_close((uv_handle_t *)&pub->delay_timer, NULL);
  uv_close((uv_handle_t *)&pub->tick_timer, NULL);
  uv_run(&pub->loop, UV_RUN_DEFAULT);
  uv_loop_close(&pub->loop);
fail_fcond:
  pthread_cond_destroy(&pub->fcond);
fail_fmu:
  pthread_cond_destroy(&pub->ccond);
  pthread_mutex_destroy(&pub->cmu);
  pthread_mutex_destroy(&pub->wmu);
  pthread_mutex_destroy(&pub->fmu);
fail_amu:
  pthread_mutex_destroy(&pub->amu);
fail_q:
  kvp__batch_destroy(&pub->batch);
  kvp__pubq_destroy(&pub->q);
fail_strs:
  free(pub->strs);
fail_pub:
  free(pub);
fail:
  if (err[0] == '\0')
    snprintf(err, errlen, "%s", kvp_strerror(rc));
  return rc;
}

static int valid_tier(int t) {
  return t >= KVP_TIER_G1 && t <= KVP_TIER_MAX;
}

int kvp_publisher_emit(kvp_publisher_t *pub, const kvp_event_t *ev) {
  size_t before = 0;
  if (pub == NULL || ev == NULL)
    return KVP_EINVAL;
  switch (ev->type) {
  case KVP_EV_STORED:
  case KVP_EV_REMOVED:
  case KVP_EV_ACCESSED:
    if (!valid_tier(ev->tier) || ev->hashes == NULL || ev->nhashes == 0 || ev->nhashes > (1u << 20))
      return KVP_EINVAL;
    break;
  case KVP_EV_CLEARED:
    if (ev->tier < KVP_TIER_ALL || ev->tier > KVP_TIER_MAX)
      return KVP_EINVAL;
    break;
  case KVP_EV_SNAPSHOT: /* only from kvp_publisher_poll */
  default:
    return KVP_EINVAL;
  }
  if (ev->volume != NULL && strlen(ev->volume) >= KVP__VOLUME_MAX)
    return KVP_EINVAL;
  int rc = kvp__pubq_push(&pub->q, ev, &before);
  if (rc == 0) {
    atomic_fetch_add_explicit(&pub->f_queued, 1, memory_order_relaxed);
    kvp__pub_maybe_wake(pub, before);
  } else if (rc == KVP_EOVERFLOW) {
    atomic_fetch_add_explicit(&pub->f_dropped, 1, memory_order_relaxed);
    atomic_store(&pub->resync_due, 1);
  }
  return rc;
}

int kvp_publisher_stored(kvp_publisher_t *pub, int tier, const char *volume, const uint64_t *parent,
                         const uint64_t *hashes, size_t n, uint32_t block_tokens,
                         uint64_t block_bytes, int32_t lora_id) {
  kvp_event_t ev = {.type = KVP_EV_STORED,
                    .tier = tier,
                    .volume = volume,
                    .has_parent = parent != NULL,
                    .parent_hash = parent ? *parent : 0,
                    .hashes = hashes,
                    .nhashes = n,
                    .block_tokens = block_tokens,
                    .block_bytes = block_bytes,
                    .lora_id = lora_id};
  return kvp_publisher_emit(pub, &ev);
}

int kvp_publisher_removed(kvp_publisher_t *pub, int tier, const char *volume,
                          const uint64_t *hashes, size_t n) {
  kvp_event_t ev = {
      .type = KVP_EV_REMOVED, .tier = tier, .volume = volume, .hashes = hashes, .nhashes = n};
  return kvp_publisher_emit(pub, &ev);
}

int kvp_publisher_accessed(kvp_publisher_t *pub, int tier, const uint64_t *hashes,
                           const uint32_t *hit_counts, size_t n) {
  kvp_event_t ev = {.type = KVP_EV_ACCESSED,
                    .tier = tier,
                    .hashes = hashes,
                    .nhashes = n,
                    .hit_counts = hit_counts};
  return kvp_publisher_emit(pub, &ev);
}

int kvp_publisher_cleared(kvp_publisher_t *pub, int tier) {
  kvp_event_t ev = {.type = KVP_EV_CLEARED, .tier = tier};
  return kvp_publisher_emit(pub, &ev);
}

static int sink_emit(void *ctx, const kvp_event_t *ev) {
  return kvp_publisher_emit(ctx, ev);
}

kvp_event_sink_t kvp_publisher_sink(kvp_publisher_t *pub) {
  kvp_event_sink_t s = {.emit = sink_emit, .ctx = pub};
  return s;
}

void kvp_publisher_request_resync(kvp_publisher_t *pub) {
  if (pub != NULL)
    atomic_store(&pub->resync_due, 1);
}

/* How long a snapshot's chunk waits for queue room: the publisher's thread
 * sent nothing in that time (the link stalled). Not a bound on the whole
 * snapshot: one larger than what the thread sends in it (a few million
 * blocks here, fewer over JetStream's acks) then never got through, each
 * poll queueing its first chunks again. In JetStream mode only an ack frees
 * room once js_max_inflight batches are out, and one ack may take up to
 * ack_wait_ms (a slow or distant stream leader) before the publisher gives
 * up on it: the chunk waits that long there. With 200 ms there, a leader
 * whose acks took longer failed every snapshot. */
#define KVP__SNAPSHOT_WAIT_NS (200 * 1000000ull)

static uint64_t snapshot_wait_ns(const kvp_publisher_t *pub) {
  uint64_t ack = (uint64_t)pub->o.ack_wait_ms * 1000000u;
  return pub->o.mode == KVP_PUB_JETSTREAM && ack > KVP__SNAPSHOT_WAIT_NS ? ack
                                                                         : KVP__SNAPSHOT_WAIT_NS;
}

/* Queues one tier's snapshot in chunks: each run's in chunks of its own,
 * and one empty chunk when the tier holds nothing (the consumer empties its
 * set). */
static int snapshot_tier(kvp_publisher_t *pub, uint64_t id, int tier, const uint64_t *h,
                         const uint64_t *p, const kvp_snapshot_run_t *runs, size_t nruns) {
  size_t chunk = (pub->o.batch_max_bytes - 512) / 18;
  if (chunk > pub->o.batch_max_blocks)
    chunk = pub->o.batch_max_blocks;
  if (chunk == 0)
    chunk = 1;
  uint32_t c = 0;
  size_t off = 0, r = 0, run_left = nruns ? runs[0].n : 0;
  /* The last run with blocks: the chunk that ends it is the last one. */
  size_t last_run = 0;
  for (size_t i = 0; i < nruns; i++)
    if (runs[i].n > 0)
      last_run = i;
  do {
    while (r + 1 < nruns && run_left == 0)
      run_left = runs[++r].n;
    size_t k = run_left < chunk ? run_left : chunk;
    kvp_event_t ev = {.type = KVP_EV_SNAPSHOT,
                      .tier = tier,
                      .volume = runs[r].volume,
                      .snapshot_id = id,
                      .chunk = c++,
                      .last = r >= last_run && k == run_left,
                      .hashes = h + off,
                      .nhashes = k,
                      .parent_hashes = p ? p + off : NULL,
                      .block_tokens = runs[r].block_tokens,
                      .block_bytes = runs[r].block_bytes};
    size_t before = 0;
    /* A full queue is waited on (while the publisher's thread drains it)
     * rather than dropped into: a snapshot must get through whole, and a
     * chunk it could not queue is not an event lost. */
    int rc = kvp__pubq_push_wait(&pub->q, &ev, &before, kvp__now_ns() + snapshot_wait_ns(pub));
    if (rc != 0)
      return rc;
    atomic_fetch_add(&pub->f_queued, 1);
    kvp__pub_wake(pub); /* snapshots are rare and must get through whole */
    off += k;
    run_left -= k;
    if (ev.last)
      return 0;
  } while (1);
}

/* One tier through whichever callback the options set: its arrays and runs
 * (one run for kvp_snapshot_fn: the options' volume and shape). */
static int take_tier(kvp_publisher_t *pub, int tier, uint64_t **h, uint64_t **p,
                     kvp_snapshot_run_t **runs, size_t *nruns) {
  size_t n = 0;
  int rc;
  if (pub->o.snapshot_runs != NULL) {
    if ((rc = pub->o.snapshot_runs(pub->o.snapshot_ctx, tier, h, p, runs, nruns)) != 0)
      return rc;
    if (*nruns > 0)
      return 0;
    free(*runs); /* nothing held: one empty run */
    *runs = NULL;
  } else if ((rc = pub->o.snapshot(pub->o.snapshot_ctx, tier, h, p, &n)) != 0) {
    return rc;
  }
  if ((*runs = calloc(1, sizeof **runs)) == NULL)
    return KVP_ENOMEM;
  memcpy((*runs)->volume, pub->o.snapshot_volumes[tier], sizeof(*runs)->volume);
  (*runs)->block_tokens = pub->o.block_tokens;
  (*runs)->block_bytes = pub->o.block_bytes;
  (*runs)->n = n;
  *nruns = 1;
  return 0;
}

int kvp_publisher_poll(kvp_publisher_t *pub) {
  int rc = 0;
  if (pub == NULL)
    return KVP_EINVAL;
  if ((pub->o.snapshot == NULL && pub->o.snapshot_runs == NULL) || !atomic_load(&pub->resync_due) ||
      !atomic_load(&pub->link_up))
    return 0;
  atomic_store(&pub->resync_due, 0);
  uint64_t id = atomic_fetch_add(&pub->snap_seq, 1) + 1;
  for (int tier = KVP_TIER_G1; tier <= KVP_TIER_MAX; tier++) {
    uint64_t *h = NULL, *p = NULL;
    kvp_snapshot_run_t *runs = NULL;
    size_t nruns = 0;
    if (!(pub->o.snapshot_tiers & (1u << tier)))
      continue;
    rc = take_tier(pub, tier, &h, &p, &runs, &nruns);
    if (rc == KVP_ETIER) {
      rc = 0;
      continue;
    }
    if (rc == 0)
      rc = snapshot_tier(pub, id, tier, h, p, runs, nruns);
    free(h);
    free(p);
    free(runs);
    if (rc != 0)
      goto fail;
  }
  atomic_fetch_add(&pub->f_resyncs, 1);
  return 1;
fail:
  atomic_store(&pub->resync_due, 1);
  return rc;
}

int kvp_publisher_flush(kvp_publisher_t *pub, uint32_t timeout_ms) {
  int rc = 0;
  if (pub == NULL)
    return KVP_EINVAL;
  uint64_t deadline = kvp__now_ns() + (uint64_t)timeout_ms * 1000000u;
  uint64_t want = kvp__pubq_head(&pub->q);
  pthread_mutex_lock(&pub->fmu);
  while (pub->done_ticket < want) {
    uint64_t now = kvp__now_ns();
    if (now >= deadline) {
      rc = KVP_ETIMEDOUT;
      break;
    }
    atomic_store(&pub->flush_want, want);
    kvp__pub_wake(pub);
    uint64_t until = now + 20000000u < deadline ? now + 20000000u : deadline;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                          .tv_nsec = (long)(until % 1000000000u)};
    pthread_cond_timedwait(&pub->fcond, &pub->fmu, &ts);
  }
  pthread_mutex_unlock(&pub->fmu);
  if (rc == 0 && pub->o.mode == KVP_PUB_CORE) {
    uint64_t now = kvp__now_ns();
    int64_t left = now >= deadline ? 1 : (int64_t)((deadline - now) / 1000000u) + 1;
    if (natsConnection_FlushTimeout(pub->nc, left) != NATS_OK)
      rc = KVP_ETIMEDOUT;
  }
  return rc;
}

void kvp_publisher_close(kvp_publisher_t *pub) {
  if (pub == NULL)
    return;
  kvp_publisher_flush(pub, pub->o.close_timeout_ms);
  kvp__pubq_close(&pub->q);
  atomic_store(&pub->stop, 1);
  kvp__pub_wake(pub);
  uv_thread_join(&pub->thread);
  uv_loop_close(&pub->loop);
  kvp__pub_disconnect(pub);
  for (size_t i = pub->ptail; i < pub->phead; i++)
    free(pub->pend[i & (pub->pcap - 1)].buf);
  free(pub->pend);
  free(pub->acks);
  kvp__batch_destroy(&pub->batch);
  kvp__pubq_destroy(&pub->q);
  pthread_cond_destroy(&pub->fcond);
  pthread_cond_destroy(&pub->ccond);
  pthread_mutex_destroy(&pub->cmu);
  pthread_mutex_destroy(&pub->wmu);
  pthread_mutex_destroy(&pub->fmu);
  pthread_mutex_destroy(&pub->amu);
  free(pub->strs);
  free(pub);
}

void kvp_publisher_stats(kvp_publisher_t *pub, kvp_publisher_stats_t *f) {
  memset(f, 0, sizeof *f);
  if (pub == NULL)
    return;
  f->queued = atomic_load(&pub->f_queued);
  f->sent = atomic_load(&pub->f_sent);
  f->acked = atomic_load(&pub->f_acked);
  f->dropped = atomic_load(&pub->f_dropped);
  f->batches = atomic_load(&pub->f_batches);
  f->bytes = atomic_load(&pub->f_bytes);
  f->reconnects = atomic_load(&pub->f_reconnects);
  f->resyncs = atomic_load(&pub->f_resyncs);
  f->blocks = atomic_load(&pub->f_blocks);
  f->retries = atomic_load(&pub->f_retries);
  f->resent = atomic_load(&pub->f_resent);
}

int kvp_publisher_connected(kvp_publisher_t *pub) {
  return pub != NULL && kvp__pub_connected(pub);
}

uint64_t kvp_publisher_epoch(const kvp_publisher_t *pub) {
  return pub ? pub->epoch : 0;
}
