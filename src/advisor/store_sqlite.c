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

#include "common/array.h"
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
    /* 3: when a worker went down and how many G1/G2 locations died with it
     * (NULL and 0 while it is up), also in worker_status. */
    "ALTER TABLE workers ADD COLUMN down_at INTEGER;"
    "ALTER TABLE workers ADD COLUMN locations_dropped INTEGER NOT NULL DEFAULT 0;"
    "DROP VIEW worker_status;"
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
    "  AND l.dp_rank = w.dp_rank AND l.tier = 4) AS g4_blocks,"
    " w.down_at AS down_at, w.locations_dropped AS locations_dropped"
    " FROM workers w;",
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
                        " status, down_at, locations_dropped)"
                        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(worker, dp_rank)"
                        " DO UPDATE SET epoch = ?3, last_event_id = ?4, last_seen = ?5,"
                        " status = ?6, down_at = ?7, locations_dropped = ?8",
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
  if ((rc = open_db(&st->db, path, err, errlen)) != 0 ||
      (rc = upgrade(st->db, KVP__ADV_SCHEMA_VERSION, err, errlen)) != 0) {
    /* Every message names the file, once. */
    if (err != NULL && errlen > 0 && strstr(err, path) == NULL) {
      char why[512];
      snprintf(why, sizeof why, "%s", err);
      snprintf(err, errlen, "%s: %s", path, why);
    }
    goto fail;
  }
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

/* --- write-behind ------------------------------------------------------- */

/* Rows copied out of the index on the loop thread, so that the write can run
 * on another thread while the index keeps changing. Names point into the
 * index's interned tables, which live as long as the index. */
typedef struct frow_s {
  uint64_t hash, parent, bytes, last_access_ms;
  uint32_t tokens, hits, what, loc_off, nlocs;
  double freq;
} frow_t;

typedef struct floc_s {
  uint64_t hash;
  const char *worker, *volume;
  uint32_t dp_rank;
  int tier;
} floc_t;

typedef struct fworker_s {
  const char *name, *status;
  uint32_t dp_rank;
  uint64_t epoch, last_event_id, last_seen_ms, down_at_ms, locations_dropped;
} fworker_t;

struct kvp__adv_flush_s {
  kvp__adv_changes_t ch; /* given back to the index if the write fails */
  frow_t *rows;
  size_t nrows;
  floc_t *locs, *gone;
  size_t nlocs, ngone;
  fworker_t *workers;
  size_t nworkers;
  const char **volumes;
  size_t nvolumes, volumes_total;
  uint64_t stream_seq;
};

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

static void floc_fill(floc_t *f, kvp__adv_index_t *ix, uint64_t h, uint16_t worker, int tier,
                      uint16_t volume) {
  f->hash = h;
  f->worker = kvp__adv_index_worker_name(ix, worker, &f->dp_rank);
  f->volume = kvp__adv_index_volume_name(ix, volume);
  f->tier = tier;
}

void kvp__adv_flush_free(kvp__adv_flush_t *fl) {
  if (fl == NULL)
    return;
  kvp__adv_changes_free(&fl->ch);
  free(fl->rows);
  free(fl->locs);
  free(fl->gone);
  free(fl->workers);
  free(fl->volumes);
  free(fl);
}

size_t kvp__adv_flush_blocks(const kvp__adv_flush_t *fl) {
  return fl->nrows;
}

/* Copies the changed blocks and, where they changed, all their locations
 * (however many workers hold a block). */
