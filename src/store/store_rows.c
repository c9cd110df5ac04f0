/* Loading the rows of blocks and block_locations into an empty index
 * (kvp__store_load without a current snapshot: after a crash, or the first
 * start of an older database). Thread: the one that opens the store; the
 * reader thread below only steps SQLite's statements. */
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_impl.h"
#include "common/log.h"
#include "kvplane/status.h"

/* Worker and volume names come once per location row: a small cache of
 * (name, dp rank) -> id spares the interning table's linear search. */
#define NAME_CACHE 256
#define NAME_MAX_CACHED 47
typedef struct name_cache_s {
  char name[NAME_MAX_CACHED + 1];
  uint32_t dp_rank;
  uint16_t id;
  uint8_t used;
} name_cache_t;

static int cached_id(kvp__index_t *ix, name_cache_t *c, const char *name, uint32_t dp_rank,
                     int volume, uint16_t *id) {
  if (name == NULL)
    return KVP_EINVAL;
  size_t len = strlen(name);
  uint64_t h = 1469598103934665603ull ^ dp_rank;
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
  name_cache_t *e = &c[h % NAME_CACHE];
  if (e->used && e->dp_rank == dp_rank && strcmp(e->name, name) == 0) {
    *id = e->id;
    return 0;
  }
  int rc = volume ? kvp__index_volume(ix, name, id) : kvp__index_worker(ix, name, dp_rank, id);
  if (rc == 0 && len <= NAME_MAX_CACHED) {
    memcpy(e->name, name, len + 1);
    e->dp_rank = dp_rank;
    e->id = *id;
    e->used = 1;
  }
  return rc;
}

typedef struct loader_s {
  kvp__store_t *st;
  kvp__index_t *ix;
  sqlite3_stmt *b, *l; /* blocks, locations: both in signed hash order */
  name_cache_t workers[NAME_CACHE], volumes[NAME_CACHE];
  uint64_t done, total;
} loader_t;

/* Progress counts blocks (counting the locations too would cost another
 * pass over their table). */
static void progress(loader_t *ld) {
  if (ld->st->progress && (++ld->done & 0xffff) == 0)
    ld->st->progress(ld->st->progress_ctx, ld->done, ld->total);
}

static int64_t count_rows(sqlite3 *db, const char *sql) {
  sqlite3_stmt *s = NULL;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return n;
}

/* --- the rows, read on a thread of their own --------------------------------
 * Stepping SQLite's two statements costs more than the index's inserts (16M
 * locations here: plain SELECTs of the rows 4.0-4.4 s, the serial load 7.0
 * s, the index's inserts 2.7 s of it),
 * so a reader thread steps them, over a read-only connection of its own in
 * one read transaction, and hands the rows over in batches; this thread
 * inserts them (step_rows, insert_batch). Without the thread (no file to
 * open again, no thread) the same two run here, a batch at a time. */

enum { REC_BLOCK = 1, REC_LOC = 2 };
#define BATCH_RECS 4096
#define BATCH_NAMES (BATCH_RECS * 32)
#define NAME_TOO_LONG 4096 /* a longer name is passed as none: the row is skipped */
#define NO_NAME UINT32_MAX

typedef struct rec_s {
  uint8_t kind, tier;
  uint32_t dp_rank, woff, voff; /* a location's names: offsets into names */
  uint32_t tokens, hits;
  uint64_t hash, parent, bytes, last_access;
  double freq;
} rec_t;

typedef struct batch_s {
  kvp__store_pipe_item_t link; /* first: the pipe's */
  size_t n, names_len;
  int last, rc; /* the reader's final batch and its result */
  rec_t r[BATCH_RECS];
  char names[BATCH_NAMES];
} batch_t;

/* The rows are read by up to READERS threads, each over its own read-only
 * connection and one read transaction, each a range of the hashes (the
 * signed halves: both tables are keyed by hash), handing batches to the one
 * loading thread through one pipe. A block and its locations are in the
 * same range, so a reader's order (a block, then its locations) holds. Two
 * readers on two cores: the reading was the load's bottleneck (one reader
 * busy 90% of the time, the loading thread 25-70%, `perf` of `kvp-bench
 * load --locations 16M`). The readers' transactions start one after the
 * other: nothing writes the database while the advisor that owns it loads
 * it. */
#define READERS 2

typedef struct reader_s {
  kvp__store_pipe_t *q;
  sqlite3 *db;
  sqlite3_stmt *b, *l;
  pthread_t th;
  int started;
} reader_t;

