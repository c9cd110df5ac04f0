/* kvp-bench load [--locations 1M] [--holders 8] [--copies 2]: restart time
 * from the advisor's SQLite database to an index that answers (issue 27).
 *
 * Writes a database of N block locations (the match suite's layout: chains
 * of 64, `copies` holders per block) with plain inserts in hash order,
 * then times kvp__store_open + kvp__store_load into an empty index and one
 * match (restart to answering), against reading the same rows with two
 * plain SELECTs (every column, no index): from the rows
 * (load.<N>M.rows.locations_per_s), then, after writing the index snapshot
 * from that index, from the snapshot (load.<N>M.locations_per_s). --db PATH keeps the database
 * (written once, reused by the next runs; with a current snapshot in it,
 * --snapshot-only times the snapshot path alone against the same SELECTs).
 * The 128M run is by hand. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "bench_index.h"
#include "index/index.h"
#include "kvplane/hash.h"
#include "store/store.h"

static int cmp_signed(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* The database: blocks and locations, inserted in signed hash order (the
 * B-trees append). Returns the number of locations written. */
static size_t write_db(const char *path, size_t want, size_t holders, double copies) {
  size_t full = (size_t)copies, extra = (size_t)((copies - (double)full) * 64 + 0.5);
  size_t per_chain = full * 64 + extra, nchains = (want + per_chain - 1) / per_chain;
  size_t nblocks = nchains * 64, nlocs = 0;
  /* (hash, parent, copies) of every block, sorted by hash. */
  int64_t *rows = malloc(nblocks * 3 * sizeof *rows);
  sqlite3 *db = NULL;
  sqlite3_stmt *sb = NULL, *sl = NULL;
  if (rows == NULL)
    return 0;
  for (size_t c = 0, k = 0; c < nchains; c++) {
    uint64_t prev = kvp_bi_rnd();
    for (size_t i = 0; i < 64; i++, k++) {
      uint64_t h = kvp_hash_chain(prev, kvp_bi_rnd(), KVP_HASH_SEED);
      rows[3 * k] = (int64_t)h;
      rows[3 * k + 1] = i ? (int64_t)prev : (int64_t)h;
      rows[3 * k + 2] = (int64_t)((full + (i < extra ? 1 : 0)) << 32 | c);
      prev = h;
    }
  }
  qsort(rows, nblocks, 3 * sizeof *rows, cmp_signed);
  kvp__store_create_version(path, KVP__STORE_SCHEMA_VERSION);
  sqlite3_open(path, &db);
  sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF; BEGIN", NULL, NULL, NULL);
  sqlite3_prepare_v2(db,
                     "INSERT INTO blocks(hash, parent, tokens, bytes, first_seen, last_access,"
                     " hits, freq) VALUES(?1, ?2, 16, 1048576, ?3, ?3, 1, 1.0)",
                     -1, &sb, NULL);
  sqlite3_prepare_v2(db,
                     "INSERT INTO block_locations(hash, worker, dp_rank, tier, volume)"
                     " VALUES(?1, ?2, 0, ?3, '')",
                     -1, &sl, NULL);
  for (size_t k = 0; k < nblocks; k++) {
    int64_t h = rows[3 * k], p = rows[3 * k + 1];
    size_t n = (size_t)((uint64_t)rows[3 * k + 2] >> 32), c = (uint32_t)rows[3 * k + 2];
    sqlite3_bind_int64(sb, 1, h);
    if (p == h)
      sqlite3_bind_null(sb, 2);
    else
      sqlite3_bind_int64(sb, 2, p);
    sqlite3_bind_int64(sb, 3, (sqlite3_int64)NOW_MS);
    sqlite3_step(sb);
    sqlite3_reset(sb);
    /* Location rows of one hash in key order: (worker, dp_rank, tier). */
    char names[64][24];
    int order[64], tiers[64];
    for (size_t j = 0; j < n && j < 64; j++) {
      snprintf(names[j], sizeof names[j], "worker%zu", (c + j) % holders);
      tiers[j] = j % 2 ? 2 : 1;
      order[j] = (int)j;
    }
    for (size_t a = 1; a < n; a++)
      for (size_t b = a; b > 0 && strcmp(names[order[b - 1]], names[order[b]]) > 0; b--) {
        int t = order[b];
        order[b] = order[b - 1];
        order[b - 1] = t;
      }
    for (size_t j = 0; j < n; j++) {
      sqlite3_bind_int64(sl, 1, h);
      sqlite3_bind_text(sl, 2, names[order[j]], -1, SQLITE_TRANSIENT);
      sqlite3_bind_int(sl, 3, tiers[order[j]]);
      if (sqlite3_step(sl) == SQLITE_DONE)
        nlocs++;
      sqlite3_reset(sl);
    }
  }
  sqlite3_exec(db, "COMMIT; PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
  sqlite3_finalize(sb);
  sqlite3_finalize(sl);
  sqlite3_close(db);
  free(rows);
  return nlocs;
}

/* The baseline: every row of both tables read with plain SELECTs. */
static double scan_rows(const char *path) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  uint64_t t0 = kvp_bench_now_ns(), acc = 0;
  static const char *const sql[2] = {
      "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks",
      "SELECT hash, worker, dp_rank, tier, volume FROM block_locations"};
  sqlite3_open(path, &db);
  sqlite3_exec(db, "PRAGMA mmap_size = 2147418112", NULL, NULL, NULL); /* as the load */
  for (int q = 0; q < 2; q++) {
    sqlite3_prepare_v2(db, sql[q], -1, &s, NULL);
    while (sqlite3_step(s) == SQLITE_ROW) {
      acc += (uint64_t)sqlite3_column_int64(s, 0) + (uint64_t)sqlite3_column_int64(s, 3);
      const unsigned char *t = sqlite3_column_text(s, q ? 1 : 2);
      acc += t ? t[0] : 0;
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  kvp_bench_sink(acc);
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

typedef struct prog_s {
  uint64_t calls, last_done, total;
} prog_t;

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
  prog_t *p = ctx;
  p->calls++;
  p->last_done = done;
  p->total = total;
}

/* Whether path holds an index snapshot of its current generation. */
static int has_current_snapshot(const char *path) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t g = -1, sg = -2;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'generation'", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
      g = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT substr(data, 9, 8) FROM index_snapshot WHERE chunk = 0", -1,
                           &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW && sqlite3_column_bytes(s, 0) == 8) {
      const unsigned char *p = sqlite3_column_blob(s, 0);
      sg = 0;
      for (int i = 0; i < 8; i++)
        sg |= (int64_t)p[i] << (8 * i);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return g == sg;
}

/* Restart to answering: open the store, load it into an empty index and
 * answer one match, timed into *secs. snapshot 0: the rows (and then a
 * snapshot is written from the loaded index, timed into *t_write); 1: the
 * snapshot, which must have been read. */
static int timed_load(const char *path, int snapshot, double *secs, kvp__index_stats_t *is,
                      uint64_t *snap_bytes, double *t_write) {
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  uint64_t seq = 0, t0 = kvp_bench_now_ns();
  prog_t pr = {0};
  char err[256];
  kvp__index_match_t rows[16];
  size_t nrows = 0;
  int rc = kvp__index_create(1024, 3600, &ix);
  if (rc == 0)
    rc = kvp__store_open(path, &st, err, sizeof err);
  if (rc == 0) {
    kvp__store_on_progress(st, on_progress, &pr);
    kvp__store_use_snapshot(st, snapshot);
    rc = kvp__store_load(st, ix, NULL, NULL, &seq);
  }
  if (rc == 0) {
    uint64_t h = 1;
    (void)kvp__index_match(ix, &h, 1, rows, 16, &nrows);
  }
  *secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  kvp__index_stats(ix, is);
  if (rc == 0 && snapshot && !kvp__store_loaded_snapshot(st))
    rc = KVP_ENOENT;
  if (rc == 0 && !snapshot) {
    t0 = kvp_bench_now_ns();
    rc = kvp__store_snapshot_write(st, ix, snap_bytes);
    *t_write = (double)(kvp_bench_now_ns() - t0) / 1e9;
  }
  printf("# %s: %llu progress calls, last %llu of %llu\n", snapshot ? "snapshot" : "rows",
         (unsigned long long)pr.calls, (unsigned long long)pr.last_done,
         (unsigned long long)pr.total);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  return rc;
}

KVP_BENCH_SUITE(load, "index: SQLite -> index load rate at N locations [--locations 1M|16M] "
                      "[--holders 8] [--copies 2] [--db PATH [--snapshot-only]] vs plain "
                      "SELECTs") {
  const size_t want = kvp_bi_size_arg(argc, argv, "--locations", 1u << 20);
  const size_t holders = kvp_bi_size_arg(argc, argv, "--holders", 8);
  const double copies = kvp_bi_double_arg(argc, argv, "--copies", 2.0);
  char dir[] = "/tmp/kvp-bench-load-XXXXXX", path[128], label[32], fig[96];
  const char *keep = NULL; /* --db PATH: reuse (or write once and keep) a database */
  int snap_only = 0;       /* --snapshot-only: a kept database's snapshot path alone */
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--db") == 0)
      keep = argv[i + 1];
    snap_only |= strcmp(argv[i], "--snapshot-only") == 0;
  }
  if (holders < 1 || copies < 1 || copies > 64 || (!keep && mkdtemp(dir) == NULL))
    return 1;
  snprintf(path, sizeof path, "%s", keep ? keep : dir);
  if (!keep)
    snprintf(path, sizeof path, "%s/advisor.db", dir);
  kvp_bi_label(label, sizeof label, want);
  uint64_t t0 = kvp_bench_now_ns();
  size_t nlocs = 0;
  if (keep && access(keep, R_OK) == 0) {
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    sqlite3_open(keep, &db);
    sqlite3_prepare_v2(db, "SELECT count(*) FROM block_locations", -1, &s, NULL);
    if (sqlite3_step(s) == SQLITE_ROW)
      nlocs = (size_t)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    printf("# %s: %zu locations\n", keep, nlocs);
  } else {
    nlocs = write_db(path, want, holders, copies);
    printf("# %zu locations written in %.1f s\n", nlocs, (double)(kvp_bench_now_ns() - t0) / 1e9);
  }
  double t_scan = scan_rows(path);

  /* The row path (the snapshot off), then a snapshot written from the
   * loaded index, then the snapshot path. */
  kvp__index_stats_t is, iss;
  double t_rows = 0, t_snap = 0, t_write = 0;
  uint64_t snap_bytes = 0;
  /* The first load of a process pays the kernel's zeroing of fresh pages
   * (freed and reused by the second): a database kept with --db that
   * already holds a current snapshot is loaded from it first. */
  int rc, snap_first = keep && has_current_snapshot(path);
  printf("# order: %s\n", snap_first ? "snapshot, then rows" : "rows, then snapshot");
  if (snap_only && !snap_first) {
    printf("# --snapshot-only: %s holds no current snapshot (run once without it)\n", path);
    return 1;
  }
  if (snap_first) {
    rc = timed_load(path, 1, &t_snap, &iss, NULL, NULL);
    if (snap_only) {
      printf("# snapshot: %zu blocks, %zu locations in %.2f s (rc %d); plain SELECTs %.2f s\n",
             iss.blocks, iss.locations, t_snap, rc, t_scan);
      snprintf(fig, sizeof fig, "load.%s.locations_per_s", label);
      kvp_bench_report(fig, (double)iss.locations / t_snap, "loc/s", "plain-selects",
                       (double)nlocs / t_scan);
      snprintf(fig, sizeof fig, "load.%s.seconds", label);
      kvp_bench_report(fig, t_snap, "s", NULL, 0);
      return rc == 0 && iss.locations == nlocs ? 0 : 1;
    }
    if (rc == 0)
      rc = timed_load(path, 0, &t_rows, &is, &snap_bytes, &t_write);
  } else {
    rc = timed_load(path, 0, &t_rows, &is, &snap_bytes, &t_write);
    if (rc == 0)
      rc = timed_load(path, 1, &t_snap, &iss, NULL, NULL);
  }
  printf("# rows: %zu blocks, %zu locations in %.2f s; snapshot written in %.2f s (%.0f MiB); "
         "snapshot: %zu blocks, %zu locations in %.2f s (rc %d); plain SELECTs of the rows "
         "%.2f s\n",
         is.blocks, is.locations, t_rows, t_write, (double)snap_bytes / (1 << 20), iss.blocks,
         iss.locations, t_snap, rc, t_scan);
  if (iss.blocks != is.blocks || iss.locations != is.locations)
    rc = 1;
  snprintf(fig, sizeof fig, "load.%s.locations_per_s", label);
  kvp_bench_report(fig, (double)iss.locations / t_snap, "loc/s", "plain-selects",
                   (double)is.locations / t_scan);
  snprintf(fig, sizeof fig, "load.%s.seconds", label);
  kvp_bench_report(fig, t_snap, "s", NULL, 0);
  snprintf(fig, sizeof fig, "load.%s.rows.locations_per_s", label);
  kvp_bench_report(fig, (double)is.locations / t_rows, "loc/s", "plain-selects",
                   (double)is.locations / t_scan);
  snprintf(fig, sizeof fig, "load.%s.rows.seconds", label);
  kvp_bench_report(fig, t_rows, "s", NULL, 0);
  if (keep)
    return rc == 0 && is.locations == nlocs ? 0 : 1;
  static const char *const files[] = {"advisor.db", "advisor.db-wal", "advisor.db-shm"};
  for (size_t i = 0; i < 3; i++) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    unlink(p);
  }
  rmdir(dir);
  return rc == 0 && is.locations == nlocs ? 0 : 1;
}
