/* The publisher's bounded multi-producer, single-consumer queue.
 *
 * Producers copy an event into a preallocated item ring plus a word arena
 * (hashes, parents, hit counts and token ids as 64-bit words) under a short
 * mutex: no malloc per event unless one event is larger than a quarter of
 * the arena. The single consumer (the loop thread) takes a range of items
 * without the lock, reads them in place and releases them. */
#ifndef KVP_PUBLISH_QUEUE_H
#define KVP_PUBLISH_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvplane/event.h"

#define KVP__VOLUME_MAX 32

typedef struct kvp__pubq_item_s {
  uint8_t type;
  uint8_t tier;
  uint8_t has_parent;
  uint8_t last; /* snapshot: last chunk */
  uint8_t engine_native;
  int32_t lora_id;
  uint32_t nhashes;
  uint32_t ntok; /* token ids, packed two per word after the hashes */
  uint32_t block_tokens;
  uint32_t chunk;      /* snapshot chunk */
  uint8_t has_hits;    /* accessed: hit counts packed after the hashes */
  uint8_t has_parents; /* snapshot: parent hashes after the hashes */
  uint64_t parent_hash;
  uint64_t block_bytes;
  uint64_t snapshot_id;
  uint64_t arena_end; /* arena position after this item's words */
  uint64_t *words;    /* in the arena, or malloc'd (ext) */
  int ext;
  char volume[KVP__VOLUME_MAX];
} kvp__pubq_item_t;

typedef struct kvp__pubq_s {
  pthread_mutex_t mu;
  pthread_cond_t not_full;
  kvp__pubq_item_t *items;
  uint64_t *arena;
  size_t cap;            /* items, power of 2 */
  size_t wcap;           /* words, power of 2 */
  uint64_t head, tail;   /* item counters; head - tail <= cap */
  uint64_t ahead, atail; /* arena word counters */
  int waiters;
  int closed;
  int drop;   /* overflow policy drop */
  int locked; /* items and arena are mlock'ed */
  /* Called under the lock when a producer finds no room, before it waits
   * (block) or gives up (drop): the consumer must run to make room. */
  void (*on_full)(void *ctx);
  void *on_full_ctx;
  uint64_t dropped; /* events refused in drop mode, not yet reported */
  uint64_t dropped_total;
} kvp__pubq_t;

/* cap items (rounded up to a power of 2). Returns 0 or KVP_ENOMEM. */
int kvp__pubq_init(kvp__pubq_t *q, size_t cap, int drop);
void kvp__pubq_destroy(kvp__pubq_t *q);

/* What kvp__pubq_push reports in *before for an event that filled the word
 * arena past half. */
#define KVP__PUBQ_HALF SIZE_MAX

/* Copies ev (validated by the caller). *before receives how many events
 * were queued before it (0: the consumer may need waking), or
 * KVP__PUBQ_HALF: the consumer should run now. Returns 0, KVP_EOVERFLOW
 * (drop mode, counted), KVP_ECLOSED or KVP_ENOMEM (an oversized event
 * could not be copied). */
int kvp__pubq_push(kvp__pubq_t *q, const kvp_event_t *ev, size_t *before);

/* kvp__pubq_push that, when the queue is full, waits for room until
 * deadline_ns (kvp__now_ns() time) whatever the overflow policy, then
 * returns KVP_EOVERFLOW without counting a dropped event. For snapshot
 * chunks, which must get through whole and are retried when they cannot. */
int kvp__pubq_push_wait(kvp__pubq_t *q, const kvp_event_t *ev, size_t *before,
                        uint64_t deadline_ns);

/* Consumer: the range [*first, *first + *n) of items ready to read. */
void kvp__pubq_peek(kvp__pubq_t *q, uint64_t *first, size_t *n);

static inline kvp__pubq_item_t *kvp__pubq_at(kvp__pubq_t *q, uint64_t i) {
  return &q->items[i & (q->cap - 1)];
}

/* Consumer: frees items before upto (exclusive) and wakes blocked producers. */
void kvp__pubq_release(kvp__pubq_t *q, uint64_t upto);

/* Producer count so far (the flush ticket). */
uint64_t kvp__pubq_head(kvp__pubq_t *q);

/* Takes and resets the count of events dropped since the last call. */
uint64_t kvp__pubq_take_dropped(kvp__pubq_t *q);

/* Wakes blocked producers with KVP_ECLOSED; later pushes fail too. */
void kvp__pubq_close(kvp__pubq_t *q);

#endif