/* The next full batch (this thread), or a free one, emptied (the reader;
 * NULL once stopped). */
static batch_t *pipe_take(kvp__store_pipe_t *q, int full) {
  batch_t *b = (batch_t *)kvp__store_pipe_take(q, full);
  if (b != NULL && !full) {
    b->n = b->names_len = 0;
    b->last = b->rc = 0;
  }
  return b;
}

static uint32_t copy_name(batch_t *b, const unsigned char *name) {
  if (name == NULL)
    return NO_NAME;
  size_t len = strlen((const char *)name);
  if (len >= NAME_TOO_LONG)
    return NO_NAME;
  uint32_t off = (uint32_t)b->names_len;
  memcpy(b->names + off, name, len + 1);
  b->names_len += len + 1;
  return off;
}

/* Room for one more record and its names. */
static int batch_full(const batch_t *b) {
  return b->n == BATCH_RECS || b->names_len + 2 * NAME_TOO_LONG > BATCH_NAMES;
}

static void read_loc(sqlite3_stmt *s, batch_t *b) {
  rec_t *r = &b->r[b->n++];
  r->kind = REC_LOC;
  r->hash = (uint64_t)sqlite3_column_int64(s, 0);
  r->woff = copy_name(b, sqlite3_column_text(s, 1));
  r->dp_rank = (uint32_t)sqlite3_column_int64(s, 2);
  r->tier = (uint8_t)sqlite3_column_int(s, 3);
  r->voff = copy_name(b, sqlite3_column_text(s, 4));
}

/* Where a full batch goes (the pipe to the inserting thread, or the
 * index at once); returns the batch to fill next, or NULL to stop. */
typedef batch_t *(*hand_fn)(void *ctx, batch_t *full);

/* One pass over both tables, side by side in hash order: a block, then
 * its locations (and those before it, which have no block: skipped by
 * kvp__index_load_loc), so they are added while its record is still in
 * cache. Hands each full batch over; returns the last one, not handed,
 * with *rc 0 or KVP_EDB, or NULL when hand said stop. */
static batch_t *step_rows(sqlite3_stmt *bs, sqlite3_stmt *ls, batch_t *b, hand_fn hand, void *ctx,
                          int *rc) {
  int r, lr = sqlite3_step(ls);
#define ROOM()                                                                                     \
  do {                                                                                             \
    if (batch_full(b) && (b = hand(ctx, b)) == NULL)                                               \
      return NULL;                                                                                 \
  } while (0)
  *rc = 0;
  while ((r = sqlite3_step(bs)) == SQLITE_ROW) {
    ROOM();
    rec_t *x = &b->r[b->n++];
    x->kind = REC_BLOCK;
    x->hash = (uint64_t)sqlite3_column_int64(bs, 0);
    x->parent =
        sqlite3_column_type(bs, 1) == SQLITE_NULL ? x->hash : (uint64_t)sqlite3_column_int64(bs, 1);
    x->tokens = (uint32_t)sqlite3_column_int64(bs, 2);
    x->bytes = (uint64_t)sqlite3_column_int64(bs, 3);
    x->last_access = (uint64_t)sqlite3_column_int64(bs, 4);
    x->hits = (uint32_t)sqlite3_column_int64(bs, 5);
    x->freq = sqlite3_column_double(bs, 6);
    sqlite3_int64 bh = (sqlite3_int64)x->hash;
    for (; lr == SQLITE_ROW && sqlite3_column_int64(ls, 0) <= bh; lr = sqlite3_step(ls)) {
      ROOM();
      read_loc(ls, b);
    }
  }
  if (r != SQLITE_DONE)
    *rc = KVP_EDB;
  for (; *rc == 0 && lr == SQLITE_ROW; lr = sqlite3_step(ls)) {
    ROOM();
    read_loc(ls, b);
  }
#undef ROOM
  if (*rc == 0 && lr != SQLITE_DONE)
    *rc = KVP_EDB;
  return b;
}

static batch_t *to_pipe(void *ctx, batch_t *full) {
  kvp__store_pipe_t *q = ctx;
  kvp__store_pipe_put(q, 1, &full->link);
  return pipe_take(q, 0);
}

static void *reader_main(void *arg) {
  reader_t *rd = arg;
  batch_t *b = pipe_take(rd->q, 0);
  int rc = 0;
  if (b == NULL || (b = step_rows(rd->b, rd->l, b, to_pipe, rd->q, &rc)) == NULL)
    return NULL; /* stopped */
  if (rc != 0)
    kvp_log_error("advisor: reading the rows of the database failed: %s", sqlite3_errmsg(rd->db));
  b->last = 1;
  b->rc = rc;
  kvp__store_pipe_put(rd->q, 1, &b->link);
  return NULL;
}

