/* NATS side of the publisher: connection options (auth, TLS), reconnect
 * callbacks, the JetStream stream and async acks, the resync subscription.
 * nats.c's own threads do the I/O; the callbacks below run on them and only
 * touch atomics, a mutex-protected ack list and uv_async_send. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/array.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"
#include "publish/pub.h"

static void on_disconnected(natsConnection *nc, void *closure) {
  kvp_publisher_t *pub = closure;
  (void)nc;
  atomic_store(&pub->link_up, 0);
  atomic_fetch_add(&pub->gen, 1);
  kvp__pub_wake(pub);
}

static void on_reconnected(natsConnection *nc, void *closure) {
  kvp_publisher_t *pub = closure;
  (void)nc;
  atomic_store(&pub->link_up, 1);
  atomic_fetch_add(&pub->f_reconnects, 1);
  /* Core mode cannot tell what was in flight when the link broke: resync. */
  if (pub->o.mode == KVP_PUB_CORE)
    atomic_store(&pub->resync_due, 1);
  kvp__pub_wake(pub);
}

static void on_closed(natsConnection *nc, void *closure) {
  kvp_publisher_t *pub = closure;
  (void)nc;
  pthread_mutex_lock(&pub->cmu);
  pub->nc_closed = 1;
  pthread_cond_broadcast(&pub->ccond);
  pthread_mutex_unlock(&pub->cmu);
}

static void on_sub_done(void *closure) {
  kvp_publisher_t *pub = closure;
  pthread_mutex_lock(&pub->cmu);
  pub->sub_done = 1;
  pthread_cond_broadcast(&pub->ccond);
  pthread_mutex_unlock(&pub->cmu);
}

static void on_resync(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  kvp_publisher_t *pub = closure;
  (void)nc;
  (void)sub;
  natsMsg_Destroy(msg);
  atomic_store(&pub->resync_due, 1);
}

/* Why an ack failed, kept for the resend's log line (under amu). No
 * responders: no stream takes the subject the servers made of it, which in
 * a partitioned deployment is a partition count the servers' mapping and
 * this publisher do not share (the publisher made or found the stream of
 * its own count's partition). */
static void ack_cause(kvp_publisher_t *pub, natsMsg *msg, const jsPubAckErr *pae) {
  if (pae->Err == NATS_NO_RESPONDERS) {
    if (pub->o.partitions > 0)
      snprintf(pub->ack_err, sizeof pub->ack_err,
               "no JetStream stream takes %s as the servers map it: check partitions (%u here) "
               "against the servers' mapping (kvplane nats-config)",
               natsMsg_GetSubject(msg), (unsigned)pub->o.partitions);
    else
      snprintf(pub->ack_err, sizeof pub->ack_err, "no JetStream stream takes %s",
               natsMsg_GetSubject(msg));
  } else {
    snprintf(pub->ack_err, sizeof pub->ack_err, "%s%s%s", natsStatus_GetText(pae->Err),
             pae->ErrText ? ": " : "", pae->ErrText ? pae->ErrText : "");
  }
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
  kvp_publisher_t *pub = closure;
  const char *id = NULL;
  (void)js;
  if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
    const char *c = strrchr(id, ':');
    uint64_t first = c ? strtoull(c + 1, NULL, 10) : 0;
    uint64_t v = first | (pa != NULL ? 0 : (1ull << 63));
    pthread_mutex_lock(&pub->amu);
    if (pa == NULL && pae != NULL)
      ack_cause(pub, msg, pae);
    /* Without room the ack is lost: the batch times out and is resent,
     * which the duplicate window absorbs. */
    if (KVP_ARRAY_RESERVE(pub->acks, pub->ackcap, pub->nacks + 1, 256) == 0)
      pub->acks[pub->nacks++] = v;
    pthread_mutex_unlock(&pub->amu);
    kvp__pub_wake(pub);
  }
  natsMsg_Destroy(msg);
}

