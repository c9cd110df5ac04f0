/* The advisor's Prometheus metrics ([metrics] listen; README "Metrics").
 *
 * Threads: the figures belong to the loop thread, and the HTTP server
 * answers on libmicrohttpd's thread. So the loop publishes a copy of them, a
 * snapshot, under a mutex (at start, every tick and every flush timer), and
 * /metrics writes the exposition from the latest snapshot. Readiness reads
 * only atomics and nats.c's connection status, which nats.c locks. */
#ifndef KVP_ADVISOR_METRICS_H
#define KVP_ADVISOR_METRICS_H

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "advisor/advisor.h"
#include "advisor/partset.h"
#include "metrics/prom.h"
#include "metrics/server.h"
#include "tier/engine.h"

/* One owned event partition of a partitioned advisor: the per-partition
 * gauges and what /readyz?partition=P answers. */
typedef struct kvp__adv_part_fig_s {
  uint32_t p;
  int ready;       /* answered for: the advisor is ready and p caught up */
  int tiered;      /* its blocks are tiered here (with tiering) */
  uint64_t pos;    /* last applied stream sequence of p's stream */
  uint64_t behind; /* while p catches up: messages still to apply */
} kvp__adv_part_fig_t;

typedef struct kvp__adv_metrics_snap_s {
  kvp__adv_ingest_counters_t in;
  kvp__index_stats_t ix;
  size_t workers_up, workers_down;
  uint64_t queue_dropped;
  uint64_t applied_seq, committed_seq;
  uint64_t flushes, flush_errors;
  size_t dirty;
  kvp__prom_hist_t flush_seconds;
  uint64_t apply_lag_ms, flush_lag_ms, pending_ms; /* freshness.h */
  /* The index's cap (cap.h) and the database load. */
  uint64_t max_memory, max_locations, memory_used;
  int64_t headroom_bytes, headroom_locations;
  uint64_t evicted, evict_rounds, evict_stuck;
  uint64_t load_ms;
  int tiering; /* the rest is set only with tiering */
  kvp__tier_stats_t tier;
  kvp__tier_vol_stats_t vols[KVP__TIER_MAX_VOLUMES];
  size_t nvols;
  /* Partitioned advisors: the deployment's partition count and the owned
   * partitions (part_count 0: unpartitioned, nparts 0). */
  uint32_t part_count;
  int nparts;
  kvp__adv_part_fig_t parts[KVP__ADV_MAX_OWNED];
  int leases;      /* partitioned: 1 with tiering leases (lease.h) */
  int leases_held; /* the partitions' tiering leases held here */
  int leases_wait; /* partitions it wants to tier whose lease another holds */
  int ns_lease;    /* partitioned with leases: 1 while it holds the namespace's ("all") */
} kvp__adv_metrics_snap_t;

typedef enum kvp__adv_phase_e {
  KVP__ADV_STARTING = 0, /* connecting, loading the database */
  KVP__ADV_RUNNING = 1,  /* the loop runs */
  KVP__ADV_STOPPING = 2,
  KVP__ADV_CATCHING_UP = 3, /* the loop runs; the streams' backlog is not applied yet */
} kvp__adv_phase_t;

typedef struct kvp__adv_metrics_s {
  kvp__metrics_server_t *srv;     /* NULL when [metrics] listen is empty */
  kvp__http_counts_t http_counts; /* the [http] server's (routerhttp.h), shown on /metrics */
  pthread_mutex_t mu;             /* guards snap and have */
  kvp__adv_metrics_snap_t snap;
  int have;
  atomic_int phase;           /* kvp__adv_phase_t */
  natsConnection *_Atomic nc; /* set once connected; valid until the server stops */
  /* The database load's progress, in blocks (set on the opening thread). */
  _Atomic uint64_t load_done, load_total;
  atomic_int loaded;
  _Atomic uint64_t behind; /* while catching up: messages still pending */
  /* For the reasons /readyz gives. */
  char servers[sizeof(((kvp_nats_opts_t *)0)->servers)];
  char db_path[sizeof(((kvp_advisor_config_t *)0)->db_path)];
} kvp__adv_metrics_t;

/* Starts serving on cfg->metrics_listen (nothing when it is empty). Returns
 * 0, or the server's KVP_ECONFIG / KVP_EIO / KVP_ENOMEM with err naming
 * "[metrics] listen", the address and the cause. */
int kvp__adv_metrics_start(kvp__adv_metrics_t *m, const kvp_advisor_config_t *cfg, char *err,
                           size_t errlen);

/* Loop thread: replaces the snapshot /metrics reads. */
void kvp__adv_metrics_publish(kvp__adv_metrics_t *m, const kvp__adv_metrics_snap_t *s);

/* Any thread: the connection whose status /readyz reports (it must stay
 * open until kvp__adv_metrics_stop), and the daemon's phase. */
void kvp__adv_metrics_set_conn(kvp__adv_metrics_t *m, natsConnection *nc);
void kvp__adv_metrics_set_phase(kvp__adv_metrics_t *m, kvp__adv_phase_t phase);

/* kvp__store_progress_fn (ctx: the metrics): the load's progress, for
 * /readyz's reason and the kvplane_advisor_load_* gauges. */
void kvp__adv_metrics_load_progress(void *ctx, uint64_t done, uint64_t total);

/* Stops the server (no callback runs after it returns) and frees what start
 * set up. Idempotent; safe on a zeroed struct. */
void kvp__adv_metrics_stop(kvp__adv_metrics_t *m);

/* Writes the exposition of s into p (exposed for tests). */
void kvp__adv_metrics_write(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p);

/* What /readyz?partition=<arg> answers from snapshot s (have: a snapshot
 * was published), the advisor as a whole being ready: 1 when p is owned
 * and caught up; 0 (503) while it catches up or before any snapshot;
 * KVP_ENOENT when p is not owned here (or the advisor is not partitioned);
 * KVP_EINVAL when arg is not a partition number of the deployment. why is
 * filled unless 1. Exposed for tests. */
int kvp__adv_metrics_partition_ready(const kvp__adv_metrics_snap_t *s, int have, const char *arg,
                                     char *why, size_t len);

#endif
