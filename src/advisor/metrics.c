/* The advisor's Prometheus metrics; see metrics.h. The names, types and
 * labels are listed in the README's "Metrics" section.
 * Why this file is long: one family after another, each a few lines, in
 * the order of the README's table; split, the table would be in pieces. */
#include "advisor/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/event.h"
#include "kvplane/status.h"
#include "metrics/build_info.h"

/* One family with one unlabelled sample. */
static void one(kvp__prom_t *p, const char *name, const char *type, const char *help, double v) {
  kvp__prom_family(p, name, type, help);
  kvp__prom_sample(p, name, NULL, v);
}

static void write_ingest(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  const kvp__adv_ingest_counters_t *c = &s->in;
  one(p, "kvplane_advisor_messages_total", "counter",
      "Event messages received from NATS and handed to decoding.", (double)c->messages);
  one(p, "kvplane_advisor_batches_total", "counter", "Event batches applied (heartbeats included).",
      (double)c->batches);
  one(p, "kvplane_advisor_heartbeats_total", "counter", "Heartbeat batches applied.",
      (double)c->heartbeats);
  kvp__prom_family(p, "kvplane_advisor_events_total", "counter",
                   "Events applied to the index, by event type.");
  for (int t = KVP_EV_STORED; t <= KVP_EV_SNAPSHOT; t++)
    kvp__prom_sample(p, "kvplane_advisor_events_total",
                     (const char *[]){"type", kvp_event_type_name(t), NULL}, (double)c->by_type[t]);
  one(p, "kvplane_advisor_block_events_total", "counter", "Block hashes in the applied events.",
      (double)c->block_events);
  one(p, "kvplane_advisor_decode_errors_total", "counter",
      "Messages that did not decode (malformed or over the [ingest] limits); skipped.",
      (double)c->malformed);
  one(p, "kvplane_advisor_oversized_total", "counter",
      "Of the decode errors: messages over the [ingest] size limits.", (double)c->oversized);
  kvp__prom_family(p, "kvplane_advisor_skipped_total", "counter",
                   "Messages, batches or events not applied, by cause.");
  static const char *const causes[] = {"bad_event",       "duplicate", "stale_epoch",
                                       "foreign_subject", "spoofed",   "unpartitioned_advisor",
                                       "mispartitioned"};
  const uint64_t vals[] = {c->bad_events, c->duplicates,    c->stale,         c->foreign,
                           c->spoofed,    c->unpartitioned, c->mispartitioned};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    kvp__prom_sample(p, "kvplane_advisor_skipped_total", (const char *[]){"cause", causes[i], NULL},
                     (double)vals[i]);
  one(p, "kvplane_advisor_unknown_removes_total", "counter",
      "Removed events naming blocks or locations the index did not hold.",
      (double)c->unknown_removes);
  one(p, "kvplane_advisor_gaps_total", "counter", "Gaps seen in workers' event id sequences.",
      (double)c->gaps);
  one(p, "kvplane_advisor_resyncs_total", "counter", "Resync requests sent to workers.",
      (double)c->resyncs);
  one(p, "kvplane_advisor_snapshots_total", "counter", "Worker snapshots completed.",
      (double)c->snapshots);
  one(p, "kvplane_advisor_worker_restarts_total", "counter",
      "New worker epochs seen (a worker process restarted).", (double)c->epochs);
  one(p, "kvplane_advisor_workers_marked_down_total", "counter",
      "Workers marked down after [workers] heartbeat_timeout of silence.", (double)c->downs);
  one(p, "kvplane_advisor_queue_dropped_total", "counter",
      "Core-mode messages dropped because the inbox held [ingest] queue_max.",
      (double)s->queue_dropped);
  one(p, "kvplane_advisor_apply_lag_seconds", "gauge",
      "From the last applied batch's timestamp (worker clock) to its application.",
      (double)s->apply_lag_ms / 1e3);
  one(p, "kvplane_advisor_applied_sequence", "gauge",
      "Last applied JetStream stream sequence (0 in core mode).", (double)s->applied_seq);
  kvp__prom_family(p, "kvplane_workers", "gauge", "Workers known to the advisor, by state.");
  kvp__prom_sample(p, "kvplane_workers", (const char *[]){"state", "up", NULL},
                   (double)s->workers_up);
  kvp__prom_sample(p, "kvplane_workers", (const char *[]){"state", "down", NULL},
                   (double)s->workers_down);
}

