/* The advisor's store: opening, closing, prepared statements and the
 * database's identity; see store.h. The schema is in store_schema.c,
 * loading in store_load.c, the write-behind flush in store_write.c.
 * Thread: the one that opens the store. */
#include "store/store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"
#include "kvplane/status.h"

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
    [S_HIST_INSERT] =
        "INSERT OR REPLACE INTO tier_history(t, tier, volume, blocks, bytes, capacity)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [S_HIST_TRIM] = "DELETE FROM tier_history WHERE t < ?1",
    [S_GEN_BUMP] = "UPDATE meta SET value = value + 1 WHERE key = 'generation'",
};

int kvp__store_open(const char *path, kvp__store_t **out, char *err, size_t errlen) {
  kvp__store_t *st = calloc(1, sizeof *st);
  int rc = KVP_ENOMEM;

  *out = NULL;
  if (st == NULL)
    goto fail;
  if ((rc = kvp__store_open_db(path, &st->db, err, errlen)) != 0 ||
      (rc = kvp__store_upgrade(st->db, KVP__STORE_SCHEMA_VERSION, err, errlen)) != 0) {
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
  kvp__store_close(st);
  return rc;
}

void kvp__store_close(kvp__store_t *st) {
  if (st == NULL)
    return;
  for (int i = 0; i < S_COUNT; i++)
    sqlite3_finalize(st->s[i]);
  sqlite3_close(st->db);
  free(st->hist);
  free(st);
}

uint64_t kvp__store_stream_seq(const kvp__store_t *st) {
  return st->stream_seq;
}

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

int kvp__store_bind(kvp__store_t *st, const char *ns, const char *consumer,
                    char db_id[KVP__STORE_DB_ID_LEN + 1], char *err, size_t errlen) {
  char have_ns[128], have_consumer[128];
  int rc;

  if ((rc = meta_get(st->db, "namespace", have_ns, sizeof have_ns)) != 0 ||
      (rc = meta_get(st->db, "consumer", have_consumer, sizeof have_consumer)) != 0 ||
      (rc = meta_get(st->db, "db_id", db_id, KVP__STORE_DB_ID_LEN + 1)) != 0) {
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
  if (strlen(db_id) != KVP__STORE_DB_ID_LEN) {
    unsigned char r[KVP__STORE_DB_ID_LEN / 2];
    sqlite3_randomness((int)sizeof r, r);
    for (size_t i = 0; i < sizeof r; i++)
      snprintf(db_id + 2 * i, 3, "%02x", r[i]);
  }
  if ((rc = kvp__store_sql_exec(st->db, "BEGIN IMMEDIATE", err, errlen)) != 0)
    return rc;
  if ((rc = meta_set(st->db, "namespace", ns)) != 0 ||
      (consumer != NULL && (rc = meta_set(st->db, "consumer", consumer)) != 0) ||
      (rc = meta_set(st->db, "db_id", db_id)) != 0) {
    snprintf(err, errlen, "%s: cannot write meta: %s", sqlite3_db_filename(st->db, "main"),
             sqlite3_errmsg(st->db));
    kvp__store_sql_exec(st->db, "ROLLBACK", NULL, 0);
    return rc;
  }
  return kvp__store_sql_exec(st->db, "COMMIT", err, errlen);
}
