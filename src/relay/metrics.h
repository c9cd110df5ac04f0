/* kvplane-relay's Prometheus metrics (--metrics ADDR; README "Metrics"):
 * every endpoint's figures (kvp_relay_stats, its publisher's) labelled with
 * its worker id, and readiness (every endpoint's publisher connected to
 * NATS).
 *
 * Threads: both run on the metrics server's thread while the relay loop
 * runs on another; they read only relaxed atomic counters, names fixed at
 * open, and nats.c's connection status (which nats.c locks). The relay
 * must outlive the metrics server. */
#ifndef KVP_RELAY_METRICS_H
#define KVP_RELAY_METRICS_H

#include <stddef.h>

#include "relay/relay.h"
#include "metrics/prom.h"
#include "metrics/server.h"

/* Writes the relay's exposition into p. Returns 0 (the writer's own
 * allocation failure is in p->err). Signature of kvp__metrics_collect_fn. */
int kvp__relay_metrics_collect(void *relay, kvp__prom_t *p);

/* 1 when every endpoint's publisher is connected to NATS; else 0 with why
 * naming the first worker that is not. A relay has no event partitions:
 * asked for one, KVP_ENOENT. Signature of kvp__metrics_ready_fn. */
int kvp__relay_metrics_ready(void *relay, const char *partition, char *why, size_t len);

/* Serves the relay's /metrics, /healthz and /readyz on addr ("host:port",
 * named --metrics in errors; opts: its limits, NULL for the defaults) until
 * kvp__metrics_server_stop(*out), which must come before kvp_relay_close(r). Returns 0 with *out
 * set, or kvp__metrics_server_start's codes (KVP_ECONFIG, KVP_EIO, KVP_ENOMEM) with err. */
int kvp__relay_metrics_start(kvp_relay_t *r, const char *addr,
                             const kvp__metrics_server_opts_t *opts, kvp__metrics_server_t **out,
                             char *err, size_t errlen);

/* relay.c's side: the endpoints' count, worker ids, publishers. */
size_t kvp__relay_endpoint_count(const kvp_relay_t *r);
const char *kvp__relay_endpoint_worker(const kvp_relay_t *r, size_t i);
kvp_publisher_t *kvp__relay_endpoint_publisher(const kvp_relay_t *r, size_t i);

#endif
