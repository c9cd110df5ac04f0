/* Advisor persistence (real SQLite files in a temp dir) and configuration
 * errors.
 *
 * Why this file is long: one fixture for the store's cases and the table
 * of configuration mistakes, each a line or two.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "store/store.h"
#include "harness.h"
#include "advisor/advisor.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

#define NOW 1800000000000ull

typedef struct fx_s {
  char dir[256], path[300];
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->path, sizeof f->path, "%s/advisor.db", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* A flush with ing's worker rows, as the advisor's write-behind does it. */
static int flush_with(kvp__store_t *st, kvp__index_t *ix, kvp__adv_ingest_t *ing, uint64_t seq,
                      size_t *nblocks) {
  kvp__store_worker_t *rows = NULL;
  size_t n = 0;
  int rc = kvp__adv_ingest_worker_rows(ing, &rows, &n);
  if (rc == 0)
    rc = kvp__store_flush(st, ix, rows, n, seq, nblocks);
  free(rows);
  return rc;
}

static int64_t q1(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  else
    print_message("query failed: %s: %s\n", sql, sqlite3_errmsg(db));
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static void flush_then_load_restores_everything(void **state) {
  fx_t *f = *state;
  kvp__index_t *ix = NULL, *ix2 = NULL;
  kvp__adv_ingest_t *ing = NULL, *ing2 = NULL;
  kvp__store_t *st = NULL;
  char err[256];
  uint16_t a, b, vol;
  uint64_t seq;

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__adv_ingest_create(ix, NULL, &ing), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__index_worker(ix, "a", 0, &a), 0);
  assert_int_equal(kvp__index_worker(ix, "b", 3, &b), 0);
  assert_int_equal(kvp__index_volume(ix, "nvme0", &vol), 0);
  /* Hashes with the top bit set are stored as negative integers. */
  uint64_t big = 0xfedcba9876543210ull;
  assert_int_equal(kvp__index_store(ix, big, 0, 0, a, 1, 0, 16, 4096, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 5, 1, big, a, 1, 0, 16, 4096, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 5, 1, big, b, 3, vol, 16, 8192, NOW), 0);
  assert_int_equal(kvp__index_store(ix, 6, 1, 5, b, 3, vol, 16, 8192, NOW), 0);
  assert_int_equal(kvp__index_access(ix, 5, 0, 4, NOW), 0);
  kvp__adv_worker_state_t ws = {
      .id = a, .epoch = 9, .last_event_id = 77, .known = 1, .last_seen_ms = NOW};
  assert_int_equal(kvp__adv_ingest_worker_set(ing, &ws), 0);
  assert_int_equal(flush_with(st, ix, ing, 1234, NULL), 0);
  /* Removed after a flush: the next flush deletes the rows. */
  assert_int_equal(kvp__index_remove(ix, 6, b, 3, vol), 0);
  size_t n = 0;
  assert_int_equal(flush_with(st, ix, ing, 1240, &n), 0);
  assert_int_equal(n, 1);
  kvp__store_close(st);
  st = NULL;

  assert_int_equal(q1(f->path, "SELECT count(*) FROM blocks"), 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM block_locations"), 3);
  assert_int_equal(q1(f->path, "SELECT parent FROM blocks WHERE hash = 5"), (int64_t)big);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM blocks WHERE hash < 0"), 1);
  assert_int_equal(q1(f->path, "SELECT hits FROM blocks WHERE hash = 5"), 4);
  assert_int_equal(q1(f->path, "SELECT value FROM meta WHERE key = 'stream_seq'"), 1240);
  assert_int_equal(q1(f->path, "SELECT last_event_id FROM workers WHERE worker = 'a'"), 77);
  assert_int_equal(q1(f->path, "SELECT blocks FROM tier_usage WHERE tier = 3"), 1);
  assert_int_equal(q1(f->path, "SELECT bytes FROM tier_usage WHERE tier = 1"), 8192 + 4096);
  assert_int_equal(q1(f->path, "SELECT g1_blocks FROM worker_status WHERE worker = 'a'"), 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM volumes WHERE volume = 'nvme0'"), 1);
  assert_int_equal(q1(f->path, "SELECT hits FROM hot_blocks LIMIT 1"), 4);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM cold_blocks"), 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM recent_migrations"), 0);

  assert_int_equal(kvp__index_create(16, 3600, &ix2), 0);
  assert_int_equal(kvp__adv_ingest_create(ix2, NULL, &ing2), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_load(st, ix2, kvp__adv_ingest_load_worker, ing2, &seq), 0);
  assert_int_equal(seq, 1240);
  kvp__index_block_t blk;
  kvp__index_loc_t locs[4];
  assert_int_equal(kvp__index_get(ix2, 5, &blk, locs, 4, &n), 0);
  assert_int_equal(n, 2);
  assert_true(blk.parent == big);
  assert_int_equal(blk.hits, 4);
  assert_int_equal(kvp__index_get(ix2, 6, NULL, NULL, 0, NULL), KVP_ENOENT);
  assert_int_equal(kvp__index_dirty_count(ix2), 0);
  kvp__adv_worker_state_t ws2;
  assert_int_equal(kvp__adv_ingest_worker_get(ing2, 0, &ws2), 0);
  assert_int_equal(ws2.last_event_id, 77);
  assert_int_equal(ws2.epoch, 9);
  kvp__store_close(st);
  kvp__adv_ingest_destroy(ing2);
  kvp__index_destroy(ix2);
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ix);
}

