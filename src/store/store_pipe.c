/* The hand-off between a load's reader thread and the loading thread
 * (store_impl.h, kvp__store_pipe_t): the rows' batches (store_rows.c) and
 * the snapshot's chunks (store_snapshot_read.c). A fixed set of items goes
 * round: the reader takes a free one, fills it and puts it full; the
 * loader takes it full, empties it and puts it free. */
#include "store/store_impl.h"

#include "kvplane/status.h"

int kvp__store_pipe_init(kvp__store_pipe_t *p) {
  p->free_list = p->full_head = p->full_tail = NULL;
  p->stop = 0;
  if (pthread_mutex_init(&p->mu, NULL) != 0)
    return KVP_ENOMEM;
  if (pthread_cond_init(&p->cv, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    return KVP_ENOMEM;
  }
  return 0;
}

void kvp__store_pipe_destroy(kvp__store_pipe_t *p) {
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
}

void kvp__store_pipe_put(kvp__store_pipe_t *p, int full, kvp__store_pipe_item_t *it) {
  pthread_mutex_lock(&p->mu);
  it->next = NULL;
  if (full) {
    if (p->full_tail)
      p->full_tail->next = it;
    else
      p->full_head = it;
    p->full_tail = it;
  } else {
    it->next = p->free_list;
    p->free_list = it;
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

kvp__store_pipe_item_t *kvp__store_pipe_take(kvp__store_pipe_t *p, int full) {
  kvp__store_pipe_item_t *it = NULL;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (full && p->full_head) {
      it = p->full_head;
      if ((p->full_head = it->next) == NULL)
        p->full_tail = NULL;
      break;
    }
    if (!full && (p->stop || p->free_list)) {
      if (!p->stop) {
        it = p->free_list;
        p->free_list = it->next;
      }
      break;
    }
    pthread_cond_wait(&p->cv, &p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return it;
}

void kvp__store_pipe_stop(kvp__store_pipe_t *p) {
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}