static void write_index(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  one(p, "kvplane_index_blocks", "gauge", "Distinct blocks in the index (any tier, any worker).",
      (double)s->ix.blocks);
  kvp__prom_family(p, "kvplane_index_locations", "gauge",
                   "Block locations (block, worker, tier[, volume]) in the index, by tier.");
  for (int t = 1; t <= KVP_TIER_MAX; t++)
    kvp__prom_sample(p, "kvplane_index_locations", (const char *[]){"tier", kvp_tier_name(t), NULL},
                     (double)s->ix.tier_locations[t]);
  kvp__prom_family(p, "kvplane_index_bytes", "gauge",
                   "Bytes of the indexed locations, by tier (as the events reported them).");
  for (int t = 1; t <= KVP_TIER_MAX; t++)
    kvp__prom_sample(p, "kvplane_index_bytes", (const char *[]){"tier", kvp_tier_name(t), NULL},
                     (double)s->ix.tier_bytes[t]);
  one(p, "kvplane_index_memory_bytes", "gauge", "Memory allocated by the index.",
      (double)s->ix.memory_bytes);
  one(p, "kvplane_index_memory_used_bytes", "gauge",
      "Memory the index's live content needs (what [index] max_memory is held to).",
      (double)s->memory_used);
  one(p, "kvplane_index_max_memory_bytes", "gauge", "[index] max_memory (0: no cap).",
      (double)s->max_memory);
  one(p, "kvplane_index_headroom_bytes", "gauge",
      "Bytes left below [index] max_memory (negative when over; 0 without a cap).",
      (double)s->headroom_bytes);
  one(p, "kvplane_index_headroom_locations", "gauge",
      "Locations left below [index] max_locations (negative when over; 0 without a cap).",
      (double)s->headroom_locations);
  one(p, "kvplane_index_evicted_locations_total", "counter",
      "Coldest G1/G2 locations dropped to hold the index's cap.", (double)s->evicted);
  one(p, "kvplane_index_evictions_total", "counter", "Eviction rounds run to hold the cap.",
      (double)s->evict_rounds);
  one(p, "kvplane_index_over_cap_total", "counter",
      "Eviction rounds that could not get under the cap (G3/G4 alone over it).",
      (double)s->evict_stuck);
  one(p, "kvplane_advisor_load_seconds", "gauge",
      "How long the database took to load into the index at start.", (double)s->load_ms / 1000.0);
}

static void write_store(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  one(p, "kvplane_store_flushes_total", "counter", "Write-behind flushes committed to SQLite.",
      (double)s->flushes);
  one(p, "kvplane_store_flush_errors_total", "counter",
      "Write-behind flushes that failed (their changes are written by the next one).",
      (double)s->flush_errors);
  kvp__prom_histogram(p, "kvplane_store_flush_seconds",
                      "Duration of committed flushes, from taking the changes to the commit.", NULL,
                      &s->flush_seconds);
  one(p, "kvplane_store_flush_lag_seconds", "gauge",
      "Last committed flush: commit time minus the timestamp of its oldest batch.",
      (double)s->flush_lag_ms / 1e3);
  one(p, "kvplane_store_pending_seconds", "gauge",
      "How long the oldest applied batch not yet committed to SQLite has waited (0: none).",
      (double)s->pending_ms / 1e3);
  one(p, "kvplane_store_dirty_blocks", "gauge", "Changed blocks waiting for the next flush.",
      (double)s->dirty);
  one(p, "kvplane_store_committed_sequence", "gauge",
      "JetStream stream sequence of the last committed flush.", (double)s->committed_seq);
}

