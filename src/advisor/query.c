/* The advisor's query connection; see query.h. */
#include "advisor/query.h"

#include <nats/adapters/libuv.h>
#include <nats/nats.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

/* Answered requests kept before their destruction (defer_destroy). */
#define QUERY_REAP_MAX 256
#define QUERY_REAP_MS 20

/* The query connection's event adapter: nats.c's libuv adapter (inner),
 * except that a change of write interest asked by the loop thread while it
 * answers (on_check) is only noted, and applied after the answers were
 * written, if a write is still wanted then. Each answer used to add the
 * write interest (publish) and remove it (the write): two uv_poll_start,
 * each an epoll_ctl DEL and the next poll an ADD, in every advisor a
 * gathered match waits for. Other threads' calls (nats.c's pings) and the
 * loop's own outside on_check go to the adapter as they come. */
typedef struct {
  void *inner; /* the libuv adapter's state */
  struct kvp__adv_query_s *q;
  int want_write;       /* as nats.c last asked, while deferred (loop thread) */
  atomic_int has_write; /* as the adapter was last told, by any thread; a
                         * stale value costs one needless poll update */
  atomic_uint told;     /* calls that went to the adapter, by any thread */
} qev_t;

/* The adapter whose write interest this thread is deferring: set by
 * on_check on the loop thread only, so other threads always see NULL. */
static _Thread_local qev_t *deferring;

struct kvp__adv_query_s {
  uv_loop_t *loop;
  qev_t *ev;
  const kvp_advisor_config_t *cfg;
  natsConnection *nc;
  natsSubscription *sub[2]; /* match, stats */
  uv_check_t check;
  /* Answered requests, destroyed together off the reply path (see
   * defer_destroy). */
  uv_timer_t reap;
  natsMsg *done[QUERY_REAP_MAX];
  int ndone;
  int check_init, reap_init, stopped;
  kvp__adv_query_fn answer;
  void *ctx;
  uint64_t answered;
};

/* nats.c hands every natsMsg_Destroy of a received message to its
 * garbage-collector thread, signalling it when it waits: one cross-thread
 * wake-up (and a contended lock) per request, on the reply path, in every
 * advisor a gathered match waits for. Answered requests are kept here and
 * destroyed together QUERY_REAP_MS later, or at once when QUERY_REAP_MAX
 * are kept: one wake-up per batch, after the answers went out. */
static void reap_all(kvp__adv_query_t *q) {
  for (int i = 0; i < q->ndone; i++)
    natsMsg_Destroy(q->done[i]);
  q->ndone = 0;
}

static void on_reap(uv_timer_t *t) {
  reap_all(t->data);
}

static void defer_destroy(kvp__adv_query_t *q, natsMsg *m) {
  if (!q->reap_init) {
    natsMsg_Destroy(m);
    return;
  }
  if (q->ndone == QUERY_REAP_MAX)
    reap_all(q);
  q->done[q->ndone++] = m;
  if (!uv_is_active((uv_handle_t *)&q->reap))
    uv_timer_start(&q->reap, on_reap, QUERY_REAP_MS, 0);
}

void kvp__adv_query_bind_thread(uv_loop_t *loop) {
  natsLibuv_Init();
  natsLibuv_SetThreadLocalLoop(loop);
}

static natsStatus qev_attach(void **user, void *loop, natsConnection *nc, natsSock fd) {
  qev_t *e = *user;
  kvp__adv_query_t *q = loop;
  natsStatus s;
  if (e == NULL) { /* the first attach; later ones are reconnects */
    if ((e = calloc(1, sizeof *e)) == NULL)
      return NATS_NO_MEMORY;
    e->q = q;
  }
  if ((s = natsLibuv_Attach(&e->inner, q->loop, nc, fd)) != NATS_OK) {
    if (*user == NULL)
      free(e); /* the adapter detached its own state */
    return s;
  }
  atomic_store(&e->has_write, 0); /* a new socket polls for reading only */
  if (*user == NULL) {            /* on the loop thread (the adapter's rule) */
    q->ev = e;
    *user = e;
  }
  return NATS_OK;
}

static natsStatus qev_read(void *user, bool add) {
  return natsLibuv_Read(((qev_t *)user)->inner, add);
}

static natsStatus qev_write(void *user, bool add) {
  qev_t *e = user;
  if (deferring == e) {
    e->want_write = add;
    return NATS_OK;
  }
  natsStatus s = natsLibuv_Write(e->inner, add);
  if (s == NATS_OK)
    atomic_store(&e->has_write, add);
  atomic_fetch_add(&e->told, 1);
  return s;
}

static natsStatus qev_detach(void *user) {
  qev_t *e = user;
  natsStatus s = natsLibuv_Detach(e->inner);
  if (e->q->ev == e)
    e->q->ev = NULL;
  free(e);
  return s;
}

/* Answers what the last poll phase read: every request queued on the
 * subscriptions, oldest first (match before stats within one pass). */
