/* kvplane-advisor lifecycle: NATS in, loop thread, write-behind; see
 * include/kvplane/advisor.h.
 *
 * Threads: nats.c delivers core messages and API requests on its own
 * threads, and in JetStream mode a fetch thread pulls batches; all of them
 * only append to a locked queue and wake the libuv loop with uv_async_send.
 * The loop thread alone touches the index, the ingest state and SQLite: it
 * drains the queue, applies batches, answers queries, and on a timer takes
 * the changes and hands the SQLite transaction to libuv's thread pool (one
 * at a time), so ingest does not stop while a flush is written.
 *
 * JetStream resume: the database, not the server, owns the position. At
 * start the durable consumer is deleted and created again to deliver from
 * the committed stream sequence + 1 (all when the database is new), so a
 * restart after kill -9 replays exactly what the database does not hold.
 * Acks (ack-all) are sent only after the flush that committed a message, and
 * a redelivered message at or below the applied sequence is skipped. */
#include "kvplane/advisor.h"

#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "advisor/api.h"
#include "advisor/index.h"
#include "advisor/ingest.h"
#include "advisor/store.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"

enum { Q_EVENT, Q_JS_EVENT, Q_MATCH, Q_STATS };

typedef struct qitem_s {
  struct qitem_s *next;
  int kind;
  uint64_t seq; /* JetStream stream sequence */
  natsMsg *msg;
} qitem_t;

struct kvp_advisor_s {
  kvp_advisor_config_t cfg;
  kvp__adv_index_t *ix;
  kvp__adv_ingest_t *ing;
  kvp__adv_store_t *store;
  kvp_wire_limits_t lim;

  natsOptions *nopts;
  natsConnection *nc;
  jsCtx *js;
  natsSubscription *ev_sub, *match_sub, *stats_sub;
  pthread_t fetcher;
  int fetcher_started;

  uv_loop_t loop;
  int loop_ready;
  uv_async_t wake;
  uv_timer_t flush_timer, tick_timer;
  uv_signal_t sig_term, sig_int, sig_hup;
  int handles;

  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  qitem_t *qhead, *qtail;
  size_t qlen;
  uint64_t queue_dropped;

  atomic_int stopping;
  int wake_closed; /* under qlock: no uv_async_send after the close */
  int stopped;
  int final_rc;

  uint64_t applied_seq;
  natsMsg *ack_pending; /* last applied JetStream message, acked after commit */
  uint64_t ack_seq;
  uint64_t flushes, flush_errors, last_flush_ms, last_flush_blocks;
  uint64_t committed_seq;
  /* The flush running on the thread pool, if any. */
  uv_work_t flush_req;
  kvp__adv_flush_t *inflight;
  natsMsg *inflight_ack;
  uint64_t inflight_seq, inflight_t0;
  int flush_rc;
  int shutdown_waiting;
  uint64_t start_ms;
  char subj[256];
};

/* --- queue (any thread) ---------------------------------------------------- */

static void qitem_free(qitem_t *it) {
  natsMsg_Destroy(it->msg);
  free(it);
}

/* Appends; returns 0, or KVP_EOVERFLOW when full and !wait. */
static int enqueue(kvp_advisor_t *adv, int kind, natsMsg *msg, uint64_t seq, int drop_if_full) {
  qitem_t *it = malloc(sizeof *it);
  if (it == NULL) {
    natsMsg_Destroy(msg);
    return KVP_ENOMEM;
  }
  it->next = NULL;
  it->kind = kind;
  it->msg = msg;
  it->seq = seq;
  pthread_mutex_lock(&adv->qlock);
  if (drop_if_full && adv->qlen >= (size_t)adv->cfg.queue_max) {
    adv->queue_dropped++;
    pthread_mutex_unlock(&adv->qlock);
    qitem_free(it);
    return KVP_EOVERFLOW;
  }
  if (adv->qtail)
    adv->qtail->next = it;
  else
    adv->qhead = it;
  adv->qtail = it;
  adv->qlen++;
  /* Sent under the lock so that it never races the handle's close. */
  if (!adv->wake_closed)
    uv_async_send(&adv->wake);
  pthread_mutex_unlock(&adv->qlock);
  return 0;
}