/* One family with a sample per volume (label volume) for the volumes v of
 * snapshot s where cond holds: value. */
#define PER_VOLUME(p_, s_, name_, type_, help_, cond_, value_)                                     \
  do {                                                                                             \
    kvp__prom_family(p_, name_, type_, help_);                                                     \
    for (size_t i_ = 0; i_ < (s_)->nvols; i_++) {                                                  \
      const kvp__tier_vol_stats_t *v = &(s_)->vols[i_];                                            \
      if (cond_)                                                                                   \
        kvp__prom_sample(p_, name_, (const char *[]){"volume", v->name, NULL}, (double)(value_));  \
    }                                                                                              \
  } while (0)

static void write_tiering(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  const kvp__tier_stats_t *t = &s->tier;
  one(p, "kvplane_migration_rounds_total", "counter", "Tiering rounds planned.", (double)t->rounds);
  kvp__prom_family(p, "kvplane_migrations_total", "counter",
                   "Block moves finished, by result: demoted (G3 -> G4) or promoted (G4 -> G3, "
                   "prefetches included) as a verified copy, evicted (dropped from G4), failed.");
  kvp__prom_sample(p, "kvplane_migrations_total", (const char *[]){"result", "demoted", NULL},
                   (double)t->demoted);
  kvp__prom_sample(p, "kvplane_migrations_total", (const char *[]){"result", "promoted", NULL},
                   (double)t->promoted);
  kvp__prom_sample(p, "kvplane_migrations_total", (const char *[]){"result", "evicted", NULL},
                   (double)t->evicted);
  kvp__prom_sample(p, "kvplane_migrations_total", (const char *[]){"result", "failed", NULL},
                   (double)t->failed);
  one(p, "kvplane_migration_prefetches_total", "counter",
      "Of the promotions: prefetches of the rest of a prefix that was hit in G4.",
      (double)t->prefetched);
  one(p, "kvplane_migration_throttled_total", "counter",
      "Planned moves left for later rounds by the bytes/s throttle.", (double)t->throttled);
  one(p, "kvplane_migration_sources_deleted_total", "counter",
      "Source copies deleted after [tiering] grace.", (double)t->sources_deleted);
  one(p, "kvplane_migration_quarantined_total", "counter",
      "Copies that failed verification: deleted, their location dropped and announced.",
      (double)t->quarantined);
  one(p, "kvplane_migration_lost_total", "counter",
      "Of the quarantined copies, those that were the block's only copy.", (double)t->lost);
  one(p, "kvplane_migration_redundant_total", "counter",
      "Second copies of a block between G3 and G4, deleted (one copy per block).",
      (double)t->redundant);
  one(p, "kvplane_pins", "gauge", "Hashes an operator pinned (kvplane pin).", (double)t->pins);
  one(p, "kvplane_pinned_blocks", "gauge",
      "Blocks pinned: the pins and their ancestors, never demoted or evicted.",
      (double)t->pinned_blocks);
  one(p, "kvplane_operator_moves_total", "counter",
      "Operator moves and deletes (kvplane move, kvplane delete) taken into rounds.",
      (double)t->operator_ops);
  one(p, "kvplane_compactions_total", "counter",
      "Compaction runs that reclaimed space ([tiering] compact_ratio).", (double)t->compactions);
  one(p, "kvplane_compaction_failures_total", "counter", "Compaction runs that failed.",
      (double)t->compact_failed);
  one(p, "kvplane_scrub_volumes_total", "counter",
      "Volume listings by the scrub ([tiering] scrub_interval).", (double)t->scrubs);
  one(p, "kvplane_scrub_missing_total", "counter",
      "Locations the scrub found without an object: dropped and announced.",
      (double)t->scrub_missing);
  one(p, "kvplane_scrub_orphans_total", "counter",
      "Objects the scrub found without a location (counted when first found).",
      (double)t->scrub_orphans);
  one(p, "kvplane_scrub_orphans_deleted_total", "counter",
      "Orphans deleted, still orphaned at their volume's next scrub.", (double)t->orphans_deleted);
  one(p, "kvplane_scrub_orphans_adopted_total", "counter",
      "Orphans adopted: a valid frame of a block the index wants and has no G3/G4 copy of.",
      (double)t->orphans_adopted);
  one(p, "kvplane_scrub_verified_total", "counter",
      "Objects a scrub pass read back and checked ([tiering] scrub_verify).",
      (double)t->scrub_verified);
  one(p, "kvplane_scrub_verified_bytes_total", "counter", "Bytes those reads took.",
      (double)t->scrub_verified_bytes);
  one(p, "kvplane_scrub_corrupt_total", "counter",
      "Copies whose frame failed the scrub's checks: quarantined.", (double)t->scrub_corrupt);
  one(p, "kvplane_scrub_seconds_total", "counter", "Time the finished scrub passes took.",
      (double)t->scrub_ms / 1e3);
  one(p, "kvplane_scrub_running", "gauge", "1 while a scrub pass runs.", (double)t->scrub_running);
  one(p, "kvplane_tier_legacy_deleted_objects_total", "counter",
      "Objects an unpartitioned deployment left under the key namespace <ns>, deleted by this "
      "partitioned advisor's scrub while it held the namespace's lease (docs/SCALE.md).",
      (double)t->legacy_deleted);
  one(p, "kvplane_tier_legacy_deleted_bytes_total", "counter",
      "Bytes of those objects, as the volume listing gave them.", (double)t->legacy_deleted_bytes);
  if (s->leases) {
    one(p, "kvplane_tier_leases_held", "gauge",
        "Partitions (unpartitioned: 1 for the namespace) whose tiering lease this advisor "
        "holds (it tiers them once caught up).",
        (double)s->leases_held);
    one(p, "kvplane_tier_leases_waiting", "gauge",
        "Partitions (unpartitioned: 1 for the namespace) this advisor would tier whose "
        "tiering lease it does not hold.",
        (double)s->leases_wait);
    if (s->part_count > 0)
      one(p, "kvplane_tier_namespace_lease_held", "gauge",
          "Partitioned: 1 while this advisor holds the namespace's lease (key all): its scrub "
          "deletes what an unpartitioned deployment left under the key namespace <ns>.",
          (double)s->ns_lease);
  }
  one(p, "kvplane_scrub_pass_objects", "gauge",
      "Objects the running scrub pass has listed so far (0: none runs).",
      (double)t->scrub_progress_objects);
  one(p, "kvplane_migration_parallel_peak", "gauge",
      "Most moves in flight at once ([tiering] max_parallel, one per destination volume).",
      (double)t->parallel_peak);
  one(p, "kvplane_migration_skipped_total", "counter",
      "Moves not tried because a volume went offline during their job.", (double)t->skipped);
  kvp__prom_family(p, "kvplane_migrated_bytes_total", "counter",
                   "Bytes of the blocks moved, by source and destination tier.");
  for (int a = 3; a <= 4; a++)
    for (int b = 3; b <= 4; b++)
      if (a != b)
        kvp__prom_sample(p, "kvplane_migrated_bytes_total",
                         (const char *[]){"from", kvp_tier_name(a), "to", kvp_tier_name(b), NULL},
                         (double)t->bytes_tiers[a][b]);
  PER_VOLUME(p, s, "kvplane_volume_used_bytes", "gauge",
             "Bytes the index places on the volume, as of the last tiering round.", 1, v->used);
  PER_VOLUME(p, s, "kvplane_volume_capacity_bytes", "gauge",
             "The volume's configured capacity ([volume <name>] capacity).", 1, v->capacity);
  PER_VOLUME(p, s, "kvplane_volume_offline", "gauge",
             "1 while the volume's identity marker is gone (a dropped mount, a deleted "
             "directory): no moves go into or out of it.",
             1, v->offline);
  PER_VOLUME(p, s, "kvplane_volume_dead_bytes", "gauge",
             "Bytes a compactable volume holds that no object owns (deleted or replaced, "
             "not yet compacted), at the engine's last look.",
             v->store_bytes > 0, v->dead_bytes);
  PER_VOLUME(p, s, "kvplane_volume_compacted_bytes_total", "counter",
             "Dead bytes compaction reclaimed in the volume ([tiering] compact_ratio).",
             v->store_bytes > 0, v->compacted_bytes);
  PER_VOLUME(p, s, "kvplane_volume_pinned_bytes", "gauge",
             "Bytes of pinned blocks in the volume (kvplane pin): never demoted or "
             "evicted.",
             1, v->pinned_bytes);
  PER_VOLUME(p, s, "kvplane_volume_fill_ratio", "gauge",
             "used / capacity of volumes with a capacity.", v->capacity > 0,
             v->used / (double)v->capacity);
  PER_VOLUME(p, s, "kvplane_volume_above_high_seconds_total", "counter",
             "Time a G3 volume's fill was above [tiering] high_watermark, as the rounds "
             "saw it.",
             v->tier == 3, v->above_high_ms / 1e3);
}

