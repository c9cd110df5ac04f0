/* The migrations journal (the migrations table, docs/sql.md) and the
 * volumes table's tier and capacity, through the tiering engine's own
 * SQLite connection. States: queued -> copying -> committed ->
 * source_deleted, or failed with the error (DESIGN.md, "Migrations").
 *
 * Threads: one connection, used by one thread at a time: the engine's open
 * on the loop thread, then its jobs on the thread pool, one at a time. */
#ifndef KVP_TIER_JOURNAL_H
#define KVP_TIER_JOURNAL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* Opens path (the advisor's database, which must exist) for the journal:
 * WAL, synchronous=NORMAL, a 10 s busy timeout. Returns 0 or KVP_EDB with
 * err naming the path. */
int kvp__tier_journal_open(const char *path, sqlite3 **out, char *err, size_t errlen);

/* BEGIN IMMEDIATE / COMMIT around a job's journal writes. */
void kvp__tier_journal_begin(sqlite3 *db);
void kvp__tier_journal_commit(sqlite3 *db);

/* A move queued now: its row id, or -1 when the row could not be written
 * (the move still runs; its outcome is then only logged). to_volume ""
 * and to_tier 0 for an eviction. */
int64_t kvp__tier_journal_insert(sqlite3 *db, uint64_t hash, int from_tier, const char *from_volume,
                                 int to_tier, const char *to_volume, uint64_t bytes,
                                 uint64_t now_ms);

/* Moves row id to state, with error (NULL for none). */
void kvp__tier_journal_set(sqlite3 *db, int64_t id, const char *state, const char *error);

/* Records a volume's tier and capacity (0: unknown) in the volumes table. */
int kvp__tier_journal_volume(sqlite3 *db, const char *name, int tier, uint64_t capacity,
                             uint64_t now_ms);

/* Calls fn for every row not finished (queued, copying, committed). */
typedef void (*kvp__tier_journal_fn)(void *ctx, int64_t id, uint64_t hash, const char *from_volume,
                                     const char *to_volume, const char *state);
int kvp__tier_journal_unfinished(sqlite3 *db, kvp__tier_journal_fn fn, void *ctx);

/* Calls fn for every finished row (source_deleted) updated at or after the
 * time the database's last write-behind flush took the index's changes
 * (meta prepared_ms, written by that flush) less margin_ms; every one when
 * the database has no such mark. Their effects on the index (the
 * destination's location added, the source's dropped) may not have reached
 * the database before a crash. */
int kvp__tier_journal_recent(sqlite3 *db, uint64_t margin_ms, kvp__tier_journal_fn fn, void *ctx);

#endif