/* A block held by more workers than any fixed buffer (300) keeps every
 * location across a flush and a restart. */
static void block_held_by_300_workers_survives_restart(void **state) {
  fx_t *f = *state;
  kvp__index_t *ix = NULL, *ix2 = NULL;
  kvp__store_t *st = NULL;
  char err[256], name[32];
  uint64_t seq;
  size_t n = 0;

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  for (int i = 0; i < 300; i++) {
    uint16_t w;
    snprintf(name, sizeof name, "w%d", i);
    assert_int_equal(kvp__index_worker(ix, name, 0, &w), 0);
    assert_int_equal(kvp__index_store(ix, 42, 0, 0, w, 1 + i % 2, 0, 16, 4096, NOW), 0);
  }
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 7, NULL), 0);
  kvp__store_close(st);
  st = NULL;
  assert_int_equal(q1(f->path, "SELECT count(*) FROM block_locations WHERE hash = 42"), 300);

  assert_int_equal(kvp__index_create(16, 3600, &ix2), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_load(st, ix2, NULL, NULL, &seq), 0);
  assert_int_equal(kvp__index_get(ix2, 42, NULL, NULL, 0, &n), 0);
  assert_int_equal(n, 300);
  kvp__index_stats_t s;
  kvp__index_stats(ix2, &s);
  assert_int_equal(s.tier_locations[1], 150);
  assert_int_equal(s.tier_locations[2], 150);
  kvp__store_close(st);
  kvp__index_destroy(ix2);
  kvp__index_destroy(ix);
}

static int cmp_match(const void *a, const void *b) {
  const kvp__index_match_t *x = a, *y = b;
  if (x->worker != y->worker)
    return x->worker < y->worker ? -1 : 1;
  return x->tier < y->tier ? -1 : x->tier > y->tier;
}

/* A restart from the rows (no snapshot: after a crash) loads them in hash
 * order and renumbers the records into chain order (index.h,
 * kvp__index_bulk_end): every chain's match, every block's parent and the
 * number of parents kept in the side table (the chain path's misses) are
 * what they were before the restart. The chains: in order over 4 workers
 * and two tiers, one in five going on from a block of an earlier one
 * (shared prefixes), some tails removed; and two blocks whose rows were
 * edited into a cycle of parents (bad rows), which must load too. */
