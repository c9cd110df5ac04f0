/* What the tiering engine's files share (engine.h is the interface): its
 * state, the job's op list and pending sources, and the helpers more than
 * one file calls. Private to src/tier/engine*.c:
 *   engine.c       rounds (candidates, plan, prefetch, throttle), start,
 *                  stop, figures, close: the loop thread;
 *   engine_job.c   the job on libuv's thread pool (copies, verification,
 *                  the journal's transactions) and its completion on the
 *                  loop thread (index, events, counters);
 *   engine_open.c  opening the volumes, recovery from the journal and the
 *                  reconciliation of moves finished before a crash: the
 *                  loop thread, before the rounds start;
 *   locations.c    a block's locations in the index, and dropping them;
 *   scrub.c        the scrub: listing and verifying a volume (its own
 *                  thread, rate-limited) and comparing it with the index
 *                  (loop); its deletes, adoptions and quarantines go to
 *                  the job as ops;
 *   legacy.c       partitioned: deleting what an unpartitioned deployment
 *                  left under the key namespace <ns> (the scrub's passes);
 *   compact.c      compaction of volumes whose plugin reports dead bytes;
 *   control.c      the operator's pins, moves and deletes;
 *   continuations.c the blocks below a prefix an operator deletes;
 *   parts.c        partitioned tiering: the partitions the engine tiers,
 *                  each with its key namespace, advisor worker and
 *                  publisher, and the filter from a location's worker to
 *                  its partition.
 * Calls go one way: engine.c queues the job of engine_job.c; all three
 * call locations.c; engine_job.c and engine_open.c call nothing in
 * engine.c (the job reports back through on_idle). */
#ifndef KVP_TIER_ENGINE_IMPL_H
#define KVP_TIER_ENGINE_IMPL_H

#include <stdint.h>
#include <uv.h>

#include "common/map64.h"
#include "index/index.h"
#include "kvplane/publisher.h"
#include "kvplane/subjects.h"
#include "kvplane/volume.h"
#include "store/journal.h"
#include "tier/engine.h"
#include "tier/policy.h"

#define ADVISOR_WORKER KVP_ADVISOR_WORKER
/* Backoff after a failed move, per volume: BACKOFF_BASE_MS doubled for each
 * failure in a row, at most BACKOFF_CAP_MS; a full volume (KVP_ENOSPC)
 * starts at BACKOFF_FULL_MS. */
#define BACKOFF_BASE_MS 1000
#define BACKOFF_FULL_MS 30000
#define BACKOFF_CAP_MS 300000
/* A volume's warnings: one line per this interval, with the count of the
 * ones suppressed. */
#define LOG_INTERVAL_MS 10000
/* Kinds of ops other than moves (kvp__tier_kind_t, >= 0). */
#define OP_SOURCE_DELETE (-1) /* a moved block's source, after the grace period */
#define OP_ORPHAN (-3)        /* delete or adopt an object no location names (scrub.c) */
#define OP_SCRUB_BAD (-4)     /* quarantine a copy the scrub found corrupt (scrub.c) */
#define OP_COMPACT (-5)       /* compact a volume while worth it (compact.c) */
/* Most objects one scrub lists; past it, the scrub drops no location. */
#define SCRUB_MAX_KEYS (1u << 22)
/* Most objects under <ns> one pass deletes (16 bytes each while it runs);
 * the rest go at the volume's later passes. */
#define LEGACY_MAX_KEYS (1u << 20)
/* A job hands its outcomes to the loop every BATCH_MOVES moves or BATCH_MS,
 * whichever comes first. */
#define BATCH_MOVES 64
#define BATCH_MS 100

typedef struct vol_s {
  kvp_volume_t *v;
  char name[64];
  int tier;
  uint64_t capacity;
  uint64_t capacity_whole;   /* partitioned, G4: the volume's, of which capacity is the share */
  uint16_t id;               /* the index's volume id */
  uint64_t backoff_until_ms; /* no moves into it before */
  uint64_t out_until_ms;     /* no moves out of it before (its reads failed) */
  uint32_t fails;            /* failures in a row, for the backoff's doubling */
  int offline;               /* its identity is gone (KVP_EOFFLINE): no moves in or out */
  int offline_job;           /* the job saw KVP_EOFFLINE: it skips the volume (atomic) */
  uint64_t log_ms;           /* when its last warning was written */
  uint64_t suppressed;       /* warnings not written since */
  kvp__tier_vol_stats_t st;  /* name, tier, capacity in st too */
  kvp__map64_t orphans;      /* objects its last scrub found without a location */
  int legacy_seen;       /* a pass found objects under <ns> here (legacy.c): log when none left */
  uint64_t legacy_swept; /* the sweep (legacy_gen) in which a pass left nothing under <ns> */
  int above_high;        /* the last round found its fill above the high watermark */
  uint64_t above_stretch_ms; /* for how long, in rounds, so far */
  int compactable;           /* its plugin compacts and reports garbage (ABI 2) */
  uint64_t compact_due_ms;   /* its garbage is looked at next then */
} vol_t;

