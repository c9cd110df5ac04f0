/* The tiering engine: the advisor's G3/G4 volumes, and the moves the policy
 * (policy.h) plans between them, carried out off the loop thread and
 * journaled in the migrations table (DESIGN.md, "Migrations").
 *
 * Each round (a timer on the advisor's loop) builds the candidates from the
 * index (every G3/G4 location in a configured volume; a volume's fill is the
 * bytes the index places in it over its configured capacity), plans, and
 * hands one job on libuv's thread pool, in priority order, the prefetches
 * behind the G4 hits reported since the last round (kvp__tier_engine_hit),
 * then demotions for space, promotions and evictions: up to max_moves and,
 * with [tiering] max_bytes_per_s, what a token bucket lets through. One job
 * runs at a time; within it, moves into different volumes run in parallel
 * on up to [tiering] max_parallel threads, one move per destination volume
 * at a time. The job journals each move (queued
 * -> copying -> committed, or failed with the error), copies the block (read and verified from the
 * source, written to the destination, read back and verified there), and
 * returns; every 64 moves or 100 ms it journals the outcomes so far and
 * hands them to the loop (a uv_async), so the index sees a long job's
 * progress while it runs. Back on the loop, a committed move adds the destination location
 * to the index (worker "_advisor"); after the grace period a later job
 * deletes the source object (journal: source_deleted) and the loop removes
 * the source location. An eviction deletes the object and its location.
 *
 * Between G3 and G4 a block has one copy: a round finds the blocks in a G3
 * volume and a G4 one (a worker offloaded to G3 a block the advisor had
 * moved to G4) and its job deletes one copy, journaled as an eviction
 * (redundant): the G3 copy, unless a G3 descendant with no G4 copy needs
 * it to keep its prefix whole in G3, then the G4 copy.
 *
 * With [tiering] scrub_interval, one volume per interval, in turn, gets a
 * rate-limited pass on a thread of its own (scrub.c): locations without an
 * object are dropped and announced; objects without a location are adopted
 * or deleted when the volume's next pass finds them orphaned still; with
 * scrub_verify, every object is read back and a corrupt one quarantined.
 *
 * After a crash, open reads the journal: a move that did not commit is
 * failed ("interrupted"), its partial destination deleted; a committed move
 * whose source was not deleted gets its destination location back and its
 * source deleted after the grace period. A move finished shortly before the
 * crash (its source deleted) may have changed the index after the last
 * flush: open looks at the moves finished since that flush took its changes
 * (meta prepared_ms) and records or drops locations by what the volumes
 * hold (tested by tier_kill: kill -9 at random moments, then no block lost
 * or in two volumes, and the database equal to the volumes). A block is in
 * at least one volume with verified bytes at every moment.
 *
 * Known gap: after a crash, JetStream may replay a worker's Stored G3 for a
 * block the engine moved and whose source it deleted before the database
 * recorded it; that location is stale until a worker reads the block (it
 * falls back to G4) or the engine plans a move of it (a demotion that
 * finds no source drops the location).
 *
 * Threads: everything here runs on the advisor's loop thread except the
 * job, which uses only its own copy of the moves, the volumes (thread-safe
 * per handle) and its own SQLite connection.
 *
 * Every committed move is published as worker "_advisor" (Stored in the
 * destination; Removed from the source once it is deleted; Removed for an
 * eviction), through a publisher on the advisor's NATS settings, so workers
 * and routers learn locations from the same stream. The advisor applies its
 * moves to its index directly as well; its own events coming back through
 * the stream change nothing. */
#ifndef KVP_TIER_ENGINE_H
#define KVP_TIER_ENGINE_H

#include <stdint.h>
#include <uv.h>

#include "index/index.h"
#include "tier/opts.h"

typedef struct kvp__tier_engine_s kvp__tier_engine_t;

