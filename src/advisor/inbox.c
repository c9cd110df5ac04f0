/* The advisor's inbox; see inbox.h. */
#include "advisor/inbox.h"

#include <stdlib.h>

#include "common/clock.h"
#include "kvplane/status.h"

int kvp__adv_inbox_init(kvp__adv_inbox_t *in, size_t max, uv_async_t *wake) {
  in->head = in->tail = NULL;
  in->len = 0;
  in->max = max;
  in->dropped = 0;
  in->wake = wake;
  in->wake_closed = 0;
  if (pthread_mutex_init(&in->lock, NULL) != 0)
    return KVP_ENOMEM;
  if (pthread_cond_init(&in->room, NULL) != 0) {
    pthread_mutex_destroy(&in->lock);
    return KVP_ENOMEM;
  }
  return 0;
}

void kvp__adv_inbox_destroy(kvp__adv_inbox_t *in) {
  kvp__adv_in_t *it = in->head;
  while (it != NULL) {
    kvp__adv_in_t *next = it->next;
    kvp__adv_in_free(it);
    it = next;
  }
  in->head = in->tail = NULL;
  pthread_cond_destroy(&in->room);
  pthread_mutex_destroy(&in->lock);
}

void kvp__adv_in_free(kvp__adv_in_t *it) {
  if (it == NULL)
    return;
  natsMsg_Destroy(it->msg);
  free(it);
}

int kvp__adv_inbox_push(kvp__adv_inbox_t *in, kvp__adv_in_kind_t kind, natsMsg *msg, uint64_t seq,
                        int drop_if_full) {
  return kvp__adv_inbox_push_slot(in, kind, msg, seq, 0, drop_if_full);
}

int kvp__adv_inbox_push_slot(kvp__adv_inbox_t *in, kvp__adv_in_kind_t kind, natsMsg *msg,
                             uint64_t seq, int slot, int drop_if_full) {
  kvp__adv_in_t *it = malloc(sizeof *it);
  if (it == NULL) {
    natsMsg_Destroy(msg);
    return KVP_ENOMEM;
  }
  it->next = NULL;
  it->kind = kind;
  it->msg = msg;
  it->seq = seq;
  it->slot = slot;
  pthread_mutex_lock(&in->lock);
  if (drop_if_full && in->len >= in->max) {
    in->dropped++;
    pthread_mutex_unlock(&in->lock);
    kvp__adv_in_free(it);
    return KVP_EOVERFLOW;
  }
  if (in->tail)
    in->tail->next = it;
  else
    in->head = it;
  in->tail = it;
  in->len++;
  /* Sent under the lock so that it never races the handle's close. */
  if (!in->wake_closed)
    uv_async_send(in->wake);
  pthread_mutex_unlock(&in->lock);
  return 0;
}

int kvp__adv_inbox_wait_room(kvp__adv_inbox_t *in, const atomic_int *stopping) {
  pthread_mutex_lock(&in->lock);
  while (in->len >= in->max && !atomic_load(stopping)) {
    struct timespec ts = kvp__realtime_in(100000000);
    pthread_cond_timedwait(&in->room, &in->lock, &ts);
  }
  pthread_mutex_unlock(&in->lock);
  return atomic_load(stopping) ? KVP_ECLOSED : 0;
}

kvp__adv_in_t *kvp__adv_inbox_take_all(kvp__adv_inbox_t *in) {
  kvp__adv_in_t *it;
  pthread_mutex_lock(&in->lock);
  it = in->head;
  in->head = in->tail = NULL;
  in->len = 0;
  pthread_cond_broadcast(&in->room);
  pthread_mutex_unlock(&in->lock);
  return it;
}

void kvp__adv_inbox_wake(kvp__adv_inbox_t *in) {
  pthread_mutex_lock(&in->lock);
  if (!in->wake_closed)
    uv_async_send(in->wake);
  pthread_mutex_unlock(&in->lock);
}

void kvp__adv_inbox_close_wake(kvp__adv_inbox_t *in) {
  pthread_mutex_lock(&in->lock);
  in->wake_closed = 1;
  pthread_cond_broadcast(&in->room);
  pthread_mutex_unlock(&in->lock);
}

uint64_t kvp__adv_inbox_dropped(kvp__adv_inbox_t *in) {
  uint64_t n;
  pthread_mutex_lock(&in->lock);
  n = in->dropped;
  pthread_mutex_unlock(&in->lock);
  return n;
}
