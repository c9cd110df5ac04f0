/* Write-behind: the advisor's index changes reach SQLite in one transaction
 * per interval, written on libuv's thread pool so that ingest goes on while
 * SQLite works, and the JetStream acks that must wait for them.
 *
 * The ack rule: a JetStream message is acknowledged only after the flush
 * that committed it (the consumer acks all up to a message, so acking the
 * newest committed one is enough). kvp__adv_acks_t is that rule as a small
 * state machine over two slots: `pending`, the newest applied message not
 * yet in a flush, and `writing`, the message the running flush will commit.
 *
 *   state            pending  writing   event              next state
 *   IDLE             -        -         applied            APPLIED
 *   APPLIED          m        -         applied(m')        APPLIED (m released)
 *   APPLIED          m        -         flush started      WRITING
 *   APPLIED          m        -         sync committed     IDLE (m acked)
 *   WRITING          -        m         committed          IDLE (m acked)
 *   WRITING          -        m         failed             APPLIED (m pending again)
 *   WRITING          -        m         applied(m')        WRITING_APPLIED
 *   WRITING_APPLIED  m'       m         committed          APPLIED (m acked)
 *   WRITING_APPLIED  m'       m         failed             APPLIED (m released: m' covers it)
 *
 * A flush that starts with nothing pending writes the changes anyway (core
 * mode, or a tick with no new JetStream message) and acks nothing.
 *
 * Threads: everything here runs on the loop thread, except the SQLite
 * transaction itself, which runs on a thread-pool thread while the loop
 * goes on. */
#ifndef KVP_ADVISOR_WRITEBEHIND_H
#define KVP_ADVISOR_WRITEBEHIND_H

#include <stdint.h>
#include <uv.h>

#include "advisor/freshness.h"
#include "advisor/partset.h"
#include "index/index.h"
#include "advisor/ingest.h"
#include "store/store.h"
#include "metrics/prom.h"

typedef enum kvp__adv_ack_state_e {
  KVP__ACK_IDLE,            /* every applied message is acked */
  KVP__ACK_APPLIED,         /* pending holds the newest applied, unflushed message */
  KVP__ACK_WRITING,         /* the running flush will commit `writing` */
  KVP__ACK_WRITING_APPLIED, /* both: messages were applied while the flush runs */
} kvp__adv_ack_state_t;

typedef struct kvp__adv_acks_s {
  void *pending, *writing;    /* messages; NULL when the slot is empty */
  void (*ack)(void *msg);     /* acknowledges msg (and so all before it) */
  void (*release)(void *msg); /* frees msg without acknowledging it */
} kvp__adv_acks_t;

void kvp__adv_acks_init(kvp__adv_acks_t *a, void (*ack)(void *), void (*release)(void *));
kvp__adv_ack_state_t kvp__adv_acks_state(const kvp__adv_acks_t *a);
const char *kvp__adv_ack_state_name(kvp__adv_ack_state_t s);
/* A message was applied to the index: it becomes pending (taken). */
void kvp__adv_acks_applied(kvp__adv_acks_t *a, void *msg);
/* An asynchronous flush took the changes: pending becomes writing. No flush
 * may be running (state APPLIED or IDLE). */
void kvp__adv_acks_flush_started(kvp__adv_acks_t *a);
/* The running flush committed: writing is acked. */
void kvp__adv_acks_flush_committed(kvp__adv_acks_t *a);
/* The running flush failed: its changes go back to the index, so its message
 * is pending again, unless a newer one is (which will ack it). */
void kvp__adv_acks_flush_failed(kvp__adv_acks_t *a);
/* A flush on the loop thread committed everything applied (no flush may be
 * running): pending is acked. */
void kvp__adv_acks_sync_committed(kvp__adv_acks_t *a);
/* Releases both slots without acking (the server redelivers them). */
void kvp__adv_acks_destroy(kvp__adv_acks_t *a);

typedef struct kvp__adv_wb_s {
  uv_loop_t *loop;
  kvp__store_t *store;
  kvp__index_t *ix;
  kvp__adv_ingest_t *ing;
  /* One ack state machine per slot (partset.h): a partitioned advisor has
   * one consumer per owned partition, and an ack reaches only its own. */
  kvp__adv_acks_t acks[KVP__ADV_MAX_OWNED];
  const kvp__adv_partset_t *parts; /* borrowed; NULL: one slot, no positions */
  const uint64_t *applied;         /* borrowed: the applied position of each slot */
  uint64_t inflight_pos[KVP__ADV_MAX_OWNED];
  uint64_t committed_pos[KVP__ADV_MAX_OWNED]; /* per slot, of the last committed flush */
  kvp__adv_fresh_t *fresh; /* told when flushes start, commit and fail; may be NULL */
  /* The flush running on the thread pool, if any. */
  uv_work_t req;
  kvp__store_flush_t *inflight;
  uint64_t inflight_seq, inflight_t0;
  int write_rc;
  /* Called on the loop thread when a running flush has finished (set by
   * the advisor while it waits to stop). */
  void (*on_idle)(void *ctx);
  void *idle_ctx;
  /* figures */
  uint64_t flushes, flush_errors, last_flush_ms, last_flush_blocks;
  uint64_t committed_seq; /* stream sequence of the last committed flush */
  /* Committed flushes' durations in seconds, from taking the changes off the
   * index to the commit (thread-pool wait included): what an operator
   * weighs against [store] flush_interval. */
  kvp__prom_hist_t flush_seconds;
} kvp__adv_wb_t;

/* Sets up write-behind to st for ix and ing, whose committed state is at
 * stream sequence committed_seq. JetStream messages are acked with
 * natsMsg_Ack. */
void kvp__adv_wb_init(kvp__adv_wb_t *wb, uv_loop_t *loop, kvp__store_t *st, kvp__index_t *ix,
                      kvp__adv_ingest_t *ing, uint64_t committed_seq);

/* Partitioned: flushes write each slot's applied[slot] as the position of
 * partition parts->p[slot] (both borrowed, outliving wb), and acks go per
 * slot. committed holds the positions the database stands at. */
void kvp__adv_wb_set_parts(kvp__adv_wb_t *wb, const kvp__adv_partset_t *parts,
                           const uint64_t *applied, const uint64_t *committed);

/* Live rebalancing: a slot was inserted (insert 1, its database position
 * committed) or removed at slot, among n slots before the change. The
 * write-behind must be idle and just synced (every ack IDLE). */
void kvp__adv_wb_slot_moved(kvp__adv_wb_t *wb, int slot, int n, int insert, uint64_t committed);

/* A JetStream message (a natsMsg, taken) of slot (0 when not partitioned)
 * was applied. */
void kvp__adv_wb_applied(kvp__adv_wb_t *wb, int slot, void *msg);

/* Takes the changes and writes them on the thread pool as the state at
 * stream sequence applied_seq. Does nothing while a flush runs (the next
 * tick takes it all). A failure to take the changes is counted. */
void kvp__adv_wb_start(kvp__adv_wb_t *wb, uint64_t applied_seq);

/* 1 while a flush runs on the thread pool. */
int kvp__adv_wb_busy(const kvp__adv_wb_t *wb);

/* Flushes on the calling (loop) thread, as the last flush at stop. No flush
 * may be running. Returns 0 or KVP_EDB / KVP_ENOMEM (counted; nothing is
 * acked). */
int kvp__adv_wb_sync(kvp__adv_wb_t *wb, uint64_t applied_seq);

/* Releases unacked messages; the store, index and ingest are the caller's. */
void kvp__adv_wb_destroy(kvp__adv_wb_t *wb);

#endif