/* A partition the engine tiers (parts.c). Not partitioned: one part, the
 * engine's namespace and worker _advisor. Partitioned: one per owned
 * partition p, its objects under key namespace <ns>-p<p> in every volume
 * and its moves announced (and held in the index) as its advisor worker
 * _advisor-p<p>-<k>, whose events land in p's stream. */
typedef struct part_s {
  uint32_t p;
  char ns[KVP_PARTITION_NS_MAX + 1];
  char worker[64];
  uint16_t worker_id;
  kvp_publisher_t *pub;     /* NULL: moves are not announced */
  struct part_snap_s *snap; /* its publisher's snapshot context (parts.c), with pub */
  int retired;              /* dropped by a live rebalance: its objects are the next owner's */
} part_t;

/* One unit of work for the job, and its outcome. */
typedef struct op_s {
  int kind;      /* kvp__tier_kind_t, or OP_* */
  uint16_t part; /* the part (e->parts) of the location moved: its key namespace */
  uint64_t hash, parent, bytes;
  uint32_t tokens;
  int has_parent;
  uint32_t from, to; /* volume indexes; to unused for evict/delete */
  int ctl_tier;      /* an operator's delete in opq: from G3 (3), G4 (4) or both (0) */
  int64_t journal_id;
  int rc;
  int src_missing;      /* a demotion's source was not in its volume */
  int skipped;          /* not tried: one of its volumes went offline during the job */
  int quarantined;      /* its source failed verification: deleted, never tried again */
  int redundant;        /* an eviction of a block's second copy between G3 and G4 */
  int adopt;            /* an orphan the index wants: adopted when its frame is valid */
  int adopted;          /* ... and it was: the loop records its location */
  size_t pend;          /* a source delete (kind -1): its entry in pend */
  uint64_t dead, total; /* a compaction: the volume's garbage after it */
  uint32_t blame;       /* the volume whose operation failed */
  char err[256];
} op_t;

/* A committed move whose source waits for the grace period. */
typedef struct pend_s {
  uint64_t hash, due_ms;
  uint32_t from;
  uint16_t part; /* its part: the key namespace */
  int deleting;  /* handed to the running job */
  int done;      /* its delete succeeded: removed at the end of the job's completion */
  int64_t journal_id;
} pend_t;

