/* Growable arrays; see array.h. */
#include "common/array.h"

#include <stdint.h>
#include <stdlib.h>

#include "kvplane/status.h"

/* The capacity a reserve of `need` grows *cap to, or 0 on overflow. */
static size_t next_cap(size_t cap, size_t need, size_t elem, size_t first,
                       kvp__array_growth_t growth) {
  size_t c = cap ? cap : (first ? first : 1);
  while (c < need) {
    size_t step = growth == KVP_ARRAY_HALF ? c / 2 : c;
    if (step == 0)
      step = 1;
    if (c > SIZE_MAX - step) {
      c = need;
      break;
    }
    c += step;
  }
  if (elem != 0 && c > SIZE_MAX / elem)
    return 0;
  return c;
}

int kvp__array_reserve(void **arr, size_t *cap, size_t need, size_t elem, size_t first,
                       kvp__array_growth_t growth) {
  size_t c;
  void *p;

  if (need <= *cap)
    return 0;
  if ((c = next_cap(*cap, need, elem, first, growth)) == 0)
    return KVP_ETOOBIG;
  if ((p = realloc(*arr, c * elem)) == NULL)
    return KVP_ENOMEM;
  *arr = p;
  *cap = c;
  return 0;
}

int kvp__array_reserve_n(void **const arrs[], const size_t elems[], size_t n, size_t *cap,
                         size_t need, size_t first) {
  size_t c, maxelem = 0;

  if (need <= *cap)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (elems[i] > maxelem)
      maxelem = elems[i];
  if ((c = next_cap(*cap, need, maxelem, first, KVP_ARRAY_DOUBLE)) == 0)
    return KVP_ETOOBIG;
  for (size_t i = 0; i < n; i++) {
    void *p = realloc(*arrs[i], c * elems[i]);
    if (p == NULL)
      return KVP_ENOMEM;
    *arrs[i] = p;
  }
  *cap = c;
  return 0;
}