typedef struct kvp__tier_stats_s {
  uint64_t rounds, demoted, evicted, sources_deleted, failed;
  uint64_t bytes_moved;
  uint64_t bytes_tiers[5][5]; /* bytes_moved by [source tier][destination tier] */
  uint64_t promoted;          /* G4 -> G3 moves committed, prefetches included */
  uint64_t prefetched;        /* of which prefetches of a prefix hit in G4 */
  uint64_t throttled;         /* planned moves left for later rounds by the bytes/s throttle */
  uint64_t hits_dropped;      /* G4 hits past KVP__TIER_HITS_MAX between two rounds */
  uint64_t events_published;  /* moves announced as worker _advisor */
  uint64_t events_dropped;    /* announcements the publisher refused */
  uint64_t skipped;           /* moves not tried: a volume went offline during their job */
  uint64_t quarantined;   /* copies that failed verification, deleted and their location dropped */
  uint64_t lost;          /* of which the block's only copy */
  uint64_t batches;       /* batches of outcomes applied to the index while their job ran */
  uint64_t redundant;     /* copies deleted because the block was in both G3 and G4 */
  uint64_t scrubs;        /* volumes listed by the scrub */
  uint64_t scrub_objects; /* objects they held */
  uint64_t scrub_missing; /* locations without an object: dropped and announced */
  uint64_t scrub_orphans; /* objects without a location, counted when first found */
  uint64_t orphans_deleted; /* of which deleted, still orphaned at the volume's next scrub */
  uint64_t orphans_adopted; /* of which adopted: valid frame, a block the index wants */
  uint64_t scrub_verified;  /* objects the scrub read back (scrub_verify) */
  uint64_t scrub_verified_bytes;
  uint64_t scrub_corrupt; /* of which failed the frame's checks: quarantined */
  uint64_t scrub_ms;      /* time the finished passes took */
  int scrub_running;      /* 1 while a pass runs */
  char scrub_volume[64];  /* the volume of the running or last pass */
  uint64_t scrub_progress_objects, scrub_progress_verified; /* the running pass so far */
  uint64_t parallel_peak;   /* most moves in flight at once ([tiering] max_parallel) */
  uint64_t lane_peak;       /* most moves in flight into one volume at once (1) */
  uint64_t compactions;     /* compaction runs that reclaimed space ([tiering] compact_ratio) */
  uint64_t compacted_bytes; /* dead bytes they reclaimed */
  uint64_t compact_failed;  /* compaction runs that failed */
  uint64_t pins;            /* hashes an operator pinned */
  uint64_t pinned_blocks;   /* they and their ancestors: never demoted or evicted */
  uint64_t operator_ops;    /* operator moves and deletes taken into rounds */
  /* Partitioned, with the namespace's lease (KVP__TIER_NAMESPACE): objects
   * an unpartitioned deployment left under the key namespace <ns>. */
  uint64_t legacy_deleted;       /* deleted by the scrub */
  uint64_t legacy_deleted_bytes; /* their bytes, as the listing gave them */
  uint64_t legacy_failed;        /* deletes that failed (tried again at a later pass) */
} kvp__tier_stats_t;

/* Per volume, as the last round saw it. */
typedef struct kvp__tier_vol_stats_s {
  char name[64];
  int tier;
  uint64_t capacity, used; /* used: bytes the index places there (fill = used / capacity) */
  uint64_t blocks;         /* blocks the index places there */
  uint64_t moved_in, moved_out, bytes_in, bytes_out, evicted;
  uint64_t failed_full;   /* moves into it refused for space (then a backoff of 30 s, doubling) */
  uint64_t failed_other;  /* moves out of it that failed otherwise */
  uint64_t missing;       /* blocks the index placed there that were not (locations dropped) */
  uint64_t quarantined;   /* its copies that failed verification (deleted, locations dropped) */
  uint64_t queued;        /* moved blocks whose source copy waits for the grace period */
  uint64_t above_high_ms; /* G3: time its fill was above the high watermark, by round */
  uint64_t above_high_max_ms; /* ... the longest stretch of it */
  int backoff;                /* 1 while no moves go into it or out of it */
  int offline;                /* 1 while its identity is gone (KVP_EOFFLINE) */
  uint64_t dead_bytes;        /* its plugin's garbage at the last look (compactable volumes) */
  uint64_t store_bytes;       /* the bytes its plugin holds, live and dead, then */
  uint64_t compacted_bytes;   /* dead bytes compaction reclaimed there */
  uint64_t pinned_bytes;      /* bytes of pinned blocks there */
} kvp__tier_vol_stats_t;

/* Fills up to cap volumes' figures; returns how many volumes there are. */
size_t kvp__tier_engine_volumes(const kvp__tier_engine_t *e, kvp__tier_vol_stats_t *out,
                                size_t cap);