static void on_event_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)nc;
  (void)sub;
  /* Core mode cannot push back: a drop shows up as an event-id gap, and the
   * worker's resync repairs it. */
  enqueue(closure, Q_EVENT, msg, 0, 1);
}

static void on_match_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)nc;
  (void)sub;
  enqueue(closure, Q_MATCH, msg, 0, 0);
}

static void on_stats_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)nc;
  (void)sub;
  enqueue(closure, Q_STATS, msg, 0, 0);
}

static void *fetch_main(void *arg) {
  kvp_advisor_t *adv = arg;
  uint64_t last_err_log = 0;

  while (!atomic_load(&adv->stopping)) {
    natsMsgList list = {0};
    jsErrCode jerr = 0;
    natsStatus s;

    pthread_mutex_lock(&adv->qlock);
    while (adv->qlen >= (size_t)adv->cfg.queue_max && !atomic_load(&adv->stopping)) {
      struct timespec ts = kvp__realtime_in(100000000);
      pthread_cond_timedwait(&adv->qcond, &adv->qlock, &ts);
    }
    pthread_mutex_unlock(&adv->qlock);
    if (atomic_load(&adv->stopping))
      break;
    uint64_t t0 = kvp__now_ns();
    s = natsSubscription_Fetch(&list, adv->ev_sub, (int)adv->cfg.fetch_batch, 500, &jerr);
    kvp_log_debug("advisor: fetch: %d messages in %.1f ms (%s)", list.Count,
                  (double)(kvp__now_ns() - t0) / 1e6, natsStatus_GetText(s));
    if (s == NATS_TIMEOUT)
      continue;
    if (s != NATS_OK) {
      uint64_t now = kvp__now_ns();
      if (now - last_err_log > 10000000000ull) {
        kvp_log_warn("advisor: fetch from stream %s failed: %s (jetstream error %d); retrying",
                     adv->cfg.stream, natsStatus_GetText(s), (int)jerr);
        last_err_log = now;
      }
      nats_Sleep(200);
      continue;
    }
    for (int i = 0; i < list.Count; i++) {
      jsMsgMetaData *meta = NULL;
      uint64_t seq = 0;
      if (natsMsg_GetMetaData(&meta, list.Msgs[i]) == NATS_OK) {
        seq = meta->Sequence.Stream;
        jsMsgMetaData_Destroy(meta);
      }
      enqueue(adv, Q_JS_EVENT, list.Msgs[i], seq, 0);
      list.Msgs[i] = NULL;
    }
    natsMsgList_Destroy(&list);
  }
  return NULL;
}

/* --- loop thread ------------------------------------------------------------ */

static void send_resync(void *ctx, const char *worker, uint32_t dp_rank, uint64_t epoch,
                        const char *reason) {
  kvp_advisor_t *adv = ctx;
  char subj[192], body[256];
  int n;
  snprintf(subj, sizeof subj, "kvplane.ctl.%s.%s.resync", adv->cfg.ns, worker);
  n = snprintf(body, sizeof body,
               "{\"worker\":\"%s\",\"dp_rank\":%" PRIu32 ",\"epoch\":%" PRIu64
               ",\"reason\":\"%s\"}",
               worker, dp_rank, epoch, reason);
  if (natsConnection_Publish(adv->nc, subj, body, n) != NATS_OK)
    kvp_log_warn("advisor: resync request to %s not sent; will retry", subj);
}

static void reply(kvp_advisor_t *adv, natsMsg *msg, char *json) {
  const char *to = natsMsg_GetReply(msg);
  if (to && to[0] && json)
    natsConnection_PublishString(adv->nc, to, json);
  free(json);
}

