/* kvplane-relay's Prometheus metrics; see metrics.h. */
#include "relay/metrics.h"

#include <stddef.h>
#include <stdio.h>

#include "kvplane/status.h"
#include "metrics/build_info.h"

typedef struct {
  kvp_relay_stats_t st;
  kvp_publisher_stats_t pub;
  int connected;
} ep_fig_t;

/* One family with a sample per endpoint: the uint64_t at offset off of its
 * figures, with extra labels k=v when k is not NULL. */
static void per_ep(kvp__prom_t *p, const kvp_relay_t *r, const ep_fig_t *f, const char *name,
                   size_t off, const char *k, const char *v) {
  for (size_t i = 0; i < kvp__relay_endpoint_count(r); i++) {
    const char *w = kvp__relay_endpoint_worker(r, i);
    double x = (double)*(const uint64_t *)((const char *)&f[i] + off);
    kvp__prom_sample(p, name, (const char *[]){"worker", w, k, v, NULL}, x);
  }
}

#define ST(field) offsetof(ep_fig_t, st.field)
#define PUB(field) offsetof(ep_fig_t, pub.field)

static void simple(kvp__prom_t *p, const kvp_relay_t *r, const ep_fig_t *f, const char *name,
                   const char *help, size_t off) {
  kvp__prom_family(p, name, "counter", help);
  per_ep(p, r, f, name, off, NULL, NULL);
}