struct kvp__tier_engine_s {
  uv_loop_t *loop;
  kvp__index_t *ix;
  char ns[64], db_path[512];
  kvp__tier_params_t prm;
  kvp__tier_pol_t *pol; /* [tiering] policy, with its state */
  uint64_t interval_ms, grace_ms;
  size_t max_moves;
  size_t max_parallel;          /* moves in flight at once, each into a different volume */
  uint32_t par_peak, lane_peak; /* most moves in flight at once, and into one volume (atomic) */
  double max_bytes_per_s;       /* 0: no throttle */
  double budget;                /* bytes the throttle lets through now (may go negative) */
  uint64_t budget_ms;           /* when the budget was last refilled */
  uint64_t hits[KVP__TIER_HITS_MAX]; /* G4 hits since the last round (kvp__tier_engine_hit) */
  size_t nhits;
  size_t round_taken; /* moves taken this round (max_moves) */
  uint64_t round_ms;  /* when the last round ran */
  vol_t *vols;
  size_t nvols;
  part_t *parts; /* the partitions tiered (parts.c); nparts >= 1 once open */
  size_t nparts;
  uint32_t partitions;             /* the deployment's count; 0: not partitioned */
  const kvp_nats_opts_t *pub_nats; /* borrowed: the publishers of parts added later */
  int pub_js;
  char pub_stream[96];
  int32_t *wpart;         /* index worker id -> part + 1, -1 not tiered here, 0 not looked up yet */
  int leased;             /* opts.h: recovery deletes no partial copy; a part's
                           * publisher is open only while it is tiered here */
  kvp__tier_gate_fn gate; /* partitioned: may an op of a partition run now (engine.h) */
  void *gate_ctx;
  size_t wpart_cap;
  uint64_t published, publish_errors;
  kvp__journal_t *db; /* the journal's connection: the job's, or the loop's before start */
  uv_timer_t timer;
  int timer_ready, running;
  uint64_t tick_round_ms; /* the loop's time of the last round the timer ran */
  uv_work_t work;
  uv_async_t async; /* the job's batches of outcomes, ready for the loop */
  int async_ready, handles_open;
  op_t *ops;
  size_t nops, ops_cap;
  size_t ready;   /* ops[0, ready) journaled by the job (atomic) */
  size_t applied; /* ops[0, applied) applied to the index by the loop */
  int busy;
  pend_t *pend;
  size_t npend, pend_cap;
  kvp__map64_t pendset; /* hash -> bit mask of the volumes in pend with it (O(1) pending()) */
  void (*on_idle)(void *ctx);
  void *idle_ctx;
  kvp__tier_stats_t st;
  /* The scrub (scrub.c): one volume every scrub_ms, in turn, on its own
   * thread: it lists the volume into keys (its objects in namespace ns)
   * and, with scrub_verify, reads each one back into bad (the corrupt
   * ones), within scrub_files_per_s and scrub_bytes_per_s; the loop then
   * compares the listing with the index. */
  uint64_t scrub_ms, scrub_due_ms, scrub_t0;
  uint64_t scrub_files_per_s, scrub_bytes_per_s; /* 0: no limit */
  int scrub_verify;
  size_t scrub_next;   /* the (volume, part) scrubbed next: volume * nparts + part */
  uint32_t scrub_vol;  /* the volume of the pass running */
  uint16_t scrub_part; /* ... and the part whose key namespace it lists */
  int scrub_running;   /* loop: a pass's thread runs, or its outcome waits for the loop */
  int scrub_stop;      /* atomic: the thread stops at its next object */
  int scrub_done;      /* atomic: the thread is finished (then uv_async_send) */
  uv_thread_t scrub_thread;
  int scrub_rc;
  char scrub_err[256];
  uint64_t scrub_listed, scrub_lbytes, scrub_verified, scrub_vbytes; /* atomic: the pass so far */
  kvp__journal_t *sdb;   /* the scrubs table's connection (loop thread) */
  int64_t scrub_row;     /* the pass's row, or -1 */
  uint64_t scrub_row_ms; /* when it was last updated */
  uint64_t scrub_missing_pass, scrub_orphans_pass, scrub_confirmed_pass;
  /* The objects under the key namespace <ns> the pass deletes (engine.h,
   * KVP__TIER_NAMESPACE; legacy.c): legacy is set by the loop at the pass's
   * start, the rest is the pass thread's until it is joined. */
  int legacy;                 /* the pass deletes them (the namespace's lease was held) */
  uint64_t legacy_gen;        /* the sweep now (kvp__tier_engine_legacy_reset), from 1 */
  uint64_t legacy_pass_gen;   /* ... when the pass started */
  uint64_t *legacy_keys;      /* hash, bytes, hash, bytes, ... as listed */
  size_t nlegacy, legacy_cap; /* entries (pairs), capacity in uint64_t */
  int legacy_cut;             /* more than LEGACY_MAX_KEYS listed: the rest at later passes */
  int legacy_whole; /* the pass's listing went to the end (the sweep's, past SCRUB_MAX_KEYS) */
  int legacy_lost;  /* the lease was gone before a delete: the pass stopped deleting */
  uint64_t legacy_deleted, legacy_dbytes, legacy_failed;
  char legacy_err[256];       /* the first failed delete's error */
  kvp__map64_t scrub_touched; /* blocks moved into the pass's volume during it */
  /* Compaction (compact.c): each compactable volume's garbage is looked
   * at every compact_ms; compacted from compact_ratio dead. */
  uint64_t compact_ms;
  double compact_ratio; /* 0: never */
  /* Operator controls (control.c), on the loop thread: ctl_db is the
   * loop's own connection (the journal's is the job's while one runs). */
  kvp__journal_t *ctl_db;
  uint64_t *pins; /* the pinned hashes, as pinned (the pins table) */
  size_t npins, pins_cap;
  kvp__map64_t pinned; /* the pins and their ancestors: never demoted or evicted */
  op_t *opq;           /* operator moves and deletes for the next round: each a block
                        * (hash, kind, to or ctl_tier) resolved against the index when
                        * a round takes it (control.c) */
  size_t nopq, opq_cap;
  kvp__map64_t opset; /* their hashes, until their job is done: busy for the plan */
  uint64_t *keys;
  size_t nkeys, keys_cap;
  size_t scrub_max_keys; /* SCRUB_MAX_KEYS, unless a test set fewer */
  int keys_truncated;
  uint64_t *bad; /* hashes whose frame failed verification in the pass */
  size_t nbad, bad_cap;
  char bad_err[256];
  uint64_t *orphq; /* orphans to delete or adopt next round: hash, volume | adopt << 32, ... */
  size_t norphq, orphq_cap;
  uint64_t *badq; /* corrupt copies to quarantine next round: hash, volume, ... */
  size_t nbadq, badq_cap;
  /* Candidate scratch, reused across rounds. */
  kvp__tier_cand_t *cands;
  size_t ncands, cands_cap;
  uint32_t *tokens;
  size_t tokens_cap;
  uint32_t *dup; /* a G3 candidate's G4 volume + 1 when G4 holds the block too, else 0 */
  size_t dup_cap;
  uint16_t *cpart; /* a candidate's part */
  size_t cpart_cap;
  uint64_t *lru;
  size_t lru_cap;
  kvp__index_loc_t *locs; /* one block's locations (get_block) */
  size_t locs_cap;
};

