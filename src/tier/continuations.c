/* The continuations of a prefix an operator deletes (control.c, engine.h
 * "Operator controls"): the blocks in the engine's volumes whose chain
 * passes through the prefix's last block. A prefix match walks from the
 * first block (DESIGN.md), so once the prefix is gone from a tier they are
 * never matched there again, yet they would keep their volume's capacity
 * and the engine's attention.
 *
 * The request's blocks are a prefix in order (the CLI and the binding send
 * the hashes of a token list's full blocks), or several. A requested block
 * is inside a prefix, not its end, when another requested block is its
 * child in the index, or when the block after it in the request is one
 * the index does not know (the tail of a prompt longer than what is
 * cached: the chain goes on through it, so the known block's other
 * children are siblings of that tail, not continuations). Every other
 * requested block is an end, and the continuations are the descendants
 * of the ends: for the prefix A-B of the chain A-B-C-D, C and D, but not
 * the sibling chain A-B'-C' below A only.
 *
 * The index has parent links, not child links: each block with a location
 * in the tiers asked (one pass over the index, kvp__index_each) is walked
 * up its parents to an end (a continuation), a root, a block the index
 * does not know, or a block already decided, each block once (a map of
 * the verdicts), on the loop thread: less than an idle round's work
 * (kvp-bench control). A block the index does
 * not know breaks the walk, so a continuation is found only through known
 * links; a prefix's end itself need not be known (the children of a block
 * deleted earlier keep its hash as their parent). */
#include <stdlib.h>

#include "common/array.h"
#include "index/walk.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

/* A block's verdict in the walk's map: its distance below an end << 2 |
 * BELOW, or NOT_BELOW, or WALKING while its walk runs. */
enum { BELOW = 1, NOT_BELOW = 2, WALKING = 3 };

typedef struct found_s {
  uint64_t hash, dist;
} found_t;

/* The requested blocks that end a prefix, into ends; asked gets them all. */
static int prefix_ends(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, kvp__map64_t *asked,
                       kvp__map64_t *ends) {
  kvp__map64_t inside;
  int rc = kvp__map64_init(&inside, n);
  for (size_t i = 0; i < n && rc == 0; i++) {
    kvp__index_block_t b;
    if ((rc = kvp__map64_put(asked, hashes[i], 1)) != 0)
      break;
    if (kvp__index_get(e->ix, hashes[i], &b, NULL, 0, NULL) == 0) {
      if (b.parent != b.hash)
        rc = kvp__map64_put(&inside, b.parent, 1);
    } else if (i > 0) {
      rc = kvp__map64_put(&inside, hashes[i - 1], 1);
    }
  }
  for (size_t i = 0; i < n && rc == 0; i++)
    if (kvp__map64_find(&inside, hashes[i]) == NULL)
      rc = kvp__map64_put(ends, hashes[i], 1);
  kvp__map64_free(&inside);
  return rc;
}

/* x's verdict (its value in seen): x and the ancestors its walk passes
 * get theirs in seen. stack is scratch. */
