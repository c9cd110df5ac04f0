/* Private view of a tier pool, shared by the pool, the manager and
 * sequences. The public API is in include/kvplane/blockmgr.h. */
#ifndef KVP_BLOCK_POOL_H
#define KVP_BLOCK_POOL_H

#include <stdint.h>

#include "kvplane/blockmgr.h"

#define KVP__NIL UINT32_MAX

/* Where a block is: referenced, or inactive on one of two lists. */
enum { KVP__ACTIVE = 0, KVP__FREE = 1, KVP__CACHED = 2 };

/* One block's metadata: 40 bytes. The inactive lists (free, and the LRU of
 * cached blocks) are circular doubly-linked through prev/next, with two
 * sentinel records after the last block. */
typedef struct kvp__blk_s {
  uint64_t hash;   /* sequence hash, when registered */
  uint64_t parent; /* parent's sequence hash, when has_parent */
  uint32_t prev, next;
  uint32_t refs;
  uint32_t hits; /* prefix hits in this tier, saturating */
  int32_t lora_id;
  uint8_t state; /* kvp_block_state_t */
  uint8_t has_parent;
  uint8_t where; /* KVP__ACTIVE / FREE / CACHED */
  uint8_t pad;
} kvp__blk_t;

struct kvp_pool_s {
  int tier;
  uint32_t n;
  kvp__blk_t *blk; /* n records + 2 sentinels: free at n, lru at n + 1 */
  /* Open-addressing hash table, linear probing, deletion by backward
   * shift (no tombstones). A slot is (hash >> 32) << 32 | (block + 1), 0 when
   * empty; the home slot is (hash >> 32) & mask, so probes and deletions
   * read no block record until a tag matches. */
  uint64_t *slots;
  uint64_t mask;
  kvp_layout_t layout;
  size_t block_stride, layer_stride;
  kvp_storage_t storage;
  unsigned char *base;
  size_t bytes;
  uint32_t nstate[4];
  uint32_t nactive, nfree, ncached;
  uint64_t evictions;
};

static inline uint32_t kvp__pool_find(const kvp_pool_t *p, uint64_t h) {
  uint64_t i = (h >> 32) & p->mask;
  uint32_t tag = (uint32_t)(h >> 32);

  for (;;) {
    uint64_t s = p->slots[i];
    if (s == 0)
      return KVP__NIL;
    if ((uint32_t)(s >> 32) == tag && p->blk[(uint32_t)s - 1].hash == h)
      return (uint32_t)s - 1;
    i = (i + 1) & p->mask;
  }
}

static inline void kvp__pool_prefetch(const kvp_pool_t *p, uint64_t h) {
  __builtin_prefetch(&p->slots[(h >> 32) & p->mask]);
}

/* Makes a cached block the most recently used one. */
void kvp__pool_touch(kvp_pool_t *p, uint32_t b);

#endif