static void on_check(uv_check_t *h) {
  kvp__adv_query_t *q = h->data;
  uint64_t before = q->answered;
  qev_t *e = q->ev;
  unsigned told = 0;
  if (e != NULL) {
    told = atomic_load(&e->told);
    e->want_write = atomic_load(&e->has_write);
    deferring = e;
  }
  for (int k = 0; k < 2 && !q->stopped; k++) {
    int pending = 0;
    while (q->sub[k] != NULL && natsSubscription_GetPending(q->sub[k], &pending, NULL) == NATS_OK &&
           pending > 0) {
      natsMsg *m = NULL;
      if (natsSubscription_NextMsg(&m, q->sub[k], 0) != NATS_OK || m == NULL)
        break;
      const char *to = natsMsg_GetReply(m);
      if (to != NULL && to[0] != '\0') {
        char *json = q->answer(q->ctx, k, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
        if (json != NULL) {
          natsConnection_PublishString(q->nc, to, json);
          q->answered++;
        }
        free(json);
      }
      defer_destroy(q, m);
    }
  }
  /* The answers go out now, in one write, not at the loop's next poll of
   * the socket for writing (a turn of the loop later). */
  if (q->answered != before)
    natsConnection_ProcessWriteEvent(q->nc);
  deferring = NULL;
  /* What is left unwritten (a full socket) waits for the socket. A write
   * asked meanwhile by another thread (nats.c's pinger) is not taken back:
   * its bytes may be in the buffer after the flush above (a write too
   * many costs one poll; one too few, a PING sent with the next answer). */
  if (e != NULL && e->want_write != atomic_load(&e->has_write) &&
      (e->want_write || atomic_load(&e->told) == told))
    qev_write(e, e->want_write);
}

int kvp__adv_query_open(uv_loop_t *loop, const kvp_advisor_config_t *cfg, kvp__adv_query_fn answer,
                        void *ctx, kvp__adv_query_t **out, char *err, size_t errlen) {
  kvp__adv_query_t *q;
  int rc;

  *out = NULL;
  if ((q = calloc(1, sizeof *q)) == NULL)
    return KVP_ENOMEM;
  q->loop = loop;
  q->cfg = cfg;
  q->answer = answer;
  q->ctx = ctx;
  /* The first attach must come from the loop's thread (nats.c's adapter
   * refuses it elsewhere): this one, until uv_run says otherwise. send_asap:
   * a reply asks the loop for a write at once, not through nats.c's
   * flusher thread (a wake-up of its own). */
  kvp__adv_query_bind_thread(loop);
  kvp__nats_conn_args_t a = {
      .name = "kvplane-advisor-queries",
      .reconnect_wait_ms = 250,
      .send_asap = 1,
      .ev_loop = q,
      .ev_attach = qev_attach,
      .ev_read = qev_read,
      .ev_write = qev_write,
      .ev_detach = qev_detach,
  };
  if ((rc = kvp__nats_connect(&cfg->nats, &a, &q->nc, err, errlen)) != 0) {
    free(q);
    return rc;
  }
  if (uv_check_init(loop, &q->check) != 0) {
    natsConnection_Destroy(q->nc);
    free(q);
    return KVP_ENOMEM;
  }
  q->check.data = q;
  q->check_init = 1;
  if (uv_timer_init(loop, &q->reap) == 0) {
    q->reap.data = q;
    q->reap_init = 1;
  }
  *out = q;
  return 0;
}

int kvp__adv_query_start(kvp__adv_query_t *q, char *err, size_t errlen) {
  static const char *const calls[2] = {KVP_API_MATCH, KVP_API_STATS};
  char subj[KVP_SUBJECT_MAX];
  natsStatus s;

  for (int k = 0; k < 2; k++) {
    if (kvp_subject_api(subj, sizeof subj, q->cfg->ns, calls[k]) != 0) {
      snprintf(err, errlen, "[advisor] namespace: '%s' makes no subject", q->cfg->ns);
      return KVP_ECONFIG;
    }
    if ((s = natsConnection_SubscribeSync(&q->sub[k], q->nc, subj)) != NATS_OK) {
      snprintf(err, errlen, "%s: %s", subj, natsStatus_GetText(s));
      return kvp__nats_status(s);
    }
    /* As the event connection's default: requests are small and few. */
    natsSubscription_SetPendingLimits(q->sub[k], 65536, 64 << 20);
  }
  uv_check_start(&q->check, on_check);
  /* The subscriptions go out now, not with the loop's first write: a
   * router may ask as soon as the advisor is open. (Open runs on the
   * loop's thread with the loop idle: the adapter is called directly.) */
  natsConnection_ProcessWriteEvent(q->nc);
  return 0;
}

void kvp__adv_query_stop(kvp__adv_query_t *q) {
  if (q == NULL || q->stopped)
    return;
  q->stopped = 1;
  for (int k = 0; k < 2; k++)
    if (q->sub[k] != NULL)
      natsSubscription_Unsubscribe(q->sub[k]);
  /* Closing detaches the connection from the loop: the adapter closes its
   * handles (in the loop's next run). */
  natsConnection_Close(q->nc);
  if (q->check_init && !uv_is_closing((uv_handle_t *)&q->check))
    uv_close((uv_handle_t *)&q->check, NULL);
  reap_all(q);
  if (q->reap_init && !uv_is_closing((uv_handle_t *)&q->reap))
    uv_close((uv_handle_t *)&q->reap, NULL);
  kvp_log_debug("advisor: query connection closed after %llu answers",
                (unsigned long long)q->answered);
}

void kvp__adv_query_destroy(kvp__adv_query_t *q) {
  if (q == NULL)
    return;
  reap_all(q); /* none when stopped */
  for (int k = 0; k < 2; k++)
    natsSubscription_Destroy(q->sub[k]);
  natsConnection_Destroy(q->nc);
  free(q);
}

uint64_t kvp__adv_query_answered(const kvp__adv_query_t *q) {
  return q ? q->answered : 0;
}
