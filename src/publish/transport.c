/* NATS side of the publisher: connection options (auth, TLS), reconnect
 * callbacks, the JetStream stream and async acks, the resync subscription.
 * nats.c's own threads do the I/O; the callbacks below run on them and only
 * touch atomics, a mutex-protected ack list and uv_async_send. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "kvplane/status.h"
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

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure) {
  kvp_publisher_t *pub = closure;
  const char *id = NULL;
  (void)js;
  (void)pae;
  if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id != NULL) {
    const char *c = strrchr(id, ':');
    uint64_t first = c ? strtoull(c + 1, NULL, 10) : 0;
    uint64_t v = first | (pa != NULL ? 0 : (1ull << 63));
    pthread_mutex_lock(&pub->amu);
    if (pub->nacks == pub->ackcap) {
      size_t nc2 = pub->ackcap ? pub->ackcap * 2 : 256;
      uint64_t *na = realloc(pub->acks, nc2 * sizeof *na);
      if (na != NULL) {
        pub->acks = na;
        pub->ackcap = nc2;
      }
    }
    /* Without room the ack is lost: the batch times out and is resent,
     * which the duplicate window absorbs. */
    if (pub->nacks < pub->ackcap)
      pub->acks[pub->nacks++] = v;
    pthread_mutex_unlock(&pub->amu);
    kvp__pub_wake(pub);
  }
  natsMsg_Destroy(msg);
}

static int map_status(natsStatus s) {
  switch (s) {
  case NATS_OK:
    return 0;
  case NATS_NOT_PERMITTED:
  case NATS_CONNECTION_AUTH_FAILED:
    return KVP_EAUTH;
  case NATS_NO_MEMORY:
    return KVP_ENOMEM;
  default:
    return KVP_ECONN;
  }
}

static int ensure_stream(kvp_publisher_t *pub, char *err, size_t errlen) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetStreamInfo(&si, pub->js, pub->o.stream, NULL, &jerr);
  if (s == NATS_OK) {
    jsStreamInfo_Destroy(si);
    return 0;
  }
  if (s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
    snprintf(err, errlen, "stream: cannot look up %s: %s", pub->o.stream, natsStatus_GetText(s));
    return KVP_ECONN;
  }
  if (!pub->o.stream_create) {
    snprintf(err, errlen, "stream: %s does not exist and stream_create is off", pub->o.stream);
    return KVP_ECONFIG;
  }
  jsStreamConfig sc;
  const char *subjects[] = {"kvplane.ev.>"};
  jsStreamConfig_Init(&sc);
  sc.Name = pub->o.stream;
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  s = js_AddStream(&si, pub->js, &sc, NULL, &jerr);
  if (s != NATS_OK && jerr != JSStreamNameExistErr) {
    snprintf(err, errlen, "stream: cannot create %s: %s", pub->o.stream, natsStatus_GetText(s));
    return KVP_ECONN;
  }
  jsStreamInfo_Destroy(si);
  return 0;
}

