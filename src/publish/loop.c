/* The publisher's loop thread: drains the queue into the batch window,
 * publishes a batch when a limit is reached or max delay expires, sends
 * heartbeats, and in JetStream mode tracks acks and resends unacked batches
 * in order. Only this thread touches the libuv handles (producers and nats.c
 * threads call uv_async_send and nothing else). */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "publish/pub.h"

static void set_done(kvp_publisher_t *pub, uint64_t ticket) {
  pthread_mutex_lock(&pub->fmu);
  if (ticket > pub->done_ticket) {
    pub->done_ticket = ticket;
    pthread_cond_broadcast(&pub->fcond);
  }
  pthread_mutex_unlock(&pub->fmu);
}

static size_t pcount(const kvp_publisher_t *pub) {
  return pub->phead - pub->ptail;
}

static kvp__pend_t *pat(kvp_publisher_t *pub, size_t i) {
  return &pub->pend[i & (pub->pcap - 1)];
}

static int pend_push(kvp_publisher_t *pub, kvp__pend_t *p) {
  if (pcount(pub) == pub->pcap) {
    size_t old = pub->pcap;
    int rc = KVP_ARRAY_RESERVE(pub->pend, pub->pcap, old + 1, 64);
    if (rc != 0)
      return rc;
    /* The capacity doubled (a power of two): an entry whose counter has the
     * old capacity's bit set now lives in the new upper half. */
    for (size_t i = pub->ptail; i != pub->phead; i++)
      if (i & old)
        pub->pend[old + (i & (old - 1))] = pub->pend[i & (old - 1)];
  }
  *pat(pub, pub->phead++) = *p;
  return 0;
}

/* After a disconnect, batches in flight on the old connection may be lost
 * while newer ones get through: resend all of them, oldest first, before
 * anything new (JetStream's duplicate window drops those that had arrived). */
static int check_relink(kvp_publisher_t *pub) {
  uint64_t g = atomic_load(&pub->gen);
  if (g == pub->seen_gen)
    return 0;
  pub->seen_gen = g;
  for (size_t j = pub->ptail; j < pub->phead; j++) {
    kvp__pend_t *p = pat(pub, j);
    if (p->state == 1 && p->gen < g) {
      p->state = 0;
      pub->inflight--;
    }
  }
  if (!pub->retry)
    pub->retry_at_ns = kvp__now_ns() + 50000000ull;
  pub->retry = 1;
  return 1;
}

static void js_send(kvp_publisher_t *pub, kvp__pend_t *p) {
  p->gen = pub->seen_gen;
  if (kvp__pub_send_js(pub, p) == 0) {
    p->state = 1;
    pub->inflight++;
    /* sent and blocks count distinct events; a resend is counted apart. */
    if (p->sends++ == 0) {
      atomic_fetch_add(&pub->f_sent, p->nevents);
      atomic_fetch_add(&pub->f_blocks, p->nblocks);
    } else {
      atomic_fetch_add(&pub->f_resent, p->nevents);
    }
    atomic_fetch_add(&pub->f_batches, 1);
    atomic_fetch_add(&pub->f_bytes, p->len);
  } else {
    p->state = 0;
    pub->retry = 1;
    pub->retry_at_ns = kvp__now_ns() + 100000000ull;
  }
}

