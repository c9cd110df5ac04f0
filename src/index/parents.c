/* The blocks' parents (index_impl.h, NODE_PARENT_*), and the renumbering
 * after a bulk load that puts chains back in record order (index.h).
 * Thread: the index owner's. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/status.h"

int kvp__index_set_parent(kvp__index_t *ix, uint32_t n, uint64_t p) {
  meta_t *md = &ix->meta[n];
  uint64_t h = ix->nodes[n].hash;
  if (ix->bulk_parent != NULL) {
    if (n >= ix->bulk_cap) {
      size_t cap = ix->node_cap > n ? ix->node_cap : (size_t)n + 1;
      uint64_t *b = realloc(ix->bulk_parent, cap * sizeof *b);
      if (b == NULL)
        return KVP_ENOMEM;
      memset(b + ix->bulk_cap, 0, (cap - ix->bulk_cap) * sizeof *b);
      ix->bulk_parent = b;
      ix->bulk_cap = cap;
    }
    ix->bulk_parent[n] = p;
    return 0;
  }
  /* A free record's hash is 0, and no block's parent is 0 here. */
  int prev = p != h && p != 0 && n > 1 && ix->nodes[n - 1].hash == p;
  if (p != h && !prev && kvp__map64_put(&ix->parents, h, p) != 0)
    return KVP_ENOMEM;
  if ((p == h || prev) && (md->flags & NODE_PARENT_SIDE))
    kvp__map64_del(&ix->parents, h, NULL);
  md->flags =
      (uint8_t)((md->flags & ~(NODE_PARENT_PREV | NODE_PARENT_SIDE)) | (p == h ? 0
                                                                        : prev ? NODE_PARENT_PREV
                                                                               : NODE_PARENT_SIDE));
  return 0;
}

int kvp__index_bulk_begin(kvp__index_t *ix) {
  size_t cap = ix->node_cap > ix->nnodes ? ix->node_cap : ix->nnodes;
  uint64_t *b = calloc(cap ? cap : 1, sizeof *b);
  if (b == NULL)
    return KVP_ENOMEM;
  /* The parents of what is there already go aside too. */
  for (size_t n = 1; n < ix->nnodes; n++)
    if (ix->meta[n].flags & NODE_LIVE) {
      b[n] = kvp__index_parent_of(ix, (uint32_t)n);
      ix->meta[n].flags &= (uint8_t) ~(NODE_PARENT_PREV | NODE_PARENT_SIDE);
    }
  kvp__map64_clear(&ix->parents);
  ix->bulk_parent = b;
  ix->bulk_cap = cap ? cap : 1;
  return 0;
}

/* The parents kept aside, set in the records' present order. */
static int set_all(kvp__index_t *ix, const uint64_t *par, size_t n) {
  int rc = 0;
  for (size_t i = 1; i < n && rc == 0; i++)
    if (ix->meta[i].flags & NODE_LIVE)
      rc = kvp__index_set_parent(ix, (uint32_t)i, i < n && par[i] ? par[i] : ix->nodes[i].hash);
  return rc;
}

int kvp__index_bulk_end(kvp__index_t *ix) {
  uint64_t *par = ix->bulk_parent;
  size_t n = ix->nnodes, k = 1, pcap = 0;
  uint32_t *newid = NULL, *order = NULL, *path = NULL;
  node_t *nn = NULL;
  meta_t *nm = NULL;
  uint64_t *np = NULL;
  int rc = KVP_ENOMEM;

  if (par == NULL)
    return 0;
  if (ix->bulk_cap < n) { /* records made without a parent: none */
    uint64_t *b = realloc(par, n * sizeof *b);
    if (b == NULL)
      goto fallback;
    memset(b + ix->bulk_cap, 0, (n - ix->bulk_cap) * sizeof *b);
    ix->bulk_parent = par = b;
    ix->bulk_cap = n;
  }
  newid = calloc(n, sizeof *newid);
  order = malloc(n * sizeof *order);
  nn = malloc(ix->node_cap * sizeof *nn);
  nm = malloc(ix->node_cap * sizeof *nm);
  np = malloc(n * sizeof *np);
  if (newid == NULL || order == NULL || nn == NULL || nm == NULL || np == NULL)
    goto fallback;
  /* Each block not placed yet: up its parents to the first one placed (or
   * the root, or one not in the index), then that path from the top down.
   * A chain's blocks thus follow each other; where two chains share a
   * prefix, the second goes on after it elsewhere (its first new block's
   * parent in the side table). UINT32_MAX marks a path being built: a
   * cycle of parents (bad rows) stops there. */
  for (size_t r = 1; r < n; r++) {
    if (!(ix->meta[r].flags & NODE_LIVE) || newid[r] != 0)
      continue;
    size_t len = 0;
    uint32_t cur = (uint32_t)r;
    for (;;) {
      if (len == pcap) {
        size_t c = pcap ? pcap * 2 : 256;
        uint32_t *p = realloc(path, c * sizeof *p);
        if (p == NULL) {
          for (size_t j = 0; j < len; j++)
            newid[path[j]] = 0;
          goto fallback;
        }
        path = p;
        pcap = c;
      }
      path[len++] = cur;
      newid[cur] = UINT32_MAX;
      uint64_t p = par[cur];
      if (p == 0 || p == ix->nodes[cur].hash)
        break;
      uint32_t q = kvp__index_find(ix, p);
      if (q == 0 || newid[q] != 0)
        break;
      cur = q;
    }
    while (len > 0) {
      uint32_t o = path[--len];
      newid[o] = (uint32_t)k;
      order[k++] = o;
    }
  }
  /* The records in their new order (free ones dropped), the map's slots
   * renamed, the parents set where they now are. */
  nn[0] = ix->nodes[0];
  nm[0] = ix->meta[0];
  for (size_t i = 1; i < k; i++) {
    nn[i] = ix->nodes[order[i]];
    nm[i] = ix->meta[order[i]];
    np[i] = par[order[i]];
  }
  for (size_t s = 0; s < ix->cap; s++) {
    uint32_t v = ix->slots[s];
    if (v != 0)
      ix->slots[s] = (v & ~ix->idx_mask) | newid[v & ix->idx_mask];
  }
  free(ix->nodes);
  free(ix->meta);
  ix->nodes = nn;
  ix->meta = nm;
  kvp__index_hint_huge(ix->nodes, ix->node_cap * sizeof *ix->nodes);
  kvp__index_hint_huge(ix->meta, ix->node_cap * sizeof *ix->meta);
  nn = NULL;
  nm = NULL;
  ix->nnodes = k;
  ix->node_free = ix->node_free_tail = 0;
  free(ix->bulk_parent);
  ix->bulk_parent = NULL;
  ix->bulk_cap = 0;
  rc = set_all(ix, np, k);
  goto out;
fallback:
  /* No room to renumber: the parents where the records are. */
  ix->bulk_parent = NULL;
  ix->bulk_cap = 0;
  rc = set_all(ix, par, n);
  free(par);
out:
  free(newid);
  free(order);
  free(path);
  free(nn);
  free(nm);
  free(np);
  /* The tables above are freed but glibc, its mmap threshold raised by the
   * big frees of the load, may keep their pages in the heap: give them back
   * (the load's peak, not the index, is what they were). */
  malloc_trim(0);
  return rc;
}