static void rows_load_keeps_matches_parents_and_chain_order(void **state) {
  fx_t *f = *state;
  enum { C = 200, L = 32 };
  static uint64_t ch[C][L];
  kvp__index_t *ix = NULL, *ix2 = NULL;
  kvp__store_t *st = NULL;
  char err[256], sql[200];
  uint64_t x = 0x9e3779b97f4a7c15ull, seq;
  uint16_t w[4];
#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  for (int i = 0; i < 4; i++) {
    snprintf(sql, sizeof sql, "w%d", i);
    assert_int_equal(kvp__index_worker(ix, sql, 0, &w[i]), 0);
  }
  size_t branches = 0;
  for (int c = 0; c < C; c++) {
    int from = 0;
    if (c > 0 && RND() % 5 == 0) { /* a prefix of an earlier chain, then its own */
      int d = (int)(RND() % (uint64_t)c);
      from = 1 + (int)(RND() % (uint64_t)(L - 1));
      memcpy(ch[c], ch[d], (size_t)from * sizeof ch[c][0]);
      branches++;
    }
    for (int i = from; i < L; i++)
      ch[c][i] = RND() | 1;
    for (int i = 0; i < L; i++)
      assert_int_equal(kvp__index_store(ix, ch[c][i], i > 0, i ? ch[c][i - 1] : 0, w[c % 4],
                                        1 + c % 2, 0, 16, 4096, NOW),
                       0);
  }
  for (int c = 0; c < C; c += 7) /* a tail's copies go (shared ones may stay) */
    for (int i = L - 4; i < L; i++)
      (void)kvp__index_remove(ix, ch[c][i], w[c % 4], 1 + c % 2, 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 7, NULL), 0);
  kvp__store_close(st);
  st = NULL;

  /* The bad rows: chain 1's first two blocks each other's parent. */
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  snprintf(sql, sizeof sql, "UPDATE blocks SET parent = %lld WHERE hash = %lld",
           (long long)ch[1][1], (long long)ch[1][0]);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  kvp__index_block_t b0;
  assert_int_equal(kvp__index_store(ix, ch[1][0], 1, ch[1][1], w[1], 2, 0, 16, 4096, NOW), 0);
  assert_int_equal(kvp__index_get(ix, ch[1][0], &b0, NULL, 0, NULL), 0);
  assert_true(b0.parent == ch[1][1]);

  /* Through the reader threads, then serially on the store's connection
   * (what a load falls back to when a reader cannot start): the same. */
  for (int serial = 0; serial < 2; serial++) {
    assert_int_equal(kvp__index_create(16, 3600, &ix2), 0);
    assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
    kvp__store_use_snapshot(st, 0);
    kvp__store_use_readers(st, !serial);
    assert_int_equal(kvp__store_load(st, ix2, NULL, NULL, &seq), 0);
    assert_false(kvp__store_loaded_snapshot(st));
    kvp__index_stats_t s1, s2;
    kvp__index_stats(ix, &s1);
    kvp__index_stats(ix2, &s2);
    assert_int_equal(s2.blocks, s1.blocks);
    assert_int_equal(s2.locations, s1.locations);
    /* Where a chain goes on from a block that has another child, one of the
     * two children is a run of its own after the load as before (the one
     * seen first in hash order then, the later stored before): no more side
     * parents than before, the cycle's one counted. */
    assert_true(s2.parents_side <= s1.parents_side + 1);
    assert_true(s2.parents_side <= branches + 1);
    for (int c = 0; c < C; c++) {
      kvp__index_match_t m1[8], m2[8];
      size_t n1 = 0, n2 = 0;
      assert_int_equal(kvp__index_match(ix, ch[c], L, m1, 8, &n1), 0);
      assert_int_equal(kvp__index_match(ix2, ch[c], L, m2, 8, &n2), 0);
      assert_int_equal(n2, n1);
      for (size_t r = 0; r < n2; r++) { /* the load interns the workers in its own order */
        uint32_t dp;
        const char *name = kvp__index_worker_name(ix2, m2[r].worker, &dp);
        assert_non_null(name);
        assert_int_equal(kvp__index_worker(ix, name, dp, &m2[r].worker), 0);
      }
      qsort(m1, n1, sizeof *m1, cmp_match);
      qsort(m2, n2, sizeof *m2, cmp_match);
      for (size_t r = 0; r < n1; r++) {
        assert_int_equal(m2[r].worker, m1[r].worker);
        assert_int_equal(m2[r].tier, m1[r].tier);
        assert_int_equal(m2[r].length, m1[r].length);
      }
      for (int i = 0; i < L; i++) {
        kvp__index_block_t a, b;
        int rc = kvp__index_get(ix, ch[c][i], &a, NULL, 0, NULL);
        assert_int_equal(kvp__index_get(ix2, ch[c][i], &b, NULL, 0, NULL), rc);
        if (rc == 0 && b.parent != a.parent)
          fail_msg("chain %d block %d: parent %016llx after the load, %016llx before", c, i,
                   (unsigned long long)b.parent, (unsigned long long)a.parent);
      }
    }
    kvp__store_close(st);
    kvp__index_destroy(ix2);
    st = NULL;
    ix2 = NULL;
  }
