/* The kvplane CLI's database views (see inspect.h): each is one SQL query
 * over the documented schema (docs/sql.md) and a list of column formats;
 * one printer renders any of them as aligned text or as JSON. */
#include "cli/inspect.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvplane/status.h"

typedef enum fmt_e {
  F_TEXT,  /* as stored */
  F_INT,   /* integer */
  F_SIZE,  /* bytes */
  F_AGE,   /* Unix ms, printed as the time since */
  F_HASH,  /* a 64-bit hash stored signed, printed as 16 hex digits */
  F_REAL,  /* two decimals */
  F_FILL,  /* a fraction, printed as a percentage */
  F_TIERS, /* tier numbers, printed G1.. */
} fmt_t;

typedef struct col_s {
  const char *name; /* header and JSON key */
  fmt_t fmt;
} col_t;

#define MAX_COLS 12
#define CELL 48

const char *kvp__cli_size(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}

const char *kvp__cli_duration(uint64_t ms, char *buf, size_t len) {
  if (ms < 1000)
    snprintf(buf, len, "%" PRIu64 " ms", ms);
  else if (ms < 60000)
    snprintf(buf, len, "%.1f s", (double)ms / 1000);
  else if (ms < 3600000)
    snprintf(buf, len, "%.0f min", (double)ms / 60000);
  else if (ms < 86400000)
    snprintf(buf, len, "%.1f h", (double)ms / 3600000);
  else
    snprintf(buf, len, "%.0f d", (double)ms / 86400000);
  return buf;
}

int kvp__cli_db_open(const char *path, sqlite3 **out, char *err, size_t errlen) {
  struct stat sb;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = KVP_EDB;

  *out = NULL;
  if (stat(path, &sb) != 0) {
    snprintf(err, errlen, "%s: no such database (is --db or [store] path right?)", path);
    return KVP_ENOENT;
  }
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "%s: %s", path, sqlite3_errmsg(db));
    goto out;
  }
  sqlite3_busy_timeout(db, 5000);
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st,
                         NULL) != SQLITE_OK ||
      sqlite3_step(st) != SQLITE_ROW) {
    snprintf(err, errlen, "%s: not a kvplane database (%s)", path, sqlite3_errmsg(db));
    goto out;
  }
  rc = 0;
out:
  sqlite3_finalize(st);
  if (rc != 0)
    sqlite3_close(db);
  else
    *out = db;
  return rc;
}

static void cell(const col_t *c, sqlite3_stmt *st, int i, const kvp__cli_out_t *o, char *buf) {
  int type = sqlite3_column_type(st, i);
  int64_t v = sqlite3_column_int64(st, i);

  if (type == SQLITE_NULL) {
    snprintf(buf, CELL, "-");
    return;
  }
  switch (c->fmt) {
  case F_INT:
    snprintf(buf, CELL, "%" PRId64, v);
    break;
  case F_SIZE:
    kvp__cli_size((uint64_t)v, buf, CELL);
    break;
  case F_AGE: {
    char d[32];
    if (v <= 0)
      snprintf(buf, CELL, "never");
    else if ((uint64_t)v >= o->now_ms)
      snprintf(buf, CELL, "now");
    else
      snprintf(buf, CELL, "%s ago", kvp__cli_duration(o->now_ms - (uint64_t)v, d, sizeof d));
    break;
  }
  case F_HASH:
    snprintf(buf, CELL, "%016" PRIx64, (uint64_t)v);
    break;
  case F_REAL:
    snprintf(buf, CELL, "%.2f", sqlite3_column_double(st, i));
    break;
  case F_FILL:
    snprintf(buf, CELL, "%.1f%%", 100.0 * sqlite3_column_double(st, i));
    break;
  case F_TIERS:
  case F_TEXT:
    snprintf(buf, CELL, "%s", (const char *)sqlite3_column_text(st, i));
    break;
  }
}

static json_t *json_cell(const col_t *c, sqlite3_stmt *st, int i) {
  switch (sqlite3_column_type(st, i)) {
  case SQLITE_NULL:
    return json_null();
  case SQLITE_INTEGER:
    if (c->fmt == F_HASH) {
      char hex[24];
      snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)sqlite3_column_int64(st, i));
      return json_string(hex);
    }
    return json_integer((json_int_t)sqlite3_column_int64(st, i));
  case SQLITE_FLOAT:
    return json_real(sqlite3_column_double(st, i));
  default:
    return json_string((const char *)sqlite3_column_text(st, i));
  }
}

