/* The block manager's G3 and G4 (tiers.c): blocks evicted from G2 are
 * offloaded to an attached G3 volume by worker threads, and a prefix lookup
 * that misses G1 and G2 reads the next blocks from G3, then G4, verified.
 *
 * Threads: kvp__tiers_victim, kvp__tiers_read, kvp__tiers_snapshot and the
 * counters run on the scheduler thread (the manager's owner); the offload
 * workers put blocks, then record them in the registry and emit Stored G3
 * events through the sink (the publisher is thread-safe). The registry and
 * the job queue are under one mutex; the counters are atomics. */
#ifndef KVP_BLOCK_TIERS_H
#define KVP_BLOCK_TIERS_H

#include <stdint.h>

#include "kvplane/blockmgr.h"

typedef struct kvp__tiers_s kvp__tiers_t;

/* Starts the offload workers for o->g3 (may be NULL: G4 reads only).
 * Returns 0, KVP_EINVAL (no volume at all), KVP_ENOTSUP (G1 is not in
 * system memory: onboarding reads straight into G1 blocks) or KVP_ENOMEM. */
int kvp__tiers_create(const kvp_blockmgr_opts_t *o, size_t block_bytes, kvp__tiers_t **out);

/* Finishes the queued offloads (their events are emitted), stops the
 * workers and frees everything; NULL is accepted. */
void kvp__tiers_destroy(kvp__tiers_t *t);

/* A G2 block about to be overwritten (the pool's victim hook, with its
 * record and its bytes): queued for G3 when it passes the frequency filter
 * and the queue has room (else counted). */
void kvp__tiers_victim(void *ctx, const kvp_pool_evicted_t *ev, const void *bytes);

/* Reads block hash from G3 (when this worker put it there), else G4, else
 * G3 again for a block this worker did not put there (the advisor promoted
 * it), into dst (block_bytes). Returns the tier it came from (3 or 4), or 0
 * on a miss: not there, gone (the advisor moved it: forgotten here), or
 * corrupt (counted, never served). */
int kvp__tiers_read(kvp__tiers_t *t, uint64_t hash, void *dst);

/* The G3 volume's name ("" without one), for events. */
const char *kvp__tiers_g3_name(const kvp__tiers_t *t);
const char *kvp__tiers_g4_name(const kvp__tiers_t *t);

/* The hashes (and parents) this worker holds in G3, malloc'd, as
 * kvp_blockmgr_snapshot. */
int kvp__tiers_snapshot(kvp__tiers_t *t, uint64_t **hashes, uint64_t **parents, size_t *n);

/* Replaces the sink the workers emit to. */
void kvp__tiers_set_sink(kvp__tiers_t *t, kvp_event_sink_t sink);

/* Waits for the queued offloads, then deletes every block this manager put
 * in G3 and forgets them (kvp_blockmgr_reset). */
void kvp__tiers_clear(kvp__tiers_t *t);

/* Waits until every queued offload is done (tests, shutdown). */
void kvp__tiers_drain(kvp__tiers_t *t);

void kvp__tiers_stats(const kvp__tiers_t *t, kvp_blockmgr_stats_t *s);

#endif
