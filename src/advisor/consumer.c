/* The advisor's NATS side; see consumer.h.
 *
 * Why this file is long: the inputs' life (made, fetched from, reset after
 * a loss, paused, removed and inserted by a live rebalance) shares the
 * fetch thread's state, and reads best beside it. */
#include "advisor/consumer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/store.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

static void on_event_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  kvp__adv_consumer_t *c = closure;
  (void)nc;
  (void)sub;
  /* Core mode cannot push back: a drop shows up as an event-id gap, and the
   * worker's resync repairs it. */
  kvp__adv_inbox_push(c->inbox, KVP__IN_EVENT, msg, 0, 1);
}

static void on_tier_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  kvp__adv_consumer_t *c = closure;
  (void)nc;
  (void)sub;
  kvp__adv_inbox_push(c->inbox, KVP__IN_TIER, msg, 0, 0);
}

static void on_parts_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  kvp__adv_consumer_t *c = closure;
  (void)nc;
  (void)sub;
  kvp__adv_inbox_push(c->inbox, KVP__IN_PARTS, msg, 0, 0);
}

static int make_consumer(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, uint64_t resume_after,
                         char *err, size_t errlen);

/* The consumer again, after f->last_seq; 0 or a failure (logged, retried). */
static int reset_consumer(kvp__adv_fetch_t *f) {
  char err[512];
  natsSubscription_Destroy(f->sub);
  f->sub = NULL;
  int rc = make_consumer(f->c, f, f->last_seq, err, sizeof err);
  if (rc == 0) {
    f->resets++;
    f->last_dseq = 0;
    kvp_log_info("advisor: consumer %s on %s made again after stream sequence %" PRIu64
                 " (deliveries were lost, or the fetch failed)",
                 f->name, f->stream, f->last_seq);
  }
  return rc;
}

static void *fetch_main(void *arg) {
  kvp__adv_fetch_t *f = arg;
  kvp__adv_consumer_t *c = f->c;
  uint64_t last_err_log = 0;
  int need_reset = 0;

  /* halt: the consumer stops, or a live rebalance pauses the inputs. */
  while (!atomic_load(&f->halt) && kvp__adv_inbox_wait_room(c->inbox, &f->halt) == 0) {
    natsMsgList list = {0};
    jsErrCode jerr = 0;
    natsStatus s;
    uint64_t t0 = kvp__now_ns();
    if (need_reset && reset_consumer(f) != 0) {
      nats_Sleep(200);
      continue;
    }
    need_reset = 0;
    s = natsSubscription_Fetch(&list, f->sub, (int)c->cfg->fetch_batch, 500, &jerr);
    kvp_log_debug("advisor: fetch %s: %d messages in %.1f ms (%s)", f->stream, list.Count,
                  (double)(kvp__now_ns() - t0) / 1e6, natsStatus_GetText(s));
    if (s == NATS_TIMEOUT)
      continue;
    if (s != NATS_OK) {
      uint64_t now = kvp__now_ns();
      if (now - last_err_log > 10000000000ull) {
        kvp_log_warn("advisor: fetch from stream %s (consumer %s) failed: %s (jetstream error "
                     "%d); retrying",
                     f->stream, f->name, natsStatus_GetText(s), (int)jerr);
        last_err_log = now;
      }
      /* A failed fetch may have lost deliveries: start again after the
       * last message pushed. */
      need_reset = 1;
      nats_Sleep(200);
      continue;
    }
    for (int i = 0; i < list.Count; i++) {
      jsMsgMetaData *meta = NULL;
      uint64_t seq = 0, dseq = 0, pending = 1;
      if (natsMsg_GetMetaData(&meta, list.Msgs[i]) == NATS_OK) {
        seq = meta->Sequence.Stream;
        dseq = meta->Sequence.Consumer;
        pending = meta->NumPending;
        jsMsgMetaData_Destroy(meta);
      }
      if (need_reset || (f->last_dseq != 0 && dseq != f->last_dseq + 1)) {
        need_reset = 1; /* this one and the rest come again from the new consumer */
        continue;
      }
      f->last_dseq = dseq;
      if (seq > f->last_seq)
        f->last_seq = seq;
      atomic_store(&f->pending, pending);
      if (pending == 0 && !atomic_load(&f->caught)) {
        atomic_store(&f->caught_seq, f->last_seq);
        atomic_store(&f->caught, 1);
      }
      kvp__adv_inbox_push_slot(c->inbox, KVP__IN_JS_EVENT, list.Msgs[i], seq, f->slot, 0);
      list.Msgs[i] = NULL;
    }
    natsMsgList_Destroy(&list);
  }
  return NULL;
}