static void handle(kvp_advisor_t *adv, qitem_t *it) {
  const uint8_t *data = (const uint8_t *)natsMsg_GetData(it->msg);
  size_t len = (size_t)natsMsg_GetDataLength(it->msg);
  uint64_t now = kvp__unix_ms();
  char *json = NULL;

  switch (it->kind) {
  case Q_JS_EVENT:
    if (it->seq != 0 && it->seq <= adv->applied_seq)
      break; /* redelivered: already applied */
    kvp__adv_ingest_message(adv->ing, data, len, &adv->lim, now);
    if (it->seq) {
      adv->applied_seq = it->seq;
      natsMsg_Destroy(adv->ack_pending);
      adv->ack_pending = it->msg;
      adv->ack_seq = it->seq;
      it->msg = NULL;
    }
    break;
  case Q_EVENT:
    kvp__adv_ingest_message(adv->ing, data, len, &adv->lim, now);
    break;
  case Q_MATCH:
    if (kvp__adv_api_match(adv->ix, data, len, &json) == 0)
      reply(adv, it->msg, json);
    break;
  case Q_STATS: {
    kvp__adv_api_extra_t x = {
        .ns = adv->cfg.ns,
        .mode = adv->cfg.mode == KVP_ADVISOR_JETSTREAM ? "jetstream" : "core",
        .stream_seq = adv->applied_seq,
        .committed_seq = adv->committed_seq,
        .flushes = adv->flushes,
        .flush_errors = adv->flush_errors,
        .last_flush_ms = adv->last_flush_ms,
        .last_flush_blocks = adv->last_flush_blocks,
        .dirty = kvp__adv_index_dirty_count(adv->ix),
        .uptime_ms = now - adv->start_ms,
    };
    pthread_mutex_lock(&adv->qlock);
    x.queue_dropped = adv->queue_dropped;
    pthread_mutex_unlock(&adv->qlock);
    if (kvp__adv_api_stats(adv->ix, adv->ing, &x, &json) == 0)
      reply(adv, it->msg, json);
    break;
  }
  }
}

static void drain(kvp_advisor_t *adv) {
  qitem_t *it;
  pthread_mutex_lock(&adv->qlock);
  it = adv->qhead;
  adv->qhead = adv->qtail = NULL;
  adv->qlen = 0;
  pthread_cond_broadcast(&adv->qcond);
  pthread_mutex_unlock(&adv->qlock);
  while (it) {
    qitem_t *next = it->next;
    handle(adv, it);
    qitem_free(it);
    it = next;
  }
}

/* After a committed flush, on the loop thread. */
static void flush_done(kvp_advisor_t *adv, size_t nblocks, uint64_t seq, natsMsg *ack,
                       uint64_t t0) {
  adv->flushes++;
  adv->last_flush_ms = kvp__unix_ms();
  adv->last_flush_blocks = nblocks;
  adv->committed_seq = seq;
  kvp_log_debug("advisor: flush: %zu blocks, sequence %" PRIu64 ", %.1f ms", nblocks, seq,
                (double)(kvp__now_ns() - t0) / 1e6);
  if (ack) {
    /* Committed: the server may now forget everything up to here. */
    natsMsg_Ack(ack, NULL);
    natsMsg_Destroy(ack);
  }
}

/* A flush on the loop thread (the last one, at stop). */
static int flush_sync(kvp_advisor_t *adv) {
  size_t n = 0;
  uint64_t t0 = kvp__now_ns();
  int rc = kvp__adv_store_flush(adv->store, adv->ix, adv->ing, adv->applied_seq, &n);
  if (rc != 0) {
    adv->flush_errors++;
    return rc;
  }
  flush_done(adv, n, adv->applied_seq, adv->ack_pending, t0);
  adv->ack_pending = NULL;
  return 0;
}

static void shutdown_finish(kvp_advisor_t *adv);

