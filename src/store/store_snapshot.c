/* The index snapshot (store.h; docs/sql.md, `index_snapshot`): the whole
 * index in large BLOB chunks, written at a clean shutdown and read back at
 * memory speed by the next start when it is provably current.
 *
 * Current means: the snapshot's generation equals meta.generation. Every
 * transaction that changes the blocks or block_locations rows (a flush,
 * kvp__store_drop_workers) adds one to meta.generation, so a snapshot
 * followed by any later change is never used: the rows stay the truth and
 * are loaded instead (after a kill -9, too: the snapshot and its tag are
 * written in one transaction).
 *
 * The format, little-endian throughout. Chunk 0, the header:
 *   "KVPSNAP1", generation u64, chunks u32 (data chunks 1..chunks),
 *   blocks u64, locations u64, workers u32, volumes u32, shapes u32,
 *   workers: (dp_rank u32, length u16, name) each,
 *   volumes: (length u16, name) each (volume 0 is ""),
 *   shapes: (tokens u32, bytes u64) each,
 *   XXH3-64 of all the bytes before it, u64.
 * Chunks 1..chunks: blocks u32, then each block:
 *   hash u64, parent u64 (equal to hash: none), shape u16,
 *   last_access_ms u64, hits u32, freq f64, locations u16, then each
 *   location: worker u16, volume u16, tier u8 (ids index the header's
 *   lists); then XXH3-64 of the bytes before it, u64.
 * 40 bytes per block and 5 per location. Thread: the index owner's. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/log.h"
#include "index/walk.h"
#include "store/store_impl.h"

#define MAGIC "KVPSNAP1"
#define CHUNK_BYTES (8u << 20)
#define BLOCK_FIXED 40u /* bytes of a block before its locations */
#define LOC_BYTES 5u

/* --- bytes -------------------------------------------------------------- */

typedef struct buf_s {
  uint8_t *p;
  size_t n, cap;
  int oom;
} buf_t;

static void put(buf_t *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n)
      cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void put_le(buf_t *b, uint64_t v, size_t n) {
  uint8_t le[8];
  for (size_t i = 0; i < n; i++)
    le[i] = (uint8_t)(v >> (8 * i));
  put(b, le, n);
}

static void put_f64(buf_t *b, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  put_le(b, v, 8);
}

/* --- writing ------------------------------------------------------------ */

typedef struct writer_s {
  kvp__store_t *st;
  sqlite3_stmt *ins;
  buf_t chunk;
  uint32_t nchunks, in_chunk;
  uint64_t blocks, locations, bytes, total; /* total: the index's blocks, for progress */
  /* Shapes met so far: open addressing over tokens << 32 | bytes + 1. */
  uint64_t *shape_key;
  uint16_t *shape_id;
  size_t shape_cap, nshapes;
  int rc;
} writer_t;

static int chunk_insert(writer_t *w, uint32_t id, buf_t *b) {
  uint64_t sum = XXH3_64bits(b->p, b->n);
  put_le(b, sum, 8);
  if (b->oom)
    return KVP_ENOMEM;
  sqlite3_bind_int64(w->ins, 1, id);
  sqlite3_bind_blob64(w->ins, 2, b->p, b->n, SQLITE_STATIC);
  int rc = kvp__store_sql_step_done(w->ins);
  sqlite3_clear_bindings(w->ins);
  w->bytes += b->n;
  return rc;
}

static int chunk_flush(writer_t *w) {
  if (w->in_chunk == 0)
    return 0;
  for (size_t i = 0; i < 4; i++)
    w->chunk.p[i] = (uint8_t)(w->in_chunk >> (8 * i));
  int rc = chunk_insert(w, ++w->nchunks, &w->chunk);
  if (rc == 0 && w->st->progress)
    w->st->progress(w->st->progress_ctx, w->blocks, w->total);
  w->chunk.n = 0;
  w->in_chunk = 0;
  put_le(&w->chunk, 0, 4); /* the count, filled in above */
  return rc;
}

static int shape_of(writer_t *w, uint32_t tokens, uint64_t bytes, uint16_t *id) {
  uint64_t key = ((uint64_t)tokens << 32 | (bytes & 0xffffffffu)) + 1;
  size_t s = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 40) % w->shape_cap;
  for (; w->shape_key[s] != 0; s = (s + 1) % w->shape_cap)
    if (w->shape_key[s] == key) {
      *id = w->shape_id[s];
      return 0;
    }
  if (w->nshapes >= 65535 || (w->nshapes + 1) * 2 > w->shape_cap)
    return KVP_ENOSPC; /* the index has at most 65,536 shapes: cannot happen */
  w->shape_key[s] = key;
  *id = w->shape_id[s] = (uint16_t)w->nshapes++;
  return 0;
}

static int write_block(void *ctx, const kvp__index_block_t *b, const kvp__index_loc_t *locs,
                       size_t n) {
  writer_t *w = ctx;
  uint16_t shape;
  int rc;
  if (n > UINT16_MAX)
    return KVP_ETOOBIG;
  if ((rc = shape_of(w, b->tokens, b->bytes, &shape)) != 0)
    return rc;
  put_le(&w->chunk, b->hash, 8);
  put_le(&w->chunk, b->parent, 8);
  put_le(&w->chunk, shape, 2);
  put_le(&w->chunk, b->last_access_ms, 8);
  put_le(&w->chunk, b->hits, 4);
  put_f64(&w->chunk, b->freq);
  put_le(&w->chunk, n, 2);
  for (size_t i = 0; i < n; i++) {
    put_le(&w->chunk, locs[i].worker, 2);
    put_le(&w->chunk, locs[i].volume, 2);
    put_le(&w->chunk, locs[i].tier, 1);
  }
  if (w->chunk.oom)
    return KVP_ENOMEM;
  w->blocks++;
  w->locations += n;
  w->in_chunk++;
  return w->chunk.n >= (w->st->snapshot_chunk ? w->st->snapshot_chunk : CHUNK_BYTES)
             ? chunk_flush(w)
             : 0;
}

