/* Publisher: the piece embedded in every worker that turns KV events into
 * kvplane.v1.EventBatch messages on NATS (DESIGN.md, "Publisher").
 *
 * Producers on any thread call kvp_publisher_stored/removed/accessed/cleared
 * (or kvp_publisher_emit, or the sink from kvp_publisher_sink). Each call
 * copies its arguments into a bounded multi-producer queue and returns; a
 * libuv loop on the publisher's own thread batches the queued events,
 * encodes them and publishes them on kvplane.ev.<ns>.<worker>. nats.c's own
 * threads do the socket I/O.
 *
 * Snapshots and thread-safety. The block manager is not thread-safe, so the
 * publisher never calls the snapshot callback from its own threads. When a
 * resync is due (a request on kvplane.ctl.<ns>.<worker>.resync, a dropped
 * batch in core mode, a reconnect in core mode) the publisher only raises a
 * flag; the embedder calls kvp_publisher_poll() from the thread that owns the
 * block manager (its scheduler loop), and poll calls the snapshot callback
 * there and enqueues the chunked Snapshot of every tier in the same queue as
 * the events. Because the same thread emits the events and takes the
 * snapshot, the snapshot sits at the exact point of the event stream where
 * it was taken.
 */
#ifndef KVPLANE_PUBLISHER_H
#define KVPLANE_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/event.h"
#include "kvplane/nats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_publisher_s kvp_publisher_t;

typedef enum kvp_pub_mode_e {
  KVP_PUB_CORE = 0,      /* fire and forget; gaps are repaired by snapshots */
  KVP_PUB_JETSTREAM = 1, /* async publish with acks, retried until acked */
} kvp_pub_mode_t;

typedef enum kvp_pub_overflow_e {
  KVP_OVERFLOW_BLOCK = 0, /* a producer waits for room in the queue */
  KVP_OVERFLOW_DROP = 1,  /* the event is counted as dropped, a gap is marked */
} kvp_pub_overflow_t;

/* Takes the registered set of one tier: malloc'd arrays the publisher frees,
 * parents[i] == hashes[i] meaning "no parent" (parents may be left NULL).
 * Returns 0, KVP_ETIER for a tier the source does not have (skipped), or
 * another KVP_E code (the resync stays pending). Same shape as
 * kvp_blockmgr_snapshot, with a context in front. Called only from
 * kvp_publisher_poll(), on the caller's thread. */
typedef int (*kvp_snapshot_fn)(void *ctx, int tier, uint64_t **hashes, uint64_t **parents,
                               size_t *n);

/* A run of a snapshot: the next n blocks of the tier's arrays, held on
 * volume ("" for none), of block_tokens tokens and block_bytes bytes each. */
typedef struct kvp_snapshot_run_s {
  char volume[32];
  uint32_t block_tokens;
  uint64_t block_bytes;
  size_t n;
} kvp_snapshot_run_t;

/* A tier's set that spans several volumes or block shapes (the tiering
 * advisor's worker holds blocks on every G3 and G4 volume it manages): as
 * kvp_snapshot_fn, and *runs (malloc'd, *nruns of them, freed by the
 * publisher) splits the arrays into runs whose n add up to their length.
 * Each run goes out in chunks of its own (a chunk names one volume and one
 * shape); consumers replace the tier's set with the union of the runs. */
typedef int (*kvp_snapshot_runs_fn)(void *ctx, int tier, uint64_t **hashes, uint64_t **parents,
                                    kvp_snapshot_run_t **runs, size_t *nruns);

/* Options. Initialise with kvp_publisher_opts_init(); strings are copied at
 * open. Zero numeric fields take the defaults listed. */
