/* The migrations journal (the migrations table, docs/sql.md) and the
 * volumes table's tier and capacity, through the tiering engine's own
 * SQLite connection. The SQL lives here, in the store module, with the rest
 * of the schema's; the tiering engine calls these. States: queued -> copying -> committed ->
 * source_deleted, or failed with the error (DESIGN.md, "Migrations").
 *
 * Threads: one connection, used by one thread at a time: the engine's open
 * on the loop thread, then its jobs on the thread pool, one at a time. */
#ifndef KVP_STORE_JOURNAL_H
#define KVP_STORE_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvp__journal_s kvp__journal_t;

/* Opens path (the advisor's database, which must exist) for the journal:
 * WAL, synchronous=NORMAL, a 10 s busy timeout. Returns 0 or KVP_EDB with
 * err naming the path, or KVP_ENOMEM. */
int kvp__journal_open(const char *path, kvp__journal_t **out, char *err, size_t errlen);

/* Closes the connection; NULL is accepted. */
void kvp__journal_close(kvp__journal_t *j);

/* The connection's last error message. */
const char *kvp__journal_errmsg(kvp__journal_t *j);

/* BEGIN IMMEDIATE / COMMIT around a job's journal writes. */
void kvp__journal_begin(kvp__journal_t *j);
void kvp__journal_commit(kvp__journal_t *j);

/* A move queued now: its row id, or -1 when the row could not be written
 * (the move still runs; its outcome is then only logged). to_volume ""
 * and to_tier 0 for an eviction. ns: the key namespace of its objects in
 * both volumes (NULL for none: a compaction). */
int64_t kvp__journal_insert(kvp__journal_t *j, uint64_t hash, int from_tier,
                            const char *from_volume, int to_tier, const char *to_volume,
                            const char *ns, uint64_t bytes, uint64_t now_ms);

/* Moves row id to state, with error (NULL for none). */
void kvp__journal_set(kvp__journal_t *j, int64_t id, const char *state, const char *error);

/* Records a volume's tier and capacity (0: unknown) in the volumes table. */
int kvp__journal_volume(kvp__journal_t *j, const char *name, int tier, uint64_t capacity,
                        uint64_t now_ms);

/* Pins (the pins table): adds (pinned 1) or removes (0) hash; 0 or
 * KVP_EDB. */
int kvp__journal_pin(kvp__journal_t *j, uint64_t hash, int pinned, const char *note,
                     uint64_t now_ms);
/* Calls fn(ctx, hash) for every pin; 0 or KVP_EDB. */
int kvp__journal_pins(kvp__journal_t *j, void (*fn)(void *ctx, uint64_t hash), void *ctx);

/* Calls fn for every row not finished (queued, copying, committed). ns is
 * the row's key namespace, NULL for rows written before schema 8. */
typedef void (*kvp__journal_fn)(void *ctx, int64_t id, uint64_t hash, const char *from_volume,
                                const char *to_volume, const char *state, const char *ns);
int kvp__journal_unfinished(kvp__journal_t *j, kvp__journal_fn fn, void *ctx);

/* Calls fn for every finished row (source_deleted) updated at or after the
 * time the database's last write-behind flush took the index's changes
 * (meta prepared_ms, written by that flush) less margin_ms; every one when
 * the database has no such mark. Their effects on the index (the
 * destination's location added, the source's dropped) may not have reached
 * the database before a crash. */
int kvp__journal_recent(kvp__journal_t *j, uint64_t margin_ms, kvp__journal_fn fn, void *ctx);

/* The scrubs table (docs/sql.md): one row per volume pass of the tiering
 * engine's scrub, written by the loop thread on the scrub's own
 * connection. */
typedef struct kvp__journal_scrub_s {
  uint64_t objects, bytes;           /* listed */
  uint64_t verified, verified_bytes; /* read and checked (verify = on) */
  uint64_t missing;                  /* locations without an object, dropped */
  uint64_t orphans;                  /* objects without a location, first found */
  uint64_t orphans_confirmed;        /* orphaned at two passes in a row: deleted or adopted */
  uint64_t corrupt;                  /* frames that failed verification: quarantined */
} kvp__journal_scrub_t;

/* A pass of volume starts (state running): its row id, or -1. */
int64_t kvp__journal_scrub_start(kvp__journal_t *j, const char *volume, int tier, int verify,
                                 uint64_t now_ms);

/* Row id's state (running, done, failed, stopped) and figures so far. */
void kvp__journal_scrub_set(kvp__journal_t *j, int64_t id, const char *state,
                            const kvp__journal_scrub_t *f, const char *error, uint64_t now_ms);

/* Passes left running by an earlier process become interrupted. */
int kvp__journal_scrub_recover(kvp__journal_t *j, uint64_t now_ms);

/* When volume's last finished pass started (Unix ms), 0 when never. */
uint64_t kvp__journal_scrub_last(kvp__journal_t *j, const char *volume);

#endif