#undef RND
  kvp__index_destroy(ix);
}

/* The store writes the index's rows (index/rows.h): they come in signed
 * hash order with the new volume names, and rows given back after a failed
 * write are written, whole, by the next flush. */
static void rows_given_back_are_written_by_the_next_flush(void **state) {
  fx_t *f = *state;
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  kvp__store_flush_t *fl = NULL;
  kvp__index_rows_t rows;
  char err[256];
  uint16_t w, v;
  size_t n = 0;
  const uint64_t neg = UINT64_MAX - 4; /* -5 as SQLite sees it: first */

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__index_worker(ix, "w0", 0, &w), 0);
  assert_int_equal(kvp__index_volume(ix, "g3-a", &v), 0);
  assert_int_equal(kvp__index_store(ix, 7, 0, 0, w, 1, 0, 16, 4096, NOW), 0);
  assert_int_equal(kvp__index_store(ix, neg, 1, 7, w, 3, v, 16, 4096, NOW), 0);

  assert_int_equal(kvp__index_rows_take(ix, kvp__store_volumes_written(st), &rows), 0);
  assert_int_equal(rows.nrows, 2);
  assert_true(rows.rows[0].hash == neg && rows.rows[1].hash == 7);
  assert_int_equal(rows.rows[0].parent, 7);
  assert_int_equal(rows.rows[0].nlocs, 1);
  assert_string_equal(rows.locs[rows.rows[0].loc_off].volume, "g3-a");
  assert_string_equal(rows.locs[rows.rows[0].loc_off].worker, "w0");
  assert_int_equal(rows.nvolumes, 1);
  assert_string_equal(rows.volumes[0], "g3-a");
  assert_int_equal(kvp__index_dirty_count(ix), 0);

  /* As after a failed write: the rows go back to the index. */
  assert_int_equal(kvp__store_prepare(st, &rows, NULL, 0, 3, &fl), 0);
  assert_int_equal(rows.nrows, 0); /* taken over */
  assert_int_equal(kvp__store_flush_blocks(fl), 2);
  kvp__index_rows_restore(ix, kvp__store_flush_rows(fl));
  kvp__store_flush_free(fl);
  assert_int_equal(kvp__index_dirty_count(ix), 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM blocks"), 0);

  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 3, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM blocks"), 2);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM block_locations WHERE volume = 'g3-a'"), 1);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM volumes WHERE volume = 'g3-a'"), 1);
  assert_int_equal(q1(f->path, "SELECT value FROM meta WHERE key = 'stream_seq'"), 3);

  /* Taken from the written mark, the volume is not listed again. */
  assert_int_equal(kvp__index_rows_take(ix, kvp__store_volumes_written(st), &rows), 0);
  assert_int_equal(rows.nrows, 0);
  assert_int_equal(rows.nvolumes, 0);
  kvp__index_rows_free(&rows);
  kvp__store_close(st);
  kvp__index_destroy(ix);
}

