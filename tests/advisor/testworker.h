/* A simulated worker for the advisor tests: it keeps its own registered set
 * per tier (the expected state), makes random event batches that change it
 * (chains stored in G1, offloads to G2 and to a G3 volume, removals,
 * accesses, blocks shared with other workers), encodes them with the wire
 * codec and publishes them like a publisher would. It answers resync
 * requests with chunked snapshots and compares an advisor database with its
 * set, block for block and tier for tier. No advisor code is used here. */
#ifndef KVP_TEST_WORKER_H
#define KVP_TEST_WORKER_H

#include <nats/nats.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tw_s tw_t;

/* seed drives every random choice; shared blocks come from a pool that is
 * the same for every worker. */
tw_t *tw_create(const char *ns, const char *worker, uint32_t dp_rank, uint64_t epoch,
                uint64_t seed);
void tw_destroy(tw_t *w);

/* The next batch of nevents random events, applied to the model. *buf is
 * owned by w and valid until the next call. Returns 0 or a KVP_E code. */
int tw_batch(tw_t *w, int nevents, const uint8_t **buf, size_t *len);

/* An empty batch (heartbeat) carrying the next event id. */
int tw_heartbeat(tw_t *w, const uint8_t **buf, size_t *len);

/* The worker restarts: new epoch, event ids from 1, G1/G2 sets empty. */
void tw_restart(tw_t *w, uint64_t epoch);

/* Publishes a buffer on kvplane.ev.<ns>.<worker>: through JetStream with an
 * ack when js is set, core NATS otherwise. Returns 0 or -1. */
int tw_publish(tw_t *w, natsConnection *nc, jsCtx *js, const uint8_t *buf, size_t len);

/* Publishes a Snapshot of every tier, chunk_max hashes per chunk, one chunk
 * per batch. Returns 0 or -1. */
int tw_publish_snapshot(tw_t *w, natsConnection *nc, jsCtx *js, size_t chunk_max);

/* Total locations in the model. */
size_t tw_size(const tw_t *w);

/* Compares the block_locations rows of this worker in db with the model.
 * Returns 0 when equal; otherwise -1 with why set. */
int tw_check_db(const tw_t *w, sqlite3 *db, char *why, size_t whylen);

/* True when block hash is in the model's tier. */
int tw_has(const tw_t *w, int tier, uint64_t hash);

/* Writes up to cap hashes of the model's tier, in insertion-ish order, and
 * returns how many the tier holds. */
size_t tw_hashes(const tw_t *w, int tier, uint64_t *out, size_t cap);

const char *tw_name(const tw_t *w);

#endif
