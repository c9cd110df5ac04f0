/* Location lists and block shapes of the advisor's index (index_impl.h).
 *
 * A block's locations are u32s: up to two inline in its record, more in a
 * chunk of the slab, a single u32 array carved into chunks of 4 << c
 * locations, with a free list per class (no malloc per block). A list keeps
 * its order: new locations go last, a removal closes the gap.
 *
 * Shapes are the (tokens, bytes) pairs of blocks, interned with a reference
 * count so that a u16 in the record stands for them.
 *
 * Thread: the advisor's loop thread. */
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "index/index_impl.h"
#include "kvplane/status.h"

#define CLASS_CAP(c) ((size_t)4 << (c))

/* --- slab chunks ---------------------------------------------------------- */

static int chunk_alloc(kvp__index_t *ix, unsigned c, uint32_t *off) {
  size_t cap = CLASS_CAP(c);
  if (ix->slab_free[c]) {
    *off = ix->slab_free[c];
    ix->slab_free[c] = ix->slab[*off];
  } else {
    size_t need = (ix->slab_n ? ix->slab_n : 1) + cap;
    if (need > UINT32_MAX || kvp__array_reserve((void **)&ix->slab, &ix->slab_cap, need,
                                                sizeof *ix->slab, 1024, KVP_ARRAY_HALF) != 0)
      return KVP_ENOMEM;
    if (ix->slab_n == 0)
      ix->slab_n = 1; /* offset 0 is "none" */
    *off = (uint32_t)ix->slab_n;
    ix->slab_n += cap;
  }
  ix->slab_used += cap;
  return 0;
}

static void chunk_free(kvp__index_t *ix, unsigned c, uint32_t off) {
  ix->slab[off] = ix->slab_free[c];
  ix->slab_free[c] = off;
  ix->slab_used -= CLASS_CAP(c);
}

/* Appends loc to node n's list. Returns 0 or KVP_ENOMEM (list unchanged). */
int kvp__index_loc_add(kvp__index_t *ix, uint32_t n, uint32_t loc) {
  node_t *nd = &ix->nodes[n];
  if (!kvp__index_is_ovf(nd->loc[1])) {
    if (nd->loc[0] == 0 || nd->loc[1] == 0) {
      nd->loc[nd->loc[0] != 0] = loc;
      return 0;
    }
    uint32_t off;
    if (chunk_alloc(ix, 0, &off) != 0)
      return KVP_ENOMEM;
    nd = &ix->nodes[n];
    ix->slab[off] = nd->loc[0];
    ix->slab[off + 1] = nd->loc[1];
    ix->slab[off + 2] = loc;
    nd->loc[0] = off;
    nd->loc[1] = kvp__index_ovf_make(0, 3);
    return 0;
  }
  unsigned c = kvp__index_ovf_class(nd->loc[1]);
  size_t cnt = kvp__index_ovf_count(nd->loc[1]);
  if (cnt + 1 > OVF_MAX_COUNT)
    return KVP_ENOMEM;
  if (cnt == CLASS_CAP(c)) {
    uint32_t off;
    if (c + 1 >= OVF_CLASSES || chunk_alloc(ix, c + 1, &off) != 0)
      return KVP_ENOMEM;
    nd = &ix->nodes[n];
    memcpy(&ix->slab[off], &ix->slab[nd->loc[0]], cnt * sizeof *ix->slab);
    chunk_free(ix, c, nd->loc[0]);
    nd->loc[0] = off;
    c++;
  }
  ix->slab[nd->loc[0] + cnt] = loc;
  nd->loc[1] = kvp__index_ovf_make(c, cnt + 1);
  return 0;
}

/* Removes the location at position at of node n's list. Never fails: a
 * list that shrinks moves to a smaller chunk only when one is free or the
 * slab has room, else it stays where it is. */
void kvp__index_loc_del(kvp__index_t *ix, uint32_t n, size_t at) {
  node_t *nd = &ix->nodes[n];
  if (!kvp__index_is_ovf(nd->loc[1])) {
    if (at == 0)
      nd->loc[0] = nd->loc[1];
    nd->loc[1] = 0;
    return;
  }
  unsigned c = kvp__index_ovf_class(nd->loc[1]);
  size_t cnt = kvp__index_ovf_count(nd->loc[1]);
  uint32_t *l = &ix->slab[nd->loc[0]];
  memmove(&l[at], &l[at + 1], (cnt - at - 1) * sizeof *l);
  cnt--;
  if (cnt <= 2) {
    uint32_t off = nd->loc[0];
    nd->loc[0] = l[0];
    nd->loc[1] = cnt == 2 ? l[1] : 0;
    chunk_free(ix, c, off);
    return;
  }
  /* A quarter full: halve (hysteresis, so one add and remove at a class
   * boundary do not move the list each time). */
  uint32_t off;
  if (c > 0 && cnt <= CLASS_CAP(c) / 4 && chunk_alloc(ix, c - 1, &off) == 0) {
    nd = &ix->nodes[n];
    memcpy(&ix->slab[off], &ix->slab[nd->loc[0]], cnt * sizeof *ix->slab);
    chunk_free(ix, c, nd->loc[0]);
    nd->loc[0] = off;
    c--;
  }
  nd->loc[1] = kvp__index_ovf_make(c, cnt);
}

