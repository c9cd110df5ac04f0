/* Advisor persistence in SQLite; see store.h and docs/sql.md. */
#include "advisor/store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

/* Schema steps: steps[v - 1] turns a version v - 1 database into version v.
 * Never edit a released step; add one. */
static const char *const steps[] = {
    /* 1: tables. */
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
    "CREATE TABLE workers(worker TEXT NOT NULL, dp_rank INTEGER NOT NULL, epoch INTEGER NOT NULL,"
    " last_event_id INTEGER NOT NULL, last_seen INTEGER NOT NULL, status TEXT NOT NULL,"
    " PRIMARY KEY(worker, dp_rank));"
    "CREATE TABLE volumes(volume TEXT PRIMARY KEY, tier INTEGER, capacity INTEGER,"
    " first_seen INTEGER NOT NULL);"
    "CREATE TABLE blocks(hash INTEGER PRIMARY KEY, parent INTEGER, tokens INTEGER NOT NULL,"
    " bytes INTEGER NOT NULL, first_seen INTEGER NOT NULL, last_access INTEGER NOT NULL);"
    "CREATE TABLE block_locations(hash INTEGER NOT NULL, worker TEXT NOT NULL,"
    " dp_rank INTEGER NOT NULL, tier INTEGER NOT NULL, volume TEXT NOT NULL DEFAULT '',"
    " PRIMARY KEY(hash, worker, dp_rank, tier, volume)) WITHOUT ROWID;"
    "CREATE TABLE migrations(id INTEGER PRIMARY KEY, hash INTEGER NOT NULL,"
    " from_tier INTEGER NOT NULL, from_volume TEXT NOT NULL, to_tier INTEGER NOT NULL,"
    " to_volume TEXT NOT NULL, bytes INTEGER NOT NULL, state TEXT NOT NULL,"
    " created INTEGER NOT NULL, updated INTEGER NOT NULL, error TEXT);",
    /* 2: hit counters and the inspection views. */
    "ALTER TABLE blocks ADD COLUMN hits INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE blocks ADD COLUMN freq REAL NOT NULL DEFAULT 0;"
    /* One secondary index only (worker_status): every index costs the
     * write-behind a B-tree update per change; tier_usage scans anyway. */
    "CREATE INDEX block_locations_by_worker ON block_locations(worker, dp_rank, tier);"
    "CREATE VIEW tier_usage AS SELECT l.tier AS tier, l.volume AS volume,"
    " count(*) AS blocks, sum(b.bytes) AS bytes, v.capacity AS capacity,"
    " CASE WHEN v.capacity > 0 THEN round(sum(b.bytes) * 1.0 / v.capacity, 4) END AS fill"
    " FROM block_locations l JOIN blocks b ON b.hash = l.hash"
    " LEFT JOIN volumes v ON v.volume = l.volume AND l.volume <> ''"
    " GROUP BY l.tier, l.volume;"
    "CREATE VIEW hot_blocks AS SELECT b.hash AS hash, printf('%016x', b.hash) AS hash_hex,"
    " b.hits AS hits, b.freq AS freq, b.last_access AS last_access,"
    " (SELECT group_concat(DISTINCT 'G' || l.tier) FROM block_locations l"
    "  WHERE l.hash = b.hash) AS tiers"
    " FROM blocks b WHERE b.hits > 0 ORDER BY b.freq DESC, b.last_access DESC LIMIT 100;"
    "CREATE VIEW cold_blocks AS SELECT b.hash AS hash, printf('%016x', b.hash) AS hash_hex,"
    " b.hits AS hits, b.freq AS freq, b.last_access AS last_access,"
    " (SELECT group_concat(DISTINCT 'G' || l.tier) FROM block_locations l"
    "  WHERE l.hash = b.hash) AS tiers"
    " FROM blocks b ORDER BY b.last_access ASC, b.freq ASC LIMIT 100;"
    "CREATE VIEW worker_status AS SELECT w.worker AS worker, w.dp_rank AS dp_rank,"
    " w.status AS status, w.epoch AS epoch, w.last_event_id AS last_event_id,"
    " w.last_seen AS last_seen,"
    " (SELECT count(*) FROM block_locations l WHERE l.worker = w.worker"
    "  AND l.dp_rank = w.dp_rank AND l.tier = 1) AS g1_blocks,"
    " (SELECT count(*) FROM block_locations l WHERE l.worker = w.worker"
    "  AND l.dp_rank = w.dp_rank AND l.tier = 2) AS g2_blocks,"
    " (SELECT count(*) FROM block_locations l WHERE l.worker = w.worker"
    "  AND l.dp_rank = w.dp_rank AND l.tier = 3) AS g3_blocks,"
    " (SELECT count(*) FROM block_locations l WHERE l.worker = w.worker"
    "  AND l.dp_rank = w.dp_rank AND l.tier = 4) AS g4_blocks"
    " FROM workers w;"
    "CREATE VIEW recent_migrations AS SELECT id, printf('%016x', hash) AS hash_hex,"
    " 'G' || from_tier AS from_tier, from_volume, 'G' || to_tier AS to_tier, to_volume, bytes,"
    " state, created, updated, error FROM migrations ORDER BY updated DESC LIMIT 100;",
};

