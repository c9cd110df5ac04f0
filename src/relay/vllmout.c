/* kvplane-relay --reverse: streams, sockets and the loop; see vllmout.h.
 * Why this file is long: a stream's state (ranks, epochs, resyncs), its
 * sockets and its replay ring are one object the loop drives; vllmenc.c
 * already holds the format. */
#include "relay/vllmout.h"

#include <inttypes.h>
#include <limits.h>
#include <nats/nats.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "nats/conn.h"
#include "relay/vllmenc.h"

/* (dp rank, epoch, next id) followed per stream at most: a stream of every
 * rank follows as many as its worker runs (data parallel 32, 64 and more);
 * a batch of a rank past them is dropped and counted (untracked). */
#define MAX_RANKS 1024
#define RESYNC_RETRY_MS 1000u /* between two resync requests of one rank */
#define RESYNC_AGAIN_MS 5000u /* an unanswered one is asked again after (the advisor's default) */

typedef struct rank_s {
  uint32_t dp;
  int known;
  uint64_t epoch, last_id;
  uint64_t resync_ms;   /* when a resync was last asked; 0: none pending */
  int lost;             /* a batch not announced whole (out of memory): the worker is
                         * cleared and asked for a resync at the next chance (recover) */
  kvp__vout_state_t st; /* what the stream announced for this rank */
} rank_t;

typedef struct msg_s {
  uint64_t seq;
  uint8_t *payload;
  size_t len;
} msg_t;

typedef struct stream_s {
  kvp__vout_stream_opts_t o;
  void *pub, *router;
  rank_t *ranks; /* grown as ranks are seen, up to MAX_RANKS */
  size_t nranks, ranks_cap;
  uint64_t next_seq;
  uint64_t sent_ms; /* monotonic: when its last message went out */
  msg_t *ring;      /* buffer_steps messages, oldest at ring_head */
  size_t ring_cap, ring_head, ring_n;
  size_t ring_bytes; /* their payloads' bytes: at most buffer_bytes, or one message */
  /* figures */
  uint64_t batches, events, messages, gaps, epochs, resyncs, replays, replayed, bad_replays,
      send_errors, untracked, encode_errors;
} stream_t;

struct kvp__vout_s {
  kvp__vout_opts_t o;
  kvp__vout_media_t media;
  void *zctx;
  stream_t *s;
  size_t ns;
  natsConnection *nc;
  natsSubscription *sub;
  atomic_int stop;
  uint64_t spoofed, undecodable, unrouted;
};

static void announce_start(kvp__vout_t *v, stream_t *s);

static uint64_t mono_ms(void) {
  return kvp__now_ns() / 1000000u;
}

void kvp__vout_opts_init(kvp__vout_opts_t *o) {
  memset(o, 0, sizeof *o);
  kvp_nats_opts_init(&o->nats);
  o->ns = "default";
  o->topic = "";
  o->replay_topic = 1;
  o->buffer_steps = 10000;
  o->buffer_bytes = (size_t)128 << 20;
  o->sndhwm = 100000;
  o->idle_ms = 10000;
}

/* A ROUTER is made mandatory: a reply past a peer's high-water mark fails
 * (sent with ZMQ_DONTWAIT: EAGAIN) instead of being dropped without a word,
 * which would leave a replay with a hole and no end marker. */
static int bind_socket(void *zctx, int type, const char *url, int hwm, void **out, char *err,
                       size_t errlen, const char *what) {
  int linger = 0, one = 1;
  void *s = zmq_socket(zctx, type);
  if (s == NULL || zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
      (hwm > 0 && zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0) ||
      (type == ZMQ_ROUTER && zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0) ||
      zmq_bind(s, url) != 0) {
    snprintf(err, errlen, "%s %s: %s", what, url, zmq_strerror(zmq_errno()));
    if (s)
      zmq_close(s);
    return KVP_ECONFIG;
  }
  *out = s;
  return 0;
}

