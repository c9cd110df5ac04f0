/* The advisor's own state (struct kvp_advisor_s), shared by the files of
 * src/advisor that are the advisor itself: advisor.c (the wiring and the
 * loop) and figures.c (the stats reply, the metrics snapshot and the
 * tier_history samples, filled from the parts' private state). The parts
 * (ingest, inbox, consumer, write-behind, ...) never include it. Thread:
 * the loop thread, except where a field says otherwise. */
#ifndef KVP_ADVISOR_ADVISOR_IMPL_H
#define KVP_ADVISOR_ADVISOR_IMPL_H

#include <stdatomic.h>
#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "advisor/cap.h"
#include "advisor/consumer.h"
#include "advisor/freshness.h"
#include "advisor/inbox.h"
#include "advisor/ingest.h"
#include "advisor/lease.h"
#include "advisor/metrics.h"
#include "advisor/routerhttp.h"
#include "advisor/partset.h"
#include "advisor/query.h"
#include "advisor/rebalance.h"
#include "advisor/writebehind.h"
#include "index/index.h"
#include "kvplane/wire.h"
#include "store/store.h"
#include "tier/engine.h"

struct kvp_advisor_s {
  kvp_advisor_config_t cfg;
  kvp__index_t *ix;
  kvp__adv_ingest_t *ing;
  kvp__store_t *store;
  int db_lock; /* the flock on the database file (dblock.h), or -1 */
  kvp__adv_consumer_t *consumer;
  kvp__adv_query_t *query; /* match and stats requests (query.h) */
  kvp_wire_limits_t lim;
  kvp__adv_inbox_t inbox;
  int inbox_ready;
  kvp__adv_wb_t wb;
  kvp__adv_fresh_t fresh;
  kvp__tier_engine_t *tier; /* NULL unless [tiering] enabled */
  kvp__adv_metrics_t metrics;
  kvp__adv_cap_t cap;            /* [index] max_memory, max_locations */
  uint64_t load_ms;              /* how long the database took to load */
  kvp__rapi_http_t *http;        /* NULL unless [http] enabled */
  kvp__adv_metrics_snap_t msnap; /* publish_metrics' scratch (12 KiB, off the stack) */

  uv_loop_t loop;
  int loop_ready;
  uv_async_t wake;
  uv_timer_t flush_timer, tick_timer;
  uv_timer_t move_timer; /* a live move's slices of index work (rebalance_move.c) */
  uv_signal_t sig_term, sig_int, sig_hup;

  atomic_int stopping;
  int stopped;
  int final_rc;
  uint64_t applied_seq;     /* last applied JetStream stream sequence; partitioned: the sum of
                             * applied_pos (a progress figure) */
  kvp__adv_partset_t parts; /* owned partitions (one slot when unpartitioned) */
  uint64_t applied_pos[KVP__ADV_MAX_OWNED]; /* per slot: last applied stream sequence */
  int ready;         /* caught up with the streams as they stood at start (sticky) */
  uint64_t ready_ms; /* when it became ready, ms after start */
  uint64_t start_ms;
  uint64_t history_ms; /* when tier occupancy was last sampled */
  char db_id[KVP__STORE_DB_ID_LEN + 1];
  natsMsg *parts_req; /* a live rebalance request waiting for idle (rebalance.c) */
  /* A live move of partitions under way (rebalance_move.c), NULL when
   * none: no flush starts, no other request is taken, a stop waits for it;
   * leaving marks the slots being dropped, which no reply lists as owned
   * or answered for any more. */
  struct kvp__adv_move_s *move;
  uint8_t leaving[KVP__ADV_MAX_OWNED];
  /* Partitions added live that the tiering engine takes once they caught
   * up (rebalance.c): before, their locations in G3/G4 are not all known,
   * and a scrub would take their objects for orphans. */
  int tier_all; /* [tiering] partitions empty: every owned partition is tiered */
  uint32_t tier_wait[KVP__ADV_MAX_OWNED];
  int ntier_wait;
  /* Partitioned with tiering: the tiering leases (lease.h). A partition
   * waits in tier_wait until caught up AND its lease is held here; one
   * tiered whose lease is lost goes back there (rebalance.c). */
  kvp__adv_lease_t *lease;
  /* Partitioned: the namespace's lease (KVP__ADV_LEASE_NS), handed on once
   * this advisor's scrub swept its volumes: not wanted again before
   * ns_rest_until (monotonic ms), so that another partitioned advisor,
   * with other volumes, takes it (rebalance.c). */
  uint64_t ns_rest_until;
  int ns_held; /* it was held at the last look */
};