/* Whether a move copies a block (a demotion, promotion or prefetch), as
 * opposed to deleting one. */
static inline int kvp__tier_is_copy(int kind) {
  return kind == KVP__TIER_DEMOTE || kind == KVP__TIER_PROMOTE || kind == KVP__TIER_PREFETCH;
}

/* The job, queued with uv_queue_work by a round (engine_job.c). */
void kvp__tier_job_work(uv_work_t *req);
void kvp__tier_job_after(uv_work_t *req, int status);
/* The async callback: applies the outcomes the job has journaled so far. */
void kvp__tier_job_progress(uv_async_t *h);

/* Adds a moved block's source, deleted after the grace period, to pend and
 * pendset. Returns 0 or KVP_ENOMEM (the source then stays). (locations.c) */
int kvp__tier_pend_add(kvp__tier_engine_t *e, uint64_t hash, uint64_t due_ms, uint32_t from,
                       uint16_t part, int64_t journal_id);

/* Removes the entries marked done from pend and pendset, in one pass.
 * (locations.c) */
void kvp__tier_pend_compact(kvp__tier_engine_t *e);

/* Looks hash up with all its locations, however many workers hold it, into
 * e->locs. Returns 0 or KVP_ENOENT / KVP_ENOMEM. (locations.c) */
int kvp__tier_get_block(kvp__tier_engine_t *e, uint64_t hash, kvp__index_block_t *b, size_t *n);

/* A warning about volume v, rate-limited per volume (LOG_INTERVAL_MS): a
 * line written says how many were suppressed before it. (locations.c) */
