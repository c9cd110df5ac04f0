/* Growable arrays: the one helper every module uses to make room in a
 * malloc'd array, instead of a realloc loop of its own.
 *
 *   uint64_t *v = NULL; size_t cap = 0;
 *   if ((rc = KVP_ARRAY_RESERVE(v, cap, n + 1, 16)) != 0) goto out;
 *   v[n++] = x;
 *
 * Capacity grows geometrically from `first`: doubling by default, or by half
 * (1.5x) where the slack is part of a published memory figure. */
#ifndef KVP_COMMON_ARRAY_H
#define KVP_COMMON_ARRAY_H

#include <stddef.h>

typedef enum kvp__array_growth_e {
  KVP_ARRAY_DOUBLE = 0, /* capacity x2 per step */
  KVP_ARRAY_HALF = 1,   /* capacity x1.5 per step */
} kvp__array_growth_t;

/* Makes room for `need` elements of `elem` bytes in *arr, whose capacity is
 * *cap elements. Returns 0 (also when there was room already), or
 * KVP_ENOMEM with *arr and *cap unchanged (the old array stays valid), or
 * KVP_ETOOBIG when need * elem does not fit a size_t. */
int kvp__array_reserve(void **arr, size_t *cap, size_t need, size_t elem, size_t first,
                       kvp__array_growth_t growth);

/* Parallel arrays that share one capacity (columns of the same rows):
 * reserves every arrs[i] (element size elems[i]) to the same new capacity.
 * Returns 0, or KVP_ENOMEM / KVP_ETOOBIG with *cap unchanged; arrays that
 * were already moved to a larger allocation stay valid with their contents,
 * so a later call only retries the rest. */
int kvp__array_reserve_n(void **const arrs[], const size_t elems[], size_t n, size_t *cap,
                         size_t need, size_t first);

/* Typed shorthands: `a` is an lvalue pointer, `cap` an lvalue size_t. */
#define KVP_ARRAY_RESERVE(a, cap, need, first)                                                     \
  kvp__array_reserve((void **)&(a), &(cap), (need), sizeof *(a), (first), KVP_ARRAY_DOUBLE)
#define KVP_ARRAY_RESERVE_HALF(a, cap, need, first)                                                \
  kvp__array_reserve((void **)&(a), &(cap), (need), sizeof *(a), (first), KVP_ARRAY_HALF)

#endif