static int prepare_rows(kvp__adv_flush_t *fl, kvp__adv_index_t *ix) {
  kvp__adv_loc_t *locs = NULL;
  size_t locs_cap = 0, cap = 0;
  int rc = KVP_ENOMEM;

  if (fl->ch.nblocks && (fl->rows = malloc(fl->ch.nblocks * sizeof *fl->rows)) == NULL)
    goto out;
  if (fl->ch.ngone && (fl->gone = malloc(fl->ch.ngone * sizeof *fl->gone)) == NULL)
    goto out;
  for (size_t i = 0; i < fl->ch.ngone; i++) {
    const kvp__adv_gone_t *g = &fl->ch.gone[i];
    floc_fill(&fl->gone[i], ix, g->hash, g->worker, g->tier, g->volume);
  }
  fl->ngone = fl->ch.ngone;
  for (size_t i = 0; i < fl->ch.nblocks; i++) {
    const kvp__adv_change_t *c = &fl->ch.blocks[i];
    frow_t *r = &fl->rows[fl->nrows++];
    kvp__adv_block_t b;
    size_t n = 0;
    memset(r, 0, sizeof *r);
    r->hash = c->hash;
    if (c->what == 0 || kvp__adv_index_get(ix, c->hash, &b, locs, locs_cap, &n) != 0)
      continue; /* what 0: delete */
    r->what = c->what;
    r->parent = b.parent;
    r->tokens = b.tokens;
    r->bytes = b.bytes;
    r->last_access_ms = b.last_access_ms;
    r->hits = b.hits;
    r->freq = b.freq;
    if (!(c->what & KVP__ADV_CH_LOCS))
      continue;
    if (n > locs_cap) {
      if ((rc = KVP_ARRAY_RESERVE(locs, locs_cap, n, 64)) != 0 ||
          (rc = kvp__adv_index_get(ix, c->hash, NULL, locs, locs_cap, &n)) != 0)
        goto out;
    }
    if ((rc = KVP_ARRAY_RESERVE(fl->locs, cap, fl->nlocs + n, 1024)) != 0)
      goto out;
    r->loc_off = (uint32_t)fl->nlocs;
    r->nlocs = (uint32_t)n;
    for (size_t k = 0; k < n; k++)
      floc_fill(&fl->locs[fl->nlocs++], ix, c->hash, locs[k].worker, locs[k].tier, locs[k].volume);
  }
  rc = 0;
out:
  free(locs);
  return rc;
}

