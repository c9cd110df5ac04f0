/* A partition handed to another advisor: its workers' rows leave this
 * database (store.h, kvp__store_drop_workers). */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_impl.h"
#include "common/log.h"
#include "kvplane/status.h"

/* Deletes every row of worker (locations, worker rows). */
static int drop_one(sqlite3 *db, const char *worker) {
  static const char *const sql[] = {"DELETE FROM block_locations WHERE worker = ?1",
                                    "DELETE FROM workers WHERE worker = ?1"};
  for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, sql[i], -1, &s, NULL) != SQLITE_OK)
      return KVP_EDB;
    sqlite3_bind_text(s, 1, worker, -1, SQLITE_TRANSIENT);
    int r = sqlite3_step(s);
    sqlite3_finalize(s);
    if (r != SQLITE_DONE)
      return KVP_EDB;
  }
  return 0;
}

int kvp__store_drop_workers(kvp__store_t *st, int (*keep)(void *ctx, const char *worker), void *ctx,
                            const uint32_t *parts, size_t nparts, size_t *dropped) {
  sqlite3_stmt *s = NULL;
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = KVP_EDB;

  *dropped = 0;
  if (kvp__store_sql_exec(st->db, "BEGIN IMMEDIATE", NULL, 0) != 0)
    return KVP_EDB;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT worker FROM workers UNION SELECT DISTINCT worker FROM "
                         "block_locations",
                         -1, &s, NULL) != SQLITE_OK)
    goto rollback;
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    const char *w = (const char *)sqlite3_column_text(s, 0);
    if (w == NULL || keep(ctx, w))
      continue;
    if (n == cap) {
      char **grown = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
      if (grown == NULL) {
        rc = KVP_ENOMEM;
        goto rollback;
      }
      names = grown;
    }
    if ((names[n] = strdup(w)) == NULL) {
      rc = KVP_ENOMEM;
      goto rollback;
    }
    n++;
  }
  sqlite3_finalize(s);
  s = NULL;
  if (r != SQLITE_DONE)
    goto rollback;
  for (size_t i = 0; i < n; i++)
    if ((rc = drop_one(st->db, names[i])) != 0)
      goto rollback;
  /* Blocks no worker holds any more go with them. */
  if (n && kvp__store_sql_exec(st->db,
                               "DELETE FROM blocks WHERE NOT EXISTS (SELECT 1 FROM "
                               "block_locations l WHERE l.hash = blocks.hash)",
                               NULL, 0) != 0)
    goto rollback;
  /* The rows changed: an index snapshot is no longer current. */
  if (n && kvp__store_sql_step_done(st->s[S_GEN_BUMP]) != 0)
    goto rollback;
  for (size_t i = 0; i < nparts; i++) {
    char sql[96];
    snprintf(sql, sizeof sql, "DELETE FROM meta WHERE key = 'stream_seq.p%" PRIu32 "'", parts[i]);
    if (kvp__store_sql_exec(st->db, sql, NULL, 0) != 0)
      goto rollback;
  }
  if (kvp__store_sql_exec(st->db, "COMMIT", NULL, 0) != 0)
    goto rollback;
  for (size_t i = 0; i < n; i++) {
    kvp_log_info("advisor: worker %s is in a partition this advisor no longer owns: its rows are "
                 "dropped",
                 names[i]);
    free(names[i]);
  }
  free(names);
  *dropped = n;
  return 0;
rollback:
  sqlite3_finalize(s);
  kvp__store_sql_exec(st->db, "ROLLBACK", NULL, 0);
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  return rc == 0 ? KVP_EDB : rc;
}
