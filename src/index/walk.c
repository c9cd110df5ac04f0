/* Every block of the index with its locations (walk.h).
 *
 * Relies on these internals (index_impl.h): the record ids 1 .. nnodes with
 * NODE_LIVE in ix->meta on those that hold a block, kvp__index_locs for a
 * record's location list in stored order (oldest first, the order a reload
 * appends them in), LOC_WORKER/LOC_TIER/LOC_VOLUME, and
 * kvp__index_fill_block for the rest. */
#include <stdlib.h>

#include "index/index_impl.h"
#include "index/walk.h"
#include "kvplane/status.h"

int kvp__index_each(const kvp__index_t *ix, kvp__index_each_fn fn, void *ctx) {
  kvp__index_loc_t small[64], *locs = small;
  size_t cap = sizeof small / sizeof small[0];
  int rc = 0;
  for (size_t i = 1; i < ix->nnodes && rc == 0; i++) {
    if (!(ix->meta[i].flags & NODE_LIVE))
      continue;
    size_t n;
    const uint32_t *l = kvp__index_locs(ix, (uint32_t)i, &n);
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
    kvp__index_block_t b;
    kvp__index_fill_block(ix, (uint32_t)i, &b);
    rc = fn(ctx, &b, locs, n);
  }
  if (locs != small)
    free(locs);
  return rc;
}
