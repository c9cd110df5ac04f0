/* Reading the index snapshot back (store_snapshot.c has the format and the
 * rule that makes a snapshot current). The decoder reads bytes of the
 * database as outside bytes: every length and id is checked, and a chunk's
 * checksum before any of its blocks is used (tests/fuzz/fuzz_snapshot.c).
 * Thread: the one that loads the store. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/log.h"
#include "store/store_impl.h"

#define MAGIC "KVPSNAP1"
#define HEADER_FIXED 48u
#define BLOCK_FIXED 40u
#define LOC_BYTES 5u
#define BATCH 32 /* blocks whose map slots are fetched together */

static uint64_t get_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void kvp__snap_header_free(kvp__snap_header_t *h) {
  free(h->wmap);
  free(h->vmap);
  free(h->shape_tokens);
  free(h->shape_bytes);
  memset(h, 0, sizeof *h);
}

/* A name of len bytes at p as a C string (names hold no NUL). */
static int name_at(const uint8_t *p, size_t len, char out[256]) {
  if (len > 255 || memchr(p, 0, len) != NULL)
    return KVP_ECORRUPT;
  memcpy(out, p, len);
  out[len] = 0;
  return 0;
}

int kvp__snap_header_parse(const uint8_t *p, size_t n, kvp__index_t *ix, kvp__snap_header_t *h) {
  size_t off = HEADER_FIXED, names_at;
  char name[256];
  int rc = KVP_ECORRUPT;

  memset(h, 0, sizeof *h);
  if (n < HEADER_FIXED + 8 || memcmp(p, MAGIC, 8) != 0 ||
      XXH3_64bits(p, n - 8) != get_le(p + n - 8, 8))
    return KVP_ECORRUPT;
  n -= 8;
  h->generation = get_le(p + 8, 8);
  h->chunks = (uint32_t)get_le(p + 16, 4);
  h->blocks = get_le(p + 20, 8);
  h->locations = get_le(p + 28, 8);
  h->nworkers = (uint32_t)get_le(p + 36, 4);
  h->nvolumes = (uint32_t)get_le(p + 40, 4);
  h->nshapes = (uint32_t)get_le(p + 44, 4);
  if (h->nworkers > KVP__INDEX_MAX_WORKERS || h->nvolumes == 0 ||
      h->nvolumes > KVP__INDEX_MAX_VOLUMES || h->nshapes > 65536 ||
      h->blocks > KVP__INDEX_MAX_BLOCKS)
    return KVP_ECORRUPT;
  /* Checked first, interned after: a bad header leaves the index alone. */
  names_at = off;
  for (uint32_t i = 0; i < h->nworkers; i++) {
    if (n - off < 6 || n - off - 6 < get_le(p + off + 4, 2))
      return KVP_ECORRUPT;
    off += 6 + get_le(p + off + 4, 2);
  }
  for (uint32_t i = 0; i < h->nvolumes; i++) {
    if (n - off < 2 || n - off - 2 < get_le(p + off, 2))
      return KVP_ECORRUPT;
    off += 2 + get_le(p + off, 2);
  }
  if ((n - off) != (size_t)h->nshapes * 12)
    return KVP_ECORRUPT;
  h->wmap = malloc((h->nworkers + 1) * sizeof *h->wmap);
  h->vmap = malloc(h->nvolumes * sizeof *h->vmap);
  h->shape_tokens = malloc((h->nshapes + 1) * sizeof *h->shape_tokens);
  h->shape_bytes = malloc((h->nshapes + 1) * sizeof *h->shape_bytes);
  if (h->wmap == NULL || h->vmap == NULL || h->shape_tokens == NULL || h->shape_bytes == NULL) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  off = names_at;
  for (uint32_t i = 0; i < h->nworkers; i++) {
    uint32_t dp = (uint32_t)get_le(p + off, 4);
    size_t len = get_le(p + off + 4, 2);
    if ((rc = name_at(p + off + 6, len, name)) != 0 ||
        (rc = kvp__index_worker(ix, name, dp, &h->wmap[i])) != 0)
      goto fail;
    off += 6 + len;
  }
  for (uint32_t i = 0; i < h->nvolumes; i++) {
    size_t len = get_le(p + off, 2);
    if ((rc = name_at(p + off + 2, len, name)) != 0 ||
        (rc = kvp__index_volume(ix, name, &h->vmap[i])) != 0)
      goto fail;
    off += 2 + len;
  }
  for (uint32_t i = 0; i < h->nshapes; i++, off += 12) {
    h->shape_tokens[i] = (uint32_t)get_le(p + off, 4);
    h->shape_bytes[i] = get_le(p + off + 4, 8);
  }
  return 0;
fail:
  kvp__snap_header_free(h);
  return rc == KVP_EINVAL || rc == KVP_ENOSPC ? KVP_ECORRUPT : rc;
}