static void flush_work(uv_work_t *req) {
  kvp_advisor_t *adv = req->data;
  adv->flush_rc = kvp__adv_store_write(adv->store, adv->inflight);
}

static void flush_after(uv_work_t *req, int status) {
  kvp_advisor_t *adv = req->data;
  if (status == 0 && adv->flush_rc == 0) {
    flush_done(adv, kvp__adv_flush_blocks(adv->inflight), adv->inflight_seq, adv->inflight_ack,
               adv->inflight_t0);
    kvp__adv_flush_free(adv->inflight);
  } else {
    /* The changes go back to the index; the next flush writes them. */
    adv->flush_errors++;
    kvp__adv_store_abandon(adv->ix, adv->inflight);
    if (adv->ack_pending == NULL)
      adv->ack_pending = adv->inflight_ack;
    else
      natsMsg_Destroy(adv->inflight_ack); /* a later message acks it too */
  }
  adv->inflight = NULL;
  adv->inflight_ack = NULL;
  if (adv->shutdown_waiting)
    shutdown_finish(adv);
}

/* Takes the changes on the loop thread and writes them on libuv's thread
 * pool, so ingest goes on while SQLite works. One flush at a time: a tick
 * that finds one running waits for the next. */
static void flush_async(kvp_advisor_t *adv) {
  if (adv->inflight || adv->stopped)
    return;
  adv->inflight_t0 = kvp__now_ns();
  if (kvp__adv_store_prepare(adv->store, adv->ix, adv->ing, adv->applied_seq, &adv->inflight) !=
      0) {
    adv->flush_errors++;
    return;
  }
  adv->inflight_seq = adv->applied_seq;
  adv->inflight_ack = adv->ack_pending;
  adv->ack_pending = NULL;
  adv->flush_req.data = adv;
  if (uv_queue_work(&adv->loop, &adv->flush_req, flush_work, flush_after) != 0) {
    flush_work(&adv->flush_req);
    flush_after(&adv->flush_req, 0);
  }
}

static void on_close(uv_handle_t *h) {
  kvp_advisor_t *adv = h->data;
  adv->handles--;
}

static void close_handle(kvp_advisor_t *adv, uv_handle_t *h) {
  (void)adv;
  if (h->data == NULL || uv_is_closing(h))
    return;
  uv_close(h, on_close);
}

/* Stops input, applies what arrived, flushes, closes the loop's handles. */
static void shutdown_loop(kvp_advisor_t *adv) {
  if (adv->stopped)
    return;
  adv->stopped = 1;
  atomic_store(&adv->stopping, 1);
  pthread_mutex_lock(&adv->qlock);
  pthread_cond_broadcast(&adv->qcond);
  pthread_mutex_unlock(&adv->qlock);
  if (adv->fetcher_started) {
    pthread_join(adv->fetcher, NULL);
    adv->fetcher_started = 0;
  }
  if (adv->ev_sub)
    natsSubscription_Unsubscribe(adv->ev_sub);
  if (adv->match_sub)
    natsSubscription_Unsubscribe(adv->match_sub);
  if (adv->stats_sub)
    natsSubscription_Unsubscribe(adv->stats_sub);
  pthread_mutex_lock(&adv->qlock);
  adv->wake_closed = 1;
  pthread_mutex_unlock(&adv->qlock);
  drain(adv);
  if (adv->inflight) {
    adv->shutdown_waiting = 1; /* flush_after finishes */
    return;
  }
  shutdown_finish(adv);
}

/* The last flush, then the loop's handles close and uv_run returns. */
static void shutdown_finish(kvp_advisor_t *adv) {
  adv->shutdown_waiting = 0;
  adv->final_rc = flush_sync(adv);
  if (adv->final_rc == 0)
    kvp_log_info("advisor: stopped; stream sequence %" PRIu64 " committed", adv->applied_seq);
  close_handle(adv, (uv_handle_t *)&adv->wake);
  close_handle(adv, (uv_handle_t *)&adv->flush_timer);
  close_handle(adv, (uv_handle_t *)&adv->tick_timer);
  close_handle(adv, (uv_handle_t *)&adv->sig_term);
  close_handle(adv, (uv_handle_t *)&adv->sig_int);
  close_handle(adv, (uv_handle_t *)&adv->sig_hup);
}