int kvp__vout_open(const kvp__vout_opts_t *o, kvp__vout_t **out, char *err, size_t errlen) {
  kvp__vout_t *v;
  char subj[KVP_SUBJECT_MAX];
  int rc;

  *out = NULL;
  if (o->nstreams == 0) {
    snprintf(err, errlen, "no stream: give --worker and --endpoint");
    return KVP_ECONFIG;
  }
  if ((o->partitioned ? kvp_subject_pevents_ns(subj, sizeof subj, o->ns)
                      : kvp_subject_events_ns(subj, sizeof subj, o->ns)) != 0) {
    snprintf(err, errlen, "--ns: '%s' is not a valid namespace", o->ns);
    return KVP_ECONFIG;
  }
  for (size_t i = 0; i < o->nstreams; i++)
    if (!kvp_subject_token_valid(o->streams[i].worker)) {
      snprintf(err, errlen, "--worker: '%s' is not a worker id ([A-Za-z0-9_-]+)",
               o->streams[i].worker);
      return KVP_ECONFIG;
    }
  if ((v = calloc(1, sizeof *v)) == NULL)
    return KVP_ENOMEM;
  v->o = *o;
  kvp__vout_media_init(&v->media);
  if (o->media && (rc = kvp__vout_media_set(&v->media, o->media, err, errlen)) != 0)
    goto fail;
  if (v->o.buffer_steps == 0)
    v->o.buffer_steps = 1;
  if ((v->zctx = zmq_ctx_new()) == NULL || (v->s = calloc(o->nstreams, sizeof *v->s)) == NULL) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  /* A run's sequences start at its start time in microseconds: above
   * every sequence of an earlier run (a clock set back by more than the
   * time between two runs aside), so a consumer sees a restart as a jump
   * forward and replays across it (announce_start). */
  uint64_t first_seq = kvp__unix_ms() * 1000;
  for (size_t i = 0; i < o->nstreams; i++) {
    stream_t *s = &v->s[v->ns];
    s->o = o->streams[i];
    s->next_seq = first_seq;
    v->ns++;
    s->ring_cap = v->o.buffer_steps;
    /* Room for the rank announce_start clears: the start never fails. */
    if ((s->ring = calloc(s->ring_cap, sizeof *s->ring)) == NULL ||
        KVP_ARRAY_RESERVE(s->ranks, s->ranks_cap, 1, 4) != 0) {
      rc = KVP_ENOMEM;
      goto fail;
    }
    if ((rc = bind_socket(v->zctx, ZMQ_PUB, s->o.endpoint, o->sndhwm, &s->pub, err, errlen,
                          "--endpoint")) != 0 ||
        /* A whole replay (the buffer and the end marker) fits under the
         * ROUTER's high-water mark (ZMQ's default, 1000, is below vLLM's
         * buffer of 10000): a requester reads it when it likes. */
        (s->o.replay && (rc = bind_socket(v->zctx, ZMQ_ROUTER, s->o.replay,
                                          s->ring_cap < INT_MAX ? (int)s->ring_cap + 1 : INT_MAX,
                                          &s->router, err, errlen, "--replay")) != 0))
      goto fail;
  }
  kvp__nats_conn_args_t a = {.name = "kvplane-relay-reverse"};
  if ((rc = kvp__nats_connect(&o->nats, &a, &v->nc, err, errlen)) != 0)
    goto fail;
  if (natsConnection_SubscribeSync(&v->sub, v->nc, subj) != NATS_OK ||
      natsSubscription_SetPendingLimits(v->sub, 1 << 20, 1 << 30) != NATS_OK) {
    snprintf(err, errlen, "cannot subscribe to %s", subj);
    rc = KVP_ECONN;
    goto fail;
  }
  natsConnection_Flush(v->nc);
  for (size_t i = 0; i < v->ns; i++)
    announce_start(v, &v->s[i]);
  *out = v;
  return 0;
fail:
  kvp__vout_close(v);
  return rc;
}

static void ring_drop_oldest(stream_t *s) {
  msg_t *m = &s->ring[s->ring_head];
  s->ring_bytes -= m->len;
  free(m->payload);
  *m = (msg_t){0};
  s->ring_head = (s->ring_head + 1) % s->ring_cap;
  s->ring_n--;
}

/* Keeps a sent payload (taking it) for replay: the oldest go past
 * buffer_steps messages or buffer_bytes bytes, the newest stays. A replay
 * from a sequence that went answers with what is left, whose first
 * sequence tells the requester what it lost (vLLM's buffer does the same). */
