/* The advisor's figures, filled from its parts' private state
 * (advisor_impl.h): the metrics snapshot for /metrics, the stats reply on
 * kvplane.api.<ns>.stats, and the tier_history samples. Thread: the loop
 * thread. */
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/advisor_impl.h"
#include "advisor/api.h"
#include "advisor/history.h"
#include "common/clock.h"
#include "common/log.h"

/* Per owned partition: caught up or how far behind, and tiered here. */
static void parts_figures(kvp_advisor_t *adv, kvp__adv_metrics_snap_t *sp) {
  uint32_t owned[KVP__ADV_MAX_OWNED], catching[KVP__ADV_MAX_OWNED], tiered[KVP__ADV_MAX_OWNED];
  uint64_t pos[KVP__ADV_MAX_OWNED], behind[KVP__ADV_MAX_OWNED];
  int nc = 0, whole = adv->ready; /* kvp__adv_check_ready's, sticky */
  (void)kvp__adv_parts_view(adv, owned, pos, catching, behind, &nc);
  size_t nt = 0;
  if (adv->tier != NULL)
    nt = kvp__tier_engine_tiered(adv->tier, tiered, KVP__ADV_MAX_OWNED);
  if (nt > KVP__ADV_MAX_OWNED)
    nt = KVP__ADV_MAX_OWNED;
  sp->part_count = adv->parts.count;
  for (int i = 0; i < adv->parts.n && sp->nparts < KVP__ADV_MAX_OWNED; i++) {
    if (adv->leaving[i])
      continue; /* being dropped (rebalance_move.c): not owned any more */
    kvp__adv_part_fig_t *f = &sp->parts[sp->nparts++];
    f->p = adv->parts.p[i];
    f->pos = adv->applied_pos[i];
    f->ready = whole;
    for (int k = 0; k < nc; k++)
      if (catching[k] == f->p) {
        f->ready = 0;
        f->behind = behind[k];
      }
    for (size_t k = 0; k < nt; k++)
      f->tiered |= tiered[k] == f->p;
  }
}

void kvp__adv_publish_metrics(kvp_advisor_t *adv) {
  kvp__adv_metrics_snap_t *sp = &adv->msnap;
  uint64_t now = kvp__unix_ms();

  if (adv->metrics.srv == NULL)
    return;
  memset(sp, 0, sizeof *sp);
  sp->in = *kvp__adv_ingest_counters(adv->ing);
  kvp__index_stats(adv->ix, &sp->ix);
  for (size_t i = 0; i < kvp__adv_ingest_worker_count(adv->ing); i++) {
    kvp__adv_worker_state_t ws;
    if (kvp__adv_ingest_worker_get(adv->ing, i, &ws) == 0)
      *(ws.down ? &sp->workers_down : &sp->workers_up) += 1;
  }
  sp->queue_dropped = kvp__adv_inbox_dropped(&adv->inbox);
  sp->applied_seq = adv->applied_seq;
  sp->committed_seq = adv->wb.committed_seq;
  sp->flushes = adv->wb.flushes;
  sp->flush_errors = adv->wb.flush_errors;
  sp->dirty = kvp__index_dirty_count(adv->ix);
  sp->flush_seconds = adv->wb.flush_seconds;
  sp->apply_lag_ms = adv->fresh.apply_lag_ms;
  sp->flush_lag_ms = adv->fresh.flush_lag_ms;
  sp->pending_ms = kvp__adv_fresh_pending_ms(&adv->fresh, now);
  sp->max_memory = adv->cap.max_memory;
  sp->max_locations = adv->cap.max_locations;
  sp->memory_used = kvp__index_memory_used(adv->ix);
  sp->headroom_bytes = kvp__adv_cap_headroom_bytes(&adv->cap, adv->ix);
  sp->headroom_locations = kvp__adv_cap_headroom_locations(&adv->cap, adv->ix);
  sp->evicted = adv->cap.evicted;
  sp->evict_rounds = adv->cap.rounds;
  sp->evict_stuck = adv->cap.stuck;
  sp->load_ms = adv->load_ms;
  if (adv->tier != NULL) {
    sp->tiering = 1;
    kvp__tier_engine_stats(adv->tier, &sp->tier);
    sp->leases = adv->lease != NULL;
    sp->leases_held = kvp__adv_lease_count(adv->lease);
    sp->leases_wait = 0;
    /* Unpartitioned: the namespace's one lease, as partition 0. */
    for (uint32_t p = 0; adv->lease != NULL && p < (adv->parts.count ? adv->parts.count : 1); p++)
      sp->leases_wait +=
          kvp__adv_lease_wanted(adv->lease, p, NULL, 0) && !kvp__adv_lease_held(adv->lease, p);
    /* Partitioned: the namespace's lease besides (what was left under <ns>). */
    sp->ns_lease = adv->parts.count > 0 && kvp__adv_lease_held(adv->lease, KVP__ADV_LEASE_NS);
    sp->nvols = kvp__tier_engine_volumes(adv->tier, sp->vols, KVP__TIER_MAX_VOLUMES);
    if (sp->nvols > KVP__TIER_MAX_VOLUMES)
      sp->nvols = KVP__TIER_MAX_VOLUMES;
  }
  if (adv->parts.count > 0)
    parts_figures(adv, sp);
  kvp__adv_metrics_publish(&adv->metrics, sp);
}