/* Runs sql (with ?1 bound to bind1 when bind1 >= 0) and prints its rows
 * with cols. A title line precedes a text table when title is set. */
static int print_query(sqlite3 *db, const char *title, const char *sql, int64_t bind1,
                       const col_t *cols, int ncols, const kvp__cli_out_t *o, json_t *into,
                       char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  char(*cells)[CELL] = NULL;
  size_t nrows = 0, cap = 0;
  int width[MAX_COLS] = {0}, rc = KVP_EDB, step;

  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "query failed: %s", sqlite3_errmsg(db));
    return KVP_EDB;
  }
  if (bind1 >= 0)
    sqlite3_bind_int64(st, 1, bind1);
  json_t *arr = o->json ? json_array() : NULL;
  for (int c = 0; c < ncols; c++)
    width[c] = (int)strlen(cols[c].name);
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (o->json) {
      json_t *row = json_object();
      for (int c = 0; c < ncols; c++)
        json_object_set_new(row, cols[c].name, json_cell(&cols[c], st, c));
      json_array_append_new(arr, row);
      continue;
    }
    if (nrows == cap) {
      cap = cap ? cap * 2 : 64;
      void *p = realloc(cells, cap * (size_t)ncols * CELL);
      if (p == NULL) {
        rc = KVP_ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto out;
      }
      cells = p;
    }
    for (int c = 0; c < ncols; c++) {
      char *b = cells[nrows * (size_t)ncols + (size_t)c];
      cell(&cols[c], st, c, o, b);
      if ((int)strlen(b) > width[c])
        width[c] = (int)strlen(b);
    }
    nrows++;
  }
  if (step != SQLITE_DONE) {
    snprintf(err, errlen, "query failed: %s", sqlite3_errmsg(db));
    goto out;
  }
  if (o->json) {
    json_object_set(into, title ? title : "rows", arr);
  } else {
    if (title)
      fprintf(o->f, "%s\n", title);
    for (int c = 0; c < ncols; c++)
      fprintf(o->f, "%s%-*s", c ? "  " : "", c + 1 < ncols ? width[c] : 0, cols[c].name);
    fputc('\n', o->f);
    for (size_t r = 0; r < nrows; r++) {
      for (int c = 0; c < ncols; c++) {
        const char *b = cells[r * (size_t)ncols + (size_t)c];
        /* Numbers right-aligned, words left-aligned. */
        int right = cols[c].fmt != F_TEXT && cols[c].fmt != F_HASH && cols[c].fmt != F_TIERS &&
                    cols[c].fmt != F_AGE;
        int w = right ? width[c] : c + 1 < ncols ? -width[c] : 0; /* no trailing blanks */
        fprintf(o->f, "%s%*s", c ? "  " : "", w, b);
      }
      fputc('\n', o->f);
    }
    if (nrows == 0)
      fprintf(o->f, "(none)\n");
  }
  rc = 0;
out:
  json_decref(arr);
  free(cells);
  sqlite3_finalize(st);
  return rc;
}

/* Prints a finished JSON document. */
static void emit_json(json_t *doc, const kvp__cli_out_t *o) {
  json_dumpf(doc, o->f, JSON_INDENT(2));
  fputc('\n', o->f);
}

static int run_one(sqlite3 *db, const char *sql, int64_t bind1, const col_t *cols, int ncols,
                   const kvp__cli_out_t *o, char *err, size_t errlen) {
  json_t *doc = o->json ? json_object() : NULL;
  int rc = print_query(db, NULL, sql, bind1, cols, ncols, o, doc, err, errlen);
  if (rc == 0 && o->json)
    emit_json(json_object_get(doc, "rows"), o);
  json_decref(doc);
  return rc;
}

