/* The advisor's write-behind flush (store.h): the index's rows (taken on
 * its owner's, the loop, thread: index/rows.h), the workers' rows and the
 * queued history samples, written in one transaction on any one thread at a
 * time. Thread: prepare on the loop thread; write anywhere, one write per
 * store at a time. */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"

typedef struct fworker_s {
  const char *name, *status;
  uint32_t dp_rank;
  uint64_t epoch, last_event_id, last_seen_ms, down_at_ms, locations_dropped;
} fworker_t;

struct kvp__store_flush_s {
  kvp__index_rows_t rows; /* the caller's, taken over; given back if the write fails */
  fworker_t *workers;
  size_t nworkers;
  kvp__store_hist_row_t *hist; /* taken from the store's queue */
  size_t nhist;
  uint64_t hist_keep_ms;
  uint64_t stream_seq;
  uint64_t prepared_ms; /* when the changes were taken (meta prepared_ms) */
  /* Per-partition positions (store_positions.c): meta stream_seq.p<N>. */
  size_t npos;
  uint32_t pos_part[KVP__STORE_MAX_POSITIONS];
  uint64_t pos_seq[KVP__STORE_MAX_POSITIONS];
};

int kvp__store_flush_set_positions(kvp__store_flush_t *fl, const uint32_t *parts,
                                   const uint64_t *seqs, size_t n) {
  if (n > KVP__STORE_MAX_POSITIONS)
    return KVP_EINVAL;
  fl->npos = n;
  if (n) {
    memcpy(fl->pos_part, parts, n * sizeof *parts);
    memcpy(fl->pos_seq, seqs, n * sizeof *seqs);
  }
  return 0;
}

void kvp__store_flush_free(kvp__store_flush_t *fl) {
  if (fl == NULL)
    return;
  kvp__index_rows_free(&fl->rows);
  free(fl->workers);
  free(fl->hist);
  free(fl);
}

size_t kvp__store_flush_blocks(const kvp__store_flush_t *fl) {
  return fl->rows.nrows;
}

kvp__index_rows_t *kvp__store_flush_rows(kvp__store_flush_t *fl) {
  return &fl->rows;
}

size_t kvp__store_volumes_written(const kvp__store_t *st) {
  return st->volumes_written;
}

static int prepare_workers(kvp__store_flush_t *fl, const kvp__store_worker_t *w, size_t n) {
  if (n && (fl->workers = malloc(n * sizeof *fl->workers)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    fworker_t *f = &fl->workers[fl->nworkers++];
    f->name = w[i].name;
    f->dp_rank = w[i].dp_rank;
    f->epoch = w[i].epoch;
    f->last_event_id = w[i].last_event_id;
    f->last_seen_ms = w[i].last_seen_ms;
    f->down_at_ms = w[i].down_at_ms;
    f->locations_dropped = w[i].locations_dropped;
    f->status = w[i].down ? "down" : (w[i].known ? "up" : "unknown");
  }
  return 0;
}

int kvp__store_prepare(kvp__store_t *st, kvp__index_rows_t *rows,
                       const kvp__store_worker_t *workers, size_t nworkers, uint64_t stream_seq,
                       kvp__store_flush_t **out) {
  kvp__store_flush_t *fl = calloc(1, sizeof *fl);

  *out = NULL;
  if (fl == NULL || prepare_workers(fl, workers, nworkers) != 0) {
    kvp__store_flush_free(fl);
    return KVP_ENOMEM;
  }
  /* Nothing can fail after this: the rows and the queued samples move to
   * the flush. */
  fl->rows = *rows;
  memset(rows, 0, sizeof *rows);
  fl->stream_seq = stream_seq;
  fl->prepared_ms = kvp__unix_ms();
  fl->hist = st->hist;
  fl->nhist = st->nhist;
  fl->hist_keep_ms = st->hist_keep_ms;
  st->hist = NULL;
  st->nhist = st->hist_cap = 0;
  *out = fl;
  return 0;
}

static void bind_loc(sqlite3_stmt *s, const kvp__index_loc_row_t *f) {
  sqlite3_bind_int64(s, 1, (sqlite3_int64)f->hash);
  sqlite3_bind_text(s, 2, f->worker, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, f->dp_rank);
  sqlite3_bind_int(s, 4, f->tier);
  sqlite3_bind_text(s, 5, f->volume, -1, SQLITE_STATIC);
}

static int write_row(kvp__store_t *st, const kvp__store_flush_t *fl, const kvp__index_row_t *r,
                     uint64_t now_ms) {
  sqlite3_stmt *s;
  int rc;

  if (r->deleted) {
    sqlite3_bind_int64(st->s[S_BLOCK_DELETE], 1, (sqlite3_int64)r->hash);
    sqlite3_bind_int64(st->s[S_LOC_DELETE], 1, (sqlite3_int64)r->hash);
    if ((rc = kvp__store_sql_step_done(st->s[S_BLOCK_DELETE])) != 0)
      return rc;
    return kvp__store_sql_step_done(st->s[S_LOC_DELETE]);
  }
  s = st->s[S_BLOCK_UPSERT];
  sqlite3_bind_int64(s, 1, (sqlite3_int64)r->hash);
  if (r->parent != r->hash)
    sqlite3_bind_int64(s, 2, (sqlite3_int64)r->parent);
  else
    sqlite3_bind_null(s, 2);
  sqlite3_bind_int64(s, 3, r->tokens);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)r->bytes);
  sqlite3_bind_int64(s, 5, (sqlite3_int64)now_ms);
  sqlite3_bind_int64(s, 6, (sqlite3_int64)(r->last_access_ms ? r->last_access_ms : now_ms));
  sqlite3_bind_int64(s, 7, r->hits);
  sqlite3_bind_double(s, 8, r->freq);
  if ((rc = kvp__store_sql_step_done(s)) != 0)
    return rc;
  /* Rows of locations that stayed are kept (OR IGNORE); removed ones went
   * with the gone list. */
  for (uint32_t k = 0; k < r->nlocs; k++) {
    bind_loc(st->s[S_LOC_INSERT], &fl->rows.locs[r->loc_off + k]);
    if ((rc = kvp__store_sql_step_done(st->s[S_LOC_INSERT])) != 0)
      return rc;
  }
  return 0;
}

