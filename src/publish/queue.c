/* Bounded MPSC queue of events for the publisher (see queue.h). */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "publish/queue.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/clock.h"
#include "kvplane/status.h"

static size_t pow2(size_t v) {
  size_t p = 1;
  while (p < v)
    p <<= 1;
  return p;
}

int kvp__pubq_init(kvp__pubq_t *q, size_t cap, int drop) {
  int rc = KVP_ENOMEM;
  memset(q, 0, sizeof *q);
  q->cap = pow2(cap < 2 ? 2 : cap);
  /* Four words per event on average, at least 64 Ki words. */
  q->wcap = pow2(q->cap * 4 < 65536 ? 65536 : q->cap * 4);
  q->drop = drop;
  q->items = calloc(q->cap, sizeof *q->items);
  if (q->items == NULL)
    goto fail;
  q->arena = malloc(q->wcap * sizeof *q->arena);
  if (q->arena == NULL)
    goto fail_items;
  /* Resident and locked, best effort (mlock needs CAP_IPC_LOCK or room
   * under RLIMIT_MEMLOCK; without it the pages are only touched): a page
   * fault inside a producer's call, on a first pass through the arena or
   * after the kernel reclaimed idle pages (DAMON pageout on the CI VMs),
   * cost 10-80 us, which was the call's p99 in the trace workload. */
  memset(q->items, 0, q->cap * sizeof *q->items);
  memset(q->arena, 0, q->wcap * sizeof *q->arena);
  q->locked = mlock(q->items, q->cap * sizeof *q->items) == 0;
  if (q->locked && mlock(q->arena, q->wcap * sizeof *q->arena) != 0) {
    munlock(q->items, q->cap * sizeof *q->items);
    q->locked = 0;
  }
  /* The lock is held for a copy at most: an adaptive mutex spins briefly
   * instead of putting a producer to sleep behind the consumer's peek (a
   * futex sleep and wake-up cost 10-20 us here, the p99 of the call). */
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  int mrc = pthread_mutex_init(&q->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  if (mrc != 0)
    goto fail_arena;
  if (pthread_cond_init(&q->not_full, NULL) != 0)
    goto fail_mu;
  return 0;
fail_mu:
  pthread_mutex_destroy(&q->mu);
fail_arena:
  free(q->arena);
fail_items:
  free(q->items);
fail:
  return rc;
}

void kvp__pubq_destroy(kvp__pubq_t *q) {
  for (uint64_t i = q->tail; i < q->head; i++) {
    kvp__pubq_item_t *it = kvp__pubq_at(q, i);
    if (it->ext)
      free(it->words);
  }
  pthread_cond_destroy(&q->not_full);
  pthread_mutex_destroy(&q->mu);
  if (q->locked) {
    munlock(q->items, q->cap * sizeof *q->items);
    munlock(q->arena, q->wcap * sizeof *q->arena);
  }
  free(q->arena);
  free(q->items);
}

static size_t words_of(const kvp_event_t *ev) {
  size_t w = ev->nhashes;
  if (ev->type == KVP_EV_ACCESSED && ev->hit_counts != NULL)
    w += (ev->nhashes + 1) / 2;
  if (ev->type == KVP_EV_SNAPSHOT && ev->parent_hashes != NULL)
    w += ev->nhashes;
  if (ev->type == KVP_EV_STORED && ev->token_ids != NULL)
    w += (ev->ntoken_ids + 1) / 2;
  return w;
}

static void pack32(uint64_t *dst, const uint32_t *src, size_t n) {
  for (size_t i = 0; i < n; i += 2)
    dst[i / 2] = (uint64_t)src[i] | (i + 1 < n ? (uint64_t)src[i + 1] << 32 : 0);
}

static void fill(kvp__pubq_item_t *it, const kvp_event_t *ev, uint64_t *w) {
  it->type = (uint8_t)ev->type;
  it->tier = (uint8_t)ev->tier;
  it->has_parent = ev->has_parent ? 1 : 0;
  it->parent_hash = ev->parent_hash;
  it->lora_id = ev->lora_id;
  it->engine_native = ev->engine_native ? 1 : 0;
  it->nhashes = (uint32_t)ev->nhashes;
  it->block_tokens = ev->block_tokens;
  it->block_bytes = ev->block_bytes;
  it->snapshot_id = ev->snapshot_id;
  it->chunk = ev->chunk;
  it->last = ev->last ? 1 : 0;
  it->has_hits = 0;
  it->has_parents = 0;
  it->ntok = 0;
  it->words = w;
  if (ev->volume != NULL && ev->volume[0] != '\0') {
    size_t l = strlen(ev->volume);
    memcpy(it->volume, ev->volume, l + 1);
  } else {
    it->volume[0] = '\0';
  }
  if (ev->nhashes > 0)
    memcpy(w, ev->hashes, ev->nhashes * sizeof *w);
  w += ev->nhashes;
  if (ev->type == KVP_EV_ACCESSED && ev->hit_counts != NULL) {
    pack32(w, ev->hit_counts, ev->nhashes);
    it->has_hits = 1;
  } else if (ev->type == KVP_EV_SNAPSHOT && ev->parent_hashes != NULL) {
    memcpy(w, ev->parent_hashes, ev->nhashes * sizeof *w);
    it->has_parents = 1;
  } else if (ev->type == KVP_EV_STORED && ev->token_ids != NULL) {
    pack32(w, ev->token_ids, ev->ntoken_ids);
    it->ntok = (uint32_t)ev->ntoken_ids;
  }
}

/* kvp__pubq_push, or with deadline_ns (kvp__now_ns() time, not 0) waiting
 * for room until then whatever the policy (kvp__pubq_push_wait). */
static int push(kvp__pubq_t *q, const kvp_event_t *ev, size_t *before, uint64_t deadline_ns) {
  int rc = 0;
  size_t nw = words_of(ev);
  uint64_t *ext = NULL;
  uint64_t pos = 0;

  *before = 1;
  if (nw > q->wcap / 4) {
    ext = malloc(nw * sizeof *ext);
    if (ext == NULL)
      return KVP_ENOMEM;
  }
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->closed) {
      rc = KVP_ECLOSED;
      goto out;
    }
    int room = q->head - q->tail < q->cap;
    if (room && ext == NULL) {
      pos = q->ahead;
      size_t off = (size_t)(pos & (q->wcap - 1));
      if (off + nw > q->wcap)
        pos += q->wcap - off; /* keep each item's words contiguous */
      room = pos + nw - q->atail <= q->wcap;
    }
    if (room)
      break;
    if (q->on_full)
      q->on_full(q->on_full_ctx);
    if (deadline_ns != 0) {
      if (kvp__now_ns() >= deadline_ns) {
        rc = KVP_EOVERFLOW; /* not a dropped event: the caller retries */
        goto out;
      }
      /* The condition variable runs on CLOCK_REALTIME: wait in 1 ms steps
       * and check the monotonic deadline between them. */
      struct timespec ts = kvp__realtime_in(1000000);
      q->waiters++;
      pthread_cond_timedwait(&q->not_full, &q->mu, &ts);
      q->waiters--;
      continue;
    }
    if (q->drop) {
      q->dropped++;
      q->dropped_total++;
      rc = KVP_EOVERFLOW;
      goto out;
    }
    q->waiters++;
    pthread_cond_wait(&q->not_full, &q->mu);
    q->waiters--;
  }
  kvp__pubq_item_t *it = kvp__pubq_at(q, q->head);
  *before = (size_t)(q->head - q->tail);
  if (ext != NULL) {
    fill(it, ev, ext);
    it->ext = 1;
    it->arena_end = q->ahead;
    ext = NULL;
  } else {
    uint64_t used = q->ahead - q->atail;
    fill(it, ev, q->arena + (pos & (q->wcap - 1)));
    it->ext = 0;
    q->ahead = pos + nw;
    it->arena_end = q->ahead;
    if (used < q->wcap / 2 && q->ahead - q->atail >= q->wcap / 2)
      *before = KVP__PUBQ_HALF; /* this event filled the arena past half */
  }
  q->head++;