/* Reader k of n: its connection, its transaction and its two statements
 * over its range of hashes. Returns 0, or KVP_ENOENT. */
static int reader_open(reader_t *rd, const char *path, int k, int n) {
  static const char *const where[3] = {"", " WHERE hash < 0", " WHERE hash >= 0"};
  const char *w = where[n == 1 ? 0 : 1 + k];
  char sb[200], sl[200];
  if (sqlite3_open_v2(path, &rd->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
    return KVP_ENOENT;
  (void)kvp__store_sql_exec(rd->db, "PRAGMA mmap_size = 2147418112", NULL, 0);
  snprintf(sb, sizeof sb,
           "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks%s"
           " ORDER BY hash",
           w);
  snprintf(sl, sizeof sl,
           "SELECT hash, worker, dp_rank, tier, volume FROM block_locations%s ORDER BY hash", w);
  if (sqlite3_exec(rd->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(rd->db, sb, -1, &rd->b, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(rd->db, sl, -1, &rd->l, NULL) != SQLITE_OK)
    return KVP_ENOENT;
  return 0;
}

static void reader_close(reader_t *rd) {
  if (rd->db == NULL)
    return;
  sqlite3_finalize(rd->b);
  sqlite3_finalize(rd->l);
  sqlite3_exec(rd->db, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(rd->db);
}

/* Blocks whose map slots are fetched together ahead of their inserts. */
#define PREFETCH 32

/* Inserts one batch's records. The rows come in hash order, which is no
 * order of the map's slots: every block's slot is a miss, so the next
 * PREFETCH blocks' slots are loaded in parallel before their inserts (as
 * the snapshot's load does). */
static int insert_batch(loader_t *ld, const batch_t *b) {
  size_t ahead = 0; /* the records before it had their slots fetched */
  for (size_t i = 0; i < b->n; i++) {
    const rec_t *x = &b->r[i];
    int rc;
    if (i >= ahead) {
      uint64_t h[PREFETCH];
      size_t k = 0;
      for (ahead = i; ahead < b->n && k < PREFETCH; ahead++)
        if (b->r[ahead].kind == REC_BLOCK)
          h[k++] = b->r[ahead].hash;
      kvp__index_prefetch(ld->ix, h, k);
    }
    if (x->kind == REC_BLOCK) {
      kvp__index_block_t blk = {.hash = x->hash,
                                .parent = x->parent,
                                .tokens = x->tokens,
                                .bytes = x->bytes,
                                .last_access_ms = x->last_access,
                                .hits = x->hits,
                                .freq = x->freq};
      progress(ld);
      if ((rc = kvp__index_load_block(ld->ix, &blk)) != 0)
        return rc;
      continue;
    }
    kvp__index_loc_t loc;
    if (x->woff == NO_NAME || x->voff == NO_NAME ||
        cached_id(ld->ix, ld->workers, b->names + x->woff, x->dp_rank, 0, &loc.worker) != 0 ||
        cached_id(ld->ix, ld->volumes, b->names + x->voff, 0, 1, &loc.volume) != 0) {
      kvp_log_warn("advisor: location of block %016llx skipped: bad worker or volume",
                   (unsigned long long)x->hash);
      continue;
    }
    loc.tier = x->tier;
    if ((rc = kvp__index_load_loc(ld->ix, x->hash, &loc)) == KVP_ENOMEM)
      return rc;
  }
  return 0;
}

/* The rows without the thread, on st->db: each full batch inserted at
 * once. */
typedef struct at_once_s {
  loader_t *ld;
  int rc;
} at_once_t;

static batch_t *to_index(void *ctx, batch_t *full) {
  at_once_t *a = ctx;
  if ((a->rc = insert_batch(a->ld, full)) != 0)
    return NULL;
  full->n = full->names_len = 0;
  return full;
}

static int load_rows_here(loader_t *ld) {
  batch_t *b = malloc(sizeof *b);
  at_once_t a = {ld, 0};
  int rc = KVP_ENOMEM;
  if (b == NULL)
    return rc;
  b->n = b->names_len = 0;
  batch_t *last = step_rows(ld->b, ld->l, b, to_index, &a, &rc);
  if (last == NULL)
    rc = a.rc;
  else if (rc == 0)
    rc = insert_batch(ld, last);
  free(b);
  return rc;
}

/* The rows through the reader threads (READERS, one on a single core).
 * Returns KVP_ENOENT (nothing done) when the database has no file of its
 * own to open again, or no thread can start: the caller loads them
 * serially. */
static int load_rows_piped(loader_t *ld) {
  const char *path = sqlite3_db_filename(ld->st->db, "main");
  batch_t *bs[3 * READERS] = {NULL};
  reader_t rd[READERS];
  kvp__store_pipe_t q;
  int rc = KVP_ENOENT, n = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? READERS : 1;

  memset(rd, 0, sizeof rd);
  if (path == NULL || path[0] == '\0' || kvp__store_pipe_init(&q) != 0)
    return KVP_ENOENT;
  for (int k = 0; k < n; k++) {
    rd[k].q = &q;
    if (reader_open(&rd[k], path, k, n) != 0)
      goto out;
  }
  for (int i = 0; i < 3 * n; i++) {
    if ((bs[i] = malloc(sizeof *bs[i])) == NULL)
      goto out;
    kvp__store_pipe_put(&q, 0, &bs[i]->link);
  }
  for (int k = 0; k < n && (k == 0 || rd[k - 1].started); k++)
    rd[k].started = pthread_create(&rd[k].th, NULL, reader_main, &rd[k]) == 0;
  if (!rd[n - 1].started) { /* a range without its reader: start again serially */
    rc = KVP_ENOENT;
    goto out;
  }
  for (int lasts = 0; lasts < n;) {
    batch_t *b = pipe_take(&q, 1);
    lasts += b->last;
    rc = b->rc != 0 ? b->rc : insert_batch(ld, b);
    kvp__store_pipe_put(&q, 0, &b->link);
    if (rc != 0)
      break;
  }
out:
  kvp__store_pipe_stop(&q); /* a failure: the readers stop at their next batch */
  for (int k = 0; k < n; k++) {
    if (rd[k].started)
      pthread_join(rd[k].th, NULL);
    reader_close(&rd[k]);
  }
  kvp__store_pipe_destroy(&q);
  for (int i = 0; i < 3 * n; i++)
    free(bs[i]);
  return rc;
}

int kvp__store_load_rows(kvp__store_t *st, kvp__index_t *ix) {
  loader_t *ld = calloc(1, sizeof *ld);
  int rc = KVP_EDB, bulk = 0;
  if (ld == NULL)
    return KVP_ENOMEM;
  ld->st = st;
  ld->ix = ix;
  /* Read the file through a mapping while loading: a pread per page is a
   * system call per 4 KiB (SQLite caps the mapping, 2 GiB in Debian's
   * build; the rest is read as usual), and pages read through the mapping
   * do not stay in this connection's page cache (the count below reads the
   * whole blocks table: through the cache it would keep up to cache_size
   * of it resident). Back to reads after. */
  (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 2147418112", NULL, 0);
  int64_t nb = count_rows(st->db, "SELECT count(*) FROM blocks");
  if (nb < 0)
    goto done;
  ld->total = (uint64_t)nb;
  /* The map and the records sized for what the database holds: no rehash
   * while loading, and a map filled as full as it may be. */
  if ((rc = kvp__index_reserve(ix, (size_t)nb)) != 0 || (rc = kvp__index_bulk_begin(ix)) != 0)
    goto done;
  bulk = 1;
  if (!st->no_readers && (rc = load_rows_piped(ld)) != KVP_ENOENT)
    goto done;
  /* Serially, on this connection. */
  rc = KVP_EDB;
  if (sqlite3_prepare_v2(st->db,
                         "SELECT hash, parent, tokens, bytes, last_access, hits, freq FROM blocks"
                         " ORDER BY hash",
                         -1, &ld->b, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(st->db,
                         "SELECT hash, worker, dp_rank, tier, volume FROM block_locations"
                         " ORDER BY hash",
                         -1, &ld->l, NULL) == SQLITE_OK)
    rc = load_rows_here(ld);
  sqlite3_finalize(ld->b);
  sqlite3_finalize(ld->l);
done:
  /* The rows come in hash order: the records are put back in chain order
   * (index.h, kvp__index_bulk_end). */
  if (bulk) {
    int brc = kvp__index_bulk_end(ix);
    if (rc == 0)
      rc = brc;
  }
  (void)kvp__store_sql_exec(st->db, "PRAGMA mmap_size = 0", NULL, 0);
  if (rc == 0 && st->progress)
    st->progress(st->progress_ctx, ld->total, ld->total);
  free(ld);
  return rc;
}