static void on_wake(uv_async_t *h) {
  kvp_advisor_t *adv = h->data;
  if (atomic_load(&adv->stopping)) {
    shutdown_loop(adv);
    return;
  }
  drain(adv);
}

static void on_flush_timer(uv_timer_t *h) {
  flush_async(h->data);
}

static void on_tick_timer(uv_timer_t *h) {
  kvp_advisor_t *adv = h->data;
  kvp__adv_ingest_tick(adv->ing, kvp__unix_ms());
}

static void on_signal(uv_signal_t *h, int signum) {
  kvp_advisor_t *adv = h->data;
  if (signum == SIGHUP) {
    if (kvp__log_reopen() != 0)
      kvp_log_warn("advisor: log file could not be reopened");
    else
      kvp_log_info("advisor: log reopened");
    return;
  }
  kvp_log_info("advisor: signal %d: stopping", signum);
  atomic_store(&adv->stopping, 1);
  shutdown_loop(adv);
}

/* --- open and close ---------------------------------------------------------- */

static int nats_fail(natsStatus s, const char *what, char *err, size_t errlen) {
  const char *last = nats_GetLastError(NULL);
  snprintf(err, errlen, "%s: %s%s%s", what, natsStatus_GetText(s), last ? ": " : "",
           last ? last : "");
  if (s == NATS_NOT_PERMITTED || (last && strstr(last, "uthorization")))
    return KVP_EAUTH;
  return KVP_ECONN;
}

static int connect_nats(kvp_advisor_t *adv, char *err, size_t errlen) {
  const kvp_advisor_config_t *c = &adv->cfg;
  natsStatus s;

  if ((s = natsOptions_Create(&adv->nopts)) != NATS_OK)
    return nats_fail(s, "nats options", err, errlen);
  s = natsOptions_SetURL(adv->nopts, c->url);
  if (s == NATS_OK)
    s = natsOptions_SetName(adv->nopts, "kvplane-advisor");
  if (s == NATS_OK)
    s = natsOptions_SetTimeout(adv->nopts, c->connect_timeout_ms);
  if (s == NATS_OK)
    s = natsOptions_SetMaxReconnect(adv->nopts, -1);
  if (s == NATS_OK)
    s = natsOptions_SetReconnectWait(adv->nopts, 250);
  if (s == NATS_OK && c->user[0])
    s = natsOptions_SetUserInfo(adv->nopts, c->user, c->password);
  if (s == NATS_OK && c->token[0])
    s = natsOptions_SetToken(adv->nopts, c->token);
  if (s == NATS_OK && c->creds[0])
    s = natsOptions_SetUserCredentialsFromFiles(adv->nopts, c->creds, NULL);
  if (s == NATS_OK && (c->tls_ca[0] || c->tls_cert[0]))
    s = natsOptions_SetSecure(adv->nopts, true);
  if (s == NATS_OK && c->tls_ca[0])
    s = natsOptions_LoadCATrustedCertificates(adv->nopts, c->tls_ca);
  if (s == NATS_OK && c->tls_cert[0])
    s = natsOptions_LoadCertificatesChain(adv->nopts, c->tls_cert, c->tls_key);
  if (s != NATS_OK)
    return nats_fail(s, "[nats] options", err, errlen);
  if ((s = natsConnection_Connect(&adv->nc, adv->nopts)) != NATS_OK)
    return nats_fail(s, c->url, err, errlen);
  return 0;
}