static int verdict(kvp__tier_engine_t *e, const kvp__map64_t *ends, kvp__map64_t *seen,
                   uint64_t **stack, size_t *cap, uint64_t x, uint64_t *out) {
  uint64_t cur = x, v = NOT_BELOW, base = 0; /* base: the last block walked's distance */
  size_t depth = 0;
  int rc = 0;
  for (;;) {
    kvp__index_block_t b;
    if (kvp__map64_get(seen, cur, &v) == 0) {
      if (v == WALKING)
        v = NOT_BELOW; /* a loop of parent links (bad events): no end on it */
      base = (v >> 2) + 1;
      break;
    }
    if (kvp__index_get(e->ix, cur, &b, NULL, 0, NULL) != 0) {
      v = NOT_BELOW; /* the chain is not known past here */
      break;
    }
    if ((rc = KVP_ARRAY_RESERVE(*stack, *cap, depth + 1, 64)) != 0 ||
        (rc = kvp__map64_put(seen, cur, WALKING)) != 0)
      break;
    (*stack)[depth++] = cur;
    if (b.parent == cur) {
      v = NOT_BELOW; /* a root */
      break;
    }
    if (kvp__map64_find((kvp__map64_t *)ends, b.parent) != NULL) {
      v = BELOW; /* cur is a child of an end: distance 0 */
      break;
    }
    cur = b.parent;
  }
  *out = rc == 0 && depth == 0 ? v : NOT_BELOW;
  for (size_t i = 0; i < depth; i++) {
    uint64_t vi = rc == 0 && v != NOT_BELOW ? (base + (depth - 1 - i)) << 2 | BELOW : NOT_BELOW;
    if (kvp__map64_put(seen, (*stack)[i], vi) != 0 && rc == 0) /* replaces: fits */
      rc = KVP_ENOMEM;
    if (i == 0)
      *out = vi;
  }
  return rc;
}

static int deeper_first(const void *a, const void *b) {
  const found_t *x = a, *y = b;
  return x->dist < y->dist ? 1 : x->dist > y->dist ? -1 : 0;
}

/* The walk's state, for each block of the index (kvp__index_each). */
typedef struct walk_s {
  kvp__tier_engine_t *e;
  int tier;
  kvp__map64_t asked, ends, seen;
  uint64_t *stack;
  size_t cap;
  found_t *found;
  size_t nfound, fcap;
} walk_t;

static int each(void *ctx, const kvp__index_block_t *b, const kvp__index_loc_t *locs, size_t n) {
  walk_t *w = ctx;
  uint64_t v;
  int there = 0;
  for (size_t k = 0; k < n && !there; k++)
    there = (locs[k].tier == 3 || locs[k].tier == 4) && (w->tier == 0 || locs[k].tier == w->tier);
  /* A requested block below another end is deleted as requested. */
  if (!there || kvp__map64_find(&w->asked, b->hash) != NULL)
    return 0;
  int rc = verdict(w->e, &w->ends, &w->seen, &w->stack, &w->cap, b->hash, &v);
  if (rc != 0 || (v & 3) != BELOW)
    return rc;
  if ((rc = KVP_ARRAY_RESERVE(w->found, w->fcap, w->nfound + 1, 64)) != 0)
    return rc;
  w->found[w->nfound++] = (found_t){.hash = b->hash, .dist = v >> 2};
  return 0;
}

int kvp__tier_continuations(kvp__tier_engine_t *e, const uint64_t *hashes, size_t n, int tier,
                            uint64_t **out, size_t *nout) {
  walk_t w = {.e = e, .tier = tier};
  int rc;

  *out = NULL;
  *nout = 0;
  if ((rc = kvp__map64_init(&w.asked, n)) != 0 || (rc = kvp__map64_init(&w.ends, n)) != 0 ||
      (rc = kvp__map64_init(&w.seen, 0)) != 0 ||
      (rc = prefix_ends(e, hashes, n, &w.asked, &w.ends)) != 0 || kvp__map64_count(&w.ends) == 0)
    goto done;
  /* Every block once, in record order: a block's locations come with it,
   * and only the parent walks look blocks up. */
  if ((rc = kvp__index_each(e->ix, each, &w)) != 0 || w.nfound == 0)
    goto done;
  /* Deepest first: the job deletes them in that order within a volume,
   * so that what is left of the chain at any moment is a whole prefix. */
  qsort(w.found, w.nfound, sizeof *w.found, deeper_first);
  if ((*out = malloc(w.nfound * sizeof **out)) == NULL) {
    rc = KVP_ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < w.nfound; i++)
    (*out)[i] = w.found[i].hash;
  *nout = w.nfound;
done:
  free(w.found);
  free(w.stack);
  kvp__map64_free(&w.asked);
  kvp__map64_free(&w.ends);
  kvp__map64_free(&w.seen);
  return rc;
}