static void ring_put(kvp__vout_t *v, stream_t *s, uint64_t seq, uint8_t *p, size_t len) {
  while (s->ring_n > 0 && (s->ring_n == s->ring_cap || s->ring_bytes + len > v->o.buffer_bytes))
    ring_drop_oldest(s);
  s->ring[(s->ring_head + s->ring_n) % s->ring_cap] = (msg_t){seq, p, len};
  s->ring_n++;
  s->ring_bytes += len;
}

static void be64(uint8_t out[8], uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    out[i] = (uint8_t)v;
}

/* Sends a payload as the stream's next message and keeps it for replay
 * (taking it). */
static void send_payload(kvp__vout_t *v, stream_t *s, uint8_t *p, size_t len) {
  uint8_t seq[8];
  uint64_t n = s->next_seq++;
  be64(seq, n);
  const char *topic = v->o.topic;
  if (zmq_send(s->pub, topic, strlen(topic), ZMQ_SNDMORE) < 0 ||
      zmq_send(s->pub, seq, 8, ZMQ_SNDMORE) < 0 || zmq_send(s->pub, p, len, 0) < 0)
    s->send_errors++;
  s->messages++;
  s->sent_ms = mono_ms();
  ring_put(v, s, n, p, len);
}

static rank_t *rank_add(stream_t *s, uint32_t dp);

/* The rank a stream speaks for in what the relay says on its own (its
 * start, its empty batches): its rank, or 0 for a stream of every rank. */
static uint32_t own_rank(const stream_t *s) {
  return s->o.dp_rank >= 0 ? (uint32_t)s->o.dp_rank : 0;
}

/* An empty batch on a stream silent for idle_ms. */
static void send_idle(kvp__vout_t *v, stream_t *s) {
  uint8_t *p = NULL;
  size_t len = 0;
  if (mono_ms() - s->sent_ms < v->o.idle_ms)
    return;
  if (kvp__vout_encode_empty(v->o.format, own_rank(s), kvp__unix_ms(), &p, &len) == 0)
    send_payload(v, s, p, len);
  else
    s->sent_ms = mono_ms(); /* no memory: not again at once */
}

/* kvp__vout_encode's sink: each payload goes out on the stream. */
typedef struct to_stream_s {
  kvp__vout_t *v;
  stream_t *s;
} to_stream_t;

static void to_stream(void *ctx, uint8_t *p, size_t len) {
  to_stream_t *t = ctx;
  send_payload(t->v, t->s, p, len);
}

/* AllBlocksCleared for rank r: what an earlier run of the relay announced
 * for it is unknown here, and the worker may have removed blocks meanwhile:
 * a consumer drops it all, then learns what the worker holds from the
 * stores that follow (a resync's snapshot when the relay joins the
 * worker's stream late). */
static int announce_clear(kvp__vout_t *v, stream_t *s, rank_t *r) {
  kvp_event_t clr = {.type = KVP_EV_CLEARED, .tier = KVP_TIER_ALL};
  kvp_batch_t b = {.worker_id = s->o.worker,
                   .dp_rank = r->dp,
                   .events = &clr,
                   .nevents = 1,
                   .timestamp_ms = kvp__unix_ms()};
  to_stream_t t = {v, s};
  size_t n;
  return kvp__vout_encode(&r->st, &b, v->o.format, &v->media, to_stream, &t, &n);
}

/* The first message of a run clears the stream's rank (rank 0 for a
 * stream of every rank, whose other ranks are cleared when first seen:
 * feed). Its sequence is the run's first (kvp__vout_open), above every one
 * of an earlier run: a consumer that reconnects after the first messages
 * sees a jump from its last sequence and replays from there, the clear
 * included. */
static void announce_start(kvp__vout_t *v, stream_t *s) {
  (void)announce_clear(v, s, rank_add(s, own_rank(s))); /* room reserved at open */
}