/* Publishes the window (may be empty: a heartbeat when hb is set). */
static void emit_window(kvp_publisher_t *pub, int hb) {
  const uint8_t *buf;
  size_t len;
  int js = pub->o.mode == KVP_PUB_JETSTREAM;
  uint64_t dropped = kvp__pubq_take_dropped(&pub->q) + pub->core_lost;
  pub->core_lost = 0;
  kvp_batch_t hdr = {.ns = pub->o.ns,
                     .worker_id = pub->o.worker_id,
                     .dp_rank = pub->o.dp_rank,
                     .epoch = pub->epoch,
                     .model = pub->o.model,
                     .first_event_id = pub->next_id,
                     .timestamp_ms = kvp__unix_ms(),
                     .dropped_events = dropped};
  size_t blocks = pub->batch.blocks;
  uv_timer_stop(&pub->delay_timer);
  int rc = kvp__batch_encode(&pub->batch, &hdr, &buf, &len);
  kvp__batch_reset(&pub->batch);
  if (rc != 0) {
    kvp_log_error("publisher %s: batch not encoded: %s", pub->o.worker_id, kvp_strerror(rc));
    pub->core_lost += dropped + hdr.nevents;
    atomic_fetch_add(&pub->f_dropped, hdr.nevents);
    set_done(pub, pub->consumed);
    return;
  }
  size_t n = hdr.nevents;
  if (n == 0 && !hb && (dropped == 0 || js)) {
    pub->core_lost += dropped; /* reported by the next batch */
    if (js && pcount(pub) > 0)
      pat(pub, pub->phead - 1)->ticket = pub->consumed;
    else
      set_done(pub, pub->consumed);
    return;
  }
  pub->last_send_ns = kvp__now_ns();
  if (!js || n == 0) {
    /* Core batches, and heartbeats in both modes (not tracked, no id). */
    if (kvp__pub_send_core(pub, buf, len) == 0) {
      atomic_fetch_add(&pub->f_sent, n);
      atomic_fetch_add(&pub->f_batches, 1);
      atomic_fetch_add(&pub->f_bytes, len);
      atomic_fetch_add(&pub->f_blocks, blocks);
    } else if (!js) {
      pub->core_lost += n + dropped;
      atomic_fetch_add(&pub->f_dropped, n);
      atomic_store(&pub->resync_due, 1);
    } else {
      pub->core_lost += dropped;
    }
    pub->next_id += n;
    if (!js || pcount(pub) == 0)
      set_done(pub, pub->consumed);
    return;
  }
  kvp__pend_t p = {.first_id = pub->next_id,
                   .nevents = n,
                   .nblocks = blocks,
                   .ticket = pub->consumed,
                   .len = len};
  p.buf = malloc(len);
  if (p.buf == NULL || pend_push(pub, &p) != 0) {
    free(p.buf);
    kvp_log_error("publisher %s: out of memory for a JetStream batch", pub->o.worker_id);
    pub->core_lost += n + dropped;
    atomic_fetch_add(&pub->f_dropped, n);
    return;
  }
  memcpy(p.buf, buf, len);
  pub->next_id += n;
  kvp__pend_t *pp = pat(pub, pub->phead - 1);
  check_relink(pub);
  if (!pub->retry)
    js_send(pub, pp);
}

static void process_acks(kvp_publisher_t *pub) {
  uint64_t local[256];
  size_t n;
  do {
    pthread_mutex_lock(&pub->amu);
    n = pub->nacks < 256 ? pub->nacks : 256;
    if (n > 0) /* acks is NULL until the first ack arrives */
      memcpy(local, pub->acks + (pub->nacks - n), n * sizeof *local);
    pub->nacks -= n;
    pthread_mutex_unlock(&pub->amu);
    for (size_t i = 0; i < n; i++) {
      uint64_t first = local[i] & ~(1ull << 63);
      int ok = !(local[i] >> 63);
      for (size_t j = pub->ptail; j < pub->phead; j++) {
        kvp__pend_t *p = pat(pub, j);
        if (p->first_id != first)
          continue;
        if (p->state == 1)
          pub->inflight--;
        if (ok) {
          p->state = 2;
        } else if (p->state != 2) {
          p->state = 0;
          if (!pub->retry)
            pub->retry_at_ns = kvp__now_ns() + 100000000ull;
          pub->retry = 1;
        }
        break;
      }
    }
  } while (n > 0);
  while (pcount(pub) > 0 && pat(pub, pub->ptail)->state == 2) {
    kvp__pend_t *p = pat(pub, pub->ptail++);
    atomic_fetch_add(&pub->f_acked, p->nevents);
    set_done(pub, p->ticket);
    free(p->buf);
    p->buf = NULL;
  }
  if (pcount(pub) == 0 && pub->batch.nev == 0)
    set_done(pub, pub->consumed);
}