/* Formats "what: status (jetstream error N)" into err; returns the code. */
static int fail(natsStatus s, jsErrCode jerr, const char *what, char *err, size_t errlen) {
  const char *last = nats_GetLastError(NULL);
  snprintf(err, errlen, "%s: %s%s%s", what, natsStatus_GetText(s), last && last[0] ? ": " : "",
           last ? last : "");
  if (jerr != 0) {
    size_t n = strlen(err);
    snprintf(err + n, errlen > n ? errlen - n : 0, " (jetstream error %d)", (int)jerr);
  }
  if (s == NATS_NO_RESPONDERS) {
    size_t n = strlen(err);
    snprintf(err + n, errlen > n ? errlen - n : 0,
             "; JetStream is probably not enabled on the server (nats-server -js, or "
             "jetstream {} in its configuration)");
  }
  return kvp__nats_status(s) == KVP_EAUTH ? KVP_EAUTH : KVP_ECONN;
}

/* Deletes the durable consumer if this database created it (its
 * description carries the database id) or if taking over; refuses a
 * consumer someone else made. Returns 0 (nothing left in the way),
 * KVP_EBUSY with err naming the consumer, or a NATS failure. */
static int clear_consumer(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, const char *db_id,
                          const char *filter, char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = c->cfg;
  jsConsumerInfo *ci = NULL;
  jsErrCode jerr = 0;
  char mark[KVP__STORE_DB_ID_LEN + 8];
  natsStatus s;
  int ours, rc = 0;

  s = js_GetConsumerInfo(&ci, c->js, f->stream, f->name, NULL, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr)
    return 0;
  if (s != NATS_OK)
    return fail(s, jerr, f->name, err, errlen);
  snprintf(mark, sizeof mark, "db=%s", db_id);
  const char *desc = ci->Config->Description ? ci->Config->Description : "";
  const char *have_filter = ci->Config->FilterSubject ? ci->Config->FilterSubject : "";
  ours = strstr(desc, mark) != NULL && strcmp(have_filter, filter) == 0;
  if (!ours && !cfg->takeover) {
    snprintf(err, errlen,
             "[jetstream] consumer: %s on stream %s was not created for this database "
             "(filter '%s', description '%s'); another advisor may own it: set another consumer "
             "name, or start with --takeover to replace it",
             f->name, f->stream, have_filter, desc);
    rc = KVP_EBUSY;
  }
  jsConsumerInfo_Destroy(ci);
  if (rc != 0)
    return rc;
  if (!ours)
    kvp_log_warn("advisor: taking over consumer %s on stream %s (filter '%s', description '%s')",
                 f->name, f->stream, have_filter, desc);
  /* The database owns the position: the consumer is made again at it. */
  jerr = 0;
  s = js_DeleteConsumer(c->js, f->stream, f->name, NULL, &jerr);
  if (s != NATS_OK && s != NATS_NOT_FOUND)
    return fail(s, jerr, f->name, err, errlen);
  return 0;
}

/* Makes f's durable consumer (replacing one this database made) to deliver
 * after resume_after, and its pull subscription. */
static int make_consumer(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, uint64_t resume_after,
                         char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = c->cfg;
  jsErrCode jerr = 0;
  jsSubOptions so;
  natsStatus s;
  char desc[KVP__STORE_DB_ID_LEN + 128];
  int rc;

  if ((rc = clear_consumer(c, f, f->db_id, f->filter, err, errlen)) != 0)
    return rc;
  snprintf(desc, sizeof desc, "kvplane-advisor ns=%s db=%s", cfg->ns, f->db_id);
  jsSubOptions_Init(&so);
  so.Stream = f->stream;
  so.Config.Durable = f->name;
  so.Config.Description = desc;
  so.Config.AckPolicy = js_AckAll;
  so.Config.AckWait = (int64_t)60 * 1000000000;
  so.Config.MaxAckPending = 1 << 24;
  if (resume_after > 0) {
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = resume_after + 1;
  } else {
    so.Config.DeliverPolicy = js_DeliverAll;
  }
  s = js_PullSubscribe(&f->sub, c->js, f->filter, f->name, NULL, &so, &jerr);
  if (s != NATS_OK)
    return fail(s, jerr, "jetstream pull consumer", err, errlen);
  return 0;
}