enum {
  S_BLOCK_UPSERT,
  S_BLOCK_DELETE,
  S_LOC_DELETE,
  S_LOC_DELETE_ONE,
  S_LOC_INSERT,
  S_WORKER_UPSERT,
  S_VOLUME_INSERT,
  S_META_SET,
  S_COUNT
};

static const char *const stmt_sql[S_COUNT] = {
    [S_BLOCK_UPSERT] = "INSERT INTO blocks(hash, parent, tokens, bytes, first_seen, last_access,"
                       " hits, freq) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                       " ON CONFLICT(hash) DO UPDATE SET parent = ?2, tokens = ?3, bytes = ?4,"
                       " last_access = ?6, hits = ?7, freq = ?8",
    [S_BLOCK_DELETE] = "DELETE FROM blocks WHERE hash = ?1",
    [S_LOC_DELETE] = "DELETE FROM block_locations WHERE hash = ?1",
    [S_LOC_DELETE_ONE] = "DELETE FROM block_locations WHERE hash = ?1 AND worker = ?2"
                         " AND dp_rank = ?3 AND tier = ?4 AND volume = ?5",
    [S_LOC_INSERT] = "INSERT OR IGNORE INTO block_locations(hash, worker, dp_rank, tier, volume)"
                     " VALUES(?1, ?2, ?3, ?4, ?5)",
    [S_WORKER_UPSERT] = "INSERT INTO workers(worker, dp_rank, epoch, last_event_id, last_seen,"
                        " status) VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(worker, dp_rank)"
                        " DO UPDATE SET epoch = ?3, last_event_id = ?4, last_seen = ?5,"
                        " status = ?6",
    [S_VOLUME_INSERT] = "INSERT OR IGNORE INTO volumes(volume, tier, capacity, first_seen)"
                        " VALUES(?1, ?2, NULL, ?3)",
    [S_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                   " ON CONFLICT(key) DO UPDATE SET value = ?2",
};

struct kvp__adv_store_s {
  sqlite3 *db;
  sqlite3_stmt *s[S_COUNT];
  uint64_t stream_seq;
  size_t volumes_written; /* volume ids below this are in the volumes table */
};

static int exec(sqlite3 *db, const char *sql, char *err, size_t errlen) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    if (err)
      snprintf(err, errlen, "%s", msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return KVP_EDB;
  }
  return 0;
}

static int schema_version(sqlite3 *db, int *v) {
  sqlite3_stmt *s = NULL;
  int rc;
  *v = 0;
  rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE name = 'meta'", -1, &s,
                          NULL);
  if (rc != SQLITE_OK)
    return KVP_EDB;
  rc = sqlite3_step(s);
  int has_meta = rc == SQLITE_ROW && sqlite3_column_int(s, 0) > 0;
  sqlite3_finalize(s);
  if (!has_meta)
    return 0;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &s, NULL) !=
      SQLITE_OK)
    return KVP_EDB;
  if (sqlite3_step(s) == SQLITE_ROW)
    *v = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  return 0;
}

/* Brings db from its version up to target, one transaction per step. */
static int upgrade(sqlite3 *db, int target, char *err, size_t errlen) {
  int v, rc;
  char sql[128];

  if ((rc = schema_version(db, &v)) != 0)
    return rc;
  int from = v;
  if (v > KVP__ADV_SCHEMA_VERSION) {
    snprintf(err, errlen, "schema version %d is newer than this program's %d", v,
             KVP__ADV_SCHEMA_VERSION);
    return KVP_ENOTSUP;
  }
  for (; v < target; v++) {
    if ((rc = exec(db, "BEGIN IMMEDIATE", err, errlen)) != 0)
      return rc;
    snprintf(sql, sizeof sql,
             "INSERT INTO meta(key, value) VALUES('schema_version', %d)"
             " ON CONFLICT(key) DO UPDATE SET value = %d",
             v + 1, v + 1);
    if ((rc = exec(db, steps[v], err, errlen)) != 0 || (rc = exec(db, sql, err, errlen)) != 0) {
      exec(db, "ROLLBACK", NULL, 0);
      return rc;
    }
    if ((rc = exec(db, "COMMIT", err, errlen)) != 0)
      return rc;
    if (from > 0)
      kvp_log_info("advisor: database upgraded from schema version %d to %d", v, v + 1);
  }
  return 0;
}