out:
  pthread_mutex_unlock(&q->mu);
  free(ext);
  return rc;
}

int kvp__pubq_push(kvp__pubq_t *q, const kvp_event_t *ev, size_t *before) {
  return push(q, ev, before, 0);
}

int kvp__pubq_push_wait(kvp__pubq_t *q, const kvp_event_t *ev, size_t *before,
                        uint64_t deadline_ns) {
  return push(q, ev, before, deadline_ns ? deadline_ns : 1);
}

void kvp__pubq_peek(kvp__pubq_t *q, uint64_t *first, size_t *n) {
  pthread_mutex_lock(&q->mu);
  *first = q->tail;
  *n = (size_t)(q->head - q->tail);
  pthread_mutex_unlock(&q->mu);
}

void kvp__pubq_release(kvp__pubq_t *q, uint64_t upto) {
  uint64_t aend = 0;
  int have = 0;
  /* The consumer owns items before head; free ext words without the lock. */
  for (uint64_t i = q->tail; i < upto; i++) {
    kvp__pubq_item_t *it = kvp__pubq_at(q, i);
    if (it->ext) {
      free(it->words);
      it->ext = 0;
    }
    aend = it->arena_end;
    have = 1;
  }
  pthread_mutex_lock(&q->mu);
  q->tail = upto;
  if (have)
    q->atail = aend;
  if (q->waiters > 0)
    pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}

uint64_t kvp__pubq_head(kvp__pubq_t *q) {
  pthread_mutex_lock(&q->mu);
  uint64_t h = q->head;
  pthread_mutex_unlock(&q->mu);
  return h;
}

uint64_t kvp__pubq_take_dropped(kvp__pubq_t *q) {
  pthread_mutex_lock(&q->mu);
  uint64_t d = q->dropped;
  q->dropped = 0;
  pthread_mutex_unlock(&q->mu);
  return d;
}

void kvp__pubq_close(kvp__pubq_t *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}