static int setup_jetstream(kvp_advisor_t *adv, char *err, size_t errlen) {
  const kvp_advisor_config_t *c = &adv->cfg;
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  jsSubOptions so;
  natsStatus s;
  char filter[128];

  if ((s = natsConnection_JetStream(&adv->js, adv->nc, NULL)) != NATS_OK)
    return nats_fail(s, "jetstream context", err, errlen);
  s = js_GetStreamInfo(&si, adv->js, c->stream, NULL, &jerr);
  if (s == NATS_NOT_FOUND) {
    const char *subjects[] = {"kvplane.ev.>"};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = c->stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    s = js_AddStream(&si, adv->js, &sc, NULL, &jerr);
    if (s == NATS_OK)
      kvp_log_info("advisor: stream %s created (subjects kvplane.ev.>)", c->stream);
  }
  jsStreamInfo_Destroy(si);
  if (s != NATS_OK)
    return nats_fail(s, c->stream, err, errlen);
  /* The database owns the position: recreate the consumer at it. */
  s = js_DeleteConsumer(adv->js, c->stream, c->consumer, NULL, &jerr);
  if (s != NATS_OK && s != NATS_NOT_FOUND)
    return nats_fail(s, c->consumer, err, errlen);
  jsSubOptions_Init(&so);
  so.Stream = c->stream;
  so.Config.Durable = c->consumer;
  so.Config.AckPolicy = js_AckAll;
  so.Config.AckWait = (int64_t)60 * 1000000000;
  so.Config.MaxAckPending = 1 << 24;
  if (adv->applied_seq > 0) {
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = adv->applied_seq + 1;
  } else {
    so.Config.DeliverPolicy = js_DeliverAll;
  }
  snprintf(filter, sizeof filter, "kvplane.ev.%s.>", c->ns);
  s = js_PullSubscribe(&adv->ev_sub, adv->js, filter, c->consumer, NULL, &so, &jerr);
  if (s != NATS_OK)
    return nats_fail(s, "jetstream pull consumer", err, errlen);
  kvp_log_info("advisor: consumer %s on %s resumes after stream sequence %" PRIu64, c->consumer,
               c->stream, adv->applied_seq);
  if (pthread_create(&adv->fetcher, NULL, fetch_main, adv) != 0) {
    snprintf(err, errlen, "cannot start the fetch thread");
    return KVP_ENOMEM;
  }
  adv->fetcher_started = 1;
  return 0;
}

static int subscribe(kvp_advisor_t *adv, char *err, size_t errlen) {
  natsStatus s;
  char subj[160];

  if (adv->cfg.mode == KVP_ADVISOR_JETSTREAM) {
    int rc = setup_jetstream(adv, err, errlen);
    if (rc != 0)
      return rc;
  } else {
    snprintf(subj, sizeof subj, "kvplane.ev.%s.>", adv->cfg.ns);
    if ((s = natsConnection_Subscribe(&adv->ev_sub, adv->nc, subj, on_event_msg, adv)) != NATS_OK)
      return nats_fail(s, subj, err, errlen);
    natsSubscription_SetPendingLimits(adv->ev_sub, (int)adv->cfg.queue_max, 1 << 30);
  }
  snprintf(subj, sizeof subj, "kvplane.api.%s.match", adv->cfg.ns);
  if ((s = natsConnection_Subscribe(&adv->match_sub, adv->nc, subj, on_match_msg, adv)) != NATS_OK)
    return nats_fail(s, subj, err, errlen);
  snprintf(subj, sizeof subj, "kvplane.api.%s.stats", adv->cfg.ns);
  if ((s = natsConnection_Subscribe(&adv->stats_sub, adv->nc, subj, on_stats_msg, adv)) != NATS_OK)
    return nats_fail(s, subj, err, errlen);
  if ((s = natsConnection_Flush(adv->nc)) != NATS_OK)
    return nats_fail(s, "subscribe", err, errlen);
  {
    char url[256] = "";
    natsConnection_GetConnectedUrl(adv->nc, url, sizeof url);
    kvp_log_info("advisor: connected to %s; answering on kvplane.api.%s.match and .stats", url,
                 adv->cfg.ns);
  }
  return 0;
}