/* Opens the configured volumes (a volume that fails to open is an error
 * naming it), records their tier and capacity in the volumes table, and
 * recovers unfinished moves from the journal. Returns 0, a volume's error,
 * KVP_EDB or KVP_ENOMEM; err says which. */
int kvp__tier_engine_open(const kvp__tier_opts_t *o, uv_loop_t *loop, kvp__index_t *ix,
                          kvp__tier_engine_t **out, char *err, size_t errlen);

/* Starts the rounds. */
void kvp__tier_engine_start(kvp__tier_engine_t *e);

/* Stops the rounds; done(ctx) is called on the loop once no job runs (at
 * once when none does). */
void kvp__tier_engine_stop(kvp__tier_engine_t *e, void (*done)(void *ctx), void *ctx);

/* A worker read hash from G4 (an Accessed event): the next round prefetches
 * its descendants in G4 to G3. Up to KVP__TIER_HITS_MAX hits wait for a
 * round; more are counted (hits_dropped) and ignored. Loop thread. */
#define KVP__TIER_HITS_MAX 1024
void kvp__tier_engine_hit(kvp__tier_engine_t *e, uint64_t hash);

/* A worker read hash from tier (3 or 4): the policy's on_access hook hears
 * it at once (lfu counts it, s3fifo marks it). Loop thread. */
void kvp__tier_engine_access(kvp__tier_engine_t *e, uint64_t hash, int tier);

/* Runs one round now (tests). */
void kvp__tier_engine_round(kvp__tier_engine_t *e);

/* 1 while a job runs on the thread pool or a scrub pass runs. */
int kvp__tier_engine_busy(const kvp__tier_engine_t *e);

void kvp__tier_engine_stats(const kvp__tier_engine_t *e, kvp__tier_stats_t *st);

/* Operator controls (control.c), loop thread; err names the cause.
 *
 * pin (pin 1) or unpin (0) hashes, each the last block of a prefix: a
 * pinned block and its ancestors are never demoted or evicted. Pins are in
 * the database (pins table, note optional) and survive a restart. A pin
 * that would put a volume's pinned bytes over its capacity is refused:
 * KVP_ENOSPC naming the volume. *changed: pins added or removed.
 *
 * move hashes to a volume of tier (3 or 4; volume NULL or "": the one with
 * the most room), queued for the next round (started now when no job
 * runs): journaled, verified and announced like every move. A block
 * already in that tier, unknown, or in no volume is skipped.
 *
 * drop (delete) hashes from the engine's volumes of tier (0: G3 and G4)
 * as evictions, queued the same way, and with them the prefix's
 * continuations in those volumes: the blocks below the prefix's last
 * block (continuations.c says which blocks end a prefix), which no match
 * would reach any more. KVP_EBUSY, nothing queued, when a requested block
 * is pinned (a pinned continuation pins the prefix: its ancestors).
 *
 * Both answer from the index as it stands at the call. A block the
 * running job copies is still where it was there: its move or delete is
 * queued whatever the index says (in_flight), and every queued move or
 * delete is resolved again by the round that takes it, once no job runs,
 * against where the block is then (a delete takes every copy in the
 * tiers asked; a move of a block already there is dropped). */
typedef struct kvp__tier_ctl_counts_s {
  size_t queued;        /* moves queued; for a delete, the copies it would delete now */
  size_t skipped;       /* requested blocks with nothing to do (or a move or delete waiting) */
  size_t continuations; /* delete: blocks below the prefix queued with it */
  size_t in_flight;     /* blocks the running job copies: decided after it */
} kvp__tier_ctl_counts_t;

int kvp__tier_engine_pin(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int pin,
                         const char *note, size_t *changed, char *err, size_t errlen);
int kvp__tier_engine_move(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                          const char *volume, kvp__tier_ctl_counts_t *c, char *err, size_t errlen);
int kvp__tier_engine_drop(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                          kvp__tier_ctl_counts_t *c, char *err, size_t errlen);
/* 1 when hash is pinned (itself or as an ancestor of a pin). */
int kvp__tier_engine_pinned(const kvp__tier_engine_t *e, uint64_t hash);