static void retry_unacked(kvp_publisher_t *pub) {
  check_relink(pub);
  if (!pub->retry || pub->inflight > 0 || kvp__now_ns() < pub->retry_at_ns ||
      !kvp__pub_connected(pub))
    return;
  pub->retry = 0;
  /* One line a 10 s at most: a cause that stays (no stream takes the
   * subject) resends every retry interval. */
  uint64_t now = kvp__now_ns();
  for (size_t j = pub->ptail; j < pub->phead; j++)
    if (pat(pub, j)->state == 0) {
      if (pub->resend_logged_ns != 0 && now - pub->resend_logged_ns < 10000000000ull) {
        pub->resends_unlogged++;
        break;
      }
      char why[sizeof pub->ack_err], more[64] = "";
      pthread_mutex_lock(&pub->amu);
      snprintf(why, sizeof why, "%s", pub->ack_err);
      pub->ack_err[0] = '\0';
      pthread_mutex_unlock(&pub->amu);
      if (pub->resends_unlogged > 0)
        snprintf(more, sizeof more, "; %llu more resends since the last line",
                 (unsigned long long)pub->resends_unlogged);
      kvp_log_warn("publisher %s: resending unacked JetStream batches from event id %llu%s%s%s%s",
                   pub->o.worker_id, (unsigned long long)pat(pub, j)->first_id,
                   why[0] ? " (an ack failed: " : "", why, why[0] ? ")" : "", more);
      pub->resend_logged_ns = now;
      pub->resends_unlogged = 0;
      break;
    }
  for (size_t j = pub->ptail; j < pub->phead && !pub->retry; j++) {
    kvp__pend_t *p = pat(pub, j);
    if (p->state != 0)
      continue;
    atomic_fetch_add(&pub->f_retries, 1);
    js_send(pub, p);
  }
}

static void drain(kvp_publisher_t *pub);

/* 1 when the loop may publish a batch now: in JetStream mode at most
 * js_max_inflight batches await their acks, and none goes out while
 * unacked ones wait to be resent. */
static int may_emit(const kvp_publisher_t *pub) {
  return pub->o.mode != KVP_PUB_JETSTREAM || (pcount(pub) < pub->o.js_max_inflight && !pub->retry);
}

/* Publishes the window when the loop may; 0 when it must wait for an ack. */
static int try_emit(kvp_publisher_t *pub) {
  if (!may_emit(pub))
    return 0;
  emit_window(pub, 0);
  return 1;
}

/* Ends every loop callback. With a window open (its max-delay timer
 * running, started by drain, or in JetStream mode an ack to come, whose
 * wake-up drains) producers need not wake the loop: armed = 1.
 * Otherwise armed = 0, then whatever a producer queued while it still saw
 * armed = 1 is drained: a producer that reads armed = 1 queued before the
 * store of 0, so the peek after that store sees its event. */
static void settle(kvp_publisher_t *pub) {
  uint64_t first;
  size_t n;

  if (pub->stopping)
    return;
  if (pub->batch.nev > 0) {
    atomic_store(&pub->armed, 1);
    return;
  }
  atomic_store(&pub->armed, 0);
  kvp__pubq_peek(&pub->q, &first, &n);
  if (n > 0) {
    drain(pub);
    if (pub->batch.nev > 0)
      atomic_store(&pub->armed, 1);
  }
}

static void on_delay(uv_timer_t *t) {
  kvp_publisher_t *pub = t->data;
  drain(pub); /* what producers queued without waking the loop */
  if (pub->batch.nev > 0)
    try_emit(pub);
  settle(pub);
}

static size_t block_cost(const kvp__pubq_item_t *it) {
  size_t c = 9;
  if (it->has_parents)
    c += 9;
  if (it->has_hits)
    c += 5;
  if (it->ntok > 0 && it->nhashes > 0)
    c += 5 * (it->ntok / it->nhashes);
  return c;
}

static int full(const kvp_publisher_t *pub) {
  const kvp__batch_t *b = &pub->batch;
  return b->nev >= pub->o.batch_max_events || b->blocks >= pub->o.batch_max_blocks ||
         b->est_bytes + 64 >= pub->o.batch_max_bytes;
}

/* Drains the queue into the window, publishing full windows, while the
 * loop may publish (may_emit): in JetStream mode it stops at the
 * js_max_inflight-th batch awaiting its ack, between two queued items or
 * inside one (pub->item_from keeps its place), and gives back the room of
 * the items it consumed; the acks' wake-ups run it again. So the loop never
 * blocks in nats.c's stall on pending acks, and a producer waiting for room
 * (a snapshot's chunk) gets it as each ack comes in. */