/* One family with a sample per owned partition (label partition). */
static void per_partition(kvp__prom_t *p, const kvp__adv_metrics_snap_t *s, const char *name,
                          const char *help, int which) {
  kvp__prom_family(p, name, "gauge", help);
  for (int i = 0; i < s->nparts; i++) {
    const kvp__adv_part_fig_t *f = &s->parts[i];
    char label[16];
    snprintf(label, sizeof label, "%" PRIu32, f->p);
    double v = which == 0   ? f->ready
               : which == 1 ? (double)f->behind
               : which == 2 ? (double)f->pos
                            : f->tiered;
    kvp__prom_sample(p, name, (const char *[]){"partition", label, NULL}, v);
  }
}

static void write_partitions(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  per_partition(p, s, "kvplane_partition_ready",
                "1 while the advisor answers for the owned partition (ready and caught up with "
                "its stream; what /readyz?partition=P answers 200 for), else 0.",
                0);
  per_partition(p, s, "kvplane_partition_behind_messages",
                "Messages of the partition's stream still to apply while it catches up (0 "
                "once caught up).",
                1);
  per_partition(p, s, "kvplane_partition_applied_sequence",
                "Last applied sequence of the partition's stream.", 2);
  if (s->tiering)
    per_partition(p, s, "kvplane_partition_tiered",
                  "1 when this advisor tiers the partition's blocks ([tiering] partitions, "
                  "kvplane partitions tier/untier), else 0.",
                  3);
}

