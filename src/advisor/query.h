/* The advisor's query connection: match and stats requests
 * (kvplane.api.<ns>.match and .stats) read and answered on the loop
 * thread, over a second NATS connection attached to the advisor's libuv
 * loop (nats.c's event-loop mode).
 *
 * Why a connection of its own: on the event connection a request crossed
 * three threads before its answer (nats.c's reader, the subscription's
 * delivery thread, the inbox to the loop), three wake-ups per advisor per
 * request; a gathered answer waits for the slowest of its advisors, so on
 * a shared machine those wake-ups were most of its latency (docs/SCALE.md,
 * "Measured here"). Here the loop reads the socket itself, takes the
 * requests from synchronous subscriptions right after the poll phase (a
 * uv_check handle) and publishes the answers: one wake-up. The event
 * connection keeps its threads: fetches block there, never on the loop.
 *
 * Threads: open, start, stop and destroy on the thread that runs (or will
 * run) the loop, with the loop not running elsewhere meanwhile;
 * kvp__adv_query_bind_thread on the thread that calls uv_run. */
#ifndef KVP_ADVISOR_QUERY_H
#define KVP_ADVISOR_QUERY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "advisor/advisor.h"

/* The answer to a request: a malloc'd NUL-terminated JSON text the query
 * connection publishes and frees, or NULL (nothing is sent). stats is 1 for
 * a stats request, 0 for a match. */
typedef char *(*kvp__adv_query_fn)(void *ctx, int stats, const void *data, size_t len);

typedef struct kvp__adv_query_s kvp__adv_query_t;

/* Connects (cfg's NATS options) with the connection attached to loop.
 * Returns 0 with *out set, or the codes of kvp__nats_connect (err says
 * why). Nothing is subscribed before kvp__adv_query_start. */
int kvp__adv_query_open(uv_loop_t *loop, const kvp_advisor_config_t *cfg, kvp__adv_query_fn answer,
                        void *ctx, kvp__adv_query_t **out, char *err, size_t errlen);

/* Subscribes to the namespace's match and stats subjects and starts
 * answering. Returns 0, or KVP_ECONFIG / a mapped nats.c status. */
int kvp__adv_query_start(kvp__adv_query_t *q, char *err, size_t errlen);

/* Stops answering: unsubscribes, closes the connection (its loop handles
 * close in the loop's next run) and the check handle. NULL is accepted;
 * a second call does nothing. */
void kvp__adv_query_stop(kvp__adv_query_t *q);

/* Frees q after stop and after the loop has run its closes; NULL is
 * accepted. */
void kvp__adv_query_destroy(kvp__adv_query_t *q);

/* Tells nats.c's libuv adapter that the calling thread runs loop (it then
 * touches the loop's handles directly, and schedules them from any other
 * thread). */
void kvp__adv_query_bind_thread(uv_loop_t *loop);

/* Requests answered so far. */
uint64_t kvp__adv_query_answered(const kvp__adv_query_t *q);

#endif