/* Samples queued for tier_history go out with the next flush; older than
 * history_keep before the newest are deleted; the queue is bounded. */
static void tier_history_is_written_and_trimmed(void **state) {
  fx_t *f = *state;
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  kvp__store_hist_row_t r[3];
  char err[256];

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  memset(r, 0, sizeof r);
  for (int i = 0; i < 3; i++) {
    r[i].t_ms = NOW + (uint64_t)i * 1000;
    r[i].tier = 3;
    snprintf(r[i].volume, sizeof r[i].volume, "g3-a");
    r[i].blocks = 10 + (uint64_t)i;
    r[i].bytes = 1000 * r[i].blocks;
    r[i].capacity = 100000;
  }
  assert_int_equal(kvp__store_history_add(st, r, 2, 0), 0);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM tier_history"), 0); /* not flushed yet */
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM tier_history"), 2);
  assert_int_equal(q1(f->path, "SELECT sum(bytes) FROM tier_history WHERE volume = 'g3-a'"), 21000);
  /* Kept 1.5 s before the newest (NOW + 2 s): the sample at NOW goes. */
  assert_int_equal(kvp__store_history_add(st, &r[2], 1, 1500), 0);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM tier_history"), 2);
  assert_int_equal(q1(f->path, "SELECT min(blocks) FROM tier_history"), 11);
  /* Past KVP__STORE_HIST_PENDING_MAX queued, the oldest are dropped. */
  for (int i = 0; i < KVP__STORE_HIST_PENDING_MAX + 5; i++) {
    r[0].t_ms = NOW + 10000 + (uint64_t)i;
    assert_int_equal(kvp__store_history_add(st, r, 1, 0), 0);
  }
  assert_int_equal(kvp__store_history_dropped(st), 5);
  assert_int_equal(kvp__store_flush(st, ix, NULL, 0, 0, NULL), 0);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM tier_history"),
                   2 + KVP__STORE_HIST_PENDING_MAX);
  kvp__store_close(st);
  kvp__index_destroy(ix);
}

