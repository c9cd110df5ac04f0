/* kvplane-advisor: the wiring of its parts (include/kvplane/advisor.h).
 * Why this file is long: it is the one place that starts, runs and stops
 * every part in order (and the flush timer that applies rebalances).
 *
 *   consumer.c     NATS: the event input, API subscriptions, resync requests
 *   inbox.c        the locked queue from NATS threads to the loop thread
 *   ingest.c       batches applied to the index (per-worker state, resyncs)
 *   index.c ...    where every block lives
 *   writebehind.c  SQLite flushes on the thread pool, and the acks after them
 *   store_sqlite.c the database
 *   api.c          match and stats replies
 *   query.c        the query connection: match and stats requests read and
 *                  answered on the loop thread (one wake-up per request)
 *   metrics.c      Prometheus /metrics, /healthz, /readyz ([metrics] listen)
 *   rebalance.c    partitions added or dropped on a running advisor
 *   routerhttp.c   the routers' indexer API over HTTP ([http]; routerapi.c)
 *   figures.c      the stats reply's, metrics snapshot's and tier_history's
 *                  figures from the parts' state (advisor_impl.h: the struct)
 *
 * Threads: nats.c's threads and the JetStream fetch thread only push into
 * the inbox and wake the libuv loop. The loop thread alone touches the
 * index, the ingest state and the write-behind: it drains the inbox, applies
 * batches, answers queries and, on a timer, starts a flush. The metrics
 * server's thread reads a snapshot the loop publishes (metrics.h). */
#include "advisor/advisor.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "advisor/advisor_impl.h"
#include "advisor/dblock.h"
#include "advisor/api.h"
#include "advisor/control.h"
#include "advisor/query.h"
#include "advisor/sdnotify.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine.h"

/* --- loop thread ------------------------------------------------------------ */

static void send_resync(void *ctx, const char *worker, uint32_t dp_rank, uint64_t epoch,
                        const char *reason) {
  kvp_advisor_t *adv = ctx;
  kvp__adv_consumer_resync(adv->consumer, worker, dp_rank, epoch, reason);
}

static void answer(kvp_advisor_t *adv, natsMsg *request, char *json) {
  kvp__adv_consumer_reply(adv->consumer, request, json);
  free(json);
}

/* An event batch: checked against its subject, applied, its freshness noted. */
static void apply(kvp_advisor_t *adv, natsMsg *msg, const uint8_t *data, size_t len, uint64_t now) {
  uint64_t before = kvp__adv_ingest_counters(adv->ing)->block_events;
  if (kvp__adv_ingest_message_on(adv->ing, natsMsg_GetSubject(msg), adv->cfg.ns, data, len,
                                 &adv->lim, now) == 0)
    kvp__adv_fresh_applied(&adv->fresh, kvp__adv_ingest_last_batch_ms(adv->ing), now,
                           kvp__adv_ingest_counters(adv->ing)->block_events - before);
  kvp__adv_cap_check(&adv->cap, adv->ix);
}

static void handle(kvp_advisor_t *adv, kvp__adv_in_t *it) {
  const uint8_t *data = (const uint8_t *)natsMsg_GetData(it->msg);
  size_t len = (size_t)natsMsg_GetDataLength(it->msg);
  uint64_t now = kvp__unix_ms();
  char *json = NULL;

  switch (it->kind) {
  case KVP__IN_JS_EVENT: {
    uint64_t *pos = &adv->applied_pos[it->slot];
    if (it->seq != 0 && it->seq <= *pos)
      break; /* redelivered: already applied */
    apply(adv, it->msg, data, len, now);
    if (it->seq) {
      adv->applied_seq = adv->parts.count ? adv->applied_seq + (it->seq - *pos) : it->seq;
      *pos = it->seq;
      kvp__adv_wb_applied(&adv->wb, it->slot, it->msg);
      it->msg = NULL;
    }
    break;
  }
  case KVP__IN_EVENT:
    apply(adv, it->msg, data, len, now);
    break;
  case KVP__IN_TIER: {
    char name[128];
    char off[512] = "";
    kvp__adv_consumer_name(&adv->cfg, name, sizeof name);
    if (adv->tier != NULL && adv->lease != NULL && adv->parts.count == 0 &&
        !kvp__adv_lease_held(adv->lease, 0)) {
      /* Unpartitioned, the namespace's lease held elsewhere: a standby. */
      char who[KVP__ADV_LEASE_HOLDER_MAX];
      kvp__adv_lease_wanted(adv->lease, 0, who, sizeof who);
      snprintf(off, sizeof off, "another advisor tiers namespace %s: %s holds its tiering lease",
               adv->cfg.ns, who[0] ? who : "nobody yet; this one waits to catch up or for it");
    }
    kvp__adv_ctl_handle(off[0] ? NULL : adv->tier, off[0] ? off : NULL, name, adv->parts.count,
                        data, len, &json);
    if (json != NULL)
      answer(adv, it->msg, json);
    break;
  }
  case KVP__IN_PARTS:
    kvp__adv_parts_request(adv, it->msg);
    it->msg = NULL;
    break;
  }
}