static int open_db(sqlite3 **db, const char *path, char *err, size_t errlen) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return KVP_EIO;
  }
  close(fd);
  if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "%s: %s", path, *db ? sqlite3_errmsg(*db) : "cannot open");
    sqlite3_close(*db);
    *db = NULL;
    return KVP_EDB;
  }
  sqlite3_busy_timeout(*db, 5000);
  /* WAL: sqlite3 shells read while the daemon writes. NORMAL is durable
   * against a killed process (the WAL is in the page cache) and keeps the
   * database consistent across power loss. */
  return exec(*db,
              "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
              " PRAGMA cache_size = -65536;",
              err, errlen);
}

int kvp__adv_store_create_version(const char *path, int version) {
  sqlite3 *db = NULL;
  char err[256];
  int rc = open_db(&db, path, err, sizeof err);
  if (rc == 0)
    rc = upgrade(db, version, err, sizeof err);
  sqlite3_close(db);
  return rc;
}

int kvp__adv_store_open(kvp__adv_store_t **out, const char *path, char *err, size_t errlen) {
  kvp__adv_store_t *st = calloc(1, sizeof *st);
  int rc = KVP_ENOMEM;

  *out = NULL;
  if (st == NULL)
    goto fail;
  if ((rc = open_db(&st->db, path, err, errlen)) != 0)
    goto fail;
  if ((rc = upgrade(st->db, KVP__ADV_SCHEMA_VERSION, err, errlen)) != 0)
    goto fail;
  for (int i = 0; i < S_COUNT; i++) {
    if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->s[i], NULL) !=
        SQLITE_OK) {
      snprintf(err, errlen, "%s: %s", path, sqlite3_errmsg(st->db));
      rc = KVP_EDB;
      goto fail;
    }
  }
  *out = st;
  return 0;
fail:
  kvp__adv_store_close(st);
  return rc;
}

void kvp__adv_store_close(kvp__adv_store_t *st) {
  if (st == NULL)
    return;
  for (int i = 0; i < S_COUNT; i++)
    sqlite3_finalize(st->s[i]);
  sqlite3_close(st->db);
  free(st);
}

uint64_t kvp__adv_store_stream_seq(const kvp__adv_store_t *st) {
  return st->stream_seq;
}

static int step_done(sqlite3_stmt *s) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  return rc == SQLITE_DONE ? 0 : KVP_EDB;
}

static void bind_loc(sqlite3_stmt *s, kvp__adv_index_t *ix, uint64_t h, uint16_t worker, int tier,
                     uint16_t volume) {
  uint32_t dp = 0;
  const char *w = kvp__adv_index_worker_name(ix, worker, &dp);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)h);
  sqlite3_bind_text(s, 2, w, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, dp);
  sqlite3_bind_int(s, 4, tier);
  sqlite3_bind_text(s, 5, kvp__adv_index_volume_name(ix, volume), -1, SQLITE_STATIC);
}

static int write_gone(kvp__adv_store_t *st, kvp__adv_index_t *ix, const kvp__adv_gone_t *g) {
  bind_loc(st->s[S_LOC_DELETE_ONE], ix, g->hash, g->worker, g->tier, g->volume);
  return step_done(st->s[S_LOC_DELETE_ONE]);
}