/* Creates slot's stream if needed and its durable consumer at resume_after
 * + 1, and starts its fetch thread. */
static int start_fetch(kvp__adv_fetch_t *f, char *err, size_t errlen) {
  atomic_store(&f->halt, 0);
  if (pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
    snprintf(err, errlen, "cannot start the fetch thread");
    return KVP_ENOMEM;
  }
  f->started = 1;
  return 0;
}

static int setup_fetch(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, const char *stream_subject,
                       const char *filter, uint64_t resume_after, const char *db_id, int start,
                       char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = c->cfg;
  int rc, created = 0;

  snprintf(f->filter, sizeof f->filter, "%s", filter);
  snprintf(f->db_id, sizeof f->db_id, "%s", db_id);
  f->last_seq = resume_after;
  /* A cluster that is still forming (no peers to place R replicas on, no
   * meta leader yet) answers with errors for a while: retried for the
   * connect timeout, as the connection itself is. */
  uint64_t until = kvp__now_ns() + (uint64_t)cfg->nats.connect_timeout_ms * 1000000u;
  while ((rc = kvp__nats_ensure_stream_ex(c->js, f->stream, stream_subject, (int)cfg->replicas, 1,
                                          &created, err, errlen)) != 0 ||
         (rc = make_consumer(c, f, resume_after, err, errlen)) != 0) {
    if ((rc != KVP_ECONN && rc != KVP_ETIMEDOUT) || kvp__now_ns() > until)
      return rc;
    kvp_log_info("advisor: %s; retrying", err);
    nats_Sleep(250);
  }
  if (created)
    kvp_log_info("advisor: stream %s created (subjects %s, %d replicas)", f->stream,
                 stream_subject ? stream_subject : KVP_SUBJECT_EVENTS_ALL, (int)cfg->replicas);
  /* Nothing to catch up with: ready at once. */
  jsConsumerInfo *ci = NULL;
  if (natsSubscription_GetConsumerInfo(&ci, f->sub, NULL, NULL) == NATS_OK) {
    atomic_store(&f->pending, ci->NumPending);
    if (ci->NumPending == 0) {
      atomic_store(&f->caught_seq, resume_after);
      atomic_store(&f->caught, 1);
    }
  }
  jsConsumerInfo_Destroy(ci);
  kvp_log_info("advisor: consumer %s on %s resumes after stream sequence %" PRIu64 " (%" PRIu64
               " messages to catch up with)",
               f->name, f->stream, resume_after, (uint64_t)atomic_load(&f->pending));
  return start ? start_fetch(f, err, errlen) : 0;
}

/* Names slot f's stream, durable consumer and filter for partition p (or
 * the one stream when not partitioned). */
static int name_fetch(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, uint32_t count, uint32_t p,
                      char *filter, char *subject) {
  const kvp_advisor_config_t *cfg = c->cfg;
  if (count == 0) {
    snprintf(f->stream, sizeof f->stream, "%s", cfg->stream);
    snprintf(f->name, sizeof f->name, "%s", c->name);
    return kvp_subject_events_ns(filter, KVP_SUBJECT_MAX, cfg->ns);
  }
  snprintf(f->stream, sizeof f->stream, "%s_P%" PRIu32, cfg->stream, p);
  snprintf(f->name, sizeof f->name, "%s-p%" PRIu32, c->name, p);
  int rc = kvp_subject_pevents(filter, KVP_SUBJECT_MAX, cfg->ns, p);
  return rc == 0 ? kvp_subject_pevents_all(subject, KVP_SUBJECT_MAX, p) : rc;
}

static int setup_jetstream(kvp__adv_consumer_t *c, const kvp__adv_partset_t *ps,
                           const uint64_t *resume, const char *db_id, char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = c->cfg;
  char filter[KVP_SUBJECT_MAX], subject[KVP_SUBJECT_MAX];
  natsStatus s;
  int rc;

  if ((s = natsConnection_JetStream(&c->js, c->nc, NULL)) != NATS_OK)
    return fail(s, 0, "jetstream context", err, errlen);
  for (int i = 0; i < ps->n; i++) {
    kvp__adv_fetch_t *f = &c->fetch[i];
    f->c = c;
    f->slot = i;
    c->nfetch = i + 1;
    if (name_fetch(c, f, ps->count, ps->p[i], filter, subject) != 0) {
      snprintf(err, errlen, "[advisor] namespace: '%s' makes no subject", cfg->ns);
      return KVP_ECONFIG;
    }
    if ((rc = setup_fetch(c, f, ps->count ? subject : NULL, filter, resume[i], db_id, 1, err,
                          errlen)) != 0)
      return rc;
  }
  return 0;
}