void kvp__adv_metrics_write(const kvp__adv_metrics_snap_t *s, kvp__prom_t *p) {
  kvp__build_info_metric(p);
  write_ingest(s, p);
  write_index(s, p);
  write_store(s, p);
  if (s->tiering)
    write_tiering(s, p);
  if (s->nparts > 0)
    write_partitions(s, p);
}

int kvp__adv_metrics_partition_ready(const kvp__adv_metrics_snap_t *s, int have, const char *arg,
                                     char *why, size_t len) {
  char *end = NULL;
  unsigned long v = 0;
  if (arg[0] >= '0' && arg[0] <= '9' && strlen(arg) <= 10)
    v = strtoul(arg, &end, 10);
  if (end == NULL || *end != '\0' || (have && s->part_count > 0 && v >= s->part_count)) {
    if (have && s->part_count > 0)
      snprintf(why, len, "partition: '%.32s' is not a partition number (0..%" PRIu32 ")", arg,
               s->part_count - 1);
    else
      snprintf(why, len, "partition: '%.32s' is not a partition number", arg);
    return KVP_EINVAL;
  }
  if (!have) {
    snprintf(why, len, "starting: no figures yet");
    return 0;
  }
  if (s->part_count == 0) {
    snprintf(why, len, "this advisor is not partitioned ([partitions] count = 0)");
    return KVP_ENOENT;
  }
  for (int i = 0; i < s->nparts; i++) {
    const kvp__adv_part_fig_t *f = &s->parts[i];
    if (f->p != v)
      continue;
    if (f->ready)
      return 1;
    snprintf(why, len,
             "partition %lu: catching up with its stream, %" PRIu64 " messages still to apply", v,
             f->behind);
    return 0;
  }
  size_t n = (size_t)snprintf(why, len, "partition %lu is not owned by this advisor (owned:", v);
  for (int i = 0; i < s->nparts && n < len; i++)
    n += (size_t)snprintf(why + n, len - n, "%s%" PRIu32, i ? "," : " ", s->parts[i].p);
  if (n < len)
    snprintf(why + n, len - n, ")");
  return KVP_ENOENT;
}

