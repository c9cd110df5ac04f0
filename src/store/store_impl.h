/* What the parts of the advisor's store share (store.h is the interface):
 * the store's struct, its prepared statements, and two SQL helpers.
 *
 * Private to src/store/store_*.c (journal.c is apart: journal.h):
 *   store_schema.c  schema steps, upgrade, opening the file (the thread that
 *                   opens the store);
 *   store_sqlite.c  open/close, statements, the database's identity (the
 *                   thread that opens the store);
 *   store_load.c    loading into an empty index (before the loop runs, on
 *                   the thread that opens);
 *   store_write.c   the write-behind flush: prepare on the index owner's
 *                   (loop) thread, write on any one thread at a time.
 * Calls go one way: store_sqlite.c -> store_schema.c; the others only use
 * this header. */
#ifndef KVP_STORE_STORE_IMPL_H
#define KVP_STORE_STORE_IMPL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store/store.h"
#include "kvplane/status.h"

enum {
  S_BLOCK_UPSERT,
  S_BLOCK_DELETE,
  S_LOC_DELETE,
  S_LOC_DELETE_ONE,
  S_LOC_INSERT,
  S_WORKER_UPSERT,
  S_VOLUME_INSERT,
  S_META_SET,
  S_HIST_INSERT,
  S_HIST_TRIM,
  S_GEN_BUMP,
  S_COUNT
};

struct kvp__store_s {
  sqlite3 *db;
  sqlite3_stmt *s[S_COUNT];
  uint64_t stream_seq;
  size_t volumes_written; /* volume ids below this are in the volumes table */
  /* tier_history rows waiting for the next flush (index owner's thread). */
  kvp__store_hist_row_t *hist;
  size_t nhist, hist_cap;
  uint64_t hist_keep_ms;
  _Atomic uint64_t hist_dropped;   /* also counted by a failed write, on its thread */
  int no_snapshot;                 /* kvp__store_use_snapshot(st, 0) */
  int no_readers;                  /* kvp__store_use_readers(st, 0) */
  int loaded_snapshot;             /* the last load read the snapshot */
  size_t snapshot_chunk;           /* kvp__store_snapshot_chunk_bytes; 0: CHUNK_BYTES */
  kvp__store_progress_fn progress; /* of kvp__store_load */
  void *progress_ctx;
};

/* Runs sql; on failure err (may be NULL) says why. Returns 0 or KVP_EDB. */
static inline int kvp__store_sql_exec(sqlite3 *db, const char *sql, char *err, size_t errlen) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    if (err)
      snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return KVP_EDB;
  }
  return 0;
}

/* Steps a statement that returns no row and resets it. 0 or KVP_EDB. */
static inline int kvp__store_sql_step_done(sqlite3_stmt *s) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  return rc == SQLITE_DONE ? 0 : KVP_EDB;
}

/* store_rows.c: the rows of blocks and block_locations into ix (reserved
 * for their count first), read by a thread of their own over a read-only
 * connection when the database is a file, else on st->db; progress as
 * kvp__store_on_progress says. Returns 0, KVP_EDB or KVP_ENOMEM. */
int kvp__store_load_rows(kvp__store_t *st, kvp__index_t *ix);

/* Opens (creating with mode 0600) path in WAL mode. Returns 0, KVP_EIO or
 * KVP_EDB (err says why). */
int kvp__store_open_db(const char *path, sqlite3 **db, char *err, size_t errlen);

/* Brings db up to schema version target, one transaction per step. Returns
 * 0, KVP_EDB, or KVP_ENOTSUP for a version newer than this program's. */
int kvp__store_upgrade(sqlite3 *db, int target, char *err, size_t errlen);

/* --- a load's reader thread and the loading thread (store_pipe.c) --- */

/* An item goes round through its first member. */
typedef struct kvp__store_pipe_item_s {
  struct kvp__store_pipe_item_s *next;
} kvp__store_pipe_item_t;

typedef struct kvp__store_pipe_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kvp__store_pipe_item_t *free_list, *full_head, *full_tail;
  int stop; /* the loader gave up: the reader ends at its next take */
} kvp__store_pipe_t;

/* Returns 0 or KVP_ENOMEM. */
int kvp__store_pipe_init(kvp__store_pipe_t *p);
void kvp__store_pipe_destroy(kvp__store_pipe_t *p);
/* Puts it on the full list (the loader's, in order) or the free one. */
void kvp__store_pipe_put(kvp__store_pipe_t *p, int full, kvp__store_pipe_item_t *it);
/* The next full item (waits for one), or a free one (waits for one; NULL
 * once stopped). */
kvp__store_pipe_item_t *kvp__store_pipe_take(kvp__store_pipe_t *p, int full);
/* The loader stops the reader (its next take of a free item is NULL). */
void kvp__store_pipe_stop(kvp__store_pipe_t *p);

/* --- the index snapshot's decoder (store_snapshot_read.c) --- */

/* A snapshot's header, checked, with its workers and volumes interned
 * into the index being loaded (wmap, vmap: snapshot id -> index id). */
typedef struct kvp__snap_header_s {
  uint64_t generation, blocks, locations;
  uint32_t chunks, nworkers, nvolumes, nshapes;
  uint16_t *wmap, *vmap;
  uint32_t *shape_tokens;
  uint64_t *shape_bytes;
} kvp__snap_header_t;

/* Checks the header chunk p[0..n) and interns its names into ix (only
 * once all of it is checked). Returns 0, KVP_ECORRUPT or KVP_ENOMEM. */
int kvp__snap_header_parse(const uint8_t *p, size_t n, kvp__index_t *ix, kvp__snap_header_t *h);
void kvp__snap_header_free(kvp__snap_header_t *h);

/* Checks the data chunk p[0..n) against its checksum and loads its blocks
 * into ix, adding to *blocks (those given to the index, counted before
 * they go in) and *locations. Returns 0, KVP_ECORRUPT (with *blocks
 * unchanged when none went in) or KVP_ENOMEM. */
int kvp__snap_chunk_load(const kvp__snap_header_t *h, const uint8_t *p, size_t n, kvp__index_t *ix,
                         uint64_t *blocks, uint64_t *locations);

/* Loads the snapshot when it is current. Returns 0, KVP_ENOENT when there
 * is no current one, KVP_ECORRUPT (*loaded: blocks already in the index),
 * KVP_ENOMEM or KVP_EDB. */
int kvp__store_snapshot_load(kvp__store_t *st, kvp__index_t *ix, uint64_t *loaded);

#endif