/* --- live rebalancing (advisor/rebalance.c) ------------------------------------ */

void kvp__adv_consumer_pause(kvp__adv_consumer_t *c) {
  for (int i = 0; i < c->nfetch; i++)
    atomic_store(&c->fetch[i].halt, 1);
  for (int i = 0; i < c->nfetch; i++)
    if (c->fetch[i].started) {
      pthread_join(c->fetch[i].thread, NULL);
      c->fetch[i].started = 0;
    }
}

int kvp__adv_consumer_resume(kvp__adv_consumer_t *c, char *err, size_t errlen) {
  for (int i = 0; i < c->nfetch; i++) {
    int rc;
    c->fetch[i].slot = i;
    if (!c->fetch[i].started && (rc = start_fetch(&c->fetch[i], err, errlen)) != 0)
      return rc;
  }
  return 0;
}

/* f's subscription and its durable consumer go (JetStream API calls). */
static void drop_input(kvp__adv_consumer_t *c, kvp__adv_fetch_t *f, const char *why) {
  jsErrCode jerr = 0;
  natsSubscription_Unsubscribe(f->sub);
  natsSubscription_Destroy(f->sub);
  f->sub = NULL;
  natsStatus s = js_DeleteConsumer(c->js, f->stream, f->name, NULL, &jerr);
  if (s != NATS_OK && s != NATS_NOT_FOUND)
    kvp_log_warn("advisor: consumer %s on %s not deleted %s (%s); it is replaced if the "
                 "partition comes back",
                 f->name, f->stream, why, natsStatus_GetText(s));
}

void kvp__adv_consumer_retire(kvp__adv_consumer_t *c, int slot) {
  /* Its durable consumer goes: the next owner makes its own, and this
   * advisor, should the partition come back, makes it again. */
  drop_input(c, &c->fetch[slot], "on a drop");
}

void kvp__adv_consumer_discard(kvp__adv_consumer_t *c, kvp__adv_fetch_t *made) {
  if (made->sub != NULL)
    drop_input(c, made, "after a failed add");
}

void kvp__adv_consumer_remove(kvp__adv_consumer_t *c, int slot) {
  kvp__adv_fetch_t *f = &c->fetch[slot];
  natsSubscription_Destroy(f->sub); /* NULL once retired */
  memmove(&c->fetch[slot], &c->fetch[slot + 1], (size_t)(c->nfetch - slot - 1) * sizeof *f);
  c->nfetch--;
  memset(&c->fetch[c->nfetch], 0, sizeof *f);
}

int kvp__adv_consumer_make(kvp__adv_consumer_t *c, uint32_t count, uint32_t p,
                           uint64_t resume_after, const char *db_id, kvp__adv_fetch_t *f, char *err,
                           size_t errlen) {
  char filter[KVP_SUBJECT_MAX], subject[KVP_SUBJECT_MAX];
  memset(f, 0, sizeof *f);
  f->c = c;
  atomic_init(&f->caught, 0);
  atomic_init(&f->caught_seq, 0);
  atomic_init(&f->pending, 1);
  atomic_init(&f->halt, 1);
  int rc = name_fetch(c, f, count, p, filter, subject);
  if (rc == 0)
    rc = setup_fetch(c, f, subject, filter, resume_after, db_id, 0, err, errlen);
  else
    snprintf(err, errlen, "[advisor] namespace: '%s' makes no subject", c->cfg->ns);
  if (rc != 0) {
    natsSubscription_Destroy(f->sub);
    f->sub = NULL;
  }
  return rc;
}