static uint64_t stat_u64(const json_t *stats, const char *obj, const char *key) {
  const json_t *v = json_object_get(json_object_get(stats, obj), key);
  return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

/* Partitioned advisors (kvp__cli_stats_merge's "gathered"): per partition
 * who answered at which position, and the partitions nobody answered for. */
static void print_gathered(FILE *f, const json_t *g) {
  const json_t *missing = json_object_get(g, "missing"), *summed = json_object_get(g, "summed");
  const json_t *parts = json_object_get(g, "partitions"), *v;
  size_t i, j;
  if (g == NULL)
    return;
  fprintf(f, "partitions: %" PRIu64 ", %zu advisor(s) answered; the figures above are the sum of",
          (uint64_t)json_integer_value(json_object_get(g, "count")),
          json_array_size(json_object_get(g, "advisors")));
  json_array_foreach(summed, i, v)
      fprintf(f, "%s %s", i ? "," : "", json_is_string(v) ? json_string_value(v) : "?");
  fputc('\n', f);
  json_array_foreach(parts, i, v) {
    const json_t *ans = json_object_get(v, "answered"), *w;
    fprintf(f, "  partition %" PRIu64 ":",
            (uint64_t)json_integer_value(json_object_get(v, "partition")));
    if (json_array_size(ans) == 0)
      fputs(" MISSING (no advisor answered)", f);
    json_array_foreach(ans, j, w)
        fprintf(f, "%s %s at %" PRIu64, j ? "," : "",
                json_is_string(json_object_get(w, "advisor"))
                    ? json_string_value(json_object_get(w, "advisor"))
                    : "?",
                (uint64_t)json_integer_value(json_object_get(w, "position")));
    fputc('\n', f);
  }
  if (json_array_size(missing) > 0) {
    fputs("missing: partition", f);
    json_array_foreach(missing, i, v)
        fprintf(f, "%s %" PRIu64, i ? "," : "", (uint64_t)json_integer_value(v));
    fputs(": their workers are not in the figures\n", f);
  }
  json_array_foreach(json_object_get(g, "advisors"), i, v) {
    const json_t *e = json_object_get(v, "error");
    if (e != NULL)
      fprintf(f, "advisor %s answered an error: %s\n",
              json_is_string(json_object_get(v, "advisor"))
                  ? json_string_value(json_object_get(v, "advisor"))
                  : "?",
              json_is_string(e) ? json_string_value(e) : "?");
  }
}

int kvp__cli_status(sqlite3 *db, const json_t *stats, const kvp__cli_out_t *o, char *err,
                    size_t errlen) {
  static const col_t tiers[] = {{"tier", F_TEXT},  {"volume", F_TEXT},   {"blocks", F_INT},
                                {"bytes", F_SIZE}, {"capacity", F_SIZE}, {"fill", F_FILL}};
  static const col_t workers[] = {{"status", F_TEXT}, {"workers", F_INT}, {"last_seen", F_AGE}};
  json_t *doc = o->json ? json_object() : NULL;
  int rc;

  rc = print_query(db, "tiers",
                   "SELECT 'G' || tier, CASE WHEN volume = '' THEN '-' ELSE volume END, blocks,"
                   " bytes, capacity, fill FROM tier_usage ORDER BY tier, volume",
                   -1, tiers, 6, o, doc, err, errlen);
  if (rc == 0 && !o->json)
    fputc('\n', o->f);
  if (rc == 0)
    rc = print_query(db, "workers",
                     "SELECT status, count(*), max(last_seen) FROM workers GROUP BY status"
                     " ORDER BY status DESC",
                     -1, workers, 3, o, doc, err, errlen);
  if (rc != 0) {
    json_decref(doc);
    return rc;
  }
  if (o->json) {
    json_object_set(doc, "advisor", stats ? (json_t *)stats : json_null());
    emit_json(doc, o);
    json_decref(doc);
    return 0;
  }
  char a[32], b[32], c[32], d[32], e[32];
  if (stats == NULL) {
    fprintf(o->f, "\nadvisor: no answer over NATS%s%s (the figures above are the database's)\n",
            o->no_answer && o->no_answer[0] ? ": " : "", o->no_answer ? o->no_answer : "");
    return 0;
  }
  fprintf(o->f,
          "\nadvisor: %s mode, up %s, %" PRIu64 " blocks in %" PRIu64 " locations indexed\n"
          "ingest:  %" PRIu64 " block-events applied, %" PRIu64 " malformed, %" PRIu64
          " gaps, %" PRIu64 " resyncs\n"
          "lag:     index %s (max %s); database %s behind now (its last flush committed %s "
          "after the oldest batch it held)\n",
          json_string_value(json_object_get(stats, "mode")),
          kvp__cli_duration((uint64_t)json_integer_value(json_object_get(stats, "uptime_ms")), a,
                            sizeof a),
          (uint64_t)json_integer_value(json_object_get(stats, "blocks")),
          (uint64_t)json_integer_value(json_object_get(stats, "locations")),
          stat_u64(stats, "ingest", "block_events"), stat_u64(stats, "ingest", "malformed"),
          stat_u64(stats, "ingest", "gaps"), stat_u64(stats, "ingest", "resyncs"),
          kvp__cli_duration(stat_u64(stats, "freshness", "apply_lag_ms"), b, sizeof b),
          kvp__cli_duration(stat_u64(stats, "freshness", "apply_lag_max_ms"), c, sizeof c),
          kvp__cli_duration(stat_u64(stats, "freshness", "pending_ms"), d, sizeof d),
          kvp__cli_duration(stat_u64(stats, "freshness", "flush_lag_ms"), e, sizeof e));
  const json_t *t = json_object_get(stats, "tiering");
  if (t != NULL) {
    char sz[32];
    fprintf(o->f,
            "tiering: %" PRIu64 " blocks demoted, %" PRIu64 " promoted (%" PRIu64
            " prefetched), %s moved, %" PRIu64 " evicted, %" PRIu64 " failed, %" PRIu64
            " moves deferred by the throttle\n",
            stat_u64(stats, "tiering", "demoted"), stat_u64(stats, "tiering", "promoted"),
            stat_u64(stats, "tiering", "prefetched"),
            kvp__cli_size(stat_u64(stats, "tiering", "bytes_moved"), sz, sizeof sz),
            stat_u64(stats, "tiering", "evicted"), stat_u64(stats, "tiering", "failed"),
            stat_u64(stats, "tiering", "throttled"));
  }
  print_gathered(o->f, json_object_get(stats, "gathered"));
  return 0;
}

int kvp__cli_workers(sqlite3 *db, const kvp__cli_out_t *o, char *err, size_t errlen) {
  static const col_t cols[] = {
      {"worker", F_TEXT},       {"dp_rank", F_INT},   {"status", F_TEXT},   {"epoch", F_INT},
      {"last_event_id", F_INT}, {"last_seen", F_AGE}, {"down_at", F_AGE},   {"dropped", F_INT},
      {"g1_blocks", F_INT},     {"g2_blocks", F_INT}, {"g3_blocks", F_INT}, {"g4_blocks", F_INT}};
  return run_one(db,
                 "SELECT worker, dp_rank, status, epoch, last_event_id, last_seen, down_at,"
                 " locations_dropped, g1_blocks, g2_blocks, g3_blocks, g4_blocks"
                 " FROM worker_status ORDER BY worker, dp_rank",
                 -1, cols, 12, o, err, errlen);
}

int kvp__cli_blocks(sqlite3 *db, int hot, int n, const kvp__cli_out_t *o, char *err,
                    size_t errlen) {
  static const col_t cols[] = {{"hash", F_HASH},  {"parent", F_HASH}, {"hits", F_INT},
                               {"freq", F_REAL},  {"bytes", F_SIZE},  {"last_access", F_AGE},
                               {"tiers", F_TIERS}};
  /* The views stop at 100 rows; these queries take any n. */
  const char *sql =
      hot ? "SELECT b.hash, b.parent, b.hits, b.freq, b.bytes, b.last_access,"
            " (SELECT group_concat(DISTINCT 'G' || l.tier) FROM block_locations l"
            "  WHERE l.hash = b.hash) FROM blocks b WHERE b.hits > 0"
            " ORDER BY b.freq DESC, b.last_access DESC LIMIT ?1"
          : "SELECT b.hash, b.parent, b.hits, b.freq, b.bytes, b.last_access,"
            " (SELECT group_concat(DISTINCT 'G' || l.tier) FROM block_locations l"
            "  WHERE l.hash = b.hash) FROM blocks b ORDER BY b.last_access ASC, b.freq ASC"
            " LIMIT ?1";
  return run_one(db, sql, n, cols, 7, o, err, errlen);
}

int kvp__cli_migrations(sqlite3 *db, int failed_only, int n, const kvp__cli_out_t *o, char *err,
                        size_t errlen) {
  static const col_t cols[] = {{"id", F_INT},      {"hash", F_HASH},  {"from", F_TEXT},
                               {"to", F_TEXT},     {"bytes", F_SIZE}, {"state", F_TEXT},
                               {"updated", F_AGE}, {"error", F_TEXT}};
  const char *sql =
      failed_only
          ? "SELECT id, hash, 'G' || from_tier || ':' || from_volume,"
            " 'G' || to_tier || ':' || to_volume, bytes, state, updated, error FROM migrations"
            " WHERE state = 'failed' ORDER BY updated DESC LIMIT ?1"
          : "SELECT id, hash, 'G' || from_tier || ':' || from_volume,"
            " 'G' || to_tier || ':' || to_volume, bytes, state, updated, error FROM migrations"
            " ORDER BY updated DESC LIMIT ?1";
  return run_one(db, sql, n, cols, 8, o, err, errlen);
}