typedef struct pending_s {
  kvp__index_block_t b;
  const uint8_t *locs;
  uint32_t nlocs;
} pending_t;

/* Loads a batch: the map slots of all its hashes are fetched first. */
static int load_batch(const kvp__snap_header_t *h, kvp__index_t *ix, const pending_t *pb, size_t n,
                      uint64_t *blocks, uint64_t *locations) {
  uint64_t hashes[BATCH];
  int rc;
  if (n == 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    hashes[i] = pb[i].b.hash;
  kvp__index_prefetch(ix, hashes, n);
  *blocks += n; /* counted before: a failed batch may be half in */
  for (size_t i = 0; i < n; i++) {
    if ((rc = kvp__index_load_block(ix, &pb[i].b)) != 0)
      return rc == KVP_ENOMEM ? rc : KVP_ECORRUPT;
    for (uint32_t k = 0; k < pb[i].nlocs; k++) {
      const uint8_t *l = pb[i].locs + (size_t)k * LOC_BYTES;
      kvp__index_loc_t loc = {
          .worker = h->wmap[get_le(l, 2)], .volume = h->vmap[get_le(l + 2, 2)], .tier = l[4]};
      if ((rc = kvp__index_load_loc(ix, pb[i].b.hash, &loc)) != 0)
        return rc == KVP_ENOMEM ? rc : KVP_ECORRUPT;
    }
    *locations += pb[i].nlocs;
  }
  return 0;
}

int kvp__snap_chunk_load(const kvp__snap_header_t *h, const uint8_t *p, size_t n, kvp__index_t *ix,
                         uint64_t *blocks, uint64_t *locations) {
  pending_t pb[BATCH];
  size_t np = 0, off = 4;
  int rc;

  if (n < 12 || XXH3_64bits(p, n - 8) != get_le(p + n - 8, 8))
    return KVP_ECORRUPT;
  n -= 8;
  uint32_t count = (uint32_t)get_le(p, 4);
  for (uint32_t i = 0; i < count; i++) {
    if (n - off < BLOCK_FIXED)
      return KVP_ECORRUPT;
    const uint8_t *q = p + off;
    uint32_t shape = (uint32_t)get_le(q + 16, 2), nl = (uint32_t)get_le(q + 38, 2);
    if (shape >= h->nshapes || (n - off - BLOCK_FIXED) / LOC_BYTES < nl)
      return KVP_ECORRUPT;
    for (uint32_t k = 0; k < nl; k++) {
      const uint8_t *l = q + BLOCK_FIXED + (size_t)k * LOC_BYTES;
      if (get_le(l, 2) >= h->nworkers || get_le(l + 2, 2) >= h->nvolumes || l[4] < 1 || l[4] > 4)
        return KVP_ECORRUPT;
    }
    pending_t *e = &pb[np++];
    e->b.hash = get_le(q, 8);
    e->b.parent = get_le(q + 8, 8);
    e->b.tokens = h->shape_tokens[shape];
    e->b.bytes = h->shape_bytes[shape];
    e->b.last_access_ms = get_le(q + 18, 8);
    e->b.hits = (uint32_t)get_le(q + 26, 4);
    uint64_t fb = get_le(q + 30, 8);
    memcpy(&e->b.freq, &fb, sizeof fb);
    e->locs = q + BLOCK_FIXED;
    e->nlocs = nl;
    off += BLOCK_FIXED + (size_t)nl * LOC_BYTES;
    if (np == BATCH) {
      if ((rc = load_batch(h, ix, pb, np, blocks, locations)) != 0)
        return rc;
      np = 0;
    }
  }
  if (off != n)
    return KVP_ECORRUPT;
  return load_batch(h, ix, pb, np, blocks, locations);
}

/* Reads chunk id with s (bound and reset here): *p, *n valid until the
 * next step or reset. */
static int chunk_get(sqlite3_stmt *s, uint32_t id, const uint8_t **p, size_t *n) {
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, id);
  if (sqlite3_step(s) != SQLITE_ROW)
    return KVP_ECORRUPT;
  *p = sqlite3_column_blob(s, 0);
  *n = (size_t)sqlite3_column_bytes(s, 0);
  return *p == NULL ? KVP_ECORRUPT : 0;
}

