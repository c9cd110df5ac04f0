/* The routers' indexer API served over HTTP ([http] enabled; routerapi.h
 * says what it answers).
 *
 * Threads: libmicrohttpd reads requests on its own thread and decodes them
 * there (kvp__rapi_parse); the index belongs to the loop thread, so a
 * decoded query is handed to the loop (a uv_async_t) and the HTTP thread
 * waits for its answer, as a NATS match request waits in the inbox. After
 * kvp__rapi_http_stop no request waits any more (503) and no answer is
 * asked of the loop. */
#ifndef KVP_ADVISOR_ROUTERHTTP_H
#define KVP_ADVISOR_ROUTERHTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "index/index.h"
#include "metrics/httpguard.h"

/* Clients are bounded (httpguard.h): a request whose headers and body are
 * not complete within request_timeout_ms is cut, one address holds
 * per_client connections at most (0: no limit; all routers behind one NAT
 * or proxy share it), all of them KVP__RAPI_MAX_CONNECTIONS. */
#define KVP__RAPI_MAX_CONNECTIONS 256u
typedef struct kvp__rapi_http_limits_s {
  int64_t request_timeout_ms;
  unsigned per_client;
} kvp__rapi_http_limits_t;

typedef struct kvp__rapi_http_s kvp__rapi_http_t;

/* Loop thread, before uv_run: binds addr (key names the setting in errors)
 * and starts answering from ix, serving namespace ns, under limits,
 * counting into counts (which must outlive the server). Returns 0 with *out
 * set, KVP_ECONFIG (a bad address), KVP_EIO (cannot listen: in use, ...),
 * KVP_ENOMEM; err says which. */
int kvp__rapi_http_start(uv_loop_t *loop, const kvp__index_t *ix, const char *ns,
                         uint32_t default_block_size, const char *key, const char *addr,
                         const kvp__rapi_http_limits_t *limits, kvp__http_counts_t *counts,
                         kvp__rapi_http_t **out, char *err, size_t errlen);

/* Loop thread, before uv_run: queries are answered only while ready(ctx)
 * returns 1 (the advisor has loaded and caught up with its streams); until
 * then 503 {"error": "not ready: catching up with the stream, N messages
 * still to apply"}, N from *behind, as the NATS match request answers "not
 * ready". Without it, always. */
typedef int (*kvp__rapi_ready_fn)(void *ctx, uint64_t *behind);
void kvp__rapi_http_set_ready(kvp__rapi_http_t *h, kvp__rapi_ready_fn ready, void *ctx);

/* The port it listens on (the chosen one when the address said 0). */
int kvp__rapi_http_port(const kvp__rapi_http_t *h);

/* Loop thread (or the thread that ran the loop, after uv_run returned):
 * answers waiting requests with 503, joins the HTTP thread and closes the
 * loop handle; the memory is freed by the handle's close callback, so the
 * loop must run once more. NULL is accepted. */
void kvp__rapi_http_stop(kvp__rapi_http_t *h);

#endif
