/* The routers' indexer API: the cumulative per-rank figures (routerapi.h,
 * kvp__rapi_paths), Mooncake's ordered tier walk (its PR #3088, the
 * conductor's `rank_matches`).
 *
 * Every (worker id, dp rank) the index knows walks the query's blocks with
 * one cursor and a one-way phase: consecutive blocks it holds in G1, then,
 * from the first G1 miss, in G2, then G3, then G4; at a miss the same block
 * is tried in the next tier (an empty phase falls through at once), and a
 * miss in G4 ends the walk. bound[t] is the cursor when phase t ended, so
 * bound[1] <= bound[2] <= bound[3] <= bound[4] <= n. One pass over the
 * blocks, each looked up once (kvp__index_get); the walk stops when no
 * rank is left. */
#include <stdlib.h>
#include <string.h>

#include "advisor/routerapi.h"
#include "kvplane/event.h"
#include "kvplane/status.h"

int kvp__rapi_paths(const kvp__index_t *ix, const uint64_t *hashes, size_t n, const char *instance,
                    kvp__rapi_path_t **out, size_t *npaths) {
  size_t nw = kvp__index_worker_count(ix), cap = 64, nlive = 0;
  kvp__rapi_path_t *p = calloc(nw + 1, sizeof *p);
  uint8_t *phase = calloc(nw + 1, 1), *held = calloc(nw + 1, 1);
  uint16_t *live = malloc((nw + 1) * sizeof *live);
  kvp__index_loc_t *locs = malloc(cap * sizeof *locs);
  int rc = KVP_ENOMEM;

  *out = NULL;
  *npaths = 0;
  if (p == NULL || phase == NULL || held == NULL || live == NULL || locs == NULL)
    goto done;
  for (size_t w = 0; w < nw; w++) {
    uint32_t dp = 0;
    const char *name = kvp__index_worker_name(ix, (uint16_t)w, &dp);
    p[w].worker = (uint16_t)w;
    if (name == NULL || (instance && instance[0] && strcmp(name, instance) != 0))
      continue;
    phase[w] = KVP_TIER_G1;
    live[nlive++] = (uint16_t)w;
  }
  for (size_t i = 0; i < n && nlive > 0; i++) {
    size_t nl = 0;
    if (kvp__index_get(ix, hashes[i], NULL, locs, cap, &nl) == 0 && nl > cap) {
      kvp__index_loc_t *grown = realloc(locs, nl * sizeof *locs);
      if (grown == NULL)
        goto done;
      locs = grown;
      cap = nl;
      (void)kvp__index_get(ix, hashes[i], NULL, locs, cap, &nl);
    }
    for (size_t k = 0; k < nl; k++)
      if (locs[k].worker < nw && locs[k].tier >= 1 && locs[k].tier <= KVP_TIER_MAX)
        held[locs[k].worker] |= (uint8_t)(1u << locs[k].tier);
    size_t keep = 0;
    for (size_t j = 0; j < nlive; j++) {
      uint16_t w = live[j];
      int t = phase[w];
      while (t <= KVP_TIER_MAX && !(held[w] & (1u << t)))
        p[w].bound[t++] = i; /* phase t ends before block i */
      if (t > KVP_TIER_MAX)
        continue; /* missed in G4 too: done */
      phase[w] = (uint8_t)t;
      live[keep++] = w;
    }
    nlive = keep;
    for (size_t k = 0; k < nl; k++)
      if (locs[k].worker < nw)
        held[locs[k].worker] = 0;
  }
  /* Still walking at the end: every phase from the current one reached n. */
  for (size_t j = 0; j < nlive; j++)
    for (int t = phase[live[j]]; t <= KVP_TIER_MAX; t++)
      p[live[j]].bound[t] = n;
  *out = p;
  *npaths = nw;
  p = NULL;
  rc = 0;
done:
  free(p);
  free(phase);
  free(held);
  free(live);
  free(locs);
  return rc;
}