/* --- MHD's thread ------------------------------------------------------------ */

static int ready(void *ctx, const char *partition, char *why, size_t len);

/* The load's progress: from atomics, so it answers while the database
 * loads (before the loop publishes any snapshot). */
static void write_load(kvp__adv_metrics_t *m, kvp__prom_t *out) {
  one(out, "kvplane_advisor_load_blocks", "gauge",
      "Blocks loaded from the database so far (with their locations).",
      (double)atomic_load(&m->load_done));
  one(out, "kvplane_advisor_load_blocks_at_start", "gauge", "Blocks the database holds at start.",
      (double)atomic_load(&m->load_total));
  one(out, "kvplane_advisor_loaded", "gauge",
      "1 once the database is loaded into the index, else 0.", (double)atomic_load(&m->loaded));
}

void kvp__adv_metrics_load_progress(void *ctx, uint64_t done, uint64_t total) {
  kvp__adv_metrics_t *m = ctx;
  atomic_store(&m->load_total, total);
  atomic_store(&m->load_done, done);
  if (done >= total)
    atomic_store(&m->loaded, 1);
}

static int collect(void *ctx, kvp__prom_t *out) {
  kvp__adv_metrics_t *m = ctx;
  int rc = 0;
  /* Written under the lock: a copy would be 12 KiB on MHD's stack per
   * scrape for nothing, and the loop only waits for this at its ticks. */
  pthread_mutex_lock(&m->mu);
  char why[256];
  if (m->have)
    kvp__adv_metrics_write(&m->snap, out);
  /* What /readyz answers, for alert rules (Prometheus does not probe it). */
  one(out, "kvplane_advisor_ready", "gauge",
      "1 while the advisor is ready (what /readyz answers 200 for), else 0.",
      ready(m, NULL, why, sizeof why) ? 1.0 : 0.0);
  write_load(m, out);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* The advisor as a whole (partition NULL), or one partition of it: the
 * whole must be ready, then the partition's figures of the last snapshot
 * (published every second and at every flush) decide. */
static int ready(void *ctx, const char *partition, char *why, size_t len) {
  kvp__adv_metrics_t *m = ctx;
  if (partition != NULL) {
    char whole[200];
    int rc;
    pthread_mutex_lock(&m->mu);
    rc = kvp__adv_metrics_partition_ready(&m->snap, m->have, partition, why, len);
    pthread_mutex_unlock(&m->mu);
    if (rc != 1)
      return rc;
    if (!ready(ctx, NULL, whole, sizeof whole)) {
      snprintf(why, len, "partition %s: the advisor is not ready: %s", partition, whole);
      return 0;
    }
    return 1;
  }
  natsConnection *nc = atomic_load(&m->nc);
  switch ((kvp__adv_phase_t)atomic_load(&m->phase)) {
  case KVP__ADV_STARTING: {
    uint64_t done = atomic_load(&m->load_done), total = atomic_load(&m->load_total);
    if (total && !atomic_load(&m->loaded))
      snprintf(why, len, "starting: loading %s: %llu of %llu blocks (%.0f%%)", m->db_path,
               (unsigned long long)done, (unsigned long long)total,
               100.0 * (double)done / (double)total);
    else
      snprintf(why, len, "starting: connecting to NATS (%s) and loading %s", m->servers,
               m->db_path);
    return 0;
  }
  case KVP__ADV_STOPPING:
    snprintf(why, len, "stopping");
    return 0;
  case KVP__ADV_CATCHING_UP:
    snprintf(why, len, "catching up: the database is loaded, %llu stream messages still to apply",
             (unsigned long long)atomic_load(&m->behind));
    return 0;
  case KVP__ADV_RUNNING:
    break;
  }
  natsConnStatus st = nc != NULL ? natsConnection_Status(nc) : NATS_CONN_STATUS_DISCONNECTED;
  if (st == NATS_CONN_STATUS_CONNECTED)
    return 1;
  snprintf(why, len, "NATS: %s (servers %s)",
           st == NATS_CONN_STATUS_RECONNECTING ? "reconnecting"
           : st == NATS_CONN_STATUS_CLOSED     ? "connection closed"
                                               : "not connected",
           m->servers);
  return 0;
}

/* --- loop thread ---------------------------------------------------------------- */

int kvp__adv_metrics_start(kvp__adv_metrics_t *m, const kvp_advisor_config_t *cfg, char *err,
                           size_t errlen) {
  int rc;
  memset(m, 0, sizeof *m);
  atomic_init(&m->phase, KVP__ADV_STARTING);
  atomic_init(&m->nc, NULL);
  if (cfg->metrics_listen[0] == '\0')
    return 0;
  snprintf(m->servers, sizeof m->servers, "%s", cfg->nats.servers);
  snprintf(m->db_path, sizeof m->db_path, "%s", cfg->db_path);
  if (pthread_mutex_init(&m->mu, NULL) != 0)
    return KVP_ENOMEM;
  kvp__metrics_server_opts_t so;
  kvp__metrics_server_opts_init(&so);
  so.request_timeout_ms = cfg->metrics_request_timeout_ms;
  so.per_client = (unsigned)cfg->metrics_per_client;
  so.http = cfg->http_enabled ? &m->http_counts : NULL;
  if ((rc = kvp__metrics_server_start("[metrics] listen", cfg->metrics_listen, &so, collect, ready,
                                      m, &m->srv, err, errlen)) != 0) {
    pthread_mutex_destroy(&m->mu);
    return rc;
  }
  return 0;
}

void kvp__adv_metrics_publish(kvp__adv_metrics_t *m, const kvp__adv_metrics_snap_t *s) {
  if (m->srv == NULL)
    return;
  pthread_mutex_lock(&m->mu);
  m->snap = *s;
  m->have = 1;
  pthread_mutex_unlock(&m->mu);
}

void kvp__adv_metrics_set_conn(kvp__adv_metrics_t *m, natsConnection *nc) {
  atomic_store(&m->nc, nc);
}

void kvp__adv_metrics_set_phase(kvp__adv_metrics_t *m, kvp__adv_phase_t phase) {
  atomic_store(&m->phase, (int)phase);
}

void kvp__adv_metrics_stop(kvp__adv_metrics_t *m) {
  if (m->srv == NULL)
    return;
  kvp__metrics_server_stop(m->srv);
  m->srv = NULL;
  pthread_mutex_destroy(&m->mu);
}