int kvp__adv_consumer_insert(kvp__adv_consumer_t *c, int slot, kvp__adv_fetch_t *made, char *err,
                             size_t errlen) {
  if (c->nfetch == KVP__ADV_MAX_OWNED) {
    snprintf(err, errlen, "more than %d partitions", KVP__ADV_MAX_OWNED);
    natsSubscription_Destroy(made->sub);
    made->sub = NULL;
    return KVP_EINVAL;
  }
  memmove(&c->fetch[slot + 1], &c->fetch[slot], (size_t)(c->nfetch - slot) * sizeof c->fetch[0]);
  c->nfetch++;
  memcpy(&c->fetch[slot], made, sizeof *made);
  c->fetch[slot].slot = slot;
  made->sub = NULL;
  return 0;
}

int kvp__adv_consumer_slot_ready(kvp__adv_consumer_t *c, int slot, uint64_t pos, uint64_t *behind) {
  kvp__adv_fetch_t *f = &c->fetch[slot];
  int ok = atomic_load(&f->caught) && pos >= atomic_load(&f->caught_seq);
  if (behind)
    *behind = ok ? 0 : atomic_load(&f->pending);
  return ok;
}

static int subscribe_api(kvp__adv_consumer_t *c, const char *call, natsMsgHandler cb,
                         natsSubscription **sub, char *err, size_t errlen) {
  char subj[KVP_SUBJECT_MAX];
  natsStatus s;

  if (kvp_subject_api(subj, sizeof subj, c->cfg->ns, call) != 0) {
    snprintf(err, errlen, "[advisor] namespace: '%s' makes no subject", c->cfg->ns);
    return KVP_ECONFIG;
  }
  if ((s = natsConnection_Subscribe(sub, c->nc, subj, cb, c)) != NATS_OK)
    return fail(s, 0, subj, err, errlen);
  return 0;
}

static int subscribe(kvp__adv_consumer_t *c, const kvp__adv_partset_t *ps, const uint64_t *resume,
                     const char *db_id, char *err, size_t errlen) {
  char subj[KVP_SUBJECT_MAX];
  natsStatus s;
  int rc;

  if (c->cfg->mode == KVP_ADVISOR_JETSTREAM) {
    if ((rc = setup_jetstream(c, ps, resume, db_id, err, errlen)) != 0)
      return rc;
  } else {
    if (kvp_subject_events_ns(subj, sizeof subj, c->cfg->ns) != 0) {
      snprintf(err, errlen, "[advisor] namespace: '%s' makes no subject", c->cfg->ns);
      return KVP_ECONFIG;
    }
    if ((s = natsConnection_Subscribe(&c->ev_sub, c->nc, subj, on_event_msg, c)) != NATS_OK)
      return fail(s, 0, subj, err, errlen);
    natsSubscription_SetPendingLimits(c->ev_sub, (int)c->cfg->queue_max, 1 << 30);
  }
  /* Match and stats requests come on the query connection (query.h). The
   * operator's tiering controls go to the advisors that tier (not to one
   * that would answer "off"). With partitions, each tiering advisor acts on
   * the blocks of its own partitions (tier/parts.c). */
  if (c->cfg->tiering &&
      (rc = subscribe_api(c, KVP_API_TIER, on_tier_msg, &c->tier_sub, err, errlen)) != 0)
    return rc;
  /* Live rebalancing, addressed to this advisor by its consumer name. */
  if (ps->count > 0) {
    if (kvp_subject_api_advisor(subj, sizeof subj, c->cfg->ns, KVP_API_PARTITIONS, c->name) != 0) {
      snprintf(err, errlen, "[jetstream] consumer: '%s' makes no subject", c->name);
      return KVP_ECONFIG;
    }
    if ((s = natsConnection_Subscribe(&c->parts_sub, c->nc, subj, on_parts_msg, c)) != NATS_OK)
      return fail(s, 0, subj, err, errlen);
  }
  if ((s = natsConnection_Flush(c->nc)) != NATS_OK)
    return fail(s, 0, "subscribe", err, errlen);
  return 0;
}

