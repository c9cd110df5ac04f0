/* The advisor's inbox: the one place where messages cross threads. nats.c's
 * threads (core events, API requests) and the JetStream fetch thread append
 * messages; the loop thread takes them all at once and wakes on a
 * uv_async_t.
 *
 * Threads: push, wait_room, wake and dropped run on any thread; take_all,
 * init and destroy on the loop thread (init and destroy while no other
 * thread uses the inbox). The wake handle is signalled under the inbox's
 * lock, so close_wake() guarantees that no uv_async_send reaches the handle
 * after it returns, and the loop may then close the handle. */
#ifndef KVP_ADVISOR_INBOX_H
#define KVP_ADVISOR_INBOX_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef enum kvp__adv_in_kind_e {
  KVP__IN_EVENT,    /* core event batch */
  KVP__IN_JS_EVENT, /* JetStream event batch; seq is its stream sequence */
  KVP__IN_TIER,     /* the operator's tiering control request */
  KVP__IN_PARTS,    /* a live rebalance request (advisor/rebalance.c) */
} kvp__adv_in_kind_t;

typedef struct kvp__adv_in_s {
  struct kvp__adv_in_s *next;
  kvp__adv_in_kind_t kind;
  uint64_t seq;
  int slot;     /* JetStream: the consumer's slot (partset.h); 0 otherwise */
  natsMsg *msg; /* owned by the item until taken (set to NULL) */
} kvp__adv_in_t;

typedef struct kvp__adv_inbox_s {
  pthread_mutex_t lock;
  pthread_cond_t room; /* signalled when take_all empties the inbox */
  kvp__adv_in_t *head, *tail;
  size_t len, max;
  uint64_t dropped; /* refused because full (core events) */
  uv_async_t *wake;
  int wake_closed;
} kvp__adv_inbox_t;

/* Sets up an empty inbox of at most max messages (for pushes that may be
 * refused), signalling wake on every push. Returns 0 or KVP_ENOMEM. */
int kvp__adv_inbox_init(kvp__adv_inbox_t *in, size_t max, uv_async_t *wake);

/* Frees every message still queued and the lock. */
void kvp__adv_inbox_destroy(kvp__adv_inbox_t *in);

/* Appends msg (taking it: it is destroyed if it cannot be queued) and wakes
 * the loop. Returns 0, KVP_EOVERFLOW when drop_if_full is set and the inbox
 * holds max messages (counted in dropped), or KVP_ENOMEM. */
int kvp__adv_inbox_push(kvp__adv_inbox_t *in, kvp__adv_in_kind_t kind, natsMsg *msg, uint64_t seq,
                        int drop_if_full);

/* The same, for slot's consumer (a partitioned advisor's JetStream
 * events). */
int kvp__adv_inbox_push_slot(kvp__adv_inbox_t *in, kvp__adv_in_kind_t kind, natsMsg *msg,
                             uint64_t seq, int slot, int drop_if_full);

/* Blocks while the inbox holds max messages or more, until take_all makes
 * room or *stopping is set (checked at least every 100 ms). Returns 0 when
 * there is room, KVP_ECLOSED when stopping. */
int kvp__adv_inbox_wait_room(kvp__adv_inbox_t *in, const atomic_int *stopping);

/* Takes every queued message as a list, oldest first (free each with
 * kvp__adv_in_free), and wakes a waiter in wait_room. */
kvp__adv_in_t *kvp__adv_inbox_take_all(kvp__adv_inbox_t *in);

/* Wakes the loop, unless close_wake ran. */
void kvp__adv_inbox_wake(kvp__adv_inbox_t *in);

/* From now on no push or wake touches the wake handle; also wakes
 * wait_room's callers so they can look at their stop flag. */
void kvp__adv_inbox_close_wake(kvp__adv_inbox_t *in);

/* Messages refused by a full inbox so far. */
uint64_t kvp__adv_inbox_dropped(kvp__adv_inbox_t *in);

/* Destroys an item and the message it still holds; NULL is accepted. */
void kvp__adv_in_free(kvp__adv_in_t *it);

#endif