static int init_loop(kvp_advisor_t *adv, char *err, size_t errlen) {
  int r = uv_loop_init(&adv->loop);
  if (r != 0)
    goto fail;
  adv->loop_ready = 1;
  if ((r = uv_async_init(&adv->loop, &adv->wake, on_wake)) != 0)
    goto fail;
  adv->wake.data = adv;
  adv->handles++;
  if ((r = uv_timer_init(&adv->loop, &adv->flush_timer)) != 0)
    goto fail;
  adv->flush_timer.data = adv;
  adv->handles++;
  if ((r = uv_timer_init(&adv->loop, &adv->tick_timer)) != 0)
    goto fail;
  adv->tick_timer.data = adv;
  adv->handles++;
  if (adv->cfg.handle_signals) {
    uv_signal_t *sigs[] = {&adv->sig_term, &adv->sig_int, &adv->sig_hup};
    int nums[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
      if ((r = uv_signal_init(&adv->loop, sigs[i])) != 0)
        goto fail;
      sigs[i]->data = adv;
      adv->handles++;
      if ((r = uv_signal_start(sigs[i], on_signal, nums[i])) != 0)
        goto fail;
    }
  }
  return 0;
fail:
  snprintf(err, errlen, "event loop: %s", uv_strerror(r));
  return KVP_ENOMEM;
}

int kvp_advisor_open(kvp_advisor_t **out, const kvp_advisor_config_t *cfg, char *err,
                     size_t errlen) {
  kvp_advisor_t *adv;
  kvp__adv_ingest_opts_t io = {0};
  int rc;

  *out = NULL;
  if ((rc = kvp_advisor_config_check(cfg, err, errlen)) != 0)
    return rc;
  if ((adv = calloc(1, sizeof *adv)) == NULL)
    return KVP_ENOMEM;
  adv->cfg = *cfg;
  adv->start_ms = kvp__unix_ms();
  pthread_mutex_init(&adv->qlock, NULL);
  pthread_cond_init(&adv->qcond, NULL);
  adv->lim.max_bytes = (size_t)cfg->max_message_bytes;
  adv->lim.max_events = (size_t)cfg->max_events;
  adv->lim.max_blocks = (size_t)cfg->max_blocks;
  kvp__log_setup(cfg->log_level, "kvplane-advisor");
  if (cfg->log_syslog)
    kvp__log_use_syslog(1);
  if (cfg->log_file[0] && kvp__log_set_file(cfg->log_file) != 0) {
    snprintf(err, errlen, "[log] file: cannot open %s", cfg->log_file);
    rc = KVP_EIO;
    goto fail;
  }
  if ((rc = kvp__adv_index_create(&adv->ix, (size_t)cfg->initial_blocks,
                                  (double)cfg->hit_half_life_ms / 1000.0)) != 0)
    goto fail;
  io.heartbeat_timeout_ms = (uint64_t)cfg->heartbeat_timeout_ms;
  io.resync_retry_ms = (uint64_t)cfg->resync_retry_ms;
  io.resync = send_resync;
  io.resync_ctx = adv;
  if ((rc = kvp__adv_ingest_create(&adv->ing, adv->ix, &io)) != 0)
    goto fail;
  if ((rc = kvp__adv_store_open(&adv->store, cfg->db_path, err, errlen)) != 0)
    goto fail;
  if ((rc = kvp__adv_store_load(adv->store, adv->ix, adv->ing, &adv->applied_seq)) != 0) {
    snprintf(err, errlen, "%s: cannot load the index: %s", cfg->db_path, kvp_strerror(rc));
    goto fail;
  }
  adv->committed_seq = adv->applied_seq;

  /* Loaded workers get a full heartbeat timeout to speak again. */
  for (size_t i = 0; i < kvp__adv_ingest_worker_count(adv->ing); i++) {
    kvp__adv_worker_state_t ws;
    if (kvp__adv_ingest_worker_get(adv->ing, i, &ws) == 0) {
      ws.last_seen_ms = adv->start_ms;
      kvp__adv_ingest_worker_set(adv->ing, &ws);
    }
  }
  {
    kvp__adv_index_stats_t st;
    kvp__adv_index_stats(adv->ix, &st);
    kvp_log_info("advisor: %s loaded: %zu blocks, %zu locations, stream sequence %" PRIu64,
                 cfg->db_path, st.blocks, st.locations, adv->applied_seq);
  }
  if ((rc = init_loop(adv, err, errlen)) != 0)
    goto fail;
  if ((rc = connect_nats(adv, err, errlen)) != 0)
    goto fail;
  if ((rc = subscribe(adv, err, errlen)) != 0)
    goto fail;
  *out = adv;
  return 0;
fail:
  kvp_advisor_close(adv);
  return rc;
}