/* A match or stats request of the query connection (query.h), on the loop
 * thread. */
static char *answer_query(void *ctx, int stats, const void *data, size_t len) {
  kvp_advisor_t *adv = ctx;
  char *json = NULL;
  if (stats)
    return kvp__adv_stats_json(adv, kvp__unix_ms());
  return kvp__adv_match_json(adv, data, len, &json) == 0 ? json : NULL;
}

void kvp__adv_drain(kvp_advisor_t *adv) {
  kvp__adv_in_t *it = kvp__adv_inbox_take_all(&adv->inbox);
  while (it) {
    kvp__adv_in_t *next = it->next;
    handle(adv, it);
    kvp__adv_in_free(it);
    it = next;
  }
  if (!adv->ready)
    kvp__adv_check_ready(adv);
}

static void close_handles(kvp_advisor_t *adv) {
  uv_handle_t *hs[] = {(uv_handle_t *)&adv->wake,       (uv_handle_t *)&adv->flush_timer,
                       (uv_handle_t *)&adv->tick_timer, (uv_handle_t *)&adv->sig_term,
                       (uv_handle_t *)&adv->sig_int,    (uv_handle_t *)&adv->sig_hup,
                       (uv_handle_t *)&adv->move_timer};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    if (hs[i]->data != NULL && !uv_is_closing(hs[i]))
      uv_close(hs[i], NULL);
}

/* How long a stop may go without progress before the service manager may
 * kill it (sdnotify.h): each extension is counted from the moment it is
 * sent, so a snapshot that keeps writing chunks is never cut short, and
 * one that hangs is killed within this much. */
#define STOP_EXTEND_USEC (30ull * 1000 * 1000)

/* The snapshot's progress (store.h): at most one extension a second. */
static void snapshot_progress(void *ctx, uint64_t done, uint64_t total) {
  uint64_t *last_ms = ctx, now = kvp__unix_ms();
  (void)done;
  (void)total;
  if (now - *last_ms >= 1000) {
    *last_ms = now;
    kvp__sd_extend_timeout(STOP_EXTEND_USEC);
  }
}

/* The last flush, then the loop's handles close and uv_run returns. */
static void shutdown_finish(void *ctx) {
  kvp_advisor_t *adv = ctx;
  adv->wb.on_idle = NULL;
  kvp__adv_sample_history(adv, kvp__unix_ms(), 1);
  kvp__sd_extend_timeout(2 * STOP_EXTEND_USEC); /* the last flush: one transaction */
  adv->final_rc = kvp__adv_wb_sync(&adv->wb, adv->applied_seq);
  if (adv->final_rc == 0) {
    /* The index now holds exactly the rows: the next start reads this
     * snapshot instead of them (store.h says when it may). A snapshot
     * that fails to write costs the next start time, nothing else. At
     * 128M locations it takes most of a minute (3.2 GiB), hence the
     * extensions of systemd's stop timeout while chunks go out. */
    uint64_t t0 = kvp__unix_ms(), bytes = 0, notified_ms = t0;
    kvp__sd_extend_timeout(STOP_EXTEND_USEC);
    kvp__store_on_progress(adv->store, snapshot_progress, &notified_ms);
    int src = kvp__store_snapshot_write(adv->store, adv->ix, &bytes);
    kvp__store_on_progress(adv->store, NULL, NULL);
    if (src == 0)
      kvp_log_info("advisor: index snapshot written: %" PRIu64 " bytes in %" PRIu64 " ms", bytes,
                   kvp__unix_ms() - t0);
    kvp_log_info("advisor: stopped; stream sequence %" PRIu64 " committed", adv->applied_seq);
  } else
    kvp_log_error("advisor: stopped; the last flush failed (%s): the database stays at stream "
                  "sequence %" PRIu64,
                  kvp_strerror(adv->final_rc), adv->wb.committed_seq);
  kvp__tier_engine_close(adv->tier); /* stopped and idle by now */
  adv->tier = NULL;
  /* A clean stop: a standby may take the partitions' leases at once. */
  kvp__adv_lease_close(adv->lease);
  adv->lease = NULL;
  close_handles(adv);
}