typedef struct kvp_publisher_opts_s {
  kvp_nats_opts_t nats;  /* servers, auth, TLS, connect timeout (kvplane/nats.h) */
  const char *ns;        /* namespace, [A-Za-z0-9_-]+; default "default" */
  const char *worker_id; /* required, [A-Za-z0-9_-]{1,64} */
  uint32_t dp_rank;
  const char *model;         /* may be NULL */
  int mode;                  /* kvp_pub_mode_t */
  const char *stream;        /* JetStream stream; default KVPLANE_EVENTS */
  int stream_create;         /* create the stream (subjects kvplane.ev.>) if absent */
  size_t batch_max_events;   /* default 4096 */
  size_t batch_max_blocks;   /* default 16384 */
  size_t batch_max_bytes;    /* default 256 KiB; <= the server's max payload */
  uint32_t max_delay_ms;     /* oldest queued event waits at most this; default 5 */
  size_t queue_capacity;     /* events; default 65536; rounded up to a power of 2 */
  int overflow;              /* kvp_pub_overflow_t */
  int coalesce;              /* drop blocks stored and removed in one batch window
                              * (consumers then see parents never announced:
                              * docs/events.md) */
  uint32_t heartbeat_ms;     /* empty batch when idle this long; default 2000 */
  uint32_t ack_wait_ms;      /* JetStream ack timeout before a retry; default 2000 */
  uint32_t close_timeout_ms; /* bound of the flush done by close; default 5000 */
  uint32_t js_max_inflight;  /* JetStream batches awaiting acks, at most; default 256 */
  unsigned snapshot_tiers;   /* bit (1 << tier); default G1|G2|G3 */
  char snapshot_volumes[KVP_TIER_MAX + 1][32]; /* volume named in each tier's snapshot
                                                  (G3/G4); "" for none */
  uint32_t block_tokens;                       /* carried in snapshots */
  uint64_t block_bytes;                        /* carried in snapshots */
  kvp_snapshot_fn snapshot;                    /* may be NULL: resyncs are then counted only */
  void *snapshot_ctx;
  /* Resuming an earlier open's stream (a relay restarted): its epoch, so
   * consumers keep the worker's blocks, and an event id above every id that
   * open used (consumers drop ids they have seen as duplicates, and take a
   * jump as a gap). 0: a new epoch (Unix time in ns), ids from 1. */
  uint64_t epoch;
  uint64_t first_event_id;
  /* A partitioned deployment (the servers map kvplane.ev.<ns>.<worker> to
   * kvplane.pev.<ns>.<p>.<worker>, kvp_partition_mapping_conf): the
   * partition count, so that JetStream mode finds (or creates) this
   * worker's partition stream <stream>_P<p> instead of <stream>. 0: not
   * partitioned. Publishing is the same either way. */
  uint32_t partitions;
  /* Replicas of a stream the publisher creates (1..5); 0: 1. */
  uint32_t stream_replicas;
  /* Used instead of snapshot when set (snapshot_ctx is its context too):
   * snapshot_volumes, block_tokens and block_bytes are then the runs'. */
  kvp_snapshot_runs_fn snapshot_runs;
} kvp_publisher_opts_t;

/* Fills o with the defaults (core mode, block on overflow, coalescing on). */
void kvp_publisher_opts_init(kvp_publisher_opts_t *o);

/* Validates o, connects to NATS (and in JetStream mode finds or creates the
 * stream), subscribes to the resync subject and starts the loop thread.
 * Returns 0 with *out set, or with *out NULL:
 *   KVP_ECONFIG / KVP_EINVAL  a bad option; err names it ("queue_capacity: ...");
 *   KVP_EAUTH   the server refused the credentials;
 *   KVP_ECONN   no server answered within connect_timeout_ms;
 *   KVP_ENOMEM.
 * err (may be NULL) receives a one-line message on failure. */
int kvp_publisher_open(const kvp_publisher_opts_t *o, kvp_publisher_t **out, char *err,
                       size_t errlen);

/* Queues one event (any type except SNAPSHOT); thread-safe. The arrays are
 * copied before the call returns. Returns 0, or:
 *   KVP_EINVAL    a malformed event (no hashes for stored/removed/accessed,
 *                 unknown tier, volume longer than 31 characters);
 *   KVP_EOVERFLOW the queue is full in drop mode (counted, a gap is marked);
 *   KVP_ECLOSED   the publisher is closing. */
int kvp_publisher_emit(kvp_publisher_t *pub, const kvp_event_t *ev);

/* Blocks became registered in tier. parent NULL: the first block of a
 * sequence. token_ids is not carried by these shortcuts (use emit). Same
 * returns as kvp_publisher_emit. */