int kvp_advisor_run(kvp_advisor_t *adv) {
  uint64_t fi = (uint64_t)adv->cfg.flush_interval_ms;
  uv_timer_start(&adv->flush_timer, on_flush_timer, fi, fi);
  uv_timer_start(&adv->tick_timer, on_tick_timer, 1000, 1000);
  kvp_log_info("advisor: running (namespace %s, %s mode)", adv->cfg.ns,
               adv->cfg.mode == KVP_ADVISOR_JETSTREAM ? "jetstream" : "core");
  /* A stop requested before the loop ran is seen on the first wake. */
  if (atomic_load(&adv->stopping))
    uv_async_send(&adv->wake);
  uv_run(&adv->loop, UV_RUN_DEFAULT);
  return adv->final_rc;
}

void kvp_advisor_stop(kvp_advisor_t *adv) {
  atomic_store(&adv->stopping, 1);
  pthread_mutex_lock(&adv->qlock);
  if (!adv->wake_closed)
    uv_async_send(&adv->wake);
  pthread_mutex_unlock(&adv->qlock);
}

void kvp_advisor_close(kvp_advisor_t *adv) {
  if (adv == NULL)
    return;
  atomic_store(&adv->stopping, 1);
  if (adv->fetcher_started)
    pthread_join(adv->fetcher, NULL);
  natsSubscription_Destroy(adv->ev_sub);
  natsSubscription_Destroy(adv->match_sub);
  natsSubscription_Destroy(adv->stats_sub);
  jsCtx_Destroy(adv->js);
  natsConnection_Destroy(adv->nc);
  natsOptions_Destroy(adv->nopts);
  pthread_mutex_lock(&adv->qlock);
  adv->wake_closed = 1;
  pthread_mutex_unlock(&adv->qlock);
  if (adv->loop_ready) {
    adv->stopped = 1; /* no flush from here: run() did it, or nothing ran */
    close_handle(adv, (uv_handle_t *)&adv->wake);
    close_handle(adv, (uv_handle_t *)&adv->flush_timer);
    close_handle(adv, (uv_handle_t *)&adv->tick_timer);
    close_handle(adv, (uv_handle_t *)&adv->sig_term);
    close_handle(adv, (uv_handle_t *)&adv->sig_int);
    close_handle(adv, (uv_handle_t *)&adv->sig_hup);
    uv_run(&adv->loop, UV_RUN_DEFAULT);
    uv_loop_close(&adv->loop);
  }
  while (adv->qhead) {
    qitem_t *next = adv->qhead->next;
    qitem_free(adv->qhead);
    adv->qhead = next;
  }
  natsMsg_Destroy(adv->ack_pending);
  kvp__adv_store_close(adv->store);
  kvp__adv_ingest_destroy(adv->ing);
  kvp__adv_index_destroy(adv->ix);
  pthread_cond_destroy(&adv->qcond);
  pthread_mutex_destroy(&adv->qlock);
  free(adv);
}
