/* The index's changes as plain rows, for the write-behind store
 * (store/store.h): every block changed or deleted since the last take, with
 * all its locations where they changed, the locations removed, and the
 * volume names interned since the store last wrote them. The store writes
 * these rows and never reads the index itself, so the write can run on
 * another thread while the index keeps changing.
 *
 * Names point into the index's interned tables, which keep their strings at
 * the same address for the life of the index (intern.h): free the rows
 * before the index.
 *
 * Thread: take and restore on the index owner's (loop) thread; the rows
 * themselves may be read anywhere. */
#ifndef KVP_INDEX_ROWS_H
#define KVP_INDEX_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "index/changelog.h"
#include "index/index.h"

/* A block row: the blocks table. */
typedef struct kvp__index_row_s {
  uint64_t hash;
  int deleted;     /* the block is gone: delete its row and its locations */
  uint64_t parent; /* equal to hash when the block has no parent */
  uint64_t bytes, last_access_ms;
  uint32_t tokens, hits;
  double freq;
  /* Its locations changed: locs[loc_off .. loc_off + nlocs) are all of them
   * now (nlocs 0 when they did not change). */
  uint32_t loc_off, nlocs;
} kvp__index_row_t;

/* A location row: the block_locations table. */
typedef struct kvp__index_loc_row_s {
  uint64_t hash;
  const char *worker, *volume; /* volume "" for none (G1/G2) */
  uint32_t dp_rank;
  int tier;
} kvp__index_loc_row_t;

typedef struct kvp__index_rows_s {
  kvp__index_row_t *rows; /* each changed or deleted block once, in signed hash order */
  size_t nrows;
  kvp__index_loc_row_t *locs; /* the rows' locations */
  size_t nlocs;
  kvp__index_loc_row_t *gone; /* locations removed, in signed hash order */
  size_t ngone;
  const char **volumes; /* volume names interned at or after volumes_from */
  size_t nvolumes;
  size_t volumes_total;    /* volumes interned in all (ids 0 .. volumes_total - 1) */
  kvp__index_changes_t ch; /* the changes taken: kvp__index_rows_restore gives them back */
} kvp__index_rows_t;

/* Takes the changes and copies them out as rows into *r; volume names from
 * id volumes_from on are listed (0 or 1: all; volume 0 is the unnamed one).
 * In signed hash order, as SQLite keys them: the B-tree writes then walk
 * the pages once. Returns 0 or KVP_ENOMEM (nothing taken, *r empty). */
int kvp__index_rows_take(kvp__index_t *ix, size_t volumes_from, kvp__index_rows_t *r);

/* Gives the changes of rows that could not be written back to the index
 * (conservatively: every block's locations are written again) and frees
 * the rows. */
void kvp__index_rows_restore(kvp__index_t *ix, kvp__index_rows_t *r);

/* Frees the rows; *r is then empty. */
void kvp__index_rows_free(kvp__index_rows_t *r);

#endif