int kvp_publisher_stored(kvp_publisher_t *pub, int tier, const char *volume, const uint64_t *parent,
                         const uint64_t *hashes, size_t n, uint32_t block_tokens,
                         uint64_t block_bytes, int32_t lora_id);
int kvp_publisher_removed(kvp_publisher_t *pub, int tier, const char *volume,
                          const uint64_t *hashes, size_t n);
/* hit_counts NULL means one hit each. */
int kvp_publisher_accessed(kvp_publisher_t *pub, int tier, const uint64_t *hashes,
                           const uint32_t *hit_counts, size_t n);
/* tier KVP_TIER_ALL clears every tier. */
int kvp_publisher_cleared(kvp_publisher_t *pub, int tier);

/* A sink (event.h) that feeds kvp_publisher_emit; thread-safe. */
kvp_event_sink_t kvp_publisher_sink(kvp_publisher_t *pub);

/* Marks a resync as due, as a request on the resync subject would. */
void kvp_publisher_request_resync(kvp_publisher_t *pub);

/* Call from the thread that owns the snapshot source (see the top of this
 * file). When a resync is due and the link is up, takes a snapshot of every
 * tier of snapshot_tiers through the callback and queues it in chunks.
 * When the queue is full, poll waits for room (under either overflow
 * policy) instead of dropping chunks, as long as the publisher's thread
 * sends: a snapshot larger than the queue takes as long as sending it
 * does (in JetStream mode, js_max_inflight batches per ack round trip). A
 * chunk that finds no room for 200 ms in core mode, or for ack_wait_ms (at
 * least 200 ms) in JetStream mode, where only an ack frees room (the link
 * stalled), ends that snapshot unfinished (its last chunk never goes out)
 * and is not counted as a dropped event. Returns 1 when a snapshot was queued, 0 when nothing
 * was due, or a KVP_E code (KVP_EOVERFLOW: no room in time; the resync
 * stays due and the next poll tries again). */
int kvp_publisher_poll(kvp_publisher_t *pub);

/* Waits until every event queued before the call is sent (core: handed to
 * the server, confirmed by a NATS flush) or acked (JetStream). Returns 0,
 * KVP_ETIMEDOUT after timeout_ms, or KVP_ECLOSED. */
int kvp_publisher_flush(kvp_publisher_t *pub, uint32_t timeout_ms);

/* Flushes for at most close_timeout_ms, stops the loop, closes the NATS
 * connection and frees everything. Producers blocked on a full queue return
 * KVP_ECLOSED. No call may use pub after (or while) this returns. NULL is
 * accepted. */
void kvp_publisher_close(kvp_publisher_t *pub);

/* Cumulative figures. queued counts accepted calls; sent, acked and the
 * publish failures in dropped count wire events, after chains were merged
 * and coalescing removed blocks (so sent can be below queued); blocks counts
 * block hashes on the wire. */
typedef struct kvp_publisher_stats_s {
  uint64_t queued;     /* accepted into the queue */
  uint64_t sent;       /* distinct events published (handed to NATS), each counted once */
  uint64_t acked;      /* acked by JetStream */
  uint64_t dropped;    /* lost: queue full in drop mode, failed core publishes */
  uint64_t batches;    /* batch messages published, heartbeats and resends included */
  uint64_t bytes;      /* message payload bytes published, resends included */
  uint64_t reconnects; /* NATS reconnections */
  uint64_t resyncs;    /* snapshots queued by kvp_publisher_poll */
  uint64_t blocks;     /* block hashes in the distinct published events */
  uint64_t retries;    /* JetStream batches published again */
  uint64_t resent;     /* events in those batches (not in sent) */
} kvp_publisher_stats_t;

void kvp_publisher_stats(kvp_publisher_t *pub, kvp_publisher_stats_t *f);

/* 1 while the publisher's NATS connection is up, 0 while it is down or
 * reconnecting (or pub is NULL). Thread-safe; the answer may change right
 * after the call (a daemon's readiness, a gauge). */
int kvp_publisher_connected(kvp_publisher_t *pub);

/* Epoch of this open (Unix time in ns at open). */
uint64_t kvp_publisher_epoch(const kvp_publisher_t *pub);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_PUBLISHER_H */