static int write_header(writer_t *w, const kvp__index_t *ix, uint64_t generation) {
  buf_t h = {0};
  size_t nw = kvp__index_worker_count(ix), nv = kvp__index_volume_count(ix);
  put(&h, MAGIC, 8);
  put_le(&h, generation, 8);
  put_le(&h, w->nchunks, 4);
  put_le(&h, w->blocks, 8);
  put_le(&h, w->locations, 8);
  put_le(&h, nw, 4);
  put_le(&h, nv, 4);
  put_le(&h, w->nshapes, 4);
  for (size_t i = 0; i < nw; i++) {
    uint32_t dp = 0;
    const char *name = kvp__index_worker_name(ix, (uint16_t)i, &dp);
    size_t len = name ? strlen(name) : 0;
    put_le(&h, dp, 4);
    put_le(&h, len, 2);
    put(&h, name, len);
  }
  for (size_t i = 0; i < nv; i++) {
    const char *name = kvp__index_volume_name(ix, (uint16_t)i);
    size_t len = name ? strlen(name) : 0;
    put_le(&h, len, 2);
    put(&h, name, len);
  }
  /* Shapes by id: the map's slots hold them in no order. */
  uint64_t *keys = calloc(w->nshapes + 1, sizeof *keys);
  if (keys == NULL) {
    free(h.p);
    return KVP_ENOMEM;
  }
  for (size_t s = 0; s < w->shape_cap; s++)
    if (w->shape_key[s])
      keys[w->shape_id[s]] = w->shape_key[s] - 1;
  for (size_t i = 0; i < w->nshapes; i++) {
    put_le(&h, keys[i] >> 32, 4);
    put_le(&h, keys[i] & 0xffffffffu, 8);
  }
  free(keys);
  int rc = chunk_insert(w, 0, &h);
  free(h.p);
  return rc;
}

static int generation_get(sqlite3 *db, uint64_t *g) {
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB, r;
  *g = 0;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'generation'", -1, &s, NULL) !=
      SQLITE_OK)
    return KVP_EDB;
  if ((r = sqlite3_step(s)) == SQLITE_ROW)
    *g = (uint64_t)sqlite3_column_int64(s, 0);
  if (r == SQLITE_ROW || r == SQLITE_DONE)
    rc = 0;
  sqlite3_finalize(s);
  return rc;
}

int kvp__store_generation(kvp__store_t *st, uint64_t *generation) {
  return generation_get(st->db, generation);
}

void kvp__store_snapshot_chunk_bytes(kvp__store_t *st, size_t bytes) {
  st->snapshot_chunk = bytes;
}

int kvp__store_snapshot_write(kvp__store_t *st, const kvp__index_t *ix, uint64_t *bytes) {
  writer_t w = {.st = st, .shape_cap = 1u << 17};
  uint64_t generation;
  int rc;

  if (bytes)
    *bytes = 0;
  if (kvp__index_dirty_count(ix) != 0)
    return KVP_EBUSY; /* the index is ahead of the rows */
  w.shape_key = calloc(w.shape_cap, sizeof *w.shape_key);
  w.shape_id = calloc(w.shape_cap, sizeof *w.shape_id);
  if (w.shape_key == NULL || w.shape_id == NULL) {
    rc = KVP_ENOMEM;
    goto out;
  }
  kvp__index_stats_t ist;
  kvp__index_stats(ix, &ist);
  w.total = ist.blocks;
  put_le(&w.chunk, 0, 4);
  if ((rc = kvp__store_sql_exec(st->db, "BEGIN IMMEDIATE", NULL, 0)) != 0)
    goto out;
  /* Read inside the transaction: no flush can commit between. */
  if ((rc = generation_get(st->db, &generation)) != 0 ||
      (rc = kvp__store_sql_exec(st->db, "DELETE FROM index_snapshot", NULL, 0)) != 0)
    goto rollback;
  rc = KVP_EDB;
  if (sqlite3_prepare_v2(st->db, "INSERT INTO index_snapshot(chunk, data) VALUES(?1, ?2)", -1,
                         &w.ins, NULL) != SQLITE_OK)
    goto rollback;
  if ((rc = kvp__index_each(ix, write_block, &w)) != 0 || (rc = chunk_flush(&w)) != 0 ||
      (rc = write_header(&w, ix, generation)) != 0)
    goto rollback;
  sqlite3_finalize(w.ins);
  w.ins = NULL;
  if ((rc = kvp__store_sql_exec(st->db, "COMMIT", NULL, 0)) != 0)
    goto rollback;
  if (bytes)
    *bytes = w.bytes;
  goto out;
rollback:
  kvp_log_error("advisor: index snapshot not written: %s",
                rc == KVP_EDB ? sqlite3_errmsg(st->db) : kvp_strerror(rc));
  sqlite3_finalize(w.ins);
  kvp__store_sql_exec(st->db, "ROLLBACK", NULL, 0);
out:
  free(w.chunk.p);
  free(w.shape_key);
  free(w.shape_id);
  return rc;
}
