/* The HTTP side of metrics: a libmicrohttpd server on one configured
 * address serving
 *   GET /metrics  the daemon's Prometheus exposition (prom.h), 200; 503 while
 *                 the collector has no figures yet (KVP_EAGAIN), 500 when it
 *                 failed otherwise;
 *   GET /healthz  200 "ok" while the process runs;
 *   GET /readyz   200 "ready" when the daemon says so, else 503 with the
 *                 reason in the body;
 *   GET /readyz?partition=P  the same for one event partition of a
 *                 partitioned daemon: 404 when it does not own P, 400 when
 *                 P is not a partition number;
 * 404 for any other path, 405 (with Allow: GET, HEAD) for other methods.
 * /metrics ends with the HTTP servers' own figures (kvplane_http_*,
 * httpguard.h: requests cut at the deadline, refused connections).
 *
 * Clients are bounded (httpguard.h): a request not complete within
 * request_timeout is cut, one address holds per_client connections at
 * most, all of them KVP__METRICS_MAX_CONNECTIONS; so a slow or hostile
 * client cannot keep Prometheus from scraping.
 *
 * Threads: MHD answers on its own thread (MHD_USE_INTERNAL_POLLING_THREAD),
 * one request at a time, so collect and ready run there and must read only
 * what is safe to read from another thread (a snapshot under a mutex,
 * atomics, nats.c's status calls). */
#ifndef KVP_METRICS_SERVER_H
#define KVP_METRICS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/httpguard.h"
#include "metrics/prom.h"

/* Fills out (reset before each call) with the exposition. Returns 0,
 * KVP_EAGAIN when there are no figures yet (answered with 503), or another
 * KVP_E code (500). */
typedef int (*kvp__metrics_collect_fn)(void *ctx, kvp__prom_t *out);
/* Returns 1 when ready; else 0 with why (a sentence) filled. partition is
 * NULL for the daemon as a whole, else the value of /readyz's `partition`
 * argument as sent: then also KVP_ENOENT (404) when the daemon does not own
 * it and KVP_EINVAL (400) when it is not a partition number, why filled. */
typedef int (*kvp__metrics_ready_fn)(void *ctx, const char *partition, char *why, size_t len);

typedef struct kvp__metrics_server_s kvp__metrics_server_t;

/* Parses "host:port" (an IPv4 address, "[IPv6]", or "localhost"; port
 * 0..65535, 0 for any free one) into a socket address. Returns 0 or
 * KVP_ECONFIG with err reading "<key>: '<addr>' <cause>". sa must hold a
 * struct sockaddr_storage; *salen is set. */
int kvp__metrics_parse_addr(const char *key, const char *addr, void *sa, unsigned *salen, char *err,
                            size_t errlen);

#define KVP__METRICS_REQUEST_TIMEOUT_MS 10000
#define KVP__METRICS_PER_CLIENT 16u
#define KVP__METRICS_MAX_CONNECTIONS 64u

typedef struct kvp__metrics_server_opts_s {
  int64_t request_timeout_ms; /* headers and body within this (> 0) */
  unsigned per_client;        /* connections one address may hold; 0: no limit */
  /* The daemon's other HTTP server (the advisor's [http]), whose figures
   * /metrics shows beside this one's (label server="http"); NULL: none. */
  const kvp__http_counts_t *http;
} kvp__metrics_server_opts_t;

/* The defaults: 10 s, 16 connections per client, no other server. */
void kvp__metrics_server_opts_init(kvp__metrics_server_opts_t *o);

/* Binds addr (parsed as above; key names the setting in errors and log
 * lines, e.g. "[metrics] listen" or "--metrics") and starts serving under
 * opts (NULL: the defaults). Returns 0 with *out
 * set, KVP_ECONFIG for a bad address, KVP_EIO when the address cannot be
 * bound ("address already in use" and the like, with the address) or the
 * server does not start, KVP_ENOMEM; err says which. */
int kvp__metrics_server_start(const char *key, const char *addr,
                              const kvp__metrics_server_opts_t *opts,
                              kvp__metrics_collect_fn collect, kvp__metrics_ready_fn ready,
                              void *ctx, kvp__metrics_server_t **out, char *err, size_t errlen);

/* The port it listens on (the chosen one when the address said 0). */
int kvp__metrics_server_port(const kvp__metrics_server_t *s);

/* What its guard counted (requests cut, connections refused). */
const kvp__http_counts_t *kvp__metrics_server_counts(const kvp__metrics_server_t *s);

/* Stops serving (a request being answered finishes first) and frees it;
 * after it returns collect and ready are not called again. NULL is
 * accepted. */
void kvp__metrics_server_stop(kvp__metrics_server_t *s);

#endif