static int write_block(kvp__adv_store_t *st, kvp__adv_index_t *ix, const kvp__adv_change_t *c,
                       uint64_t now_ms) {
  kvp__adv_block_t b;
  kvp__adv_loc_t locs[64];
  size_t n;
  sqlite3_stmt *s;
  uint64_t h = c->hash;
  int rc;

  if (c->what == 0 || kvp__adv_index_get(ix, h, &b, locs, 64, &n) != 0) {
    sqlite3_bind_int64(st->s[S_BLOCK_DELETE], 1, (sqlite3_int64)h);
    sqlite3_bind_int64(st->s[S_LOC_DELETE], 1, (sqlite3_int64)h);
    if ((rc = step_done(st->s[S_BLOCK_DELETE])) != 0)
      return rc;
    return step_done(st->s[S_LOC_DELETE]);
  }
  s = st->s[S_BLOCK_UPSERT];
  sqlite3_bind_int64(s, 1, (sqlite3_int64)h);
  if (b.parent != h)
    sqlite3_bind_int64(s, 2, (sqlite3_int64)b.parent);
  else
    sqlite3_bind_null(s, 2);
  sqlite3_bind_int64(s, 3, b.tokens);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)b.bytes);
  sqlite3_bind_int64(s, 5, (sqlite3_int64)now_ms);
  sqlite3_bind_int64(s, 6, (sqlite3_int64)(b.last_access_ms ? b.last_access_ms : now_ms));
  sqlite3_bind_int64(s, 7, b.hits);
  sqlite3_bind_double(s, 8, b.freq);
  if ((rc = step_done(s)) != 0 || !(c->what & KVP__ADV_CH_LOCS))
    return rc;
  if (n > 64) {
    kvp_log_warn("advisor: block %016llx has %zu locations; only 64 persisted",
                 (unsigned long long)h, n);
    n = 64;
  }
  /* Rows of locations that stayed are kept (OR IGNORE); removed ones went
   * with the gone list. */
  for (size_t i = 0; i < n; i++) {
    bind_loc(st->s[S_LOC_INSERT], ix, h, locs[i].worker, locs[i].tier, locs[i].volume);
    if ((rc = step_done(st->s[S_LOC_INSERT])) != 0)
      return rc;
  }
  return 0;
}

static int write_workers(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing) {
  kvp__adv_worker_state_t ws;
  sqlite3_stmt *s = st->s[S_WORKER_UPSERT];
  int rc;

  for (size_t i = 0; ing && i < kvp__adv_ingest_worker_count(ing); i++) {
    uint32_t dp = 0;
    if (kvp__adv_ingest_worker_get(ing, i, &ws) != 0)
      continue;
    sqlite3_bind_text(s, 1, kvp__adv_index_worker_name(ix, ws.id, &dp), -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, dp);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)ws.epoch);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)ws.last_event_id);
    sqlite3_bind_int64(s, 5, (sqlite3_int64)ws.last_seen_ms);
    sqlite3_bind_text(s, 6, ws.down ? "down" : (ws.known ? "up" : "unknown"), -1, SQLITE_STATIC);
    if ((rc = step_done(s)) != 0)
      return rc;
  }
  return 0;
}

static int write_volumes(kvp__adv_store_t *st, kvp__adv_index_t *ix, uint64_t now_ms) {
  size_t n = kvp__adv_index_volume_count(ix);
  int rc;
  for (size_t i = st->volumes_written ? st->volumes_written : 1; i < n; i++) {
    sqlite3_stmt *s = st->s[S_VOLUME_INSERT];
    sqlite3_bind_text(s, 1, kvp__adv_index_volume_name(ix, (uint16_t)i), -1, SQLITE_STATIC);
    sqlite3_bind_null(s, 2);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)now_ms);
    if ((rc = step_done(s)) != 0)
      return rc;
  }
  return 0;
}

/* Signed order, as SQLite stores the hashes. */
static int by_change_hash(const void *a, const void *b) {
  int64_t x = (int64_t)((const kvp__adv_change_t *)a)->hash;
  int64_t y = (int64_t)((const kvp__adv_change_t *)b)->hash;
  return x < y ? -1 : x > y;
}

static int by_gone_hash(const void *a, const void *b) {
  int64_t x = (int64_t)((const kvp__adv_gone_t *)a)->hash;
  int64_t y = (int64_t)((const kvp__adv_gone_t *)b)->hash;
  return x < y ? -1 : x > y;
}