static void shutdown_flush(void *ctx);

/* Stops input, applies what arrived, lets a running tiering job finish,
 * flushes, closes the loop's handles. */
static void shutdown_loop(kvp_advisor_t *adv) {
  if (adv->stopped)
    return;
  adv->stopped = 1;
  atomic_store(&adv->stopping, 1);
  kvp__sd_notify("STOPPING=1");
  kvp__adv_metrics_set_phase(&adv->metrics, KVP__ADV_STOPPING);
  kvp__rapi_http_stop(adv->http);
  adv->http = NULL;
  kvp__adv_query_stop(adv->query);
  kvp__adv_inbox_close_wake(&adv->inbox);
  if (adv->move != NULL)
    return; /* a live move uses the inputs and the store: it calls on when it ends */
  kvp__adv_shutdown_inputs(adv);
}

void kvp__adv_shutdown_inputs(kvp_advisor_t *adv) {
  kvp__adv_consumer_stop(adv->consumer);
  kvp__adv_drain(adv);
  if (adv->tier != NULL) {
    kvp__tier_engine_stop(adv->tier, shutdown_flush, adv);
    return;
  }
  shutdown_flush(adv);
}

static void shutdown_flush(void *ctx) {
  kvp_advisor_t *adv = ctx;
  if (kvp__adv_wb_busy(&adv->wb)) {
    adv->wb.on_idle = shutdown_finish; /* when the running flush ends */
    adv->wb.idle_ctx = adv;
    return;
  }
  shutdown_finish(adv);
}

static void on_wake(uv_async_t *h) {
  kvp_advisor_t *adv = h->data;
  if (atomic_load(&adv->stopping)) {
    shutdown_loop(adv);
    return;
  }
  kvp__adv_drain(adv);
}

static void on_flush_timer(uv_timer_t *h) {
  kvp_advisor_t *adv = h->data;
  kvp__adv_parts_poll(adv); /* a rebalance waiting for an idle moment */
  /* A live move uses the store until it ends (rebalance_move.c). */
  if (!adv->stopped && adv->move == NULL)
    kvp__adv_wb_start(&adv->wb, adv->applied_seq);
  kvp__adv_publish_metrics(adv);
}

static void on_tick_timer(uv_timer_t *h) {
  kvp_advisor_t *adv = h->data;
  uint64_t now = kvp__unix_ms();
  kvp__adv_ingest_tick(adv->ing, now);
  kvp__adv_sample_history(adv, now, 0);
  kvp__adv_publish_metrics(adv);
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
  shutdown_loop(adv);
}

/* --- open and close ---------------------------------------------------------- */

static int init_loop(kvp_advisor_t *adv, char *err, size_t errlen) {
  int r = uv_loop_init(&adv->loop);
  if (r != 0)
    goto fail;
  adv->loop_ready = 1;
  if ((r = uv_async_init(&adv->loop, &adv->wake, on_wake)) != 0)
    goto fail;
  adv->wake.data = adv;
  if ((r = uv_timer_init(&adv->loop, &adv->flush_timer)) != 0)
    goto fail;
  adv->flush_timer.data = adv;
  if ((r = uv_timer_init(&adv->loop, &adv->tick_timer)) != 0)
    goto fail;
  adv->tick_timer.data = adv;
  if ((r = uv_timer_init(&adv->loop, &adv->move_timer)) != 0)
    goto fail;
  adv->move_timer.data = adv;
  if (adv->cfg.handle_signals) {
    uv_signal_t *sigs[] = {&adv->sig_term, &adv->sig_int, &adv->sig_hup};
    int nums[] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
      if ((r = uv_signal_init(&adv->loop, sigs[i])) != 0)
        goto fail;
      sigs[i]->data = adv;
      if ((r = uv_signal_start(sigs[i], on_signal, nums[i])) != 0)
        goto fail;
    }
  }
  return 0;
fail:
  snprintf(err, errlen, "event loop: %s", uv_strerror(r));
  return KVP_ENOMEM;
}

