/* The advisor's NATS side: the connection, the event input (a JetStream
 * durable pull consumer with its fetch thread, or core subscriptions), the
 * API request subscriptions, and what the advisor sends (resync requests,
 * replies). Everything received goes into the inbox.
 *
 * JetStream resume: the database, not the server, owns the position. At
 * open the durable consumer is deleted and created again to deliver from
 * resume_after + 1 (all when it is 0), so a restart after kill -9 replays
 * exactly what the database does not hold. Acks are the write-behind's
 * business (writebehind.h). Isolation: the consumer's description carries
 * the database's id, so an advisor never deletes a consumer made for
 * another database (two advisors sharing one would split its messages).
 *
 * Threads: open, stop and close run on the loop thread (open before the
 * loop runs). The fetch thread and nats.c's threads only push into the
 * inbox. resync and reply run on the loop thread. */
#ifndef KVP_ADVISOR_CONSUMER_H
#define KVP_ADVISOR_CONSUMER_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "advisor/inbox.h"
#include "advisor/advisor.h"
#include "advisor/partset.h"
#include "kvplane/subjects.h"

struct kvp__adv_consumer_s;

/* One JetStream input: a durable pull consumer on one stream and the
 * thread that fetches from it. An unpartitioned advisor has one (slot 0,
 * [jetstream] stream); a partitioned one has one per owned partition p
 * (stream <stream>_P<p>, consumer <consumer>-p<p>). */
typedef struct kvp__adv_fetch_s {
  struct kvp__adv_consumer_s *c;
  int slot;
  natsSubscription *sub;
  pthread_t thread;
  int started;
  char stream[96], name[160];
  char filter[KVP_SUBJECT_MAX], db_id[KVP__STORE_DB_ID_LEN + 1];
  /* Fetch thread only: the last stream and delivery (consumer) sequences
   * it pushed. A delivery sequence that jumps means delivered messages
   * were lost on the way (a server died with a fetch's reply in flight, a
   * consumer leader moved): the consumer is then made again after
   * last_seq, so nothing is skipped (duplicates are dropped by sequence). */
  uint64_t last_seq, last_dseq;
  uint64_t resets; /* consumers made again after a loss */
  /* Catch-up at start (any thread reads): caught is set once the stream
   * had nothing more for this consumer (a message said 0 pending, or the
   * consumer started with none), with caught_seq the last stream sequence
   * pushed by then; pending is the last count of messages still to come. */
  atomic_int caught;
  _Atomic uint64_t caught_seq, pending;
  atomic_int halt; /* set: the fetch thread ends (stop, or a live rebalance's pause) */
} kvp__adv_fetch_t;

typedef struct kvp__adv_consumer_s {
  const kvp_advisor_config_t *cfg; /* borrowed; outlives the consumer */
  kvp__adv_inbox_t *inbox;         /* borrowed */
  natsConnection *nc;
  jsCtx *js;
  natsSubscription *ev_sub, *tier_sub; /* ev_sub: core mode */
  natsSubscription *parts_sub;         /* partitioned: kvplane.api.<ns>.partitions.<name> */
  kvp__adv_fetch_t fetch[KVP__ADV_MAX_OWNED];
  int nfetch;
  atomic_int stopping;
  char name[128]; /* the durable consumer's name (JetStream mode) */
} kvp__adv_consumer_t;

/* The durable consumer's name: [jetstream] consumer, or
 * kvplane-advisor-<namespace> when that is empty. */
void kvp__adv_consumer_name(const kvp_advisor_config_t *cfg, char *buf, size_t len);

/* Connects (nothing is subscribed yet). Returns 0 with *out set, or
 * KVP_ECONFIG, KVP_ECONN, KVP_EAUTH, KVP_ENOMEM with err naming the servers
 * and the cause; nothing is left open on error. */
int kvp__adv_consumer_open(const kvp_advisor_config_t *cfg, kvp__adv_inbox_t *inbox,
                           kvp__adv_consumer_t **out, char *err, size_t errlen);