int kvp__pub_connect(kvp_publisher_t *pub, char *err, size_t errlen) {
  const kvp_publisher_opts_t *o = &pub->o;
  kvp__nats_conn_args_t a = {
      .name = o->worker_id,
      .reconnect_wait_ms = 100,
      .ping_interval_ms = 1000,
      .max_pings_out = 2,
      .write_deadline_ms = 1000,
      /* JetStream: nothing is buffered while reconnecting, so no new batch
       * can reach the stream ahead of the resend of older lost ones. */
      .reconnect_buf_bytes = o->mode == KVP_PUB_JETSTREAM ? 1 : 32 << 20,
      /* JetStream: a batch goes out at once, not at nats.c's flusher's
       * next pass (it waits 1 ms for more): the loop publishes again only
       * when acks come back, so that 1 ms per round trip capped it at
       * js_max_inflight batches a millisecond. Core batches keep the
       * buffer: nothing waits on them. */
      .send_asap = o->mode == KVP_PUB_JETSTREAM,
      .disconnected = on_disconnected,
      .reconnected = on_reconnected,
      .closed = on_closed,
      .closure = pub,
  };
  natsStatus s;
  int rc;

  if ((rc = kvp__nats_connect(&o->nats, &a, &pub->nc, err, errlen)) != 0)
    goto out;
  atomic_store(&pub->link_up, 1);
  if ((int64_t)o->batch_max_bytes + 1024 > natsConnection_GetMaxPayload(pub->nc)) {
    rc = KVP_ECONFIG;
    snprintf(err, errlen, "batch_max_bytes: %zu over the server's max payload %" PRId64,
             o->batch_max_bytes, natsConnection_GetMaxPayload(pub->nc));
    goto out;
  }
  if (o->mode == KVP_PUB_JETSTREAM) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.AckHandler = on_ack;
    jo.PublishAsync.AckHandlerClosure = pub;
    jo.PublishAsync.MaxPending = (int64_t)o->js_max_inflight * 2 + 16;
    jo.PublishAsync.StallWait = 50;
    s = natsConnection_JetStream(&pub->js, pub->nc, &jo);
    if (s != NATS_OK) {
      rc = kvp__nats_status(s);
      snprintf(err, errlen, "mode: JetStream context: %s", natsStatus_GetText(s));
      goto out;
    }
    char stream[128], subject[KVP_SUBJECT_MAX];
    const char *subj = NULL;
    snprintf(stream, sizeof stream, "%s", o->stream);
    if (o->partitions > 0) {
      uint32_t p = kvp_partition_of(o->worker_id, o->partitions);
      snprintf(stream, sizeof stream, "%s_P%" PRIu32, o->stream, p);
      kvp_subject_pevents_all(subject, sizeof subject, p);
      subj = subject;
    }
    if ((rc = kvp__nats_ensure_stream_ex(pub->js, stream, subj, (int)o->stream_replicas,
                                         o->stream_create, NULL, err, errlen)) != 0)
      goto out;
  }
  s = natsConnection_Subscribe(&pub->ctl_sub, pub->nc, pub->ctl_subject, on_resync, pub);
  if (s != NATS_OK) {
    rc = kvp__nats_status(s);
    snprintf(err, errlen, "nats.servers: cannot subscribe to %s: %s", pub->ctl_subject,
             natsStatus_GetText(s));
    goto out;
  }
  natsSubscription_SetOnCompleteCB(pub->ctl_sub, on_sub_done, pub);
  /* The subscription must be known to the server before open returns. */
  natsConnection_FlushTimeout(pub->nc, o->nats.connect_timeout_ms);
  rc = 0;
out:
  if (rc != 0)
    kvp__pub_disconnect(pub);
  return rc;
}

/* Waits (at most 2 s) for nats.c's last callbacks into pub. */
static void wait_quiet(kvp_publisher_t *pub, int want_sub) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 2;
  pthread_mutex_lock(&pub->cmu);
  while (!pub->nc_closed || (want_sub && !pub->sub_done))
    if (pthread_cond_timedwait(&pub->ccond, &pub->cmu, &ts) != 0)
      break;
  pthread_mutex_unlock(&pub->cmu);
}

void kvp__pub_disconnect(kvp_publisher_t *pub) {
  int want_sub = pub->ctl_sub != NULL;
  if (pub->ctl_sub != NULL)
    natsSubscription_Unsubscribe(pub->ctl_sub);
  if (pub->nc != NULL) {
    natsConnection_Close(pub->nc);
    wait_quiet(pub, want_sub);
  }
  natsSubscription_Destroy(pub->ctl_sub);
  pub->ctl_sub = NULL;
  jsCtx_Destroy(pub->js);
  pub->js = NULL;
  natsConnection_Destroy(pub->nc);
  pub->nc = NULL;
}

int kvp__pub_send_core(kvp_publisher_t *pub, const uint8_t *buf, size_t len) {
  natsStatus s = natsConnection_Publish(pub->nc, pub->subject, buf, (int)len);
  return s == NATS_OK ? 0 : KVP_ECONN;
}

int kvp__pub_connected(kvp_publisher_t *pub) {
  return natsConnection_Status(pub->nc) == NATS_CONN_STATUS_CONNECTED;
}

int kvp__pub_send_js(kvp_publisher_t *pub, kvp__pend_t *p) {
  if (!kvp__pub_connected(pub))
    return KVP_ECONN;
  char id[160];
  jsPubOptions po;
  natsMsg *m = NULL;
  jsPubOptions_Init(&po);
  snprintf(id, sizeof id, "%s:%" PRIu32 ":%" PRIu64 ":%" PRIu64, pub->o.worker_id, pub->o.dp_rank,
           pub->epoch, p->first_id);
  po.MsgId = id;
  po.MaxWait = pub->o.ack_wait_ms;
  if (natsMsg_Create(&m, pub->subject, NULL, (const char *)p->buf, (int)p->len) != NATS_OK)
    return KVP_ENOMEM;
  natsStatus s = js_PublishMsgAsync(pub->js, &m, &po);
  natsMsg_Destroy(m); /* NULL when the library took it */
  return s == NATS_OK ? 0 : KVP_ECONN;
}