char *kvp__adv_stats_json(kvp_advisor_t *adv, uint64_t now) {
  const kvp__adv_wb_t *wb = &adv->wb;
  kvp__adv_api_extra_t x = {
      .ns = adv->cfg.ns,
      .mode = adv->cfg.mode == KVP_ADVISOR_JETSTREAM ? "jetstream" : "core",
      .stream_seq = adv->applied_seq,
      .committed_seq = wb->committed_seq,
      .flushes = wb->flushes,
      .flush_errors = wb->flush_errors,
      .last_flush_ms = wb->last_flush_ms,
      .last_flush_blocks = wb->last_flush_blocks,
      .dirty = kvp__index_dirty_count(adv->ix),
      .history_dropped = kvp__store_history_dropped(adv->store),
      .uptime_ms = now - adv->start_ms,
      .queue_dropped = kvp__adv_inbox_dropped(&adv->inbox),
      .apply_lag_ms = adv->fresh.apply_lag_ms,
      .apply_lag_max_ms = adv->fresh.apply_lag_max_ms,
      .flush_lag_ms = adv->fresh.flush_lag_ms,
      .flush_lag_max_ms = adv->fresh.flush_lag_max_ms,
      .pending_ms = kvp__adv_fresh_pending_ms(&adv->fresh, now),
      .max_memory = adv->cap.max_memory,
      .max_locations = adv->cap.max_locations,
      .memory_used = kvp__index_memory_used(adv->ix),
      .headroom_bytes = kvp__adv_cap_headroom_bytes(&adv->cap, adv->ix),
      .headroom_locations = kvp__adv_cap_headroom_locations(&adv->cap, adv->ix),
      .evicted = adv->cap.evicted,
      .evict_rounds = adv->cap.rounds,
      .load_ms = adv->load_ms,
  };
  kvp__tier_stats_t ts;
  kvp__tier_vol_stats_t tv[KVP__TIER_MAX_VOLUMES];
  char ns_holder[KVP__ADV_LEASE_HOLDER_MAX] = "";
  uint32_t tiered[KVP__ADV_MAX_OWNED];
  if (adv->tier != NULL) {
    size_t nt = kvp__tier_engine_tiered(adv->tier, tiered, KVP__ADV_MAX_OWNED);
    x.tiered = tiered;
    x.ntiered = nt < KVP__ADV_MAX_OWNED ? nt : KVP__ADV_MAX_OWNED;
    kvp__tier_engine_stats(adv->tier, &ts);
    x.tier = &ts;
    x.ntier_vols = kvp__tier_engine_volumes(adv->tier, tv, KVP__TIER_MAX_VOLUMES);
    x.tier_vols = tv;
    x.leases = kvp__adv_leases_json(adv);
    x.leases_held = kvp__adv_lease_count(adv->lease);
    if (adv->lease != NULL && adv->parts.count > 0) {
      x.ns_lease = kvp__adv_lease_held(adv->lease, KVP__ADV_LEASE_NS);
      kvp__adv_lease_wanted(adv->lease, KVP__ADV_LEASE_NS, ns_holder, sizeof ns_holder);
      x.ns_lease_holder = x.ns_lease ? "this advisor" : ns_holder;
    }
    x.high_watermark = adv->cfg.tier_high;
    x.low_watermark = adv->cfg.tier_low;
  }
  char name[128];
  kvp__adv_consumer_name(&adv->cfg, name, sizeof name);
  uint32_t owned[KVP__ADV_MAX_OWNED], catching[KVP__ADV_MAX_OWNED];
  uint64_t pos[KVP__ADV_MAX_OWNED], behind[KVP__ADV_MAX_OWNED];
  int nc = 0, n = kvp__adv_parts_view(adv, owned, pos, catching, behind, &nc);
  kvp__adv_api_where_t w = {
      .count = adv->parts.count,
      .n = n,
      .owned = owned,
      .positions = pos,
      .advisor = name,
      .ready = kvp__adv_check_ready(adv),
      .ready_ms = adv->ready_ms,
      .catching = catching,
      .behind = behind,
      .ncatching = nc,
  };
  x.where = &w;
  char *json = NULL;
  return kvp__adv_api_stats(adv->ix, adv->ing, &x, &json) == 0 ? json : NULL;
}

