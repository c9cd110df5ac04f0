/* kvplane-relay: KV events of vLLM and SGLang engines (ZMQ PUB, msgpack)
 * republished as kvplane events (DESIGN.md, "Engine adapters").
 *
 * One relay reads one or more engine endpoints, one worker id each, and
 * owns one kvplane publisher per endpoint. kvp_relay_run() runs the loop on
 * the caller's thread until kvp_relay_stop() (callable from any thread or a
 * signal handler).
 *
 * Per endpoint: messages are [topic, 8-byte big-endian seq, msgpack
 * payload]. A sequence gap (a lost message, or the SUB high-water mark
 * overflowing) is recovered through the engine's replay socket (a DEALER to
 * the engine's ROUTER: ["", start_seq] out; replies ["", topic, seq,
 * payload], ["", seq, payload] or [seq, payload] until seq -1). A publisher
 * restart (seq back to 0), no replay endpoint, a replay that times out or
 * starts after the missing sequence make the relay publish AllBlocksCleared
 * (every tier) for that worker and start afresh.
 *
 * With a state directory the relay is restart-safe: per endpoint it keeps
 * the last sequence it published (after a publisher flush) and the
 * publisher's epoch in a state file; a restarted relay resumes that epoch,
 * replays the engine's buffer from its oldest message (what it had
 * published only rebuilds the engine-to-kvplane map) and publishes from the
 * saved sequence + 1. A buffer that no longer reaches back to it is logged,
 * counted lost and cleared once.
 */
#ifndef KVP_RELAY_RELAY_H
#define KVP_RELAY_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/publisher.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_RELAY_MAX_ENDPOINTS 64

typedef struct kvp_relay_s kvp_relay_t;

typedef struct kvp_relay_endpoint_s {
  const char *endpoint; /* ZMQ PUB to connect, e.g. tcp://10.0.0.5:5557 */
  const char *replay;   /* engine's ROUTER, or NULL: gaps then clear */
  const char *worker_id;
  uint32_t dp_rank;
} kvp_relay_endpoint_t;

typedef struct kvp_relay_opts_s {
  kvp_publisher_opts_t pub; /* ns, nats, mode...; worker_id and dp_rank are per endpoint */
  kvp_relay_endpoint_t endpoints[KVP_RELAY_MAX_ENDPOINTS];
  size_t nendpoints;
  const char *topic;          /* SUB filter; default "" (every topic) */
  int rcvhwm;                 /* ZMQ receive high-water mark; default 100000 */
  size_t map_cap;             /* engine->kvplane hashes per worker; default 1<<20 */
  uint32_t replay_timeout_ms; /* per reply message; default 1000 */
  const char *media;          /* "NAME=G<n>,..." overrides of the medium table, or NULL */
  uint32_t block_size;        /* tokens per block when events omit it; 0: from the event */
  const char *state_dir;      /* restart state per endpoint (<worker>.state), or NULL: none */
  uint32_t state_interval_ms; /* state written at most this often while events flow; 200 */
  uint32_t join_window;       /* a relay whose first sequence is n asks the replay socket
                               * for n - join_window.. at the earliest, never for 0..n-1
                               * of a stream that starts at a timestamp; 1<<20 */
} kvp_relay_opts_t;

void kvp_relay_opts_init(kvp_relay_opts_t *o);

/* Validates the options, opens the publishers (NATS) and the ZMQ sockets.
 * Returns 0 with *out set, or KVP_ECONFIG (err names the option), the
 * publisher's codes (KVP_ECONN, KVP_EAUTH), KVP_EIO (a ZMQ socket), KVP_ENOMEM. */
int kvp_relay_open(const kvp_relay_opts_t *o, kvp_relay_t **out, char *err, size_t errlen);

/* Runs until kvp_relay_stop(); returns 0. */
int kvp_relay_run(kvp_relay_t *r);

/* Async-signal-safe. */
void kvp_relay_stop(kvp_relay_t *r);

/* True once kvp_relay_stop() was called. */
int kvp_relay_stopped(kvp_relay_t *r);

/* Flushes the publishers and frees everything. NULL is accepted. */
void kvp_relay_close(kvp_relay_t *r);

/* Cumulative figures of one endpoint. */
typedef struct kvp_relay_stats_s {
  uint64_t msgs;                                 /* ZMQ messages read (live and replayed) */
  uint64_t in_stored, in_removed, in_cleared;    /* engine events decoded */
  uint64_t out_stored, out_removed, out_cleared; /* kvplane events published */
  uint64_t blocks_kvp, blocks_native;            /* stored blocks by hash kind */
  uint64_t skip_group, skip_medium, skip_dup;    /* skipped: hybrid group, unknown medium,
                                                  * replayed message outside the range */
  uint64_t skip_unmapped;                        /* removals of hashes never mapped */
  uint64_t skip_kind, skip_kind_unknown;         /* skipped by the kv_cache_spec_kind
                                                  * table; kinds it does not know */
  uint64_t gaps, replays, replay_msgs, clears, restarts;
  uint64_t decode_errors; /* bad payloads, bad frames */
  uint64_t lost;          /* sequences given up: undecodable in sequence, or gone from
                           * the engine's replay buffer */
  uint64_t event_errors;  /* malformed events inside good payloads */
  uint64_t map_evictions;
  uint64_t resyncs;    /* advisor resync requests answered with the blocks published */
  uint64_t heartbeats; /* batches without events (TensorRT-LLM's idle batches) */
  int64_t last_seq;
} kvp_relay_stats_t;

/* Copies endpoint i's figures; KVP_EINVAL when i is out of range.
 * Thread-safe (counters are read relaxed). */
int kvp_relay_stats(kvp_relay_t *r, size_t i, kvp_relay_stats_t *s);

/* Writes every endpoint's figures as one JSON object per line to f. */
void kvp_relay_stats_print(kvp_relay_t *r, void *file); /* file: a FILE * */

#ifdef __cplusplus
}
#endif
#endif /* KVP_RELAY_RELAY_H */
