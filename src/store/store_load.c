/* Loading the advisor's database into an empty index (store.h).
 * Thread: the one that opens the store, before the loop runs. */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"
#include "common/log.h"
#include "kvplane/status.h"

static int load_workers(kvp__store_t *st, kvp__store_worker_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT worker, dp_rank, epoch, last_event_id, last_seen, status,"
                         " down_at, locations_dropped FROM workers",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__store_worker_t w = {0};
    const char *status = (const char *)sqlite3_column_text(s, 5);
    w.name = (const char *)sqlite3_column_text(s, 0);
    if (w.name == NULL)
      continue;
    w.dp_rank = (uint32_t)sqlite3_column_int64(s, 1);
    w.epoch = (uint64_t)sqlite3_column_int64(s, 2);
    w.last_event_id = (uint64_t)sqlite3_column_int64(s, 3);
    w.last_seen_ms = (uint64_t)sqlite3_column_int64(s, 4);
    w.known = status && strcmp(status, "unknown") != 0;
    w.down = status && strcmp(status, "down") == 0;
    w.down_at_ms = w.down ? (uint64_t)sqlite3_column_int64(s, 6) : 0;
    w.locations_dropped = w.down ? (uint64_t)sqlite3_column_int64(s, 7) : 0;
    if (fn && (rc = fn(ctx, &w)) != 0)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
}

/* The snapshot when it is current (store_snapshot.c), else the rows
 * (store_rows.c). */
static int load_index(kvp__store_t *st, kvp__index_t *ix) {
  uint64_t loaded = 0;
  int rc;
  st->loaded_snapshot = 0;
  if (!st->no_snapshot) {
    (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 2147418112", NULL, 0);
    rc = kvp__store_snapshot_load(st, ix, &loaded);
    (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 0", NULL, 0);
    if (rc == 0) {
      st->loaded_snapshot = 1;
      return 0;
    }
    if (rc != KVP_ENOENT && (rc != KVP_ECORRUPT || loaded > 0)) {
      /* Half in: the caller starts again from an empty index, which reads
       * the rows once the snapshot is gone. */
      if (rc == KVP_ECORRUPT &&
          kvp__store_sql_exec(st->db, "DELETE FROM index_snapshot", NULL, 0) == 0)
        kvp_log_error("advisor: the corrupt index snapshot is deleted: the next load reads the "
                      "rows");
      return rc;
    }
  }
  return kvp__store_load_rows(st, ix);
}

void kvp__store_use_snapshot(kvp__store_t *st, int on) {
  st->no_snapshot = !on;
}

void kvp__store_use_readers(kvp__store_t *st, int on) {
  st->no_readers = !on;
}

int kvp__store_loaded_snapshot(const kvp__store_t *st) {
  return st->loaded_snapshot;
}

void kvp__store_on_progress(kvp__store_t *st, kvp__store_progress_fn fn, void *ctx) {
  st->progress = fn;
  st->progress_ctx = ctx;
}

int kvp__store_load(kvp__store_t *st, kvp__index_t *ix, kvp__store_worker_fn worker_fn, void *ctx,
                    uint64_t *stream_seq) {
  sqlite3_stmt *s = NULL;
  int rc;

  *stream_seq = 0;
  if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key = 'stream_seq'", -1, &s, NULL) !=
      SQLITE_OK)
    return KVP_EDB;
  if (sqlite3_step(s) == SQLITE_ROW)
    *stream_seq = (uint64_t)sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  kvp__index_track_dirty(ix, 0);
  if ((rc = load_workers(st, worker_fn, ctx)) == 0)
    rc = load_index(st, ix);
  kvp__index_track_dirty(ix, 1);
  if (rc == 0) {
    st->stream_seq = *stream_seq;
    st->volumes_written = kvp__index_volume_count(ix);
  }
  return rc;
}

/* Reads meta.key into buf (empty when absent). Returns 0 or KVP_EDB. */

int kvp__store_position(kvp__store_t *st, uint32_t p, uint64_t *seq) {
  sqlite3_stmt *s = NULL;
  char key[32];
  int rc = 0;

  *seq = 0;
  snprintf(key, sizeof key, "stream_seq.p%" PRIu32, p);
  if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key = ?1", -1, &s, NULL) !=
      SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
  int r = sqlite3_step(s);
  if (r == SQLITE_ROW)
    *seq = (uint64_t)sqlite3_column_int64(s, 0);
  else if (r != SQLITE_DONE)
    rc = KVP_EDB;
  sqlite3_finalize(s);
  return rc;
}