/* Live rebalancing (parts.c): the engine starts (add 1) or stops (add 0)
 * tiering partition p of a partitioned advisor. Stopping leaves p's
 * objects alone (the next owner's; its pending source deletes are
 * forgotten) and its scrub skips p's key namespace; starting opens p's
 * advisor worker's publisher. Either changes the shares of G4 volumes.
 * add -1 stops too but keeps p's pending source deletes, done once p is
 * tiered here again (a partition whose tiering lease is waited for).
 * The engine must be idle (kvp__tier_engine_busy 0). Returns 0, KVP_EBUSY,
 * KVP_EINVAL (not partitioned), or a publisher's error with err. */
int kvp__tier_engine_partition(kvp__tier_engine_t *e, uint32_t p, int add, char *err,
                               size_t errlen);

/* The partitions the engine tiers now (not retired), up to cap of them
 * into parts; returns how many there are. 0 when not partitioned. */
size_t kvp__tier_engine_tiered(const kvp__tier_engine_t *e, uint32_t *parts, size_t cap);

/* Closes the volumes; the engine must be stopped and idle. NULL is accepted. */
void kvp__tier_engine_close(kvp__tier_engine_t *e);

/* Unpartitioned with leases (opts.leased): the publisher of worker
 * _advisor, which announces the moves, is open only while this advisor
 * tiers (holds the namespace's lease): on 1 opens it (a new epoch), on 0
 * closes it (the engine must be idle: KVP_EBUSY). A waiting advisor's
 * publisher would send heartbeats under its own epoch and make the
 * holder's announcements stale. Rounds wait for it (the gate). Returns 0,
 * KVP_EINVAL (partitioned: kvp__tier_engine_partition does it), or the
 * publisher's error with err. announcing: whether it is open. Loop
 * thread. */
int kvp__tier_engine_announce(kvp__tier_engine_t *e, int on, char *err, size_t errlen);
int kvp__tier_engine_announcing(const kvp__tier_engine_t *e);

/* The most objects of its part a scrub pass lists (SCRUB_MAX_KEYS, 4M,
 * unless set: tests set a few). Past it the pass goes on with what it
 * listed: it finds orphans and corrupt copies among them, and drops no
 * location (an object not listed is not known to be missing). */
void kvp__tier_engine_set_scrub_max_keys(kvp__tier_engine_t *e, size_t n);

/* A gate asked on the job's threads before each op on a partition's
 * objects (moves, evictions, source and orphan deletes), with the
 * partition (unpartitioned: 0, the namespace); 0 skips the op (counted as
 * skipped; a source delete is due again). The advisor's tiering leases
 * (advisor/lease.h): an advisor that lost a partition's lease makes no
 * further move of it even within a running job (a move already copying
 * finishes). Unpartitioned, the gate is asked at each round's start too,
 * and a round it refuses does nothing. fn NULL: no gate.
 *
 * Partitioned, it is asked for KVP__TIER_NAMESPACE too: at each scrub
 * pass's start (loop) and before each delete (the pass's thread). While
 * it says 1, a pass also deletes every object its listing of the volume
 * found under the key namespace <ns> itself (legacy.c): what an
 * unpartitioned tiering advisor left there before the deployment was
 * partitioned, which no partitioned advisor's index knows or reads (their
 * objects are under <ns>-p<P>). The advisor answers it with the
 * namespace's lease, which no unpartitioned tiering advisor holds then. */
#define KVP__TIER_NAMESPACE UINT32_MAX

typedef int (*kvp__tier_gate_fn)(void *ctx, uint32_t partition);
void kvp__tier_engine_set_gate(kvp__tier_engine_t *e, kvp__tier_gate_fn fn, void *ctx);

/* The sweep of <ns> (KVP__TIER_NAMESPACE), loop thread: reset starts it
 * again (the advisor took the namespace's lease again); swept is 1 once
 * every online volume (at least one) had a pass, started after the reset,
 * that listed it whole while the gate said 1 and deleted all it found
 * under <ns>, 2 when no volume is online (nothing this engine can sweep),
 * else 0. The advisor then hands the namespace's lease on to an advisor
 * with other volumes. */
void kvp__tier_engine_legacy_reset(kvp__tier_engine_t *e);
int kvp__tier_engine_legacy_swept(const kvp__tier_engine_t *e);

#endif