static int write_rest(kvp__store_t *st, const kvp__store_flush_t *fl, uint64_t now_ms) {
  sqlite3_stmt *s = st->s[S_WORKER_UPSERT];
  int rc;
  for (size_t i = 0; i < fl->nworkers; i++) {
    const fworker_t *w = &fl->workers[i];
    sqlite3_bind_text(s, 1, w->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, w->dp_rank);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)w->epoch);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)w->last_event_id);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)w->last_seen_ms);
    sqlite3_bind_text(s, 6, w->status, -1, SQLITE_STATIC);
    if (w->down_at_ms)
      sqlite3_bind_int64(s, 7, (sqlite3_int64)w->down_at_ms);
    else
      sqlite3_bind_null(s, 7);
    sqlite3_bind_int64(s, 8, (sqlite3_int64)w->locations_dropped);
    if ((rc = kvp__store_sql_step_done(s)) != 0)
      return rc;
  }
  s = st->s[S_VOLUME_INSERT];
  for (size_t i = 0; i < fl->rows.nvolumes; i++) {
    sqlite3_bind_text(s, 1, fl->rows.volumes[i], -1, SQLITE_STATIC);
    sqlite3_bind_null(s, 2);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)now_ms);
    if ((rc = kvp__store_sql_step_done(s)) != 0)
      return rc;
  }
  s = st->s[S_HIST_INSERT];
  for (size_t i = 0; i < fl->nhist; i++) {
    const kvp__store_hist_row_t *h = &fl->hist[i];
    sqlite3_bind_int64(s, 1, (sqlite3_int64)h->t_ms);
    sqlite3_bind_int(s, 2, h->tier);
    sqlite3_bind_text(s, 3, h->volume, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)h->blocks);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)h->bytes);
    if (h->capacity > 0)
      sqlite3_bind_int64(s, 6, (sqlite3_int64)h->capacity);
    else
      sqlite3_bind_null(s, 6);
    if ((rc = kvp__store_sql_step_done(s)) != 0)
      return rc;
  }
  if (fl->nhist > 0 && fl->hist_keep_ms > 0 && fl->hist[fl->nhist - 1].t_ms > fl->hist_keep_ms) {
    sqlite3_bind_int64(st->s[S_HIST_TRIM], 1,
                       (sqlite3_int64)(fl->hist[fl->nhist - 1].t_ms - fl->hist_keep_ms));
    if ((rc = kvp__store_sql_step_done(st->s[S_HIST_TRIM])) != 0)
      return rc;
  }
  /* The tiering engine's recovery looks at moves finished since the index
   * changes this flush holds were taken (kvp__journal_recent). */
  s = st->s[S_META_SET];
  sqlite3_bind_text(s, 1, "prepared_ms", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)fl->prepared_ms);
  if ((rc = kvp__store_sql_step_done(s)) != 0)
    return rc;
  for (size_t i = 0; i < fl->npos; i++) {
    char key[32];
    snprintf(key, sizeof key, "stream_seq.p%" PRIu32, fl->pos_part[i]);
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)fl->pos_seq[i]);
    if ((rc = kvp__store_sql_step_done(s)) != 0)
      return rc;
  }
  sqlite3_bind_text(s, 1, "stream_seq", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)fl->stream_seq);
  return kvp__store_sql_step_done(s);
}

