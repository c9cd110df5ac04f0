/* Interned names of the advisor's index; see intern.h. */
#include "index/intern.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "kvplane/status.h"

void kvp__index_intern_init(kvp__index_intern_t *t, size_t max) {
  memset(t, 0, sizeof *t);
  t->max = max;
}

void kvp__index_intern_free(kvp__index_intern_t *t) {
  for (size_t i = 0; i < t->n; i++)
    free(t->v[i].name);
  free(t->v);
  t->v = NULL;
  t->n = t->cap = 0;
}

int kvp__index_intern_id(kvp__index_intern_t *t, const char *name, uint32_t dp_rank, size_t from,
                         uint16_t *id) {
  char *copy;
  int rc;

  /* A linear search: workers and volumes are few, and interning happens
   * once per batch, not per block. */
  for (size_t i = from; i < t->n; i++) {
    if (t->v[i].dp_rank == dp_rank && strcmp(t->v[i].name, name) == 0) {
      *id = (uint16_t)i;
      return 0;
    }
  }
  if (t->n >= t->max)
    return KVP_ENOSPC;
  if ((rc = KVP_ARRAY_RESERVE(t->v, t->cap, t->n + 1, 8)) != 0)
    return rc;
  if ((copy = strdup(name)) == NULL)
    return KVP_ENOMEM;
  t->v[t->n] = (kvp__index_name_t){.name = copy, .dp_rank = dp_rank};
  *id = (uint16_t)t->n++;
  return 0;
}

const char *kvp__index_intern_name(const kvp__index_intern_t *t, uint16_t id, uint32_t *dp_rank) {
  if (id >= t->n)
    return NULL;
  if (dp_rank)
    *dp_rank = t->v[id].dp_rank;
  return t->v[id].name;
}

size_t kvp__index_intern_memory(const kvp__index_intern_t *t) {
  size_t bytes = 0;
  for (size_t i = 0; i < t->n; i++)
    bytes += sizeof(kvp__index_name_t) + strlen(t->v[i].name) + 1;
  return bytes;
}
