/* The advisor's query connection; see query.h. */
#include "advisor/query.h"

#include <nats/adapters/libuv.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

struct kvp__adv_query_s {
  uv_loop_t *loop;
  const kvp_advisor_config_t *cfg;
  natsConnection *nc;
  natsSubscription *sub[2]; /* match, stats */
  uv_check_t check;
  int check_init, stopped;
  kvp__adv_query_fn answer;
  void *ctx;
  uint64_t answered;
};

void kvp__adv_query_bind_thread(uv_loop_t *loop) {
  natsLibuv_Init();
  natsLibuv_SetThreadLocalLoop(loop);
}

/* Answers what the last poll phase read: every request queued on the
 * subscriptions, oldest first (match before stats within one pass). */
static void on_check(uv_check_t *h) {
  kvp__adv_query_t *q = h->data;
  uint64_t before = q->answered;
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
      natsMsg_Destroy(m);
    }
  }
  /* The answers go out now, in one write, not at the loop's next poll of
   * the socket for writing (a turn of the loop later). */
  if (q->answered != before)
    natsConnection_ProcessWriteEvent(q->nc);
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
      .ev_loop = loop,
      .ev_attach = natsLibuv_Attach,
      .ev_read = natsLibuv_Read,
      .ev_write = natsLibuv_Write,
      .ev_detach = natsLibuv_Detach,
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
  kvp_log_debug("advisor: query connection closed after %llu answers",
                (unsigned long long)q->answered);
}

void kvp__adv_query_destroy(kvp__adv_query_t *q) {
  if (q == NULL)
    return;
  for (int k = 0; k < 2; k++)
    natsSubscription_Destroy(q->sub[k]);
  natsConnection_Destroy(q->nc);
  free(q);
}

uint64_t kvp__adv_query_answered(const kvp__adv_query_t *q) {
  return q ? q->answered : 0;
}
