/* The advisor database's schema and its upgrades, and opening the file;
 * see store.h and docs/sql.md. Thread: the one that opens the store. */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store_impl.h"
#include "common/log.h"
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
    /* 4: tier occupancy over time, sampled by the advisor (store.h,
     * kvp__store_history_add). volume '' is a tier's total. */
    "CREATE TABLE tier_history(t INTEGER NOT NULL, tier INTEGER NOT NULL,"
    " volume TEXT NOT NULL DEFAULT '', blocks INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " capacity INTEGER, PRIMARY KEY(t, tier, volume)) WITHOUT ROWID;",
    /* 5: the tiering engine's scrub, one row per volume pass, and each
     * volume's latest pass. */
    "CREATE TABLE scrubs(id INTEGER PRIMARY KEY, volume TEXT NOT NULL, tier INTEGER NOT NULL,"
    " verify INTEGER NOT NULL, started INTEGER NOT NULL, updated INTEGER NOT NULL,"
    " state TEXT NOT NULL, objects INTEGER NOT NULL DEFAULT 0,"
    " bytes INTEGER NOT NULL DEFAULT 0, verified INTEGER NOT NULL DEFAULT 0,"
    " verified_bytes INTEGER NOT NULL DEFAULT 0, missing INTEGER NOT NULL DEFAULT 0,"
    " orphans INTEGER NOT NULL DEFAULT 0, orphans_confirmed INTEGER NOT NULL DEFAULT 0,"
    " corrupt INTEGER NOT NULL DEFAULT 0, error TEXT);"
    "CREATE VIEW scrub_status AS SELECT s.volume AS volume, 'G' || s.tier AS tier,"
    " s.state AS state, s.verify AS verify, s.started AS started, s.updated AS updated,"
    " s.objects AS objects, s.bytes AS bytes, s.verified AS verified,"
    " s.verified_bytes AS verified_bytes, s.missing AS missing, s.orphans AS orphans,"
    " s.orphans_confirmed AS orphans_confirmed, s.corrupt AS corrupt, s.error AS error,"
    " (SELECT count(*) FROM scrubs d WHERE d.volume = s.volume AND d.state = 'done') AS passes"
    " FROM scrubs s WHERE s.id = (SELECT max(id) FROM scrubs x WHERE x.volume = s.volume);",
    /* 6: blocks an operator pinned (kvplane pin; the tiering engine never
     * demotes or evicts a pinned block or its ancestors). */
    "CREATE TABLE pins(hash INTEGER PRIMARY KEY, created INTEGER NOT NULL, note TEXT);",
    /* 7: the index snapshot (store_snapshot.c) and the generation that
     * every change of the blocks and block_locations rows bumps. */
    ("CREATE TABLE index_snapshot(chunk INTEGER PRIMARY KEY, data BLOB NOT NULL);"
     "INSERT OR IGNORE INTO meta(key, value) VALUES('generation', 0);"),
    /* 8: the key namespace of a move's objects (partitioned tiering keeps
     * each partition's under <ns>-p<p>); NULL in rows written before. */
    "ALTER TABLE migrations ADD COLUMN ns TEXT;",
};

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
int kvp__store_upgrade(sqlite3 *db, int target, char *err, size_t errlen) {
  int v, rc;
  char sql[128];

  if ((rc = schema_version(db, &v)) != 0)
    return rc;
  int from = v;
  if (v > KVP__STORE_SCHEMA_VERSION) {
    snprintf(err, errlen, "schema version %d is newer than this program's %d", v,
             KVP__STORE_SCHEMA_VERSION);
    return KVP_ENOTSUP;
  }
  for (; v < target; v++) {
    if ((rc = kvp__store_sql_exec(db, "BEGIN IMMEDIATE", err, errlen)) != 0)
      return rc;
    snprintf(sql, sizeof sql,
             "INSERT INTO meta(key, value) VALUES('schema_version', %d)"
             " ON CONFLICT(key) DO UPDATE SET value = %d",
             v + 1, v + 1);
    if ((rc = kvp__store_sql_exec(db, steps[v], err, errlen)) != 0 ||
        (rc = kvp__store_sql_exec(db, sql, err, errlen)) != 0) {
      kvp__store_sql_exec(db, "ROLLBACK", NULL, 0);
      return rc;
    }
    if ((rc = kvp__store_sql_exec(db, "COMMIT", err, errlen)) != 0)
      return rc;
    if (from > 0)
      kvp_log_info("advisor: database upgraded from schema version %d to %d", v, v + 1);
  }
  return 0;
}

int kvp__store_open_db(const char *path, sqlite3 **db, char *err, size_t errlen) {
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
  return kvp__store_sql_exec(*db,
                             "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                             " PRAGMA cache_size = -65536;",
                             err, errlen);
}

int kvp__store_create_version(const char *path, int version) {
  sqlite3 *db = NULL;
  char err[256];
  int rc = kvp__store_open_db(path, &db, err, sizeof err);
  if (rc == 0)
    rc = kvp__store_upgrade(db, version, err, sizeof err);
  sqlite3_close(db);
  return rc;
}