static int setup_log(const kvp_advisor_config_t *cfg, char *err, size_t errlen) {
  kvp__log_setup(cfg->log_level, "kvplane-advisor");
  if (cfg->log_syslog)
    kvp__log_use_syslog(1);
  /* The operator's to change, as a listen address in use: exit 1 (a
   * configuration error), with the cause. */
  if (cfg->log_file[0] && kvp__log_set_file(cfg->log_file) != 0) {
    snprintf(err, errlen, "[log] file: cannot open %s: %s", cfg->log_file, strerror(errno));
    return KVP_ECONFIG;
  }
  return 0;
}

/* The database's directory: made (mode 0700) when missing and its parent
 * exists, as the packaged default /var/lib/kvplane on a fresh machine.
 * Returns 0, or KVP_EIO with err saying what to create. */
static int ensure_db_dir(const char *path, char *err, size_t errlen) {
  char dir[sizeof((kvp_advisor_config_t *)0)->db_path];
  struct stat sb;
  char *slash;

  snprintf(dir, sizeof dir, "%s", path);
  if ((slash = strrchr(dir, '/')) == NULL || slash == dir)
    return 0;
  *slash = '\0';
  if (stat(dir, &sb) == 0)
    return 0;
  if (mkdir(dir, 0700) == 0) {
    kvp_log_info("advisor: created %s (mode 0700) for the database", dir);
    return 0;
  }
  snprintf(err, errlen,
           "[store] path: cannot create the directory %s of %s: %s (create it, mode 0700, "
           "owned by the advisor's user)",
           dir, path, strerror(errno));
  return KVP_EIO;
}

/* Blocks read from G3 or G4 by a worker: the tiering policy hears each
 * read (its on_access hook), and for G4 the engine brings the rest of the
 * prefix to G3 (prefetch). */
static void on_accessed(void *ctx, int tier, const uint64_t *hashes, size_t n) {
  kvp_advisor_t *adv = ctx;
  if (adv->tier == NULL || (tier != KVP_TIER_G3 && tier != KVP_TIER_G4))
    return;
  for (size_t i = 0; i < n; i++) {
    kvp__tier_engine_access(adv->tier, hashes[i], tier);
    if (tier == KVP_TIER_G4)
      kvp__tier_engine_hit(adv->tier, hashes[i]);
  }
}

/* Opens the index, ingest state and database, and loads the index. */
static int load_state(kvp_advisor_t *adv, char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = &adv->cfg;
  kvp__adv_ingest_opts_t io = {
      .heartbeat_timeout_ms = (uint64_t)cfg->heartbeat_timeout_ms,
      .resync_retry_ms = (uint64_t)cfg->resync_retry_ms,
      .resync = send_resync,
      .resync_ctx = adv,
      .accessed = on_accessed,
      .accessed_ctx = adv,
      .partitions = (uint32_t)cfg->partitions,
  };
  kvp__index_stats_t st;
  int rc;

  if ((rc = kvp__index_create((size_t)cfg->initial_blocks, (double)cfg->hit_half_life_ms / 1000.0,
                              &adv->ix)) != 0 ||
      (rc = kvp__adv_ingest_create(adv->ix, &io, &adv->ing)) != 0 ||
      (rc = ensure_db_dir(cfg->db_path, err, errlen)) != 0 ||
      (rc = kvp__store_open(cfg->db_path, &adv->store, err, errlen)) != 0)
    return rc;
  {
    char consumer[128];
    kvp__adv_consumer_name(cfg, consumer, sizeof consumer);
    if ((rc = kvp__store_bind(adv->store, cfg->ns,
                              cfg->mode == KVP_ADVISOR_JETSTREAM ? consumer : NULL, adv->db_id, err,
                              errlen)) != 0)
      return rc;
  }
  if ((rc = kvp__adv_cap_init(&adv->cap, adv->ix, (uint64_t)cfg->index_max_memory,
                              (uint64_t)cfg->index_max_locations)) != 0) {
    snprintf(err, errlen, "[index] max_memory %" PRId64 ": cannot reserve the index: %s",
             cfg->index_max_memory, kvp_strerror(rc));
    return rc;
  }
  /* /readyz and /metrics show the load's progress while it runs. */
  uint64_t t0 = kvp__unix_ms();
  kvp__store_on_progress(adv->store, kvp__adv_metrics_load_progress, &adv->metrics);
  if ((rc = kvp__adv_partset_prepare_db(&adv->parts, adv->store, err, errlen)) != 0)
    return rc;
  if ((rc = kvp__store_load(adv->store, adv->ix, kvp__adv_ingest_load_worker, adv->ing,
                            &adv->applied_seq)) != 0) {
    snprintf(err, errlen, "%s: cannot load the index: %s", cfg->db_path, kvp_strerror(rc));
    return rc;
  }
  kvp__store_on_progress(adv->store, NULL, NULL);
  adv->load_ms = kvp__unix_ms() - t0;
  /* A database written under a larger cap (or none) is cut to this one. */
  kvp__adv_cap_check(&adv->cap, adv->ix);
  if ((rc = kvp__adv_partset_positions(&adv->parts, adv->store, adv->applied_seq, adv->applied_pos,
                                       &adv->applied_seq)) != 0) {
    snprintf(err, errlen, "%s: cannot read the partitions' positions", cfg->db_path);
    return rc;
  }
  /* Loaded workers get a full heartbeat timeout to speak again. */
  for (size_t i = 0; i < kvp__adv_ingest_worker_count(adv->ing); i++) {
    kvp__adv_worker_state_t ws;
    if (kvp__adv_ingest_worker_get(adv->ing, i, &ws) == 0) {
      ws.last_seen_ms = adv->start_ms;
      kvp__adv_ingest_worker_set(adv->ing, &ws);
    }
  }
  kvp__index_stats(adv->ix, &st);
  kvp_log_info("advisor: %s loaded from the %s: %zu blocks, %zu locations in %" PRIu64
               " ms, stream sequence %" PRIu64,
               cfg->db_path, kvp__store_loaded_snapshot(adv->store) ? "index snapshot" : "rows",
               st.blocks, st.locations, adv->load_ms, adv->applied_seq);
  return 0;
}

