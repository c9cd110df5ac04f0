/* The migrations journal (see journal.h). */
#include "store/journal.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

struct kvp__journal_s {
  sqlite3 *db;
};

int kvp__journal_open(const char *path, kvp__journal_t **out, char *err, size_t errlen) {
  kvp__journal_t *j = calloc(1, sizeof *j);

  *out = NULL;
  if (j == NULL)
    return KVP_ENOMEM;
  if (sqlite3_open_v2(path, &j->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "tiering: %s: %s", path, sqlite3_errmsg(j->db));
    kvp__journal_close(j);
    return KVP_EDB;
  }
  sqlite3_busy_timeout(j->db, 10000);
  /* WAL with synchronous=NORMAL, like the store: committed transactions
   * survive a crash of the process; a job's journal is three of them. */
  sqlite3_exec(j->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
  *out = j;
  return 0;
}

void kvp__journal_close(kvp__journal_t *j) {
  if (j == NULL)
    return;
  sqlite3_close(j->db);
  free(j);
}

const char *kvp__journal_errmsg(kvp__journal_t *j) {
  return sqlite3_errmsg(j->db);
}

void kvp__journal_begin(kvp__journal_t *j) {
  sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
}

void kvp__journal_commit(kvp__journal_t *j) {
  if (sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    kvp_log_warn("tiering: journal commit failed: %s", sqlite3_errmsg(j->db));
}

int64_t kvp__journal_insert(kvp__journal_t *j, uint64_t hash, int from_tier,
                            const char *from_volume, int to_tier, const char *to_volume,
                            const char *ns, uint64_t bytes, uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  int64_t id = -1;
  if (sqlite3_prepare_v2(j->db,
                         "INSERT INTO migrations(hash, from_tier, from_volume, to_tier, to_volume,"
                         " bytes, state, created, updated, ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6,"
                         " 'queued', ?7, ?7, ?8)",
                         -1, &s, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(s, 1, kvp_hash_to_i64(hash));
  sqlite3_bind_int(s, 2, from_tier);
  sqlite3_bind_text(s, 3, from_volume, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 4, to_tier);
  sqlite3_bind_text(s, 5, to_volume, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 6, (sqlite3_int64)bytes);
  sqlite3_bind_int64(s, 7, (sqlite3_int64)now_ms);
  if (ns != NULL)
    sqlite3_bind_text(s, 8, ns, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 8);
  if (sqlite3_step(s) == SQLITE_DONE)
    id = sqlite3_last_insert_rowid(j->db);
  sqlite3_finalize(s);
  return id;
}

void kvp__journal_set(kvp__journal_t *j, int64_t id, const char *state, const char *error) {
  sqlite3_stmt *s = NULL;
  if (id < 0 || sqlite3_prepare_v2(j->db,
                                   "UPDATE migrations SET state = ?1, updated = ?2, error = ?3"
                                   " WHERE id = ?4",
                                   -1, &s, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_text(s, 1, state, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)kvp__unix_ms());
  if (error)
    sqlite3_bind_text(s, 3, error, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, 3);
  sqlite3_bind_int64(s, 4, id);
  if (sqlite3_step(s) != SQLITE_DONE)
    kvp_log_warn("tiering: journal row %" PRId64 " not updated to %s: %s", id, state,
                 sqlite3_errmsg(j->db));
  sqlite3_finalize(s);
}

int kvp__journal_volume(kvp__journal_t *j, const char *name, int tier, uint64_t capacity,
                        uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  if (sqlite3_prepare_v2(j->db,
                         "INSERT INTO volumes(volume, tier, capacity, first_seen)"
                         " VALUES(?1, ?2, ?3, ?4) ON CONFLICT(volume) DO UPDATE SET tier = ?2,"
                         " capacity = ?3",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, tier);
  if (capacity)
    sqlite3_bind_int64(s, 3, (sqlite3_int64)capacity);
  else
    sqlite3_bind_null(s, 3);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)now_ms);
  if (sqlite3_step(s) == SQLITE_DONE)
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

/* Calls fn for each row of s (id, hash, from_volume, to_volume, state, ns),
 * then finalizes it. */
static int each_row(sqlite3_stmt *s, kvp__journal_fn fn, void *ctx) {
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW)
    fn(ctx, sqlite3_column_int64(s, 0), kvp_hash_from_i64(sqlite3_column_int64(s, 1)),
       (const char *)sqlite3_column_text(s, 2), (const char *)sqlite3_column_text(s, 3),
       (const char *)sqlite3_column_text(s, 4), (const char *)sqlite3_column_text(s, 5));
  sqlite3_finalize(s);
  return r == SQLITE_DONE ? 0 : KVP_EDB;
}

int kvp__journal_unfinished(kvp__journal_t *j, kvp__journal_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(j->db,
                         "SELECT id, hash, from_volume, to_volume, state, ns FROM migrations"
                         " WHERE state IN ('queued', 'copying', 'committed') ORDER BY id",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  return each_row(s, fn, ctx);
}

int kvp__journal_recent(kvp__journal_t *j, uint64_t margin_ms, kvp__journal_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(j->db,
                         "SELECT id, hash, from_volume, to_volume, state, ns FROM migrations"
                         " WHERE state = 'source_deleted' AND updated >= coalesce((SELECT value"
                         " FROM meta WHERE key = 'prepared_ms') - ?1, 0) ORDER BY id",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_int64(s, 1, (sqlite3_int64)margin_ms);
  return each_row(s, fn, ctx);
}

/* --- the scrubs table ---------------------------------------------------------- */

int64_t kvp__journal_scrub_start(kvp__journal_t *j, const char *volume, int tier, int verify,
                                 uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  int64_t id = -1;
  if (sqlite3_prepare_v2(j->db,
                         "INSERT INTO scrubs(volume, tier, verify, started, updated, state)"
                         " VALUES(?1, ?2, ?3, ?4, ?4, 'running')",
                         -1, &s, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(s, 1, volume, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, 2, tier);
  sqlite3_bind_int(s, 3, verify);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)now_ms);
  if (sqlite3_step(s) == SQLITE_DONE)
    id = sqlite3_last_insert_rowid(j->db);
  sqlite3_finalize(s);
  return id;
}

void kvp__journal_scrub_set(kvp__journal_t *j, int64_t id, const char *state,
                            const kvp__journal_scrub_t *f, const char *error, uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  if (id < 0 || sqlite3_prepare_v2(j->db,
                                   "UPDATE scrubs SET state = ?2, updated = ?3, objects = ?4,"
                                   " bytes = ?5, verified = ?6, verified_bytes = ?7, missing = ?8,"
                                   " orphans = ?9, orphans_confirmed = ?10, corrupt = ?11,"
                                   " error = ?12 WHERE id = ?1",
                                   -1, &s, NULL) != SQLITE_OK)
    return;
  sqlite3_bind_int64(s, 1, id);
  sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, (sqlite3_int64)now_ms);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)f->objects);
  sqlite3_bind_int64(s, 5, (sqlite3_int64)f->bytes);
  sqlite3_bind_int64(s, 6, (sqlite3_int64)f->verified);
  sqlite3_bind_int64(s, 7, (sqlite3_int64)f->verified_bytes);
  sqlite3_bind_int64(s, 8, (sqlite3_int64)f->missing);
  sqlite3_bind_int64(s, 9, (sqlite3_int64)f->orphans);
  sqlite3_bind_int64(s, 10, (sqlite3_int64)f->orphans_confirmed);
  sqlite3_bind_int64(s, 11, (sqlite3_int64)f->corrupt);
  if (error)
    sqlite3_bind_text(s, 12, error, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 12);
  if (sqlite3_step(s) != SQLITE_DONE)
    kvp_log_warn("tiering: scrubs row %" PRId64 ": %s", id, sqlite3_errmsg(j->db));
  sqlite3_finalize(s);
}

int kvp__journal_scrub_recover(kvp__journal_t *j, uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  if (sqlite3_prepare_v2(j->db,
                         "UPDATE scrubs SET state = 'interrupted', updated = ?1,"
                         " error = 'interrupted by a restart' WHERE state = 'running'",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_int64(s, 1, (sqlite3_int64)now_ms);
  if (sqlite3_step(s) == SQLITE_DONE)
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

uint64_t kvp__journal_scrub_last(kvp__journal_t *j, const char *volume) {
  sqlite3_stmt *s = NULL;
  uint64_t t = 0;
  if (sqlite3_prepare_v2(j->db,
                         "SELECT max(started) FROM scrubs WHERE volume = ?1 AND state = 'done'", -1,
                         &s, NULL) != SQLITE_OK)
    return 0;
  sqlite3_bind_text(s, 1, volume, -1, SQLITE_STATIC);
  if (sqlite3_step(s) == SQLITE_ROW)
    t = (uint64_t)sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return t;
}
int kvp__journal_pin(kvp__journal_t *j, uint64_t hash, int pinned, const char *note,
                     uint64_t now_ms) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  if (sqlite3_prepare_v2(j->db,
                         pinned ? "INSERT INTO pins(hash, created, note) VALUES(?1, ?2, ?3)"
                                  " ON CONFLICT(hash) DO UPDATE SET note = ?3"
                                : "DELETE FROM pins WHERE hash = ?1",
                         -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  sqlite3_bind_int64(s, 1, kvp_hash_to_i64(hash));
  if (pinned) {
    sqlite3_bind_int64(s, 2, (sqlite3_int64)now_ms);
    if (note && note[0])
      sqlite3_bind_text(s, 3, note, -1, SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(s, 3);
  }
  if (sqlite3_step(s) == SQLITE_DONE)
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

int kvp__journal_pins(kvp__journal_t *j, void (*fn)(void *ctx, uint64_t hash), void *ctx) {
  sqlite3_stmt *s = NULL;
  int r;
  if (sqlite3_prepare_v2(j->db, "SELECT hash FROM pins ORDER BY hash", -1, &s, NULL) != SQLITE_OK)
    return KVP_EDB;
  while ((r = sqlite3_step(s)) == SQLITE_ROW)
    fn(ctx, kvp_hash_from_i64(sqlite3_column_int64(s, 0)));
  sqlite3_finalize(s);
  return r == SQLITE_DONE ? 0 : KVP_EDB;
}