int kvp__store_write(kvp__store_t *st, const kvp__store_flush_t *fl) {
  uint64_t now_ms = kvp__unix_ms();
  int rc;

  if ((rc = kvp__store_sql_exec(st->db, "BEGIN IMMEDIATE", NULL, 0)) != 0)
    goto fail;
  for (size_t i = 0; i < fl->rows.ngone; i++) {
    bind_loc(st->s[S_LOC_DELETE_ONE], &fl->rows.gone[i]);
    if ((rc = kvp__store_sql_step_done(st->s[S_LOC_DELETE_ONE])) != 0)
      goto rollback;
  }
  for (size_t i = 0; i < fl->rows.nrows; i++)
    if ((rc = write_row(st, fl, &fl->rows.rows[i], now_ms)) != 0)
      goto rollback;
  if ((rc = write_rest(st, fl, now_ms)) != 0)
    goto rollback;
  /* The rows of blocks changed: an index snapshot is no longer current. */
  if ((fl->rows.ngone > 0 || fl->rows.nrows > 0) &&
      (rc = kvp__store_sql_step_done(st->s[S_GEN_BUMP])) != 0)
    goto rollback;
  if ((rc = kvp__store_sql_exec(st->db, "COMMIT", NULL, 0)) != 0)
    goto rollback;
  st->stream_seq = fl->stream_seq;
  st->volumes_written = fl->rows.volumes_total;
  return 0;
rollback:
  kvp_log_error("advisor: flush of %zu blocks failed: %s", fl->rows.nrows, sqlite3_errmsg(st->db));
  kvp__store_sql_exec(st->db, "ROLLBACK", NULL, 0);
  /* The changes go back to the index; the samples are lost. */
  atomic_fetch_add(&st->hist_dropped, fl->nhist);
fail:
  return KVP_EDB;
}

int kvp__store_flush(kvp__store_t *st, kvp__index_t *ix, const kvp__store_worker_t *workers,
                     size_t nworkers, uint64_t stream_seq, size_t *nblocks) {
  kvp__store_flush_t *fl = NULL;
  int rc;

  if (nblocks)
    *nblocks = 0;
  kvp__index_rows_t rows;
  if ((rc = kvp__index_rows_take(ix, st->volumes_written, &rows)) != 0)
    return rc;
  if ((rc = kvp__store_prepare(st, &rows, workers, nworkers, stream_seq, &fl)) != 0) {
    kvp__index_rows_restore(ix, &rows);
    return rc;
  }
  if ((rc = kvp__store_write(st, fl)) != 0) {
    kvp__index_rows_restore(ix, kvp__store_flush_rows(fl));
    kvp__store_flush_free(fl);
    return rc;
  }
  if (nblocks)
    *nblocks = fl->rows.nrows;
  kvp__store_flush_free(fl);
  return 0;
}

int kvp__store_history_add(kvp__store_t *st, const kvp__store_hist_row_t *rows, size_t n,
                           uint64_t keep_ms) {
  st->hist_keep_ms = keep_ms;
  if (n > KVP__STORE_HIST_PENDING_MAX) {
    atomic_fetch_add(&st->hist_dropped, n - KVP__STORE_HIST_PENDING_MAX);
    rows += n - KVP__STORE_HIST_PENDING_MAX;
    n = KVP__STORE_HIST_PENDING_MAX;
  }
  if (st->nhist + n > KVP__STORE_HIST_PENDING_MAX) { /* the oldest go */
    size_t drop = st->nhist + n - KVP__STORE_HIST_PENDING_MAX;
    memmove(st->hist, st->hist + drop, (st->nhist - drop) * sizeof *st->hist);
    st->nhist -= drop;
    atomic_fetch_add(&st->hist_dropped, drop);
  }
  if (KVP_ARRAY_RESERVE(st->hist, st->hist_cap, st->nhist + n, 64) != 0)
    return KVP_ENOMEM;
  memcpy(st->hist + st->nhist, rows, n * sizeof *rows);
  st->nhist += n;
  return 0;
}

uint64_t kvp__store_history_dropped(const kvp__store_t *st) {
  return atomic_load(&st->hist_dropped);
}