void kvp__adv_sample_history(kvp_advisor_t *adv, uint64_t now, int force) {
  kvp__store_hist_row_t rows[KVP__ADV_HIST_ROWS];

  if (adv->cfg.history_interval_ms <= 0 ||
      (!force && now - adv->history_ms < (uint64_t)adv->cfg.history_interval_ms))
    return;
  adv->history_ms = now;
  size_t n = kvp__adv_history_sample(adv->ix, adv->tier, now, rows);
  if (kvp__store_history_add(adv->store, rows, n, (uint64_t)adv->cfg.history_keep_ms) != 0)
    kvp_log_warn("advisor: tier_history sample dropped: out of memory");
}

int kvp__adv_check_ready(kvp_advisor_t *adv) {
  uint64_t behind = 0;
  if (adv->ready)
    return 1;
  if (kvp__adv_consumer_caught_up(adv->consumer, adv->applied_pos, &behind)) {
    adv->ready = 1;
    adv->ready_ms = kvp__unix_ms() - adv->start_ms;
    if (adv->lease != NULL && adv->parts.count == 0)
      kvp__adv_lease_want(adv->lease, 0, 1); /* the namespace's (open_leases) */
    if (!atomic_load(&adv->stopping))
      kvp__adv_metrics_set_phase(&adv->metrics, KVP__ADV_RUNNING);
    kvp_log_info("advisor: caught up with the streams %llu ms after start: answering queries",
                 (unsigned long long)adv->ready_ms);
    return 1;
  }
  atomic_store(&adv->metrics.behind, behind);
  return 0;
}

int kvp__adv_match_json(kvp_advisor_t *adv, const void *data, size_t len, char **json) {
  char name[128];
  uint64_t behind = 0;
  if (!kvp__adv_check_ready(adv)) {
    /* Never an answer from a half-loaded index: the router asks a standby
     * or reports the partitions missing. */
    kvp__adv_consumer_caught_up(adv->consumer, adv->applied_pos, &behind);
    json_t *o = json_pack("{s:s, s:b, s:I}", "error", "not ready: catching up with the stream",
                          "ready", 0, "behind", (json_int_t)behind);
    *json = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return *json ? 0 : KVP_ENOMEM;
  }
  kvp__adv_consumer_name(&adv->cfg, name, sizeof name);
  /* A partition added by a live rebalance is answered for once caught
   * up; until then it is listed as catching up, not owned. */
  uint32_t owned[KVP__ADV_MAX_OWNED], catching[KVP__ADV_MAX_OWNED];
  uint64_t pos[KVP__ADV_MAX_OWNED], lag[KVP__ADV_MAX_OWNED];
  int nc = 0, n = kvp__adv_parts_view(adv, owned, pos, catching, lag, &nc);
  kvp__adv_api_where_t w = {
      .count = adv->parts.count,
      .n = n,
      .owned = owned,
      .positions = pos,
      .advisor = name,
      .ready = 1,
      .ready_ms = adv->ready_ms,
      .catching = catching,
      .behind = lag,
      .ncatching = nc,
  };
  return kvp__adv_api_match_at(adv->ix, &w, data, len, json);
}
