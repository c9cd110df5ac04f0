/* Every block of the index with its locations (walk.h).
 *
 * Relies on these internals (index_impl.h): the records ix->nodes[1 ..
 * nnodes) with NODE_LIVE on those that hold a block, kvp__index_locs for a
 * record's location list, LOC_WORKER/LOC_TIER/LOC_VOLUME, and the shape and
 * last-access encodings (as query.c's fill_block reads them). */
#include <stdlib.h>

#include "index/index_impl.h"
#include "index/walk.h"
#include "kvplane/status.h"

int kvp__index_each(const kvp__index_t *ix, kvp__index_each_fn fn, void *ctx) {
  kvp__index_loc_t small[64], *locs = small;
  size_t cap = sizeof small / sizeof small[0];
  int rc = 0;
  for (size_t i = 1; i < ix->nnodes && rc == 0; i++) {
    const node_t *nd = &ix->nodes[i];
    if (!(nd->flags & NODE_LIVE))
      continue;
    size_t n;
    const uint32_t *l = kvp__index_locs(ix, nd, &n);
    if (n > cap) {
      kvp__index_loc_t *p = malloc(n * sizeof *p);
      if (p == NULL) {
        rc = KVP_ENOMEM;
        break;
      }
      if (locs != small)
        free(locs);
      locs = p;
      cap = n;
    }
    for (size_t k = 0; k < n; k++) {
      locs[k].worker = LOC_WORKER(l[k]);
      locs[k].tier = (uint8_t)LOC_TIER(l[k]);
      locs[k].volume = LOC_VOLUME(l[k]);
    }
    kvp__index_block_t b = {
        .hash = nd->hash,
        .parent = nd->parent,
        .tokens = kvp__index_shape_tokens(ix, nd->shape),
        .bytes = kvp__index_shape_bytes(ix, nd->shape),
        .last_access_ms =
            nd->last_access_s ? ((uint64_t)nd->last_access_s + KVP__INDEX_EPOCH_S) * 1000 : 0,
        .hits = nd->hits,
        .freq = nd->freq,
    };
    rc = fn(ctx, &b, locs, n);
  }
  if (locs != small)
    free(locs);
  return rc;
}