/* [tiering] partitions: the owned partitions it does not list are not
 * tiered here (a standby's), until a live request tiers them
 * (rebalance.c). The engine opened with every owned one. */
static int untier_unlisted(kvp_advisor_t *adv, char *err, size_t errlen) {
  kvp__adv_partset_t tiered;
  int rc = kvp__adv_partset_tiered(&adv->cfg, &adv->parts, &tiered, &adv->tier_all, err, errlen);
  for (int i = 0; rc == 0 && !adv->tier_all && i < adv->parts.n; i++)
    if (kvp__adv_partset_slot(&tiered, adv->parts.p[i]) < 0)
      rc = kvp__tier_engine_partition(adv->tier, adv->parts.p[i], 0, err, errlen);
  if (rc != 0 || adv->lease == NULL || adv->parts.count == 0)
    return rc; /* unpartitioned, the engine's gate waits (open_leases) */
  /* With leases, none is tiered before its lease is held here (and it
   * caught up): each waits in tier_wait, its lease wanted. */
  for (int i = 0; rc == 0 && i < tiered.n; i++)
    if (kvp__adv_partset_slot(&adv->parts, tiered.p[i]) >= 0 &&
        (rc = kvp__tier_engine_partition(adv->tier, tiered.p[i], -1, err, errlen)) == 0)
      kvp__adv_tier_soon(adv, tiered.p[i]);
  kvp__tier_engine_set_gate(adv->tier, kvp__adv_lease_gate, adv->lease);
  return rc;
}

/* With tiering in JetStream mode: the tiering leases (lease.h), one per
 * partition, or one for the namespace when not partitioned (wanted once
 * caught up, kvp__adv_check_ready; the engine's rounds wait for it). In
 * core NATS mode a warning: nothing but the configuration keeps two
 * advisors from tiering the same volumes' objects. */
static int open_leases(kvp_advisor_t *adv, char *err, size_t errlen) {
  const kvp_advisor_config_t *cfg = &adv->cfg;
  char name[128];
  int rc;
  if (!cfg->tiering)
    return 0;
  if (cfg->mode != KVP_ADVISOR_JETSTREAM) {
    kvp_log_warn("tiering: core NATS mode has no key-value store, so no tiering lease: that one "
                 "advisor tiers namespace %s's objects in these volumes is by configuration only "
                 "(docs/SCALE.md)",
                 cfg->ns);
    return 0;
  }
  kvp__adv_consumer_name(cfg, name, sizeof name);
  if ((rc = kvp__adv_lease_open(cfg, adv->consumer->nc, adv->parts.count, name, &adv->lease, err,
                                errlen)) != 0)
    return rc;
  if (adv->parts.count == 0)
    kvp__tier_engine_set_gate(adv->tier, kvp__adv_lease_gate, adv->lease);
  return 0;
}

