/* Loading the advisor's database into an empty index (store.h).
 * Thread: the one that opens the store, before the loop runs. */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdint.h>
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

static int load_blocks(kvp__store_t *st, kvp__index_t *ix) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__index_block_t b;
    b.hash = (uint64_t)sqlite3_column_int64(s, 0);
    b.parent =
        sqlite3_column_type(s, 1) == SQLITE_NULL ? b.hash : (uint64_t)sqlite3_column_int64(s, 1);
    b.tokens = (uint32_t)sqlite3_column_int64(s, 2);
    b.bytes = (uint64_t)sqlite3_column_int64(s, 3);
    b.last_access_ms = (uint64_t)sqlite3_column_int64(s, 4);
    b.hits = (uint32_t)sqlite3_column_int64(s, 5);
    b.freq = sqlite3_column_double(s, 6);
    if ((rc = kvp__index_load_block(ix, &b)) != 0)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
}

static int load_locations(kvp__store_t *st, kvp__index_t *ix) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db, "SELECT hash, worker, dp_rank, tier, volume FROM block_locations",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__index_loc_t loc;
    uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
    if (kvp__index_worker(ix, (const char *)sqlite3_column_text(s, 1),
                          (uint32_t)sqlite3_column_int64(s, 2), &loc.worker) != 0 ||
        kvp__index_volume(ix, (const char *)sqlite3_column_text(s, 4), &loc.volume) != 0) {
      kvp_log_warn("advisor: location of block %016llx skipped: bad worker or volume",
                   (unsigned long long)h);
      continue;
    }
    loc.tier = (uint8_t)sqlite3_column_int(s, 3);
    if ((rc = kvp__index_load_loc(ix, h, &loc)) == KVP_ENOMEM)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
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
  if ((rc = load_workers(st, worker_fn, ctx)) == 0 && (rc = load_blocks(st, ix)) == 0)
    rc = load_locations(st, ix);
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
