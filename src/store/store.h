/* Advisor persistence: the SQLite database that operators query
 * (DESIGN.md, "SQL inspection"; docs/sql.md documents every table and view).
 *
 * Write-behind: the index marks changed blocks dirty; kvp__store_flush()
 * writes every dirty block, the worker states and the last applied stream
 * sequence in ONE transaction, so the database always holds a state that
 * matches exactly one stream position. A restart loads that state and resumes
 * the stream right after it: nothing is lost, nothing counted twice.
 *
 * The database runs in WAL mode (readers never block the writer) and is
 * created with mode 0600. The schema is versioned in meta.schema_version; an
 * older database is upgraded on open, a newer one is refused.
 *
 * In parts (store_impl.h says which thread runs each): store_schema.c,
 * store_sqlite.c, store_load.c, store_write.c. */
#ifndef KVP_STORE_STORE_H
#define KVP_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "index/rows.h"

#define KVP__STORE_SCHEMA_VERSION 8

typedef struct kvp__store_s kvp__store_t;

/* Opens (creating with mode 0600 if needed) and upgrades the database at
 * path. Returns 0, KVP_EIO when the file cannot be created, KVP_EDB for a
 * database error or KVP_ENOTSUP for a schema newer than this program; err
 * then says why. */
int kvp__store_open(const char *path, kvp__store_t **out, char *err, size_t errlen);

/* Closes; NULL is accepted. Nothing pending is written: flush first. */
void kvp__store_close(kvp__store_t *st);

/* A row of the workers table: one (worker id, dp rank)'s stream state, as
 * the advisor's ingest keeps it. */
typedef struct kvp__store_worker_s {
  const char *name;
  uint32_t dp_rank;
  uint64_t epoch;
  uint64_t last_event_id;
  uint64_t last_seen_ms;
  int known; /* last_event_id is meaningful */
  int down;
  uint64_t down_at_ms;        /* while down: when it was marked down */
  uint64_t locations_dropped; /* while down: G1/G2 locations that dropped */
} kvp__store_worker_t;

/* Called for each workers row at load; a non-zero return stops the load
 * and is returned by it. */
typedef int (*kvp__store_worker_fn)(void *ctx, const kvp__store_worker_t *w);

/* Loads blocks and locations into an empty ix (from the index snapshot
 * when it is current, else from the rows), hands every workers row to
 * worker_fn (may be NULL), and sets *stream_seq to the committed stream
 * sequence (0 when none). Returns 0, KVP_EDB, KVP_ENOMEM, what worker_fn
 * returned, or KVP_ECORRUPT when a current snapshot turned out corrupt
 * after some of it was loaded: the snapshot is then deleted (the next
 * load reads the rows) and ix must be destroyed. A snapshot found corrupt
 * before any block went in is skipped for the rows. */
int kvp__store_load(kvp__store_t *st, kvp__index_t *ix, kvp__store_worker_fn worker_fn, void *ctx,
                    uint64_t *stream_seq);

/* The index snapshot (store_snapshot.c; docs/sql.md, index_snapshot): the
 * whole index in large chunks, tagged with meta.generation, which every
 * transaction that changes the blocks or block_locations rows bumps.
 * kvp__store_load reads it instead of the rows when its tag equals the
 * generation (no change since), and the rows otherwise.
 *
 * Writes ix as the snapshot in one transaction (the old one is replaced).
 * The index must hold exactly what the rows hold: nothing dirty (else
 * KVP_EBUSY) and no flush running; call it after a flush that committed,
 * on the index owner's thread. Returns 0, KVP_EBUSY, KVP_ENOMEM or KVP_EDB
 * (rolled back). *bytes (may be NULL) receives the bytes written. */
int kvp__store_snapshot_write(kvp__store_t *st, const kvp__index_t *ix, uint64_t *bytes);

/* meta.generation. Returns 0 or KVP_EDB. */
int kvp__store_generation(kvp__store_t *st, uint64_t *generation);

/* Whether kvp__store_load may read a current snapshot (default on; off:
 * always the rows, for the benchmark's row path and the tests). */
void kvp__store_use_snapshot(kvp__store_t *st, int on);

/* Whether a load of the rows may read them on threads of their own, each
 * over its own connection (default on; off: serially on the store's
 * connection, what a load falls back to when a reader cannot start: for
 * the benchmark's baseline and the tests). */
void kvp__store_use_readers(kvp__store_t *st, int on);

/* The size the snapshot's chunks are cut at, about (default 8 MiB; 0: the
 * default): the tests cover several chunks with few blocks. */
void kvp__store_snapshot_chunk_bytes(kvp__store_t *st, size_t bytes);

/* Whether the last kvp__store_load read the snapshot. */
int kvp__store_loaded_snapshot(const kvp__store_t *st);

/* Progress of kvp__store_load: blocks loaded (with their locations) of the
 * total, every 65,536 blocks and once at the end. Also of
 * kvp__store_snapshot_write: blocks written of the index's, after each
 * chunk (about 8 MiB). Called on the loading or writing thread. */
typedef void (*kvp__store_progress_fn)(void *ctx, uint64_t done, uint64_t total);
void kvp__store_on_progress(kvp__store_t *st, kvp__store_progress_fn fn, void *ctx);

/* Writes the dirty blocks of ix, the worker rows workers[0..nworkers) and
 * stream_seq in one transaction. *nblocks (may be NULL) receives the number
 * of blocks written. On failure the transaction is rolled back, the dirty
 * marks are restored and KVP_EDB is returned. */
