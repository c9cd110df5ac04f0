/* The kvplane CLI's database views: status, workers, blocks, migrations,
 * read from the advisor's SQLite file (read-only, while the daemon writes)
 * and printed for people (aligned columns, human sizes and ages) or as JSON
 * (--json: one array of objects, sizes in bytes, times in Unix ms).
 *
 * Threads: any, one call at a time per database handle. */
#ifndef KVP_CLI_INSPECT_H
#define KVP_CLI_INSPECT_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

/* Opens path read-only. Returns 0, KVP_ENOENT when there is no such file
 * (err says so and names it), or KVP_EDB when it is not a kvplane database
 * (no schema_version in meta) or cannot be read. */
int kvp__cli_db_open(const char *path, sqlite3 **out, char *err, size_t errlen);

typedef struct kvp__cli_out_s {
  FILE *f;
  int json;
  uint64_t now_ms;       /* ages are printed relative to this */
  const char *no_answer; /* why the advisor's stats are missing, or NULL */
} kvp__cli_out_t;

/* Per tier and volume: blocks, bytes, capacity, fill; workers up and down;
 * with stats (the advisor's stats reply, or NULL when it did not answer)
 * its ingest and flush lag. Returns 0 or KVP_EDB (err set). */
int kvp__cli_status(sqlite3 *db, const json_t *stats, const kvp__cli_out_t *o, char *err,
                    size_t errlen);

/* Every worker and dp rank: status, epoch, last event id, last seen, when
 * it last went down and how many G1/G2 locations were dropped then, blocks
 * per tier. */
int kvp__cli_workers(sqlite3 *db, const kvp__cli_out_t *o, char *err, size_t errlen);

/* The n hottest (by decayed hit frequency) or coldest (least recently
 * accessed) blocks with the tiers that hold them. */
int kvp__cli_blocks(sqlite3 *db, int hot, int n, const kvp__cli_out_t *o, char *err, size_t errlen);

/* The n most recent migrations, or only the failed ones. */
int kvp__cli_migrations(sqlite3 *db, int failed_only, int n, const kvp__cli_out_t *o, char *err,
                        size_t errlen);

/* "1.5 GiB", "512 B": bytes for people, into buf. */
const char *kvp__cli_size(uint64_t bytes, char *buf, size_t len);

/* "3.2 s", "4 min", "2.0 h", "3 d": a duration for people, into buf. */
const char *kvp__cli_duration(uint64_t ms, char *buf, size_t len);

#endif
