/* Every block of the index with its locations, for a snapshot of the
 * whole index (store/store_snapshot.c writes one at a clean shutdown).
 *
 * Thread: the index owner's, like the index. */
#ifndef KVP_INDEX_WALK_H
#define KVP_INDEX_WALK_H

#include <stddef.h>

#include "index/index.h"

/* Called once per block: b as kvp__index_get fills it, and its n
 * locations in the order the index keeps them (oldest first: loading them
 * in this order with kvp__index_load_loc rebuilds the same lists). A
 * non-zero return stops the walk and is returned by it. */
typedef int (*kvp__index_each_fn)(void *ctx, const kvp__index_block_t *b,
                                  const kvp__index_loc_t *locs, size_t n);

/* Walks every block in record order. Returns 0, what fn returned, or
 * KVP_ENOMEM (a block with more locations than a small buffer holds). */
int kvp__index_each(const kvp__index_t *ix, kvp__index_each_fn fn, void *ctx);

#endif