int kvp__store_flush(kvp__store_t *st, kvp__index_t *ix, const kvp__store_worker_t *workers,
                     size_t nworkers, uint64_t stream_seq, size_t *nblocks);

/* The same flush in parts, so that the write can run off the loop thread
 * (the daemon queues it on libuv's thread pool). The store writes plain
 * rows; it does not read the index for them:
 *   the caller (index owner's thread) takes the index's rows
 *     (kvp__index_rows_take, from kvp__store_volumes_written);
 *   prepare  (index owner's thread) takes them over with the workers' rows
 *            and the queued history samples;
 *   write    (any thread, one at a time per store) runs the transaction;
 *   after a failed write the caller gives the rows back to the index
 *     (kvp__index_rows_restore(ix, kvp__store_flush_rows(fl))); then, or
 *     after a successful write, it frees the flush.
 * prepare returns 0, or KVP_ENOMEM with rows left to the caller; write
 * returns 0 or KVP_EDB (rolled back). The rows borrow names from the index:
 * free the flush before the index. */
typedef struct kvp__store_flush_s kvp__store_flush_t;

/* One sample of a tier's or a volume's occupancy, a row of tier_history:
 * volume "" is the tier's total; capacity 0 is unknown (NULL). */
typedef struct kvp__store_hist_row_s {
  uint64_t t_ms;
  int tier;
  char volume[64];
  uint64_t blocks, bytes, capacity;
} kvp__store_hist_row_t;

/* Most samples waiting for a flush: past it the oldest are dropped (a
 * database that cannot be written loses history, not memory). */
#define KVP__STORE_HIST_PENDING_MAX 4096

/* Queues rows for the next flush (prepare takes them; a failed write drops
 * them, counted). Rows older than keep_ms before the newest one are deleted
 * by that flush (keep_ms 0: kept forever). Index owner's thread. Returns 0
 * or KVP_ENOMEM. */
int kvp__store_history_add(kvp__store_t *st, const kvp__store_hist_row_t *rows, size_t n,
                           uint64_t keep_ms);

/* Samples dropped: queued past KVP__STORE_HIST_PENDING_MAX, or in a failed
 * write. Index owner's thread. */
uint64_t kvp__store_history_dropped(const kvp__store_t *st);

int kvp__store_prepare(kvp__store_t *st, kvp__index_rows_t *rows,
                       const kvp__store_worker_t *workers, size_t nworkers, uint64_t stream_seq,
                       kvp__store_flush_t **out);
int kvp__store_write(kvp__store_t *st, const kvp__store_flush_t *fl);
void kvp__store_flush_free(kvp__store_flush_t *fl);
/* The index's rows the flush holds, to give back after a failed write. */
kvp__index_rows_t *kvp__store_flush_rows(kvp__store_flush_t *fl);
/* Volume ids below this are in the volumes table (index owner's thread). */
size_t kvp__store_volumes_written(const kvp__store_t *st);
/* Blocks (rows of the blocks table) the flush writes. */
size_t kvp__store_flush_blocks(const kvp__store_flush_t *fl);

/* Per-partition stream positions (a partitioned advisor consumes one
 * stream per partition, DESIGN.md "Scale beyond one machine"): the flush
 * writes them with its rows, as meta keys stream_seq.p<N>, in the same
 * transaction. At most KVP__STORE_MAX_POSITIONS; returns 0 or KVP_EINVAL.
 * Index owner's thread, between prepare and write. */
#define KVP__STORE_MAX_POSITIONS 64
int kvp__store_flush_set_positions(kvp__store_flush_t *fl, const uint32_t *parts,
                                   const uint64_t *seqs, size_t n);

/* The committed position of partition p (0 when the database has none:
 * the partition is consumed from its stream's start). Returns 0 or
 * KVP_EDB. */
int kvp__store_position(kvp__store_t *st, uint32_t p, uint64_t *seq);

/* Before a load: deletes the rows (locations, worker rows) of every
 * worker for which keep(ctx, name) returns 0, the blocks no worker holds
 * after that, and the positions of partitions parts[0..nparts) (the
 * partitions this advisor no longer owns: a later owner starts them from
 * their stream's start), in one transaction. *dropped gets the number of
 * workers dropped. Returns 0, KVP_EDB or KVP_ENOMEM (rolled back). */
int kvp__store_drop_workers(kvp__store_t *st, int (*keep)(void *ctx, const char *worker), void *ctx,
                            const uint32_t *parts, size_t nparts, size_t *dropped);

/* The stream sequence of the last committed flush (not thread-safe against
 * a write running elsewhere). */
uint64_t kvp__store_stream_seq(const kvp__store_t *st);

/* Runs the SQL of schema versions 1..version on a fresh database, for the
 * upgrade tests. Returns 0 or KVP_EDB. */
int kvp__store_create_version(const char *path, int version);

/* Identity of a database: the namespace (and, in JetStream mode, the
 * durable consumer) it holds the state of, and a random id that marks the
 * consumer this database created on the server. */
#define KVP__STORE_DB_ID_LEN 32

/* Binds the database to ns and consumer (NULL in core mode: not checked or
 * recorded): a new database records them, an existing one must hold the
 * same ones. db_id receives the database's id (made on first use). Returns
 * 0, KVP_ECONFIG when the database belongs to another namespace or consumer
 * (err names both), or KVP_EDB. */
int kvp__store_bind(kvp__store_t *st, const char *ns, const char *consumer,
                    char db_id[KVP__STORE_DB_ID_LEN + 1], char *err, size_t errlen);

#endif