static void resync(kvp__vout_t *v, stream_t *s, rank_t *r, const char *worker, const char *why,
                   uint64_t now) {
  char subj[KVP_SUBJECT_MAX], body[256];
  if (v->o.no_resync || (r->resync_ms && now - r->resync_ms < RESYNC_RETRY_MS))
    return;
  if (kvp_subject_resync(subj, sizeof subj, v->o.ns, worker) != 0)
    return;
  int n = snprintf(body, sizeof body,
                   "{\"worker\":\"%s\",\"dp_rank\":%" PRIu32 ",\"epoch\":%" PRIu64
                   ",\"reason\":\"%s\"}",
                   worker, r->dp, r->epoch, why);
  if (natsConnection_Publish(v->nc, subj, body, n) == NATS_OK) {
    r->resync_ms = now;
    s->resyncs++;
    kvp_log_info("relay --reverse: worker %s dp %" PRIu32 ": resync requested (%s)", worker, r->dp,
                 why);
  }
}

static rank_t *rank_find(stream_t *s, uint32_t dp) {
  for (size_t i = 0; i < s->nranks; i++)
    if (s->ranks[i].dp == dp)
      return &s->ranks[i];
  return NULL;
}

/* A rank's state, made when first seen (the caller found none); NULL past
 * MAX_RANKS ranks or without memory. A rank is never taken over by
 * another: the two would each be seen anew at their next batch, cleared
 * (feed) and make the stream's other ranks resync, batch after batch.
 * Pointers into s->ranks go when a rank is added. */
static rank_t *rank_add(stream_t *s, uint32_t dp) {
  if (s->nranks == MAX_RANKS || KVP_ARRAY_RESERVE(s->ranks, s->ranks_cap, s->nranks + 1, 4) != 0)
    return NULL;
  rank_t *r = &s->ranks[s->nranks++];
  *r = (rank_t){.dp = dp};
  kvp__vout_state_init(&r->st);
  return r;
}

/* Clears rank r on the stream and forgets what the stream announced for
 * its other ranks. Routers read a clear two ways: one keyed by (worker,
 * rank) drops that rank's blocks, Dynamo's indexer the worker's, every
 * rank. So the other ranks' announced state goes too (a snapshot of
 * theirs in flight still completes), and each is marked asked: the resync
 * the caller asks for r reaches every rank's publisher (the subject is the
 * worker's), their snapshots announce their blocks again, to either kind
 * of router, and each asks again at its next batch after RESYNC_AGAIN_MS
 * unanswered. Returns 0, or KVP_ENOMEM when the clear could not be
 * encoded (nothing forgotten then). *others: the ranks forgotten. */
static int clear_worker(kvp__vout_t *v, stream_t *s, rank_t *r, uint64_t now, size_t *others) {
  int rc = announce_clear(v, s, r);
  *others = 0;
  if (rc != 0)
    return rc;
  for (size_t i = 0; i < s->nranks; i++) {
    rank_t *o = &s->ranks[i];
    if (o == r || !o->known)
      continue;
    kvp__vout_state_forget(&o->st);
    o->resync_ms = now;
    (*others)++;
  }
  return 0;
}

/* After a batch of r that was not announced whole: what the encoder
 * marked announced may not have gone out (or may have, in part), so
 * neither what the stream says nor what it remembers can be trusted. The
 * worker is cleared and asked for a resync, whose snapshots announce it
 * again. When the clear itself finds no memory, r stays lost and the next
 * batch tries again. With --no-resync nothing would bring the worker back:
 * the log said so, and r is left as it is. */
static void recover(kvp__vout_t *v, stream_t *s, rank_t *r, const char *worker, uint64_t now) {
  size_t others;
  if (v->o.no_resync) {
    r->lost = 0;
    return;
  }
  if (clear_worker(v, s, r, now, &others) != 0)
    return;
  r->lost = 0;
  r->resync_ms = 0; /* asked now, whatever was pending */
  resync(v, s, r, worker, "out of memory", now);
  kvp_log_info("relay --reverse: worker %s dp %" PRIu32 ": cleared after a batch not announced "
               "whole; it and its %zu other rank(s) are announced again from the resync",
               worker, r->dp, others);
}

/* Announces b on s: epochs, gaps and duplicates first, as the advisor
 * follows them (ingest.c). */