static int prepare_workers(kvp__adv_flush_t *fl, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing) {
  size_t n = ing ? kvp__adv_ingest_worker_count(ing) : 0;
  kvp__adv_worker_state_t ws;
  if (n && (fl->workers = malloc(n * sizeof *fl->workers)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (kvp__adv_ingest_worker_get(ing, i, &ws) != 0)
      continue;
    fworker_t *w = &fl->workers[fl->nworkers++];
    w->name = kvp__adv_index_worker_name(ix, ws.id, &w->dp_rank);
    w->epoch = ws.epoch;
    w->last_event_id = ws.last_event_id;
    w->last_seen_ms = ws.last_seen_ms;
    w->down_at_ms = ws.down_at_ms;
    w->locations_dropped = ws.locations_dropped;
    w->status = ws.down ? "down" : (ws.known ? "up" : "unknown");
  }
  return 0;
}

int kvp__adv_store_prepare(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing,
                           uint64_t stream_seq, kvp__adv_flush_t **out) {
  kvp__adv_flush_t *fl = calloc(1, sizeof *fl);
  size_t from = st->volumes_written ? st->volumes_written : 1;
  int rc;

  *out = NULL;
  if (fl == NULL)
    return KVP_ENOMEM;
  if (kvp__adv_index_changes_take(ix, &fl->ch) != 0) {
    free(fl);
    return KVP_ENOMEM;
  }
  /* In key order the B-tree writes walk the pages once instead of jumping
   * between them: the coalescing buys this for free. */
  if (fl->ch.ngone > 1)
    qsort(fl->ch.gone, fl->ch.ngone, sizeof *fl->ch.gone, by_gone_hash);
  if (fl->ch.nblocks > 1)
    qsort(fl->ch.blocks, fl->ch.nblocks, sizeof *fl->ch.blocks, by_change_hash);
  fl->stream_seq = stream_seq;
  fl->volumes_total = kvp__adv_index_volume_count(ix);
  if ((rc = prepare_rows(fl, ix)) != 0 || (rc = prepare_workers(fl, ix, ing)) != 0)
    goto fail;
  if (fl->volumes_total > from) {
    if ((fl->volumes = malloc((fl->volumes_total - from) * sizeof *fl->volumes)) == NULL) {
      rc = KVP_ENOMEM;
      goto fail;
    }
    for (size_t v = from; v < fl->volumes_total; v++)
      fl->volumes[fl->nvolumes++] = kvp__adv_index_volume_name(ix, (uint16_t)v);
  }
  *out = fl;
  return 0;
fail:
  kvp__adv_store_abandon(ix, fl);
  return rc;
}

void kvp__adv_store_abandon(kvp__adv_index_t *ix, kvp__adv_flush_t *fl) {
  if (fl == NULL)
    return;
  kvp__adv_index_changes_restore(ix, &fl->ch);
  kvp__adv_flush_free(fl);
}

static void bind_floc(sqlite3_stmt *s, const floc_t *f) {
  sqlite3_bind_int64(s, 1, (sqlite3_int64)f->hash);
  sqlite3_bind_text(s, 2, f->worker, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, f->dp_rank);
  sqlite3_bind_int(s, 4, f->tier);
  sqlite3_bind_text(s, 5, f->volume, -1, SQLITE_STATIC);
}

static int write_row(kvp__adv_store_t *st, const kvp__adv_flush_t *fl, const frow_t *r,
                     uint64_t now_ms) {
  sqlite3_stmt *s;
  int rc;

  if (r->what == 0) {
    sqlite3_bind_int64(st->s[S_BLOCK_DELETE], 1, (sqlite3_int64)r->hash);
    sqlite3_bind_int64(st->s[S_LOC_DELETE], 1, (sqlite3_int64)r->hash);
    if ((rc = step_done(st->s[S_BLOCK_DELETE])) != 0)
      return rc;
    return step_done(st->s[S_LOC_DELETE]);
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
  if ((rc = step_done(s)) != 0)
    return rc;
  /* Rows of locations that stayed are kept (OR IGNORE); removed ones went
   * with the gone list. */
  for (uint32_t k = 0; k < r->nlocs; k++) {
    bind_floc(st->s[S_LOC_INSERT], &fl->locs[r->loc_off + k]);
    if ((rc = step_done(st->s[S_LOC_INSERT])) != 0)
      return rc;
  }
  return 0;
}

static int write_rest(kvp__adv_store_t *st, const kvp__adv_flush_t *fl, uint64_t now_ms) {
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
    if ((rc = step_done(s)) != 0)
      return rc;
  }
  s = st->s[S_VOLUME_INSERT];
  for (size_t i = 0; i < fl->nvolumes; i++) {
    sqlite3_bind_text(s, 1, fl->volumes[i], -1, SQLITE_STATIC);
    sqlite3_bind_null(s, 2);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)now_ms);
    if ((rc = step_done(s)) != 0)
      return rc;
  }
  s = st->s[S_META_SET];
  sqlite3_bind_text(s, 1, "stream_seq", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)fl->stream_seq);
  return step_done(s);
}

int kvp__adv_store_write(kvp__adv_store_t *st, const kvp__adv_flush_t *fl) {
  uint64_t now_ms = kvp__unix_ms();
  int rc;

  if ((rc = exec(st->db, "BEGIN IMMEDIATE", NULL, 0)) != 0)
    goto fail;
  for (size_t i = 0; i < fl->ngone; i++) {
    bind_floc(st->s[S_LOC_DELETE_ONE], &fl->gone[i]);
    if ((rc = step_done(st->s[S_LOC_DELETE_ONE])) != 0)
      goto rollback;
  }
  for (size_t i = 0; i < fl->nrows; i++)
    if ((rc = write_row(st, fl, &fl->rows[i], now_ms)) != 0)
      goto rollback;
  if ((rc = write_rest(st, fl, now_ms)) != 0)
    goto rollback;
  if ((rc = exec(st->db, "COMMIT", NULL, 0)) != 0)
    goto rollback;
  st->stream_seq = fl->stream_seq;
  st->volumes_written = fl->volumes_total;
  return 0;
rollback:
  kvp_log_error("advisor: flush of %zu blocks failed: %s", fl->nrows, sqlite3_errmsg(st->db));
  exec(st->db, "ROLLBACK", NULL, 0);
fail:
  return KVP_EDB;
}

