/* Bounds on the clients of a libmicrohttpd server, shared by the metrics
 * server (server.h) and the advisor's routers' API (advisor/routerhttp.h):
 * a hostile or broken client holds a connection slot for a bounded time,
 * and one address holds a bounded share of the slots.
 *
 *  - A whole-request deadline: a request whose headers and body have not
 *    all arrived request_timeout after it began is cut (the socket is shut
 *    down and libmicrohttpd closes the connection), counted and logged
 *    (rate-limited, naming the peer). libmicrohttpd's own timeout is per
 *    idle period, so a client trickling a byte every few seconds (a
 *    slowloris) was never cut. A request begins when the connection is
 *    accepted, and on a kept-alive connection when its first byte arrives
 *    after the previous answer (seen from the kernel's count of received
 *    bytes, TCP_INFO, checked every tick); an idle kept-alive connection
 *    is closed by the idle timeout, uncounted. The answer's own sending is
 *    not under the deadline (the idle timeout bounds a reader that stops).
 *  - A per-address limit (MHD_OPTION_PER_IP_CONNECTION_LIMIT): all clients
 *    behind one NAT or proxy share it.
 *  - libmicrohttpd's messages go to the daemon's log, rate-limited (a
 *    refused connection was one stderr line each); its "connection limit"
 *    refusals (total or per address: it says the same) are counted.
 *
 * Threads: libmicrohttpd's polling thread runs the callbacks; a watchdog
 * thread of the guard's own wakes every tick (a tenth of the deadline,
 * 50..500 ms) and cuts late requests; the counts are atomics, read from
 * any thread. */
#ifndef KVP_METRICS_HTTPGUARD_H
#define KVP_METRICS_HTTPGUARD_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvp__http_limits_s {
  int64_t request_timeout_ms; /* headers and body within this (> 0) */
  unsigned per_client;        /* connections one address may hold; 0: no limit */
  unsigned max_connections;   /* all clients together */
  unsigned idle_timeout_s;    /* a connection silent this long is closed */
} kvp__http_limits_t;

/* What a server's guard counted; owned by the caller, so a daemon reports
 * one server's figures from another's /metrics. */
typedef struct kvp__http_counts_s {
  _Atomic uint64_t timed_out; /* requests cut at the deadline */
  _Atomic uint64_t refused;   /* connections refused at a connection limit */
} kvp__http_counts_t;

typedef struct kvp__http_guard_s kvp__http_guard_t;

/* Starts libmicrohttpd on the bound, listening socket fd (flags as for
 * MHD_start_daemon) with handler and its completion callback (done may be
 * NULL) under lim, counting into counts (which must outlive the guard).
 * what names the server in log lines ("[http]"). Returns 0 with *out set,
 * KVP_ENOMEM, or KVP_EIO when libmicrohttpd did not start (fd is then
 * still the caller's to close). */
int kvp__http_guard_start(const char *what, const kvp__http_limits_t *lim,
                          kvp__http_counts_t *counts, unsigned flags, int fd,
                          MHD_AccessHandlerCallback handler, void *handler_cls,
                          MHD_RequestCompletedCallback done, void *done_cls,
                          kvp__http_guard_t **out);

/* Stops libmicrohttpd (joining its thread; it closes the listening
 * socket), then the watchdog, and frees the guard. NULL is accepted. */
void kvp__http_guard_stop(kvp__http_guard_t *g);

/* The deadline applied (the limits' request_timeout_ms). */
int64_t kvp__http_guard_timeout_ms(const kvp__http_guard_t *g);

#endif