/* The routers' HTTP API answers as the NATS match request does: not from
 * an index still catching up with its streams (kvp__adv_match_json). */
static int http_ready(void *ctx, uint64_t *behind) {
  kvp_advisor_t *adv = ctx;
  if (kvp__adv_check_ready(adv))
    return 1;
  kvp__adv_consumer_caught_up(adv->consumer, adv->applied_pos, behind);
  return 0;
}

int kvp_advisor_open(const kvp_advisor_config_t *cfg, kvp_advisor_t **out, char *err,
                     size_t errlen) {
  kvp_advisor_t *adv;
  int rc;

  *out = NULL;
  if ((rc = kvp_advisor_config_check(cfg, err, errlen)) != 0)
    return rc;
  if ((adv = calloc(1, sizeof *adv)) == NULL)
    return KVP_ENOMEM;
  adv->cfg = *cfg;
  adv->db_lock = -1;
  /* Checked above: cannot fail. */
  (void)kvp__adv_partset_parse(&adv->parts, (uint32_t)cfg->partitions, cfg->owned, err, errlen);
  adv->start_ms = kvp__unix_ms();
  atomic_init(&adv->stopping, 0);
  adv->lim.max_bytes = (size_t)cfg->max_message_bytes;
  adv->lim.max_events = (size_t)cfg->max_events;
  adv->lim.max_blocks = (size_t)cfg->max_blocks;
  if ((rc = setup_log(cfg, err, errlen)) != 0 || (rc = init_loop(adv, err, errlen)) != 0)
    goto fail;
  /* Before NATS and the database: /healthz answers and /readyz says why not
   * yet while they take their time, and a port in use stops us first. */
  if ((rc = kvp__adv_metrics_start(&adv->metrics, cfg, err, errlen)) != 0) {
    /* The configured address is taken: the operator's to change, as the
     * relay's --metrics (exit 1, not the 2 of a database or NATS). */
    if (rc == KVP_EIO)
      rc = KVP_ECONFIG;
    goto fail;
  }
  if ((rc = kvp__adv_inbox_init(&adv->inbox, (size_t)cfg->queue_max, &adv->wake)) != 0)
    goto fail;
  adv->inbox_ready = 1;
  /* Before NATS: a second advisor on this database would remake the first
   * one's durable consumer. A database made below is locked once made. */
  if ((rc = kvp__adv_db_lock(cfg->db_path, &adv->db_lock, err, errlen)) != 0)
    goto fail;
  /* NATS first: a wrong URL or credentials must not leave a new database
   * file behind. */
  if ((rc = kvp__adv_consumer_open(&adv->cfg, &adv->inbox, &adv->consumer, err, errlen)) != 0 ||
      (rc = load_state(adv, err, errlen)) != 0 ||
      (adv->db_lock < 0 && (rc = kvp__adv_db_lock(cfg->db_path, &adv->db_lock, err, errlen)) != 0))
    goto fail;
  kvp__adv_metrics_set_conn(&adv->metrics, adv->consumer->nc);
  kvp__adv_wb_init(&adv->wb, &adv->loop, adv->store, adv->ix, adv->ing, adv->applied_seq);
  kvp__adv_wb_set_parts(&adv->wb, &adv->parts, adv->applied_pos, adv->applied_pos);
  adv->wb.fresh = &adv->fresh;
  /* Volumes and unfinished moves before any event: a volume that does not
   * open stops the advisor here, naming it. */
  kvp__tier_opts_t topts;
  kvp__adv_tier_opts(&adv->cfg, &topts);
  /* Partitioned: the engine tiers the owned partitions only (tier/parts.c). */
  topts.partitions = adv->parts.count;
  topts.owned = adv->parts.p;
  topts.nowned = adv->parts.count ? (size_t)adv->parts.n : 0;
  topts.leased = cfg->mode == KVP_ADVISOR_JETSTREAM; /* tiering leases (open_leases) */
  if (cfg->tiering &&
      (rc = kvp__tier_engine_open(&topts, &adv->loop, adv->ix, &adv->tier, err, errlen)) != 0)
    goto fail;
  if (adv->tier != NULL && (rc = open_leases(adv, err, errlen)) != 0)
    goto fail;
  if (adv->tier != NULL && (rc = untier_unlisted(adv, err, errlen)) != 0)
    goto fail;
  if ((rc = kvp__adv_consumer_start(adv->consumer, &adv->parts, adv->applied_pos, adv->db_id, err,
                                    errlen)) != 0 ||
      (rc = kvp__adv_query_open(&adv->loop, &adv->cfg, answer_query, adv, &adv->query, err,
                                errlen)) != 0 ||
      (rc = kvp__adv_query_start(adv->query, err, errlen)) != 0)
    goto fail;
  /* After the load: the API answers from a loaded index. An address in use
   * is the operator's to change (exit 1), as for [metrics] listen. */
  kvp__rapi_http_limits_t hl = {.request_timeout_ms = cfg->http_request_timeout_ms,
                                .per_client = (unsigned)cfg->http_per_client};
  if (cfg->http_enabled &&
      (rc = kvp__rapi_http_start(&adv->loop, adv->ix, cfg->ns, (uint32_t)cfg->http_block_size,
                                 "[http] listen", cfg->http_listen, &hl, &adv->metrics.http_counts,
                                 &adv->http, err, errlen)) != 0) {
    if (rc == KVP_EIO)
      rc = KVP_ECONFIG;
    goto fail;
  }
  if (adv->http != NULL)
    kvp__rapi_http_set_ready(adv->http, http_ready, adv);
  kvp__adv_publish_metrics(adv);
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
  if (adv->tier != NULL)
    kvp__tier_engine_start(adv->tier);
  if (!atomic_load(&adv->stopping))
    kvp__adv_metrics_set_phase(&adv->metrics, KVP__ADV_CATCHING_UP);
  kvp__adv_check_ready(adv); /* RUNNING at once when there is nothing to catch up with */
  kvp__adv_query_bind_thread(&adv->loop);
  kvp_log_info("advisor: running (namespace %s, %s mode)", adv->cfg.ns,
               adv->cfg.mode == KVP_ADVISOR_JETSTREAM ? "jetstream" : "core");
  /* A stop requested before the loop ran is seen on the first wake. */
  if (atomic_load(&adv->stopping))
    uv_async_send(&adv->wake);
  uv_run(&adv->loop, UV_RUN_DEFAULT);
  return adv->final_rc;
}

