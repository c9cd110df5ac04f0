/* Interned names of the advisor's index: worker (id, dp rank) pairs and
 * volume names, each given a small dense id (a u16 in the index) that the
 * index stores instead of the string.
 *
 * A table only grows: an id, once given, names the same string for the life
 * of the table, and the strings stay at the same address (the write-behind
 * flush borrows them while it runs on another thread).
 *
 * Thread: the advisor's loop thread, with the index that embeds it. */
#ifndef KVP_INDEX_INTERN_H
#define KVP_INDEX_INTERN_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvp__index_name_s {
  char *name;
  uint32_t dp_rank; /* 0 for volumes */
} kvp__index_name_t;

typedef struct kvp__index_intern_s {
  kvp__index_name_t *v;
  size_t n, cap;
  size_t max; /* ids 0 .. max - 1 */
} kvp__index_intern_t;

/* An empty table that gives at most max ids. */
void kvp__index_intern_init(kvp__index_intern_t *t, size_t max);

/* Frees every name. */
void kvp__index_intern_free(kvp__index_intern_t *t);

/* The id of (name, dp_rank), added when new (the name is copied). Ids
 * below `from` are not searched (volume 0 is the reserved "none"). Returns
 * 0, KVP_ENOSPC when the table is full or KVP_ENOMEM (table unchanged). */
int kvp__index_intern_id(kvp__index_intern_t *t, const char *name, uint32_t dp_rank, size_t from,
                         uint16_t *id);

/* The name of id and its dp rank; NULL for an unknown id. */
const char *kvp__index_intern_name(const kvp__index_intern_t *t, uint16_t id, uint32_t *dp_rank);

/* Bytes the names take, for the index's memory figure. */
size_t kvp__index_intern_memory(const kvp__index_intern_t *t);

#endif
