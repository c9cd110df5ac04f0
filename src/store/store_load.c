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

/* Worker and volume names come once per location row: a small cache of
 * (name, dp rank) -> id spares the interning table's linear search. */
#define NAME_CACHE 256
#define NAME_MAX_CACHED 47
typedef struct name_cache_s {
  char name[NAME_MAX_CACHED + 1];
  uint32_t dp_rank;
  uint16_t id;
  uint8_t used;
} name_cache_t;

static int cached_id(kvp__index_t *ix, name_cache_t *c, const char *name, uint32_t dp_rank,
                     int volume, uint16_t *id) {
  if (name == NULL)
    return KVP_EINVAL;
  size_t len = strlen(name);
  uint64_t h = 1469598103934665603ull ^ dp_rank;
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
  name_cache_t *e = &c[h % NAME_CACHE];
  if (e->used && e->dp_rank == dp_rank && strcmp(e->name, name) == 0) {
    *id = e->id;
    return 0;
  }
  int rc = volume ? kvp__index_volume(ix, name, id) : kvp__index_worker(ix, name, dp_rank, id);
  if (rc == 0 && len <= NAME_MAX_CACHED) {
    memcpy(e->name, name, len + 1);
    e->dp_rank = dp_rank;
    e->id = *id;
    e->used = 1;
  }
  return rc;
}

typedef struct loader_s {
  kvp__store_t *st;
  kvp__index_t *ix;
  sqlite3_stmt *b, *l; /* blocks, locations: both in signed hash order */
  int lrow;            /* l is on a row */
  name_cache_t workers[NAME_CACHE], volumes[NAME_CACHE];
  uint64_t done, total;
} loader_t;

/* Progress counts blocks (counting the locations too would cost another
 * pass over their table). */
static void progress(loader_t *ld) {
  if (ld->st->progress && (++ld->done & 0xffff) == 0)
    ld->st->progress(ld->st->progress_ctx, ld->done, ld->total);
}

/* Loads the location row l is on (the block is loaded when it has a row). */
static int load_loc_row(loader_t *ld) {
  sqlite3_stmt *s = ld->l;
  kvp__index_loc_t loc;
  uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
  int rc;
  if (cached_id(ld->ix, ld->workers, (const char *)sqlite3_column_text(s, 1),
                (uint32_t)sqlite3_column_int64(s, 2), 0, &loc.worker) != 0 ||
      cached_id(ld->ix, ld->volumes, (const char *)sqlite3_column_text(s, 4), 0, 1, &loc.volume) !=
          0) {
    kvp_log_warn("advisor: location of block %016llx skipped: bad worker or volume",
                 (unsigned long long)h);
    return 0;
  }
  loc.tier = (uint8_t)sqlite3_column_int(s, 3);
  rc = kvp__index_load_loc(ld->ix, h, &loc);
  return rc == KVP_ENOMEM ? rc : 0;
}

/* One pass over both tables, side by side in hash order: a block's
 * locations are added while its record is still in cache. */
static int load_blocks(loader_t *ld) {
  int rc = 0, r, lr;
  lr = sqlite3_step(ld->l);
  while ((r = sqlite3_step(ld->b)) == SQLITE_ROW) {
    sqlite3_stmt *s = ld->b;
    kvp__index_block_t b;
    b.hash = (uint64_t)sqlite3_column_int64(s, 0);
    b.parent =
        sqlite3_column_type(s, 1) == SQLITE_NULL ? b.hash : (uint64_t)sqlite3_column_int64(s, 1);
    b.tokens = (uint32_t)sqlite3_column_int64(s, 2);
    b.bytes = (uint64_t)sqlite3_column_int64(s, 3);
    b.last_access_ms = (uint64_t)sqlite3_column_int64(s, 4);
    b.hits = (uint32_t)sqlite3_column_int64(s, 5);
    b.freq = sqlite3_column_double(s, 6);
    progress(ld);
    if ((rc = kvp__index_load_block(ld->ix, &b)) != 0)
      return rc;
    /* Locations up to this block's hash (those before it have no block:
     * they are skipped, as kvp__index_load_loc says). */
    while (lr == SQLITE_ROW && sqlite3_column_int64(ld->l, 0) <= (sqlite3_int64)b.hash) {
      if ((rc = load_loc_row(ld)) != 0)
        return rc;
      lr = sqlite3_step(ld->l);
    }
  }
  if (r != SQLITE_DONE)
    return KVP_EDB;
  for (; lr == SQLITE_ROW; lr = sqlite3_step(ld->l))
    if ((rc = load_loc_row(ld)) != 0)
      return rc;
  return lr == SQLITE_DONE ? 0 : KVP_EDB;
}

static int64_t count_rows(sqlite3 *db, const char *sql) {
  sqlite3_stmt *s = NULL;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return n;
}

/* The snapshot when it is current (store_snapshot.c), else the rows. */
static int load_rows(kvp__store_t *st, kvp__index_t *ix);

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
  return load_rows(st, ix);
}

void kvp__store_use_snapshot(kvp__store_t *st, int on) {
  st->no_snapshot = !on;
}

int kvp__store_loaded_snapshot(const kvp__store_t *st) {
  return st->loaded_snapshot;
}

static int load_rows(kvp__store_t *st, kvp__index_t *ix) {
  loader_t *ld = calloc(1, sizeof *ld);
  int rc = KVP_EDB;
  if (ld == NULL)
    return KVP_ENOMEM;
  ld->st = st;
  ld->ix = ix;
  /* Read the file through a mapping while loading: a pread per page is
   * a system call per 4 KiB (SQLite caps the mapping, 2 GiB in Debian's
   * build; the rest is read as usual). Back to reads after. */
  (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 2147418112", NULL, 0);
  int64_t nb = count_rows(st->db, "SELECT count(*) FROM blocks");
  if (nb < 0)
    goto done;
  ld->total = (uint64_t)nb;
  /* The map and the records sized for what the database holds: no rehash
   * while loading, and a map filled as full as it may be. */
  if ((rc = kvp__index_reserve(ix, (size_t)nb)) != 0)
    goto done;
  rc = KVP_EDB;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks"
                         " ORDER BY hash",
                         -1, &ld->b, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(st->db,
                         "SELECT hash, worker, dp_rank, tier, volume FROM block_locations"
                         " ORDER BY hash",
                         -1, &ld->l, NULL) != SQLITE_OK)
    goto done;
  rc = load_blocks(ld);
  if (rc == 0 && st->progress)
    st->progress(st->progress_ctx, ld->total, ld->total);
done:
  sqlite3_finalize(ld->b);
  sqlite3_finalize(ld->l);
  (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 0", NULL, 0);
  free(ld);
  return rc;
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