int kvp__adv_store_flush(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing,
                         uint64_t stream_seq, size_t *nblocks) {
  kvp__adv_flush_t *fl = NULL;
  int rc;

  if (nblocks)
    *nblocks = 0;
  if ((rc = kvp__adv_store_prepare(st, ix, ing, stream_seq, &fl)) != 0)
    return rc;
  if ((rc = kvp__adv_store_write(st, fl)) != 0) {
    kvp__adv_store_abandon(ix, fl);
    return rc;
  }
  if (nblocks)
    *nblocks = fl->nrows;
  kvp__adv_flush_free(fl);
  return 0;
}

static int load_workers(kvp__adv_store_t *st, kvp__adv_index_t *ix, kvp__adv_ingest_t *ing) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT worker, dp_rank, epoch, last_event_id, last_seen, status,"
                         " down_at, locations_dropped FROM workers",
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
    ws.down_at_ms = ws.down ? (uint64_t)sqlite3_column_int64(s, 6) : 0;
    ws.locations_dropped = ws.down ? (uint64_t)sqlite3_column_int64(s, 7) : 0;
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

/* Reads meta.key into buf (empty when absent). Returns 0 or KVP_EDB. */
static int meta_get(sqlite3 *db, const char *key, char *buf, size_t len) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  buf[0] = '\0';
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  int r = sqlite3_step(s);
  if (r == SQLITE_ROW) {
    const unsigned char *v = sqlite3_column_text(s, 0);
    snprintf(buf, len, "%s", v ? (const char *)v : "");
    rc = 0;
  } else if (r == SQLITE_DONE) {
    rc = 0;
  }
  sqlite3_finalize(s);
  return rc;
}

static int meta_set(sqlite3 *db, const char *key, const char *value) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  if (sqlite3_prepare_v2(db,
                         "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                         " ON CONFLICT(key) DO UPDATE SET value = ?2",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
  if (sqlite3_step(s) == SQLITE_DONE)
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

int kvp__adv_store_bind(kvp__adv_store_t *st, const char *ns, const char *consumer,
                        char db_id[KVP__ADV_DB_ID_LEN + 1], char *err, size_t errlen) {
  char have_ns[128], have_consumer[128];
  int rc;

  if ((rc = meta_get(st->db, "namespace", have_ns, sizeof have_ns)) != 0 ||
      (rc = meta_get(st->db, "consumer", have_consumer, sizeof have_consumer)) != 0 ||
      (rc = meta_get(st->db, "db_id", db_id, KVP__ADV_DB_ID_LEN + 1)) != 0) {
    snprintf(err, errlen, "%s: cannot read meta: %s", sqlite3_db_filename(st->db, "main"),
             sqlite3_errmsg(st->db));
    return rc;
  }
  if ((have_ns[0] && strcmp(have_ns, ns) != 0) ||
      (consumer != NULL && have_consumer[0] && strcmp(have_consumer, consumer) != 0)) {
    snprintf(err, errlen,
             "%s: this database belongs to namespace '%s' (consumer '%s'), not to namespace "
             "'%s' (consumer '%s'); use another [store] path",
             sqlite3_db_filename(st->db, "main"), have_ns, have_consumer[0] ? have_consumer : "-",
             ns, consumer ? consumer : "-");
    return KVP_ECONFIG;
  }
  if (strlen(db_id) != KVP__ADV_DB_ID_LEN) {
    unsigned char r[KVP__ADV_DB_ID_LEN / 2];
    sqlite3_randomness((int)sizeof r, r);
    for (size_t i = 0; i < sizeof r; i++)
      snprintf(db_id + 2 * i, 3, "%02x", r[i]);
  }
  if ((rc = exec(st->db, "BEGIN IMMEDIATE", err, errlen)) != 0)
    return rc;
  if ((rc = meta_set(st->db, "namespace", ns)) != 0 ||
      (consumer != NULL && (rc = meta_set(st->db, "consumer", consumer)) != 0) ||
      (rc = meta_set(st->db, "db_id", db_id)) != 0) {
    snprintf(err, errlen, "%s: cannot write meta: %s", sqlite3_db_filename(st->db, "main"),
             sqlite3_errmsg(st->db));
    exec(st->db, "ROLLBACK", NULL, 0);
    return rc;
  }
  return exec(st->db, "COMMIT", err, errlen);
}