/* Frees node n's chunk, if any; its list is then empty. */
void kvp__index_locs_free(kvp__index_t *ix, uint32_t n) {
  node_t *nd = &ix->nodes[n];
  if (kvp__index_is_ovf(nd->loc[1]))
    chunk_free(ix, kvp__index_ovf_class(nd->loc[1]), nd->loc[0]);
  nd->loc[0] = nd->loc[1] = 0;
}

/* --- shapes -------------------------------------------------------------- */

static size_t shape_slot(uint64_t key, size_t cap) {
  return (size_t)(((key * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1));
}

static int shapes_rehash(shapes_t *s, size_t cap) {
  uint32_t *map = calloc(cap, sizeof *map);
  if (map == NULL)
    return KVP_ENOMEM;
  for (size_t id = 0; id < s->n; id++) {
    if (s->ref[id] == 0)
      continue;
    size_t i = shape_slot(s->key[id], cap);
    while (map[i])
      i = (i + 1) & (cap - 1);
    map[i] = (uint32_t)id + 1;
  }
  free(s->map);
  s->map = map;
  s->map_cap = cap;
  return 0;
}

/* Takes a reference on the id of (tokens, bytes), interning it when new.
 * Returns 0, KVP_ENOMEM or KVP_ENOSPC (65536 different sizes live). */
int kvp__index_shape_get(kvp__index_t *ix, uint32_t tokens, uint64_t bytes, uint16_t *id) {
  shapes_t *s = &ix->shapes;
  uint64_t key = kvp__index_shape_key(tokens, bytes);
  if (s->map_cap) {
    for (size_t i = shape_slot(key, s->map_cap); s->map[i]; i = (i + 1) & (s->map_cap - 1)) {
      if (s->key[s->map[i] - 1] == key) {
        *id = (uint16_t)(s->map[i] - 1);
        s->ref[*id]++;
        return 0;
      }
    }
  }
  if (s->live >= 65536)
    return KVP_ENOSPC;
  if ((s->live + 1) * 2 > s->map_cap && shapes_rehash(s, s->map_cap ? s->map_cap * 2 : 16) != 0)
    return KVP_ENOMEM;
  size_t nid = s->n;
  if (s->n >= 65536) { /* every id given once: reuse a free one */
    for (nid = 0; s->ref[nid] != 0; nid++)
      ;
  } else {
    void **const arrs[] = {(void **)&s->key, (void **)&s->ref};
    const size_t elems[] = {sizeof *s->key, sizeof *s->ref};
    if (kvp__array_reserve_n(arrs, elems, 2, &s->cap, s->n + 1, 16) != 0)
      return KVP_ENOMEM;
    s->n++;
  }
  s->key[nid] = key;
  s->ref[nid] = 1;
  s->live++;
  size_t i = shape_slot(key, s->map_cap);
  while (s->map[i])
    i = (i + 1) & (s->map_cap - 1);
  s->map[i] = (uint32_t)nid + 1;
  *id = (uint16_t)nid;
  return 0;
}

/* Drops a reference; the last one frees the id (backward-shift delete). */
void kvp__index_shape_put(kvp__index_t *ix, uint16_t id) {
  shapes_t *s = &ix->shapes;
  if (--s->ref[id] != 0)
    return;
  s->live--;
  size_t m = s->map_cap - 1, i = shape_slot(s->key[id], s->map_cap);
  while (s->map[i] != (uint32_t)id + 1)
    i = (i + 1) & m;
  for (size_t j = (i + 1) & m; s->map[j]; j = (j + 1) & m) {
    size_t home = shape_slot(s->key[s->map[j] - 1], s->map_cap);
    if (((j - home) & m) >= ((j - i) & m)) {
      s->map[i] = s->map[j];
      i = j;
    }
  }
  s->map[i] = 0;
}

size_t kvp__index_locs_memory(const kvp__index_t *ix) {
  const shapes_t *s = &ix->shapes;
  return ix->slab_cap * sizeof *ix->slab + s->cap * (sizeof *s->key + sizeof *s->ref) +
         s->map_cap * sizeof *s->map;
}