static void drain(kvp_publisher_t *pub) {
  int stalled = 0;
  while (!stalled && may_emit(pub)) {
    uint64_t first;
    size_t n;
    kvp__pubq_peek(&pub->q, &first, &n);
    if (n == 0)
      break;
    if (n > 4096)
      n = 4096;
    for (size_t i = 0; i < n && !stalled; i++) {
      const kvp__pubq_item_t *it = kvp__pubq_at(&pub->q, first + i);
      size_t from = pub->item_from;
      do {
        if (full(pub) && !try_emit(pub)) {
          stalled = 1;
          break;
        }
        if (pub->batch.nev == 0)
          pub->batch.oldest_ns = kvp__now_ns();
        size_t count = it->nhashes - from;
        size_t room_b = pub->o.batch_max_blocks - pub->batch.blocks;
        size_t room_y = (pub->o.batch_max_bytes - 64 - pub->batch.est_bytes) / block_cost(it);
        if (count > room_b)
          count = room_b;
        if (count > room_y)
          count = room_y;
        if (it->type == KVP_EV_SNAPSHOT && count < it->nhashes && pub->batch.nev > 0) {
          /* A snapshot chunk is never split: it keeps its chunk number. */
          if (!try_emit(pub)) {
            stalled = 1;
            break;
          }
          pub->batch.oldest_ns = kvp__now_ns();
          continue;
        }
        if (it->type == KVP_EV_SNAPSHOT)
          count = it->nhashes;
        if (count == 0 && it->nhashes > from)
          count = 1;
        int rc = kvp__batch_add(&pub->batch, it, from, count);
        if (rc != 0) {
          kvp_log_error("publisher %s: event lost: %s", pub->o.worker_id, kvp_strerror(rc));
          pub->core_lost++;
          break;
        }
        from += count;
      } while (from < it->nhashes);
      if (stalled) {
        pub->item_from = from; /* the window holds the item's hashes before it */
        break;
      }
      pub->item_from = 0;
      pub->consumed = first + i + 1;
      if (full(pub))
        try_emit(pub);
    }
    /* The window copied the items' words: their room goes back now. */
    kvp__pubq_release(&pub->q, pub->consumed);
  }
  /* A window the loop may not publish yet waits for acks, not for its
   * timer: the step an ack wakes drains again and starts it. */
  if (pub->batch.nev > 0 && may_emit(pub) && !uv_is_active((uv_handle_t *)&pub->delay_timer)) {
    uint64_t age_ms = (kvp__now_ns() - pub->batch.oldest_ns) / 1000000u;
    uint64_t wait = age_ms >= pub->o.max_delay_ms ? 0 : pub->o.max_delay_ms - age_ms;
    uv_timer_start(&pub->delay_timer, on_delay, wait, 0);
  }
}

static void on_close(uv_handle_t *h) {
  (void)h;
}

static void stop_loop(kvp_publisher_t *pub) {
  if (pub->stopping)
    return;
  pub->stopping = 1;
  pthread_mutex_lock(&pub->wmu);
  pub->wake_ok = 0;
  pthread_mutex_unlock(&pub->wmu);
  uv_close((uv_handle_t *)&pub->async, on_close);
  uv_close((uv_handle_t *)&pub->delay_timer, on_close);
  uv_close((uv_handle_t *)&pub->tick_timer, on_close);
}

static void step(kvp_publisher_t *pub) {
  if (pub->stopping)
    return;
  if (pub->o.mode == KVP_PUB_JETSTREAM) {
    process_acks(pub);
    retry_unacked(pub);
  }
  drain(pub);
  uint64_t fw = atomic_exchange(&pub->flush_want, 0);
  /* A flush that finds no room for a batch asks again (every 20 ms). */
  if (fw != 0 && pub->batch.nev > 0)
    try_emit(pub);
  if (atomic_load(&pub->stop))
    stop_loop(pub);
  settle(pub);
}

void kvp__pub_on_async(uv_async_t *a) {
  step(a->data);
}

static void on_tick(uv_timer_t *t) {
  kvp_publisher_t *pub = t->data;
  step(pub);
  if (pub->stopping)
    return;
  uint64_t now = kvp__now_ns();
  int idle = pub->batch.nev == 0 && (pub->o.mode == KVP_PUB_CORE || pcount(pub) == 0);
  if (idle && now - pub->last_send_ns >= (uint64_t)pub->o.heartbeat_ms * 1000000u)
    emit_window(pub, 1);
  settle(pub);
}

void kvp__pub_loop_main(void *arg) {
  kvp_publisher_t *pub = arg;
  pthread_setname_np(pthread_self(), "kvp-publisher"); /* seen in top, perf, gdb */
  pub->last_send_ns = kvp__now_ns();
  uv_timer_start(&pub->tick_timer, on_tick, 50, 50);
  uv_run(&pub->loop, UV_RUN_DEFAULT);
}