/* Sets up the event input and the API subscriptions and starts the fetch
 * threads. In JetStream mode each slot's durable consumer (ps: one slot,
 * or one per owned partition) is (re)created to resume after stream
 * sequence resume[slot], marked with db_id (the database's id,
 * store.h); an existing consumer of that name is replaced only when it
 * carries the same mark and filter, or cfg->takeover is set. Returns 0, or
 * KVP_ECONFIG, KVP_EBUSY (a consumer of another advisor), KVP_ECONN,
 * KVP_EAUTH, KVP_ENOMEM with err naming the object and the cause; close
 * undoes what was set up. */
int kvp__adv_consumer_start(kvp__adv_consumer_t *c, const kvp__adv_partset_t *ps,
                            const uint64_t *resume, const char *db_id, char *err, size_t errlen);

/* Stops the input: the fetch thread ends (joined) and the subscriptions are
 * unsubscribed, so nothing new reaches the inbox after it returns, except
 * messages nats.c had already started to deliver. Idempotent. */
void kvp__adv_consumer_stop(kvp__adv_consumer_t *c);

/* Stops if needed and closes the connection; NULL is accepted. */
void kvp__adv_consumer_close(kvp__adv_consumer_t *c);

/* 1 once every input caught up with its stream as it stood at start
 * (core mode: at once) and pos[slot] (the applied positions) reached the
 * last sequence pushed by then; *behind (may be NULL) gets the messages
 * still pending. Loop thread. */
int kvp__adv_consumer_caught_up(kvp__adv_consumer_t *c, const uint64_t *pos, uint64_t *behind);

/* Live rebalancing (advisor/rebalance_move.c). pause ends every fetch
 * thread (joined; a fetch in flight finishes first, up to its 500 ms
 * wait) and keeps the consumers; nothing new reaches the inbox after it.
 * resume starts them again, each with its (new) slot. While paused, and
 * with the slots not moving: retire stops slot's input (its subscription,
 * and its durable consumer on the server: JetStream API calls that may
 * wait up to the request timeout), make prepares the input of partition p
 * (of count) in f, outside the slots, its durable consumer resuming after
 * resume_after (0: the stream's start). Both may run on any one thread
 * while the loop thread goes on reading the slots (slot_ready,
 * caught_up). Then on the loop thread: remove drops a retired slot, the
 * slots after it moving down one; insert places a made input at slot, the
 * ones from slot moving up (its thread started by resume; f gives up its
 * subscription). make and insert return 0, or KVP_EINVAL, KVP_ECONFIG,
 * KVP_ECONN, KVP_EAUTH, KVP_ENOMEM with err (nothing left made, the slots
 * as before). slot_ready (loop thread): 1 once slot's input caught up
 * with its stream as it stood when the consumer was made and pos (its
 * applied position) reached it; *behind (may be NULL) the messages it
 * waits for. discard (any thread but the loop's: JetStream API calls): a
 * made input that is not to be placed gives up its subscription and its
 * durable consumer, which would stay on the server otherwise. */
void kvp__adv_consumer_pause(kvp__adv_consumer_t *c);
int kvp__adv_consumer_resume(kvp__adv_consumer_t *c, char *err, size_t errlen);
void kvp__adv_consumer_retire(kvp__adv_consumer_t *c, int slot);
int kvp__adv_consumer_make(kvp__adv_consumer_t *c, uint32_t count, uint32_t p,
                           uint64_t resume_after, const char *db_id, kvp__adv_fetch_t *f, char *err,
                           size_t errlen);
void kvp__adv_consumer_discard(kvp__adv_consumer_t *c, kvp__adv_fetch_t *made);
void kvp__adv_consumer_remove(kvp__adv_consumer_t *c, int slot);
int kvp__adv_consumer_insert(kvp__adv_consumer_t *c, int slot, kvp__adv_fetch_t *f, char *err,
                             size_t errlen);
int kvp__adv_consumer_slot_ready(kvp__adv_consumer_t *c, int slot, uint64_t pos, uint64_t *behind);

/* Publishes a resync request to the worker (no reply expected); a failed
 * publish is logged and left to the ingest's retry timer. */
void kvp__adv_consumer_resync(kvp__adv_consumer_t *c, const char *worker, uint32_t dp_rank,
                              uint64_t epoch, const char *reason);

/* Sends json as the reply to a request message; a request without a reply
 * subject gets nothing. */
void kvp__adv_consumer_reply(kvp__adv_consumer_t *c, natsMsg *request, const char *json);

#endif
