/* Internal state of a publisher, shared by the files of src/publish. */
#ifndef KVP_PUBLISH_PUB_H
#define KVP_PUBLISH_PUB_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "kvplane/publisher.h"
#include "publish/batch.h"
#include "publish/queue.h"

/* A JetStream batch awaiting its ack. */
typedef struct kvp__pend_s {
  uint64_t first_id;
  uint64_t nevents;
  uint64_t nblocks;
  uint64_t ticket; /* queue items up to here are in this or earlier batches */
  uint8_t *buf;
  size_t len;
  int state;      /* 0 to send, 1 in flight, 2 acked */
  uint64_t gen;   /* connection generation it was last sent on */
  uint32_t sends; /* publishes so far: the first counts as sent, the rest as resent */
} kvp__pend_t;

struct kvp_publisher_s {
  kvp_publisher_opts_t o; /* strings point into strs */
  char *strs;
  char subject[256];
  char ctl_subject[256];
  uint64_t epoch;
  /* producers */
  kvp__pubq_t q;
  uv_async_t async;
  /* loop thread */
  uv_loop_t loop;
  uv_timer_t delay_timer;
  uv_timer_t tick_timer;
  uv_thread_t thread;
  kvp__batch_t batch;
  uint64_t next_id;
  uint64_t consumed; /* queue items fully added to the window */
  size_t item_from;  /* hashes of the item at consumed already in the window */
  uint64_t last_send_ns;
  uint64_t core_lost; /* events of failed core publishes, for the next batch */
  kvp__pend_t *pend;  /* ring */
  size_t pcap, phead, ptail;
  size_t inflight;
  int retry; /* an ack failed: resend unacked batches in order */
  uint64_t retry_at_ns;
  uint64_t resend_logged_ns; /* the last resend's log line; at most one a 10 s */
  uint64_t resends_unlogged; /* resends since that line */
  int stopping;
  /* nats */
  natsConnection *nc;
  jsCtx *js;
  natsSubscription *ctl_sub;
  /* acks from nats threads */
  pthread_mutex_t amu;
  uint64_t *acks; /* first ids; top bit set = failed */
  size_t nacks, ackcap;
  char ack_err[160]; /* why the last failed ack failed ("" none); under amu */
  /* flush */
  pthread_mutex_t fmu;
  pthread_cond_t fcond;
  uint64_t done_ticket;
  /* closing: nats.c delivers callbacks on its own threads, possibly after
   * natsConnection_Close returns; wait for its last ones before freeing */
  pthread_mutex_t cmu;
  pthread_cond_t ccond;
  int nc_closed, sub_done;
  pthread_mutex_t wmu; /* guards wake_ok: no uv_async_send once the handle closes */
  int wake_ok;
  _Atomic uint64_t flush_want;
  /* Set by the loop while a batch window is open and its max-delay timer
   * runs: producers then skip waking the loop for an event into an empty
   * queue (the timer will take it), and wake it only when the queue
   * reaches wake_at events. Saves a syscall and a context switch per burst
   * of events on the producer's thread (loop.c, kvp__pub_maybe_wake and
   * settle). */
  _Atomic int armed;
  size_t wake_at; /* 0: every event wakes the loop (a tiny queue) */
  _Atomic int stop;
  _Atomic int link_up;
  _Atomic uint64_t gen; /* bumped at every disconnect */
  uint64_t seen_gen;    /* loop thread's view of gen */
  _Atomic int resync_due;
  _Atomic uint64_t snap_seq;
  /* figures */
  _Atomic uint64_t f_queued, f_sent, f_acked, f_dropped, f_batches, f_bytes, f_reconnects,
      f_resyncs, f_blocks, f_retries, f_resent;
};

/* options.c: validates o, writes "<option>: <why>" to err. */
int kvp__pub_opts_check(const kvp_publisher_opts_t *o, char *err, size_t errlen);
/* Copies o with its strings into pub->o. */
int kvp__pub_opts_copy(kvp_publisher_t *pub, const kvp_publisher_opts_t *o);

/* transport.c */
int kvp__pub_connect(kvp_publisher_t *pub, char *err, size_t errlen);
void kvp__pub_disconnect(kvp_publisher_t *pub);
/* Core publish of one encoded batch; 0 or KVP_ECONN. */
int kvp__pub_send_core(kvp_publisher_t *pub, const uint8_t *buf, size_t len);
/* JetStream async publish of a pending batch; 0 or KVP_ECONN. */
int kvp__pub_send_js(kvp_publisher_t *pub, kvp__pend_t *p);
/* 1 when the NATS connection is up right now. */
int kvp__pub_connected(kvp_publisher_t *pub);

/* loop.c */
void kvp__pub_loop_main(void *arg);
void kvp__pub_on_async(uv_async_t *a);

/* wake.c: callable from any thread. Wakes the loop (nothing once its
 * async handle is closing). */
void kvp__pub_wake(kvp_publisher_t *pub);

/* A producer queued an event behind `before` others: wakes the loop when
 * it must (an empty queue and no open window, or the queue reaching the
 * wake threshold). */
void kvp__pub_maybe_wake(kvp_publisher_t *pub, size_t before);

#endif