void kvp__tier_vol_warn(vol_t *v, uint64_t now, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Announces a change of o->hash in v as worker _advisor (type
 * KVP_EV_STORED or KVP_EV_REMOVED); counted. (engine_job.c) */
void kvp__tier_publish(kvp__tier_engine_t *e, int type, const vol_t *v, const op_t *o);

/* The scrub (scrub.c), loop thread. queue starts the pass of the next
 * volume when one is due and none runs, and adds to the round's ops the
 * orphans the last passes confirmed (deleted, or adopted) and the corrupt
 * copies they found (quarantined); finish, when the pass's thread is done
 * (kvp__tier_job_progress sees scrub_done), compares its listing with the
 * index; stop ends a running pass and waits for its thread. */
void kvp__tier_scrub_queue(kvp__tier_engine_t *e, uint64_t now);
void kvp__tier_scrub_finish(kvp__tier_engine_t *e);
void kvp__tier_scrub_stop(kvp__tier_engine_t *e);
/* Applies a scrub op's outcome (OP_ORPHAN; OP_SCRUB_BAD goes through the
 * job's quarantine) on the loop. */
void kvp__tier_scrub_applied(kvp__tier_engine_t *e, op_t *o);
/* A move committed hash into volume v: a running pass of v does not take
 * it for missing. */
void kvp__tier_scrub_touched(kvp__tier_engine_t *e, uint64_t hash, uint32_t v);
/* Sleeps until files objects and bytes bytes since t0 are within the
 * scrub's limits, in slices that notice a stop. Returns 1 when stopped. */
int kvp__tier_scrub_pace(kvp__tier_engine_t *e, uint64_t t0, uint64_t files, uint64_t bytes);

/* The sweep of <ns> by a pass (legacy.c): start (loop, at the pass's
 * start) asks the gate for KVP__TIER_NAMESPACE and sets e->legacy; keep
 * (the pass's thread) keeps an object its listing found under <ns>;
 * delete (the pass's thread, after the listing) deletes what was kept
 * while the gate still says 1, within the pace (*files counts on), and
 * returns 0, KVP_ECLOSED when stopped, or KVP_EOFFLINE with scrub_err;
 * done (loop, the thread joined) counts it and logs one line for v;
 * listed_all: the pass listed v whole. */
void kvp__tier_legacy_start(kvp__tier_engine_t *e);
void kvp__tier_legacy_keep(kvp__tier_engine_t *e, uint64_t hash, uint64_t bytes);
int kvp__tier_legacy_delete(kvp__tier_engine_t *e, vol_t *v, uint64_t t0, uint64_t *files,
                            uint64_t bytes);
void kvp__tier_legacy_done(kvp__tier_engine_t *e, vol_t *v, int listed_all);
/* Whether the index places hash in volume v, held by a worker of part
 * (-1: any part). */
int kvp__tier_located(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v, int part);

/* Compaction (compact.c): queue adds an OP_COMPACT per compactable volume
 * due (loop); run is the job's part; apply counts and logs (loop). */
void kvp__tier_compact_queue(kvp__tier_engine_t *e, uint64_t now);
void kvp__tier_compact_run(kvp__tier_engine_t *e, op_t *o);
void kvp__tier_compact_apply(kvp__tier_engine_t *e, const op_t *o);

/* Operator controls (control.c): loading the pins (open), the pinned set
 * rebuilt (each round), the queued ops taken into a round ahead of its
 * plan, and the busy set reset when a job is done. */
int kvp__tier_pins_load(kvp__tier_engine_t *e);
int kvp__tier_pins_rebuild(kvp__tier_engine_t *e);
void kvp__tier_control_take(kvp__tier_engine_t *e);
void kvp__tier_control_done(kvp__tier_engine_t *e);

/* The continuations of a prefix delete of hashes (continuations.c, which
 * says how the prefixes' ends are found): the blocks with a location in
 * tier (0: G3 or G4) below an end, other than the requested ones, deepest
 * first, into *out (malloc'd, NULL when *nout is 0). Returns 0 or
 * KVP_ENOMEM (then none). Loop thread. */
int kvp__tier_continuations(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                            uint64_t **out, size_t *nout);

/* The engine's volume at location (tier, index volume id), or -1 when the
 * engine has none there (G1/G2, or a volume it does not manage).
 * (locations.c) */
long kvp__tier_vol_of(const kvp__tier_engine_t *e, int tier, uint16_t id);

/* Removes every location of hash in (tier, volume) v held by a worker of
 * part (-1: whoever holds it). (locations.c) */
void kvp__tier_drop_locations(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v, int part);

/* Partitioned tiering (parts.c). open builds e->parts from o (registers
 * the advisor workers, opens their publishers on o->nats) and takes each
 * G4 volume's share of its capacity; close closes the publishers. part_of
 * is the partition filter: the part of an index worker, or -1 when the
 * worker is of no partition this engine tiers (its locations are left
 * alone). ns is a part's key namespace. recover_part finds the part of a
 * journal row by the namespace the row records (schema 8), or for an
 * older row (ns NULL) guesses it by where the object is. */
int kvp__tier_parts_open(kvp__tier_engine_t *e, const kvp__tier_opts_t *o, char *err,
                         size_t errlen);
void kvp__tier_parts_close(kvp__tier_engine_t *e);
/* 1 when the engine announces its moves at all (NATS options given). */
int kvp__tier_parts_publish(const kvp__tier_engine_t *e);
/* Answers the resyncs asked of the parts' advisor workers (a consumer
 * that missed events, or joined late): each publisher's snapshot of the
 * G3 and G4 locations its worker holds, per volume. Loop thread. */
void kvp__tier_parts_poll(kvp__tier_engine_t *e);
int kvp__tier_part_of(kvp__tier_engine_t *e, uint16_t worker);
static inline const char *kvp__tier_ns(const kvp__tier_engine_t *e, uint16_t part) {
  return e->parts[part].ns;
}
uint16_t kvp__tier_recover_part(kvp__tier_engine_t *e, const char *ns, uint64_t hash, long from,
                                long to);

#endif