void kvp__advisor_observe(kvp_advisor_t *adv, const kvp__adv_observer_t *obs) {
  adv->fresh.obs = *obs;
}

void kvp_advisor_stop(kvp_advisor_t *adv) {
  atomic_store(&adv->stopping, 1);
  kvp__adv_inbox_wake(&adv->inbox);
}

void kvp_advisor_close(kvp_advisor_t *adv) {
  if (adv == NULL)
    return;
  atomic_store(&adv->stopping, 1);
  /* First: its thread reads the connection the consumer closes. */
  kvp__adv_metrics_stop(&adv->metrics);
  if (adv->tier != NULL)
    kvp__tier_engine_set_gate(adv->tier, NULL, NULL);
  kvp__adv_lease_close(adv->lease); /* its thread too (the leases released) */
  adv->lease = NULL;
  kvp__adv_consumer_close(adv->consumer);
  if (adv->inbox_ready)
    kvp__adv_inbox_close_wake(&adv->inbox);
  if (adv->loop_ready) {
    kvp__adv_query_stop(adv->query); /* its handles close in the run below */
    kvp__rapi_http_stop(adv->http);  /* its handle closes in the run below */
    adv->http = NULL;
    adv->stopped = 1;                  /* no flush from here: run() did it, or nothing ran */
    kvp__tier_engine_close(adv->tier); /* its timer closes in the run below */
    adv->tier = NULL;
    close_handles(adv);
    uv_run(&adv->loop, UV_RUN_DEFAULT);
    uv_loop_close(&adv->loop);
  }
  kvp__adv_query_destroy(adv->query);
  if (adv->inbox_ready)
    kvp__adv_inbox_destroy(&adv->inbox);
  natsMsg_Destroy(adv->parts_req);
  kvp__adv_wb_destroy(&adv->wb);
  kvp__store_close(adv->store);
  kvp__adv_ingest_destroy(adv->ing);
  kvp__index_destroy(adv->ix);
  kvp__adv_db_unlock(adv->db_lock); /* after every SQLite connection: see dblock.h */
  free(adv);
}