/* --- the chunks, read on a thread of their own ---------------------------
 * Reading a chunk is SQLite's (a page at a time, by pread past the 2 GiB
 * mapping: 5.6 GiB of chunks at 128M locations) and a copy; the loading
 * thread decodes and inserts. A reader thread reads the next chunks over
 * a read-only connection of its own in one read transaction and hands
 * them over: the reading and its waits for the disk overlap the inserts.
 * Without it (no file to open again, no thread) the chunks are read on
 * the loading thread, one after another. */

#define CHUNKS_IN_FLIGHT 3

typedef struct chunk_s {
  kvp__store_pipe_item_t link; /* first: the pipe's */
  uint8_t *p;
  size_t n, cap;
  int rc;   /* the reader's: 0, or why it stopped (this item carries no chunk) */
  int last; /* no chunk after this item */
} chunk_t;

typedef struct reader_s {
  kvp__store_pipe_t q;
  sqlite3 *db;
  sqlite3_stmt *s;
  uint64_t generation;
  uint32_t chunks;
} reader_t;

/* Hands over a chunk item without bytes: rc (0: all read) and the end. */
static void reader_end(reader_t *r, chunk_t *c, int rc) {
  c->n = 0;
  c->rc = rc;
  c->last = 1;
  kvp__store_pipe_put(&r->q, 1, &c->link);
}

static void *reader_main(void *arg) {
  reader_t *r = arg;
  const uint8_t *p;
  size_t n;
  chunk_t *c = (chunk_t *)kvp__store_pipe_take(&r->q, 0);
  if (c == NULL)
    return NULL;
  /* The header this connection sees must be the one parsed: the same
   * generation (a file changed in between is loaded from its rows). */
  if (chunk_get(r->s, 0, &p, &n) != 0 || n < 16 || get_le(p + 8, 8) != r->generation) {
    reader_end(r, c, KVP_ECORRUPT);
    return NULL;
  }
  for (uint32_t id = 1; id <= r->chunks; id++) {
    if (chunk_get(r->s, id, &p, &n) != 0) {
      reader_end(r, c, KVP_ECORRUPT);
      return NULL;
    }
    if (n > c->cap) {
      uint8_t *b = realloc(c->p, n);
      if (b == NULL) {
        reader_end(r, c, KVP_ENOMEM);
        return NULL;
      }
      c->p = b;
      c->cap = n;
    }
    memcpy(c->p, p, n);
    c->n = n;
    c->rc = c->last = 0;
    kvp__store_pipe_put(&r->q, 1, &c->link);
    if ((c = (chunk_t *)kvp__store_pipe_take(&r->q, 0)) == NULL)
      return NULL; /* the loader stopped */
  }
  /* No chunk past the last one the header counts. */
  reader_end(r, c, chunk_get(r->s, r->chunks + 1, &p, &n) == 0 ? KVP_ECORRUPT : 0);
  return NULL;
}

/* Loads chunks 1..h->chunks read by a reader thread. Returns KVP_ENOENT
 * (nothing done) when there is no file to open again or the thread cannot
 * start: the caller reads them itself. */