int kvp__pub_connect(kvp_publisher_t *pub, char *err, size_t errlen) {
  const kvp_publisher_opts_t *o = &pub->o;
  natsOptions *no = NULL;
  natsStatus s;
  int rc = KVP_ENOMEM;
  char *urls = NULL;
  const char *list[32];
  int nurl = 0;

  if (natsOptions_Create(&no) != NATS_OK)
    goto out;
  urls = strdup(o->servers);
  if (urls == NULL)
    goto out;
  for (char *sp = NULL, *t = strtok_r(urls, ",", &sp); t != NULL && nurl < 32;
       t = strtok_r(NULL, ",", &sp))
    list[nurl++] = t;
  rc = KVP_ECONFIG;
  if (natsOptions_SetServers(no, list, nurl) != NATS_OK) {
    snprintf(err, errlen, "servers: cannot parse '%s'", o->servers);
    goto out;
  }
  if (o->user != NULL && o->user[0] && natsOptions_SetUserInfo(no, o->user, o->password) != NATS_OK)
    goto out;
  if (o->token != NULL && o->token[0] && natsOptions_SetToken(no, o->token) != NATS_OK)
    goto out;
  if (o->creds_file != NULL && o->creds_file[0] &&
      natsOptions_SetUserCredentialsFromFiles(no, o->creds_file, NULL) != NATS_OK) {
    snprintf(err, errlen, "creds_file: cannot use %s", o->creds_file);
    goto out;
  }
  if (o->tls_ca != NULL && o->tls_ca[0]) {
    if (natsOptions_SetSecure(no, true) != NATS_OK ||
        natsOptions_LoadCATrustedCertificates(no, o->tls_ca) != NATS_OK) {
      snprintf(err, errlen, "tls_ca: cannot load %s", o->tls_ca);
      goto out;
    }
  }
  if (o->tls_cert != NULL && o->tls_cert[0] &&
      natsOptions_LoadCertificatesChain(no, o->tls_cert, o->tls_key) != NATS_OK) {
    snprintf(err, errlen, "tls_cert: cannot load %s / %s", o->tls_cert, o->tls_key);
    goto out;
  }
  rc = KVP_ENOMEM;
  if (natsOptions_SetTimeout(no, o->connect_timeout_ms) != NATS_OK ||
      natsOptions_SetMaxReconnect(no, -1) != NATS_OK ||
      natsOptions_SetReconnectWait(no, 100) != NATS_OK ||
      natsOptions_SetPingInterval(no, 1000) != NATS_OK ||
      natsOptions_SetMaxPingsOut(no, 2) != NATS_OK ||
      natsOptions_SetWriteDeadline(no, 1000) != NATS_OK ||
      /* JetStream: nothing is buffered while reconnecting, so no new batch
       * can reach the stream ahead of the resend of older lost ones. */
      natsOptions_SetReconnectBufSize(no, o->mode == KVP_PUB_JETSTREAM ? 1 : 32 << 20) != NATS_OK ||
      natsOptions_SetDisconnectedCB(no, on_disconnected, pub) != NATS_OK ||
      natsOptions_SetReconnectedCB(no, on_reconnected, pub) != NATS_OK ||
      natsOptions_SetClosedCB(no, on_closed, pub) != NATS_OK)
    goto out;
  s = natsConnection_Connect(&pub->nc, no);
  if (s != NATS_OK) {
    rc = map_status(s);
    if (rc == 0 || rc == KVP_ENOMEM)
      rc = KVP_ECONN;
    const char *why = nats_GetLastError(NULL);
    if (why != NULL && (strstr(why, "uthori") != NULL || strstr(why, "uthenti") != NULL))
      rc = KVP_EAUTH;
    snprintf(err, errlen, "servers: cannot connect to %s: %s", o->servers,
             why ? why : natsStatus_GetText(s));
    goto out;
  }
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
      rc = map_status(s);
      snprintf(err, errlen, "mode: JetStream context: %s", natsStatus_GetText(s));
      goto out;
    }
    if ((rc = ensure_stream(pub, err, errlen)) != 0)
      goto out;
  }
  s = natsConnection_Subscribe(&pub->ctl_sub, pub->nc, pub->ctl_subject, on_resync, pub);
  if (s != NATS_OK) {
    rc = map_status(s);
    snprintf(err, errlen, "servers: cannot subscribe to %s: %s", pub->ctl_subject,
             natsStatus_GetText(s));
    goto out;
  }
  natsSubscription_SetOnCompleteCB(pub->ctl_sub, on_sub_done, pub);
  /* The subscription must be known to the server before open returns. */
  natsConnection_FlushTimeout(pub->nc, o->connect_timeout_ms);
  pub->nopts = no;
  no = NULL;
  rc = 0;
out:
  if (rc != 0)
    kvp__pub_disconnect(pub);
  free(urls);
  natsOptions_Destroy(no);
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
  natsOptions_Destroy(pub->nopts);
  pub->nopts = NULL;
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