int kvp__relay_metrics_collect(void *relay, kvp__prom_t *p) {
  kvp_relay_t *r = relay;
  size_t n = kvp__relay_endpoint_count(r);
  ep_fig_t f[KVP_RELAY_MAX_ENDPOINTS];

  for (size_t i = 0; i < n; i++) {
    kvp_relay_stats(r, i, &f[i].st);
    kvp_publisher_stats(kvp__relay_endpoint_publisher(r, i), &f[i].pub);
    f[i].connected = kvp_publisher_connected(kvp__relay_endpoint_publisher(r, i));
  }
  kvp__build_info_metric(p);
  simple(p, r, f, "kvplane_relay_messages_total",
         "ZMQ messages read from the engine (live and replayed).", ST(msgs));
  kvp__prom_family(p, "kvplane_relay_events_in_total", "counter",
                   "Engine KV events decoded, by type.");
  per_ep(p, r, f, "kvplane_relay_events_in_total", ST(in_stored), "type", "stored");
  per_ep(p, r, f, "kvplane_relay_events_in_total", ST(in_removed), "type", "removed");
  per_ep(p, r, f, "kvplane_relay_events_in_total", ST(in_cleared), "type", "cleared");
  kvp__prom_family(p, "kvplane_relay_events_out_total", "counter",
                   "kvplane events handed to the publisher, by type.");
  per_ep(p, r, f, "kvplane_relay_events_out_total", ST(out_stored), "type", "stored");
  per_ep(p, r, f, "kvplane_relay_events_out_total", ST(out_removed), "type", "removed");
  per_ep(p, r, f, "kvplane_relay_events_out_total", ST(out_cleared), "type", "cleared");
  kvp__prom_family(p, "kvplane_relay_blocks_total", "counter",
                   "Stored blocks republished, by hash kind: kvplane (from token ids) or "
                   "engine_native (the engine's own hash).");
  per_ep(p, r, f, "kvplane_relay_blocks_total", ST(blocks_kvp), "hash", "kvplane");
  per_ep(p, r, f, "kvplane_relay_blocks_total", ST(blocks_native), "hash", "engine_native");
  kvp__prom_family(p, "kvplane_relay_skipped_total", "counter",
                   "Engine events or blocks not republished, by cause.");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_group), "cause", "hybrid_group");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_medium), "cause", "unknown_medium");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_dup), "cause", "replay_duplicate");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_unmapped), "cause", "unmapped_remove");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_kind), "cause", "spec_kind");
  per_ep(p, r, f, "kvplane_relay_skipped_total", ST(skip_kind_unknown), "cause",
         "unknown_spec_kind");
  simple(p, r, f, "kvplane_relay_gaps_total", "Sequence gaps seen on the engine's stream.",
         ST(gaps));
  simple(p, r, f, "kvplane_relay_replays_total", "Replays requested from the engine.", ST(replays));
  simple(p, r, f, "kvplane_relay_replayed_messages_total", "Messages received by replays.",
         ST(replay_msgs));
  simple(p, r, f, "kvplane_relay_clears_total",
         "AllBlocksCleared published for the worker (engine restart, unrecoverable gap).",
         ST(clears));
  simple(p, r, f, "kvplane_relay_restarts_total", "Engine publisher restarts seen (sequence 0).",
         ST(restarts));
  simple(p, r, f, "kvplane_relay_decode_errors_total", "Bad payloads or frames from the engine.",
         ST(decode_errors));
  simple(p, r, f, "kvplane_relay_lost_total",
         "Engine sequences given up: undecodable, or gone from the engine's replay buffer.",
         ST(lost));
  simple(p, r, f, "kvplane_relay_resyncs_total",
         "Advisor resync requests answered with the blocks the relay published.", ST(resyncs));
  simple(p, r, f, "kvplane_relay_event_errors_total",
         "Malformed events inside payloads that decoded.", ST(event_errors));
  simple(p, r, f, "kvplane_relay_map_evictions_total",
         "Engine-to-kvplane hash mappings evicted (--map-cap reached).", ST(map_evictions));
  simple(p, r, f, "kvplane_relay_heartbeats_total", "Engine batches without events (idle batches).",
         ST(heartbeats));
  kvp__prom_family(p, "kvplane_relay_last_sequence", "gauge",
                   "Last engine sequence number read (-1: none yet).");
  for (size_t i = 0; i < n; i++)
    kvp__prom_sample(p, "kvplane_relay_last_sequence",
                     (const char *[]){"worker", kvp__relay_endpoint_worker(r, i), NULL},
                     (double)f[i].st.last_seq);
  simple(p, r, f, "kvplane_relay_published_batches_total",
         "Event batch messages published to NATS (heartbeats and resends included).", PUB(batches));
  simple(p, r, f, "kvplane_relay_published_bytes_total", "Payload bytes published to NATS.",
         PUB(bytes));
  simple(p, r, f, "kvplane_relay_publish_dropped_total",
         "kvplane events lost by the publisher (queue full, failed core publishes).", PUB(dropped));
  simple(p, r, f, "kvplane_relay_nats_reconnects_total", "NATS reconnections.", PUB(reconnects));
  kvp__prom_family(p, "kvplane_relay_nats_connected", "gauge",
                   "1 while the worker's publisher is connected to NATS.");
  for (size_t i = 0; i < n; i++)
    kvp__prom_sample(p, "kvplane_relay_nats_connected",
                     (const char *[]){"worker", kvp__relay_endpoint_worker(r, i), NULL},
                     f[i].connected);
  return 0;
}

int kvp__relay_metrics_ready(void *relay, const char *partition, char *why, size_t len) {
  kvp_relay_t *r = relay;
  if (partition != NULL) {
    snprintf(why, len, "a relay has no event partitions (asked for partition '%.32s')", partition);
    return KVP_ENOENT;
  }
  if (kvp_relay_stopped(r)) {
    snprintf(why, len, "stopping");
    return 0;
  }
  for (size_t i = 0; i < kvp__relay_endpoint_count(r); i++)
    if (!kvp_publisher_connected(kvp__relay_endpoint_publisher(r, i))) {
      snprintf(why, len, "NATS: the publisher of worker %s is not connected",
               kvp__relay_endpoint_worker(r, i));
      return 0;
    }
  return 1;
}

int kvp__relay_metrics_start(kvp_relay_t *r, const char *addr,
                             const kvp__metrics_server_opts_t *opts, kvp__metrics_server_t **out,
                             char *err, size_t errlen) {
  return kvp__metrics_server_start("--metrics", addr, opts, kvp__relay_metrics_collect,
                                   kvp__relay_metrics_ready, r, out, err, errlen);
}