int kvp__adv_consumer_open(const kvp_advisor_config_t *cfg, kvp__adv_inbox_t *inbox,
                           kvp__adv_consumer_t **out, char *err, size_t errlen) {
  /* Replies go out at once (send_asap), not at nats.c's next flush: a
   * router waits for them. */
  kvp__nats_conn_args_t args = {
      .name = "kvplane-advisor", .reconnect_wait_ms = 250, .send_asap = 1};
  kvp__adv_consumer_t *c;
  int rc;

  *out = NULL;
  if ((c = calloc(1, sizeof *c)) == NULL)
    return KVP_ENOMEM;
  c->cfg = cfg;
  c->inbox = inbox;
  kvp__adv_consumer_name(cfg, c->name, sizeof c->name);
  atomic_init(&c->stopping, 0);
  if ((rc = kvp__nats_connect(&cfg->nats, &args, &c->nc, err, errlen)) != 0) {
    kvp__adv_consumer_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

int kvp__adv_consumer_start(kvp__adv_consumer_t *c, const kvp__adv_partset_t *ps,
                            const uint64_t *resume, const char *db_id, char *err, size_t errlen) {
  char url[256] = "", m[KVP_SUBJECT_MAX] = "";
  int rc;

  if ((rc = subscribe(c, ps, resume, db_id, err, errlen)) != 0)
    return rc;
  natsConnection_GetConnectedUrl(c->nc, url, sizeof url);
  kvp_subject_api(m, sizeof m, c->cfg->ns, KVP_API_MATCH);
  kvp_log_info("advisor: connected to %s; answering on %s and .%s", url, m, KVP_API_STATS);
  return 0;
}

int kvp__adv_consumer_caught_up(kvp__adv_consumer_t *c, const uint64_t *pos, uint64_t *behind) {
  uint64_t sum = 0;
  int ok = 1;
  for (int i = 0; i < c->nfetch; i++) {
    kvp__adv_fetch_t *f = &c->fetch[i];
    sum += atomic_load(&f->pending);
    if (!atomic_load(&f->caught) || pos[i] < atomic_load(&f->caught_seq))
      ok = 0;
  }
  if (behind)
    *behind = ok ? 0 : sum;
  return ok;
}

void kvp__adv_consumer_name(const kvp_advisor_config_t *cfg, char *buf, size_t len) {
  if (cfg->consumer[0])
    snprintf(buf, len, "%s", cfg->consumer);
  else
    snprintf(buf, len, "kvplane-advisor-%s", cfg->ns);
}

void kvp__adv_consumer_stop(kvp__adv_consumer_t *c) {
  atomic_store(&c->stopping, 1);
  kvp__adv_consumer_pause(c); /* the fetch threads halted and joined */
  for (int i = 0; i < c->nfetch; i++)
    if (c->fetch[i].sub)
      natsSubscription_Unsubscribe(c->fetch[i].sub);
  if (c->ev_sub)
    natsSubscription_Unsubscribe(c->ev_sub);
  if (c->tier_sub)
    natsSubscription_Unsubscribe(c->tier_sub);
  if (c->parts_sub)
    natsSubscription_Unsubscribe(c->parts_sub);
}

void kvp__adv_consumer_close(kvp__adv_consumer_t *c) {
  if (c == NULL)
    return;
  atomic_store(&c->stopping, 1);
  for (int i = 0; i < c->nfetch; i++)
    atomic_store(&c->fetch[i].halt, 1);
  for (int i = 0; i < c->nfetch; i++) {
    if (c->fetch[i].started)
      pthread_join(c->fetch[i].thread, NULL);
    natsSubscription_Destroy(c->fetch[i].sub);
  }
  natsSubscription_Destroy(c->ev_sub);
  natsSubscription_Destroy(c->tier_sub);
  natsSubscription_Destroy(c->parts_sub);
  jsCtx_Destroy(c->js);
  natsConnection_Destroy(c->nc);
  free(c);
}

void kvp__adv_consumer_resync(kvp__adv_consumer_t *c, const char *worker, uint32_t dp_rank,
                              uint64_t epoch, const char *reason) {
  char subj[KVP_SUBJECT_MAX], body[256];
  int n;

  if (kvp_subject_resync(subj, sizeof subj, c->cfg->ns, worker) != 0) {
    kvp_log_warn("advisor: worker '%s' has no resync subject; not asked", worker);
    return;
  }
  n = snprintf(body, sizeof body,
               "{\"worker\":\"%s\",\"dp_rank\":%" PRIu32 ",\"epoch\":%" PRIu64
               ",\"reason\":\"%s\"}",
               worker, dp_rank, epoch, reason);
  if (natsConnection_Publish(c->nc, subj, body, n) != NATS_OK)
    kvp_log_warn("advisor: resync request to %s not sent; will retry", subj);
}

void kvp__adv_consumer_reply(kvp__adv_consumer_t *c, natsMsg *request, const char *json) {
  const char *to = natsMsg_GetReply(request);
  if (to && to[0] && json)
    natsConnection_PublishString(c->nc, to, json);
}