static void database_files_are_private(void **state) {
  fx_t *f = *state;
  kvp__store_t *st = NULL;
  char err[256], wal[320];
  struct stat sb;
  mode_t old = umask(0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  umask(old);
  assert_int_equal(stat(f->path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  snprintf(wal, sizeof wal, "%s-wal", f->path);
  assert_int_equal(stat(wal, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  kvp__store_close(st);
}

static void old_schema_is_upgraded(void **state) {
  fx_t *f = *state;
  kvp__store_t *st = NULL;
  char err[256];
  assert_int_equal(kvp__store_create_version(f->path, 1), 0);
  assert_int_equal(q1(f->path, "SELECT value FROM meta WHERE key = 'schema_version'"), 1);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM sqlite_master WHERE name = 'tier_usage'"), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  kvp__store_close(st);
  assert_int_equal(q1(f->path, "SELECT value FROM meta WHERE key = 'schema_version'"),
                   KVP__STORE_SCHEMA_VERSION);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'view'"), 6);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM sqlite_master WHERE name = 'scrubs'"), 1);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM pragma_table_info('blocks')"
                               " WHERE name = 'hits'"),
                   1);
  /* Version 2 with a worker row: step 3 keeps the row and adds down_at and
   * locations_dropped, to the table and the view. */
  char p2[sizeof f->path + 8];
  sqlite3 *db = NULL;
  snprintf(p2, sizeof p2, "%s.v2", f->path);
  assert_int_equal(kvp__store_create_version(p2, 2), 0);
  assert_int_equal(sqlite3_open(p2, &db), SQLITE_OK);
  assert_int_equal(
      sqlite3_exec(db, "INSERT INTO workers VALUES('w', 0, 1, 7, 1000, 'up')", 0, 0, 0), SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(kvp__store_open(p2, &st, err, sizeof err), 0);
  kvp__store_close(st);
  assert_int_equal(q1(p2, "SELECT last_event_id FROM worker_status WHERE worker = 'w'"), 7);
  assert_int_equal(q1(p2, "SELECT locations_dropped FROM worker_status WHERE worker = 'w'"), 0);
  assert_int_equal(q1(p2, "SELECT down_at IS NULL FROM workers WHERE worker = 'w'"), 1);
  char x[sizeof p2 + 8];
  snprintf(x, sizeof x, "%s-wal", p2);
  unlink(x);
  snprintf(x, sizeof x, "%s-shm", p2);
  unlink(x);
  unlink(p2);
}

/* A version 2 database (no down_at, locations_dropped) upgrades in place:
 * its rows stay, the new columns read NULL and 0, and a down worker's marks
 * then survive a flush and a load. */
static void version_2_database_gains_down_columns(void **state) {
  fx_t *f = *state;
  kvp__index_t *ix = NULL;
  kvp__adv_ingest_t *ing = NULL;
  kvp__store_t *st = NULL;
  sqlite3 *db = NULL;
  char err[256];
  uint64_t seq;
  uint16_t a;

  assert_int_equal(kvp__store_create_version(f->path, 2), 0);
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "INSERT INTO workers VALUES('old', 0, 3, 40, 1000, 'down');"
                                "INSERT INTO workers VALUES('a', 0, 1, 5, 1000, 'up');",
                                0, 0, 0),
                   SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM pragma_table_info('workers')"
                               " WHERE name = 'down_at'"),
                   0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(q1(f->path, "SELECT value FROM meta WHERE key = 'schema_version'"),
                   KVP__STORE_SCHEMA_VERSION);
  assert_int_equal(q1(f->path, "SELECT count(*) FROM tier_history"), 0); /* step 4 */
  assert_int_equal(q1(f->path, "SELECT last_event_id FROM workers WHERE worker = 'old'"), 40);
  assert_int_equal(q1(f->path, "SELECT down_at IS NULL FROM workers WHERE worker = 'old'"), 1);
  assert_int_equal(q1(f->path, "SELECT locations_dropped FROM workers WHERE worker = 'old'"), 0);
  assert_int_equal(q1(f->path, "SELECT down_at IS NULL AND locations_dropped = 0"
                               " FROM worker_status WHERE worker = 'a'"),
                   1);

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__adv_ingest_create(ix, NULL, &ing), 0);
  assert_int_equal(kvp__store_load(st, ix, kvp__adv_ingest_load_worker, ing, &seq), 0);
  assert_int_equal(kvp__index_worker(ix, "a", 0, &a), 0);
  kvp__adv_worker_state_t ws = {.id = a,
                                .epoch = 1,
                                .last_event_id = 5,
                                .known = 1,
                                .down = 1,
                                .last_seen_ms = NOW,
                                .down_at_ms = NOW + 30000,
                                .locations_dropped = 1234};
  assert_int_equal(kvp__adv_ingest_worker_set(ing, &ws), 0);
  assert_int_equal(flush_with(st, ix, ing, 0, NULL), 0);
  kvp__store_close(st);
  st = NULL;
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ix);
  assert_int_equal(q1(f->path, "SELECT down_at FROM workers WHERE worker = 'a'"),
                   (int64_t)(NOW + 30000));
  assert_int_equal(q1(f->path, "SELECT locations_dropped FROM worker_status WHERE worker = 'a'"),
                   1234);

  assert_int_equal(kvp__index_create(16, 3600, &ix), 0);
  assert_int_equal(kvp__adv_ingest_create(ix, NULL, &ing), 0);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), 0);
  assert_int_equal(kvp__store_load(st, ix, kvp__adv_ingest_load_worker, ing, &seq), 0);
  kvp__adv_worker_state_t got;
  int found = 0;
  for (size_t i = 0; i < kvp__adv_ingest_worker_count(ing); i++) {
    if (kvp__adv_ingest_worker_get(ing, i, &got) == 0 &&
        strcmp(kvp__index_worker_name(ix, got.id, NULL), "a") == 0) {
      found = 1;
      assert_true(got.down);
      assert_true(got.down_at_ms == NOW + 30000);
      assert_int_equal(got.locations_dropped, 1234);
    }
  }
  assert_true(found);
  kvp__store_close(st);
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ix);
}