/* advisor.c: applies everything in the inbox now. */
void kvp__adv_drain(kvp_advisor_t *adv);

/* rebalance.c: a live rebalance request (taken) is kept by request and
 * applied by poll, on the flush timer (never inside a drain), once the
 * write-behind and the tiering engine are idle, and answered. parts_view lists the owned partitions
 * that answer (caught up) with their positions, and the ones still catching up with the messages
 * they wait for; returns how many answer. */
void kvp__adv_parts_request(kvp_advisor_t *adv, natsMsg *msg);
/* rebalance.c: partition p is tiered here once caught up and (with
 * leases) once its lease is held; its lease is wanted from now on. */
void kvp__adv_tier_soon(kvp_advisor_t *adv, uint32_t p);
/* rebalance.c: the tiering leases as JSON, [{"partition": p, "held": b,
 * "holder": "..."}, ...] for the partitions this advisor wants to tier
 * (NULL without leases). */
json_t *kvp__adv_leases_json(kvp_advisor_t *adv);
void kvp__adv_parts_poll(kvp_advisor_t *adv);
/* rebalance.c: the reply to a partitions request (msg not taken): the
 * state, with err when rc is not 0. */
void kvp__adv_parts_reply(kvp_advisor_t *adv, natsMsg *msg, int rc, const char *err);
/* rebalance.c: p is not to be tiered here (drop, untier); its lease is
 * released once the engine stopped tiering it. The engine idle. */
void kvp__adv_tier_not_soon(kvp_advisor_t *adv, uint32_t p);
/* rebalance.c: a request's tier and untier (the engine idle); 0 or an
 * error with err. */
int kvp__adv_apply_tiering(kvp_advisor_t *adv, const kvp__adv_parts_req_t *r, char *err,
                           size_t errlen);

/* rebalance_move.c: starts moving the partitions r adds and drops
 * (checked: the result owns 1..64), on the loop thread with the
 * write-behind and the tiering engine idle; msg (taken on 0) is answered
 * when the move ends. Returns 0, KVP_ENOENT (nothing to add or drop:
 * nothing taken) or KVP_ENOMEM. move_poll finishes a move whose slow
 * steps are done once the tiering engine is idle (from the flush timer). */
typedef struct kvp__adv_move_s kvp__adv_move_t;
int kvp__adv_move_start(kvp_advisor_t *adv, natsMsg *msg, const kvp__adv_parts_req_t *r);
void kvp__adv_move_poll(kvp_advisor_t *adv);

/* advisor.c: the rest of a stop once no move is under way (the inputs
 * stop, the last flush, the handles close); a move that ends during a
 * stop calls it. */
void kvp__adv_shutdown_inputs(kvp_advisor_t *adv);
int kvp__adv_parts_view(kvp_advisor_t *adv, uint32_t *owned, uint64_t *pos, uint32_t *catching,
                        uint64_t *behind, int *ncatching);

/* figures.c */

/* Copies the figures /metrics shows for the metrics server's thread (no-op
 * without [metrics] listen). Cheap enough for every flush timer: counters
 * and sums kept as they change, and one pass over the workers. */
void kvp__adv_publish_metrics(kvp_advisor_t *adv);

/* The stats reply at now (malloc'd JSON, include/kvplane/client.h documents
 * it), or NULL when it cannot be made (out of memory). */
char *kvp__adv_stats_json(kvp_advisor_t *adv, uint64_t now);

/* Samples tier occupancy into tier_history when store.history_interval has
 * passed (or now, with force: the last sample at stop). The rows go with the
 * next flush; a sample that does not fit in memory is dropped with a
 * warning. */
void kvp__adv_sample_history(kvp_advisor_t *adv, uint64_t now, int force);

/* 1 once the advisor caught up (kvp__adv_consumer_caught_up); updates
 * ready, the metrics' phase and the figures while catching up. Loop
 * thread. */
int kvp__adv_check_ready(kvp_advisor_t *adv);

/* The match reply to request data (malloc'd JSON in *json), with the
 * partitions this advisor answers for and their positions. Returns 0 or
 * KVP_ENOMEM. */
int kvp__adv_match_json(kvp_advisor_t *adv, const void *data, size_t len, char **json);

#endif