static void feed(kvp__vout_t *v, stream_t *s, const kvp_batch_t *b, uint64_t now) {
  rank_t *r = rank_find(s, b->dp_rank);
  const char *why = NULL;
  to_stream_t t = {v, s};
  size_t n;

  if (r == NULL) {
    /* A rank of a stream of every rank, first seen in this run: cleared first, as the stream's
     * first rank was at the start (an earlier run may have announced its blocks); the resync asked
     * below brings back what it holds, and the other ranks' (clear_worker). With --no-resync
     * nothing would bring the other ranks back: no clear then. */
    if ((r = rank_add(s, b->dp_rank)) == NULL) {
      if (s->untracked++ == 0)
        kvp_log_warn("relay --reverse: worker %s dp %" PRIu32 ": not relayed: the stream "
                     "follows %zu ranks at most (or no memory); its batches are dropped "
                     "(counted untracked)",
                     b->worker_id, b->dp_rank, (size_t)MAX_RANKS);
      return;
    }
    if (!v->o.no_resync) {
      size_t others = 0;
      if (clear_worker(v, s, r, now, &others) != 0)
        r->lost = 1; /* the clear did not go out: again at its next batch */
      kvp_log_info("relay --reverse: worker %s dp %" PRIu32 ": first seen: cleared; what the "
                   "stream announced for its %zu other rank(s) is announced again from the "
                   "resync",
                   b->worker_id, b->dp_rank, others);
    }
  }

  s->batches++;
  if (r->lost && r->known)
    recover(v, s, r, b->worker_id, now);
  if (r->known && b->epoch < r->epoch)
    return; /* a previous life's batch */
  if (r->known && b->epoch > r->epoch) {
    /* A restarted worker: its G1/G2 blocks are gone, G3/G4 are on disk. */
    kvp_event_t clr[2] = {{.type = KVP_EV_CLEARED, .tier = KVP_TIER_G1},
                          {.type = KVP_EV_CLEARED, .tier = KVP_TIER_G2}};
    kvp_batch_t cb = {.worker_id = b->worker_id,
                      .dp_rank = b->dp_rank,
                      .events = clr,
                      .nevents = 2,
                      .timestamp_ms = b->timestamp_ms};
    if (kvp__vout_encode(&r->st, &cb, v->o.format, &v->media, to_stream, &t, &n) != 0)
      r->lost = 1; /* recovered after this batch */
    s->epochs++;
    r->known = 0;
    why = "epoch";
  }
  if (!r->known) {
    r->known = 1;
    r->epoch = b->epoch;
    r->last_id = b->first_event_id ? b->first_event_id - 1 : 0;
    r->resync_ms = 0;
    /* Whatever its first event id: G3/G4 blocks outlive a worker's epoch,
     * and a worker first seen at the start of one (it started after this
     * relay, an advisor restarted with its database) may hold some this
     * stream never announced. The advisor keeps what it learnt in its
     * database; this relay keeps nothing past its run. */
    if (why == NULL)
      why = b->first_event_id > 1 ? "unknown" : "joined";
  } else if (b->first_event_id > r->last_id + 1 || b->dropped_events > 0) {
    why = "gap";
    s->gaps++;
  } else if (r->resync_ms && now - r->resync_ms >= RESYNC_AGAIN_MS) {
    /* Asked and never answered (core NATS drops a request nobody was
     * subscribed to: the worker's publisher was reconnecting): again, at
     * the worker's next batch, as the advisor does (ingest.c, "retry"). */
    why = "retry";
  }
  if (why)
    resync(v, s, r, b->worker_id, why, now);
  if (b->nevents == 0) {
    if (b->first_event_id > r->last_id + 1)
      r->last_id = b->first_event_id - 1;
    return;
  }
  size_t skip = 0;
  for (; skip < b->nevents; skip++) {
    uint64_t eid = b->events[skip].event_id ? b->events[skip].event_id : b->first_event_id + skip;
    if (eid > r->last_id)
      break;
  }
  if (skip == b->nevents)
    return; /* duplicates */
  kvp_batch_t view = *b;
  view.events += skip;
  view.nevents -= skip;
  const kvp_event_t *last = &b->events[b->nevents - 1];
  r->last_id = last->event_id ? last->event_id : b->first_event_id + b->nevents - 1;
  for (size_t i = 0; i < view.nevents; i++)
    if (view.events[i].type == KVP_EV_SNAPSHOT && view.events[i].last)
      r->resync_ms = 0; /* answered */
  if (kvp__vout_encode(&r->st, &view, v->o.format, &v->media, to_stream, &t, &n) != 0) {
    s->encode_errors++;
    kvp_log_warn("relay --reverse: worker %s dp %" PRIu32 ": out of memory encoding a batch "
                 "(event ids %" PRIu64 "..%" PRIu64 "): %s",
                 b->worker_id, b->dp_rank, b->first_event_id, r->last_id,
                 v->o.no_resync ? "what routers hold of the worker may be wrong until it restarts "
                                  "(--no-resync: no resync to ask)"
                                : "the worker is cleared and asked for a resync");
    r->lost = 1;
  }
  s->events += n;
  if (r->lost)
    recover(v, s, r, b->worker_id, now);
}