static int load_chunks_piped(kvp__store_t *st, const kvp__snap_header_t *h, kvp__index_t *ix,
                             uint64_t *blocks, uint64_t *locations) {
  const char *path = sqlite3_db_filename(st->db, "main");
  chunk_t items[CHUNKS_IN_FLIGHT];
  reader_t r;
  pthread_t th;
  int rc = KVP_ENOENT, piped = 0;

  memset(&r, 0, sizeof r);
  memset(items, 0, sizeof items);
  r.generation = h->generation;
  r.chunks = h->chunks;
  if (path == NULL || path[0] == '\0' ||
      sqlite3_open_v2(path, &r.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK)
    goto out;
  (void)kvp__store_sql_exec(r.db, "PRAGMA mmap_size = 2147418112", NULL, 0);
  if (sqlite3_exec(r.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(r.db, "SELECT data FROM index_snapshot WHERE chunk = ?1", -1, &r.s,
                         NULL) != SQLITE_OK ||
      kvp__store_pipe_init(&r.q) != 0)
    goto out;
  for (int i = 0; i < CHUNKS_IN_FLIGHT; i++)
    kvp__store_pipe_put(&r.q, 0, &items[i].link);
  if (pthread_create(&th, NULL, reader_main, &r) != 0) {
    kvp__store_pipe_destroy(&r.q);
    goto out;
  }
  piped = 1;
  for (;;) {
    chunk_t *c = (chunk_t *)kvp__store_pipe_take(&r.q, 1);
    int last = c->last;
    rc = c->rc != 0 || last ? c->rc : kvp__snap_chunk_load(h, c->p, c->n, ix, blocks, locations);
    kvp__store_pipe_put(&r.q, 0, &c->link);
    if (rc != 0 || last)
      break;
    if (st->progress)
      st->progress(st->progress_ctx, *blocks, h->blocks);
  }
  kvp__store_pipe_stop(&r.q); /* a failed chunk: the reader stops at its next take */
  pthread_join(th, NULL);
  kvp__store_pipe_destroy(&r.q);
out:
  sqlite3_finalize(r.s);
  if (r.db != NULL) {
    sqlite3_exec(r.db, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(r.db);
  }
  for (int i = 0; i < CHUNKS_IN_FLIGHT; i++)
    free(items[i].p);
  return piped ? rc : KVP_ENOENT;
}

/* Chunks 1..h->chunks read here, one after another, with s. */
static int load_chunks_here(kvp__store_t *st, sqlite3_stmt *s, const kvp__snap_header_t *h,
                            kvp__index_t *ix, uint64_t *blocks, uint64_t *locations) {
  const uint8_t *p;
  size_t n;
  int rc;
  for (uint32_t c = 1; c <= h->chunks; c++) {
    if ((rc = chunk_get(s, c, &p, &n)) != 0 ||
        (rc = kvp__snap_chunk_load(h, p, n, ix, blocks, locations)) != 0)
      return rc;
    if (st->progress)
      st->progress(st->progress_ctx, *blocks, h->blocks);
  }
  return chunk_get(s, h->chunks + 1, &p, &n) == 0 ? KVP_ECORRUPT : 0;
}

int kvp__store_snapshot_load(kvp__store_t *st, kvp__index_t *ix, uint64_t *loaded) {
  sqlite3_stmt *s = NULL;
  kvp__snap_header_t h = {0};
  const uint8_t *p;
  uint64_t generation, blocks = 0, locations = 0;
  int rc;

  *loaded = 0;
  if ((rc = kvp__store_generation(st, &generation)) != 0)
    return rc;
  if (sqlite3_prepare_v2(st->db, "SELECT data FROM index_snapshot WHERE chunk = ?1", -1, &s,
                         NULL) != SQLITE_OK)
    return KVP_EDB;
  /* No header, or one of another generation: not current (the rows are
   * newer). Not an error: the rows are loaded. */
  rc = KVP_ENOENT;
  sqlite3_bind_int64(s, 1, 0);
  if (sqlite3_step(s) != SQLITE_ROW || sqlite3_column_bytes(s, 0) < 16 ||
      (p = sqlite3_column_blob(s, 0)) == NULL || get_le(p + 8, 8) != generation)
    goto out;
  if ((rc = kvp__snap_header_parse(p, (size_t)sqlite3_column_bytes(s, 0), ix, &h)) != 0)
    goto out;
  if ((rc = kvp__index_reserve(ix, (size_t)h.blocks)) != 0)
    goto out;
  if ((rc = load_chunks_piped(st, &h, ix, &blocks, &locations)) == KVP_ENOENT)
    rc = load_chunks_here(st, s, &h, ix, &blocks, &locations);
  *loaded = blocks;
  if (rc == 0 && (blocks != h.blocks || locations != h.locations))
    rc = KVP_ECORRUPT;
out:
  if (rc == KVP_ECORRUPT)
    kvp_log_error("advisor: the index snapshot of generation %llu is corrupt (%llu blocks in)",
                  (unsigned long long)generation, (unsigned long long)blocks);
  kvp__snap_header_free(&h);
  sqlite3_finalize(s);
  return rc;
}