static void newer_schema_is_refused(void **state) {
  fx_t *f = *state;
  kvp__store_t *st = NULL;
  sqlite3 *db = NULL;
  char err[256] = "";
  assert_int_equal(kvp__store_create_version(f->path, KVP__STORE_SCHEMA_VERSION), 0);
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  assert_int_equal(
      sqlite3_exec(db, "UPDATE meta SET value = 99 WHERE key = 'schema_version'", 0, 0, 0), 0);
  sqlite3_close(db);
  assert_int_equal(kvp__store_open(f->path, &st, err, sizeof err), KVP_ENOTSUP);
  assert_null(st);
  assert_non_null(strstr(err, "99"));
}

static void unwritable_path_is_an_error(void **state) {
  (void)state;
  kvp__store_t *st = NULL;
  char err[256] = "";
  assert_int_equal(kvp__store_open("/nonexistent-dir/x/advisor.db", &st, err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent-dir/x/advisor.db"));
}

/* --- configuration ------------------------------------------------------ */

static int load_text(fx_t *f, const char *text, char *err, size_t n) {
  char p[320];
  kvp_advisor_config_t c;
  snprintf(p, sizeof p, "%s/a.conf", f->dir);
  FILE *fp = fopen(p, "w");
  fputs(text, fp);
  fclose(fp);
  kvp_advisor_config_defaults(&c);
  int rc = kvp_advisor_config_load(&c, p, err, n);
  if (rc == 0)
    rc = kvp_advisor_config_check(&c, err, n);
  return rc;
}

static void old_url_key_sets_servers(void **state) {
  (void)state;
  kvp_advisor_config_t c;
  char err[256];
  kvp_advisor_config_defaults(&c);
  assert_int_equal(kvp_advisor_config_set(&c, "nats.url=nats://10.0.0.1:4222", err, sizeof err), 0);
  assert_string_equal(c.nats.servers, "nats://10.0.0.1:4222");
  assert_int_equal(
      kvp_advisor_config_set(&c, "nats.servers=nats://a:1,nats://b:2", err, sizeof err), 0);
  assert_string_equal(c.nats.servers, "nats://a:1,nats://b:2");
  assert_int_equal(kvp_advisor_config_check(&c, err, sizeof err), 0);
  /* The old name is never printed: the printed file uses servers. */
  char *buf = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&buf, &len);
  kvp_advisor_config_print(&c, mf);
  fclose(mf);
  assert_non_null(strstr(buf, "\nservers = nats://a:1,nats://b:2\n"));
  assert_null(strstr(buf, "\nurl = "));
  free(buf);
}

static void shipped_config_loads(void **state) {
  (void)state;
  kvp_advisor_config_t c;
  char err[512], p[512];
  snprintf(p, sizeof p, "%s/../etc/kvplane-advisor.conf", kvp_test_srcdir());
  kvp_advisor_config_defaults(&c);
  assert_int_equal(kvp_advisor_config_load(&c, p, err, sizeof err), 0);
  assert_int_equal(kvp_advisor_config_check(&c, err, sizeof err), 0);
  kvp_advisor_config_t d;
  kvp_advisor_config_defaults(&d);
  /* The file documents the defaults: loading it changes nothing but the
   * path recorded for errors naming file:line. */
  assert_string_equal(c.conf_path, p);
  memset(c.conf_path, 0, sizeof c.conf_path);
  assert_memory_equal(&c, &d, sizeof c);
}

static void each_config_mistake_names_the_key(void **state) {
  fx_t *f = *state;
  static const struct {
    const char *text, *want;
  } cases[] = {
      {"[nats]\nmode = fast\n", "[nats] mode"},
      {"[nats]\nurls = x\n", "[nats] urls"},
      {"[natz]\nurl = x\n", "[natz]"},
      {"[store]\nflush_interval = soon\n", "[store] flush_interval"},
      {"[store]\nflush_interval = 1ms\n", "[store] flush_interval"},
      {"[ingest]\nmax_message_bytes = 12XB\n", "[ingest] max_message_bytes"},
      {"[ingest]\nqueue_max = -3\n", "[ingest] queue_max"},
      {"[log]\nsyslog = maybe\n", "[log] syslog"},
      {"[log]\nlevel = loud\n", "[log] level"},
      {"[advisor]\nnamespace = a.b\n", "[advisor] namespace"},
      {"[nats]\nuser = u\n", "[nats] password"},
      {"[nats]\ntoken = t\ncreds = /c\n", "[nats] token"},
      {"[nats]\ntls_cert = /c.pem\n", "[nats] tls_key"},
      {"[store]\npath =\n", "[store] path"},
      {"[jetstream]\nconsumer = a b\n", "[jetstream] consumer"},
      {"[workers]\nheartbeat_timeout = 2d\n", "[workers] heartbeat_timeout"},
      {"[metrics]\nlisten = 9464\n", "[metrics] listen"},
      {"[metrics]\nlisten = metrics.example:9464\n", "[metrics] listen"},
      {"[metrics]\nlisten = 127.0.0.1:65536\n", "[metrics] listen"},
      /* An unknown policy names the file's line and the policies there are. */
      {"[tiering]\npolicy = arc\n",
       ":2: [tiering] policy: 'arc' is not one of lru s3fifo lfu hyperbolic density"},
      {"[tiering]\npolicy = s3fifo\npolicy_params = small=0.1 tiny=2\n",
       "'tiny' is not a parameter of policy s3fifo (its parameters: small, ghost)"},
      {"[tiering]\npolicy = lfu\npolicy_params = half_life=soon\n", "lfu.half_life = 'soon'"},
  };
  char err[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    err[0] = 0;
    assert_int_equal(load_text(f, cases[i].text, err, sizeof err), KVP_ECONFIG);
    if (strstr(err, cases[i].want) == NULL)
      fail_msg("case %zu: '%s' does not name '%s'", i, err, cases[i].want);
  }
  kvp_advisor_config_t c;
  kvp_advisor_config_defaults(&c);
  assert_int_equal(kvp_advisor_config_set(&c, "store.flush_interval=2s", err, sizeof err), 0);
  assert_int_equal(c.flush_interval_ms, 2000);
  assert_int_equal(kvp_advisor_config_set(&c, "store.flush=2s", err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "flush"));
  assert_int_equal(kvp_advisor_config_set(&c, "nonsense", err, sizeof err), KVP_ECONFIG);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(old_url_key_sets_servers),
    cmocka_unit_test_setup_teardown(flush_then_load_restores_everything, setup, teardown),
    cmocka_unit_test_setup_teardown(block_held_by_300_workers_survives_restart, setup, teardown),
    cmocka_unit_test_setup_teardown(rows_load_keeps_matches_parents_and_chain_order, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(rows_given_back_are_written_by_the_next_flush, setup, teardown),
    cmocka_unit_test_setup_teardown(tier_history_is_written_and_trimmed, setup, teardown),
    cmocka_unit_test_setup_teardown(database_files_are_private, setup, teardown),
    cmocka_unit_test_setup_teardown(old_schema_is_upgraded, setup, teardown),
    cmocka_unit_test_setup_teardown(version_2_database_gains_down_columns, setup, teardown),
    cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
    cmocka_unit_test_setup_teardown(unwritable_path_is_an_error, setup, teardown),
    cmocka_unit_test_setup_teardown(shipped_config_loads, setup, teardown),
    cmocka_unit_test_setup_teardown(each_config_mistake_names_the_key, setup, teardown),
};

KVP_TEST_MAIN("advisor_store", tests)