static void on_nats(kvp__vout_t *v, natsMsg *m, uint64_t now) {
  char ns[KVP_SUBJECT_TOKEN_MAX + 1], worker[KVP_SUBJECT_TOKEN_MAX + 1];
  kvp_wire_batch_t *wb = NULL;
  uint32_t part;

  if (kvp_subject_parse_any_events(natsMsg_GetSubject(m), ns, worker, &part) != 0)
    return;
  if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), NULL,
                      &wb) != 0) {
    v->undecodable++;
    return;
  }
  const kvp_batch_t *b = kvp_wire_batch_view(wb);
  if (strcmp(b->worker_id, worker) != 0) {
    v->spoofed++;
  } else {
    int routed = 0;
    for (size_t i = 0; i < v->ns; i++) {
      stream_t *s = &v->s[i];
      if (strcmp(s->o.worker, worker) == 0 && (s->o.dp_rank < 0 || s->o.dp_rank == b->dp_rank)) {
        feed(v, s, b, now);
        routed = 1;
      }
    }
    if (!routed)
      v->unrouted++;
  }
  kvp_wire_batch_free(wb);
}

/* Sends one reply: [identity, ("",) (topic,) seq, payload], the topic
 * frame unless topic is NULL. Never blocks: a requester gone, or one that
 * has not read an earlier replay (its pipe full), fails it (the ROUTER is
 * mandatory, bind_socket). */
static int reply(stream_t *s, const zmq_msg_t *id, int delim, const char *topic,
                 const uint8_t seq[8], const uint8_t *p, size_t len) {
  const int f = ZMQ_DONTWAIT | ZMQ_SNDMORE;
  if (zmq_send(s->router, zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id), f) < 0 ||
      (delim && zmq_send(s->router, "", 0, f) < 0) ||
      (topic != NULL && zmq_send(s->router, topic, strlen(topic), f) < 0) ||
      zmq_send(s->router, seq, 8, f) < 0 || zmq_send(s->router, p, len, ZMQ_DONTWAIT) < 0)
    return KVP_EIO;
  return 0;
}

/* Answers one replay request waiting on s's ROUTER: every buffered message
 * from the requested sequence on, then the end marker (an empty topic,
 * sequence -1, an empty payload), as vLLM 0.26+'s _service_replay does;
 * topic NULL (--replay-no-topic): no topic frames, as vLLM before 0.26 and
 * SGLang send them. */
static void serve_replay(stream_t *s, const char *topic) {
  zmq_msg_t f[4];
  const uint8_t *data[4];
  size_t lens[4], n = 0, total = 0;
  int more = 1, delim;
  uint64_t start;

  while (more) {
    zmq_msg_t tmp;
    zmq_msg_init(&tmp);
    if (zmq_msg_recv(&tmp, s->router, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&tmp);
      break;
    }
    more = zmq_msg_more(&tmp);
    total++;
    if (n < 4)
      f[n++] = tmp;
    else
      zmq_msg_close(&tmp);
  }
  for (size_t i = 0; i < n; i++) {
    data[i] = zmq_msg_data(&f[i]);
    lens[i] = zmq_msg_size(&f[i]);
  }
  if (total == 0)
    return;
  if (total != n || kvp__vout_replay_request(data, lens, n, &start, &delim) != 0) {
    s->bad_replays++;
    goto done;
  }
  s->replays++;
  for (size_t k = 0; k < s->ring_n; k++) {
    const msg_t *m = &s->ring[(s->ring_head + k) % s->ring_cap];
    uint8_t seq[8];
    if (m->seq < start)
      continue;
    be64(seq, m->seq);
    if (reply(s, &f[0], delim, topic, seq, m->payload, m->len) != 0) {
      s->send_errors++;
      goto done;
    }
    s->replayed++;
  }
  static const uint8_t end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  if (reply(s, &f[0], delim, topic != NULL ? "" : NULL, end, (const uint8_t *)"", 0) != 0)
    s->send_errors++;
done:
  for (size_t i = 0; i < n; i++)
    zmq_msg_close(&f[i]);
}