int kvp__adv_store_flush(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing,
                         uint64_t stream_seq, size_t *nblocks) {
  kvp__adv_changes_t ch;
  uint64_t now_ms = kvp__unix_ms();
  int rc;

  if (nblocks)
    *nblocks = 0;
  if (kvp__adv_index_changes_take(ix, &ch) != 0)
    return KVP_ENOMEM;
  /* In key order the B-tree writes walk the pages once instead of jumping
   * between them: the coalescing buys this for free. */
  if (ch.ngone > 1)
    qsort(ch.gone, ch.ngone, sizeof *ch.gone, by_gone_hash);
  if (ch.nblocks > 1)
    qsort(ch.blocks, ch.nblocks, sizeof *ch.blocks, by_change_hash);
  if ((rc = exec(st->db, "BEGIN IMMEDIATE", NULL, 0)) != 0)
    goto fail;
  for (size_t i = 0; i < ch.ngone; i++)
    if ((rc = write_gone(st, ix, &ch.gone[i])) != 0)
      goto rollback;
  for (size_t i = 0; i < ch.nblocks; i++)
    if ((rc = write_block(st, ix, &ch.blocks[i], now_ms)) != 0)
      goto rollback;
  if ((rc = write_workers(st, ix, ing)) != 0 || (rc = write_volumes(st, ix, now_ms)) != 0)
    goto rollback;
  sqlite3_bind_text(st->s[S_META_SET], 1, "stream_seq", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st->s[S_META_SET], 2, (sqlite3_int64)stream_seq);
  if ((rc = step_done(st->s[S_META_SET])) != 0)
    goto rollback;
  if ((rc = exec(st->db, "COMMIT", NULL, 0)) != 0)
    goto rollback;
  st->stream_seq = stream_seq;
  st->volumes_written = kvp__adv_index_volume_count(ix);
  if (nblocks)
    *nblocks = ch.nblocks;
  kvp__adv_changes_free(&ch);
  return 0;
rollback:
  kvp_log_error("advisor: flush of %zu blocks failed: %s", ch.nblocks, sqlite3_errmsg(st->db));
  exec(st->db, "ROLLBACK", NULL, 0);
fail:
  kvp__adv_index_changes_restore(ix, &ch);
  kvp__adv_changes_free(&ch);
  return KVP_EDB;
}

static int load_workers(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT worker, dp_rank, epoch, last_event_id, last_seen, status"
                         " FROM workers",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__adv_worker_state_t ws = {0};
    const char *status = (const char *)sqlite3_column_text(s, 5);
    if (kvp__adv_index_worker(ix, (const char *)sqlite3_column_text(s, 0),
                              (uint32_t)sqlite3_column_int64(s, 1), &ws.id) != 0)
      continue;
    ws.epoch = (uint64_t)sqlite3_column_int64(s, 2);
    ws.last_event_id = (uint64_t)sqlite3_column_int64(s, 3);
    ws.last_seen_ms = (uint64_t)sqlite3_column_int64(s, 4);
    ws.known = status && strcmp(status, "unknown") != 0;
    ws.down = status && strcmp(status, "down") == 0;
    if (ing && (rc = kvp__adv_ingest_worker_set(ing, &ws)) != 0)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
}

static int load_blocks(kvp__adv_store_t *st, kvp__adv_index_t *ix) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__adv_block_t b;
    b.hash = (uint64_t)sqlite3_column_int64(s, 0);
    b.parent =
        sqlite3_column_type(s, 1) == SQLITE_NULL ? b.hash : (uint64_t)sqlite3_column_int64(s, 1);
    b.tokens = (uint32_t)sqlite3_column_int64(s, 2);
    b.bytes = (uint64_t)sqlite3_column_int64(s, 3);
    b.last_access_ms = (uint64_t)sqlite3_column_int64(s, 4);
    b.hits = (uint32_t)sqlite3_column_int64(s, 5);
    b.freq = sqlite3_column_double(s, 6);
    if ((rc = kvp__adv_index_load_block(ix, &b)) != 0)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
}

static int load_locations(kvp__adv_store_t *st, kvp__adv_index_t *ix) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db, "SELECT hash, worker, dp_rank, tier, volume FROM block_locations",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    kvp__adv_loc_t loc;
    uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
    if (kvp__adv_index_worker(ix, (const char *)sqlite3_column_text(s, 1),
                              (uint32_t)sqlite3_column_int64(s, 2), &loc.worker) != 0 ||
        kvp__adv_index_volume(ix, (const char *)sqlite3_column_text(s, 4), &loc.volume) != 0) {
      kvp_log_warn("advisor: location of block %016llx skipped: bad worker or volume",
                   (unsigned long long)h);
      continue;
    }
    loc.tier = (uint8_t)sqlite3_column_int(s, 3);
    if ((rc = kvp__adv_index_load_loc(ix, h, &loc)) == KVP_ENOMEM)
      goto done;
  }
  rc = r == SQLITE_DONE ? 0 : KVP_EDB;
done:
  sqlite3_finalize(s);
  return rc;
}

int kvp__adv_store_load(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing,
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
  kvp__adv_index_track_dirty(ix, 0);
  if ((rc = load_workers(st, ix, ing)) == 0 && (rc = load_blocks(st, ix)) == 0)
    rc = load_locations(st, ix);
  kvp__adv_index_track_dirty(ix, 1);
  if (rc == 0) {
    st->stream_seq = *stream_seq;
    st->volumes_written = kvp__adv_index_volume_count(ix);
  }
  return rc;
}