int kvp__vout_run(kvp__vout_t *v) {
  zmq_pollitem_t items[KVP_RELAY_MAX_ENDPOINTS];
  stream_t *owner[KVP_RELAY_MAX_ENDPOINTS];
  int ni = 0;

  for (size_t i = 0; i < v->ns; i++)
    if (v->s[i].router) {
      items[ni] = (zmq_pollitem_t){.socket = v->s[i].router, .events = ZMQ_POLLIN};
      owner[ni++] = &v->s[i];
    }
  while (!atomic_load(&v->stop)) {
    if (ni > 0 && zmq_poll(items, ni, 0) > 0)
      for (int i = 0; i < ni; i++)
        if (items[i].revents & ZMQ_POLLIN)
          serve_replay(owner[i], v->o.replay_topic ? v->o.topic : NULL);
    /* NATS next, up to 10 ms of waiting: a replay request waits at most that. */
    natsMsg *m = NULL;
    natsStatus st = natsSubscription_NextMsg(&m, v->sub, 10);
    for (int k = 0; st == NATS_OK && k < 256; k++) {
      on_nats(v, m, kvp__unix_ms());
      natsMsg_Destroy(m);
      m = NULL;
      st = natsSubscription_NextMsg(&m, v->sub, 1);
    }
    if (st == NATS_OK)
      natsMsg_Destroy(m);
    for (size_t i = 0; v->o.idle_ms && i < v->ns; i++)
      send_idle(v, &v->s[i]);
  }
  return 0;
}

void kvp__vout_stop(kvp__vout_t *v) {
  atomic_store(&v->stop, 1);
}

void kvp__vout_stats_print(const kvp__vout_t *v, FILE *f) {
  for (size_t i = 0; i < v->ns; i++) {
    const stream_t *s = &v->s[i];
    fprintf(f,
            "{\"worker\":\"%s\",\"dp_rank\":%" PRId64 ",\"endpoint\":\"%s\",\"batches\":%" PRIu64
            ",\"events\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"gaps\":%" PRIu64
            ",\"epochs\":%" PRIu64 ",\"resyncs\":%" PRIu64 ",\"replays\":%" PRIu64
            ",\"replayed\":%" PRIu64 ",\"bad_replays\":%" PRIu64 ",\"send_errors\":%" PRIu64
            ",\"spoofed\":%" PRIu64 ",\"undecodable\":%" PRIu64 ",\"buffered\":%zu"
            ",\"buffered_bytes\":%zu,\"ranks\":%zu,\"untracked\":%" PRIu64
            ",\"encode_errors\":%" PRIu64 "}\n",
            s->o.worker, s->o.dp_rank, s->o.endpoint, s->batches, s->events, s->messages, s->gaps,
            s->epochs, s->resyncs, s->replays, s->replayed, s->bad_replays, s->send_errors,
            v->spoofed, v->undecodable, s->ring_n, s->ring_bytes, s->nranks, s->untracked,
            s->encode_errors);
  }
  fflush(f);
}

void kvp__vout_close(kvp__vout_t *v) {
  if (v == NULL)
    return;
  natsSubscription_Destroy(v->sub);
  if (v->nc) {
    natsConnection_Close(v->nc);
    natsConnection_Destroy(v->nc);
  }
  for (size_t i = 0; i < v->ns; i++) {
    stream_t *s = &v->s[i];
    if (s->pub)
      zmq_close(s->pub);
    if (s->router)
      zmq_close(s->router);
    for (size_t k = 0; s->ring && k < s->ring_n; k++)
      free(s->ring[(s->ring_head + k) % s->ring_cap].payload);
    free(s->ring);
    for (size_t k = 0; k < s->nranks; k++)
      kvp__vout_state_free(&s->ranks[k].st);
    free(s->ranks);
  }
  free(v->s);
  if (v->zctx)
    zmq_ctx_term(v->zctx);
  free(v);
}
