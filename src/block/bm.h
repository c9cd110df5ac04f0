/* Private view of the block manager, shared by blockmgr.c and seq.c. */
#ifndef KVP_BLOCK_BM_H
#define KVP_BLOCK_BM_H

#include <stdlib.h>

#include "block/pool.h"
#include "block/tiers.h"
#include "kvplane/blockmgr.h"

/* An offload whose Stored G2 event is queued (events.c). */
typedef struct kvp__bm_pend_s {
  uint64_t hash, parent;
  int32_t lora_id;
  uint32_t block; /* the G2 block, lent (kvp__pool_lent) while queued */
  uint8_t has_parent;
} kvp__bm_pend_t;

struct kvp_blockmgr_s {
  kvp_pool_t *g1, *g2; /* g2 NULL when not configured */
  uint32_t page;       /* tokens per block */
  uint64_t block_bytes;
  int offload;
  uint32_t min_hits;
  kvp_event_sink_t sink;
  kvp__tiers_t *tiers; /* G3/G4, NULL without volumes */
  kvp_seq_t *seqs;     /* live sequences, doubly linked */
  uint64_t nseqs;
  /* Scratch for kvp_seq_allocate, grown as needed, reused across calls. */
  uint32_t *g2_ids;
  uint8_t *fresh;      /* 1: the block at this position was registered by this call */
  uint8_t *lower_tier; /* the tier (3, 4) each block read from a volume came from */
  size_t g2_ids_cap, fresh_cap, lower_cap;
  /* Events queued during one call (events.c). rm[0]: Removed G1, rm[1]:
   * Removed G2; st2: Stored G2, whose G2 blocks are lent (kvp__pool_lent). */
  uint64_t *rm[2];
  size_t nrm[2], rmcap[2];
  kvp__bm_pend_t *st2;
  size_t nst2, st2cap;
  uint64_t *run;
  size_t runcap;
  /* Figures. */
  uint64_t lookups, hits_g1, hits_g2, onboards, offloads, offloads_filtered, dedups;
  uint64_t events, event_errors;
};

struct kvp_seq_s {
  kvp_blockmgr_t *bm;
  kvp_seq_t *prev, *next;
  uint64_t seed;
  int32_t lora_id;
  int allocated;
  uint64_t *hashes; /* of the full blocks */
  size_t nhashes, hashes_cap;
  uint32_t *blocks; /* G1 block ids: the full blocks, then the tail's */
  size_t nblocks, blocks_cap;
  uint32_t *tail; /* tokens of the trailing partial block (page of them) */
  size_t ntail;
  size_t cached_tokens;
};

/* Emits one event, counting it and a refusal by the sink. */
void kvp__bm_emit(kvp_blockmgr_t *bm, const kvp_event_t *ev);

/* Queue the events of offloads and evictions; see events.c. kvp__bm_flush
 * emits what is queued; every public call that can queue flushes before it
 * returns or emits anything else. The _slow functions are the rare paths
 * (growth, a queued G2 block evicted again) of the inline ones. */
void kvp__bm_pend_removed_slow(kvp_blockmgr_t *bm, int tier, uint64_t hash);
void kvp__bm_pend_stored_g2_slow(kvp_blockmgr_t *bm, const kvp__bm_pend_t *e);
void kvp__bm_flush(kvp_blockmgr_t *bm);
void kvp__bm_events_free(kvp_blockmgr_t *bm);

/* Removed G1 of hash. */
static inline void kvp__bm_pend_removed_g1(kvp_blockmgr_t *bm, uint64_t hash) {
  if (bm->nrm[0] < bm->rmcap[0])
    bm->rm[0][bm->nrm[0]++] = hash;
  else
    kvp__bm_pend_removed_slow(bm, KVP_TIER_G1, hash);
}

/* Removed G2 of hash, evicted from G2 block b. A block still lent was
 * offloaded earlier in this call: what is queued goes out first, so its
 * Stored precedes this Removed. */
static inline void kvp__bm_pend_removed_g2(kvp_blockmgr_t *bm, uint64_t hash, uint32_t b) {
  if (kvp__pool_lent(bm->g2, b))
    kvp__bm_flush(bm);
  if (bm->nrm[1] < bm->rmcap[1])
    bm->rm[1][bm->nrm[1]++] = hash;
  else
    kvp__bm_pend_removed_slow(bm, KVP_TIER_G2, hash);
}

/* Stored G2 of an offload of G1 record x into G2 block b. The queue entry
 * is written field by field: a kvp__bm_pend_t built on the stack and copied
 * would be read back before its stores retire, a stall per offload. */
static inline void kvp__bm_pend_stored_g2(kvp_blockmgr_t *bm, const kvp__blk_t *x, uint32_t b) {
  if (bm->nst2 < bm->st2cap) {
    kvp__bm_pend_t *e = &bm->st2[bm->nst2++];
    e->hash = x->hash;
    e->parent = x->parent;
    e->lora_id = x->lora_id;
    e->block = b;
    e->has_parent = x->has_parent;
    kvp__pool_lend(bm->g2, b, 1);
  } else {
    kvp__bm_pend_t e = {x->hash, x->parent, x->lora_id, b, x->has_parent};
    kvp__bm_pend_stored_g2_slow(bm, &e);
  }
}

/* Stored event for a chain of blocks in tier. */
void kvp__bm_stored(kvp_blockmgr_t *bm, int tier, const uint64_t *parent, const uint64_t *hashes,
                    size_t n, int32_t lora_id);

/* Takes a G1 block for writing, with one reference, in state Reset. An
 * evicted cached block is announced (Removed G1) and, by policy, offloaded
 * to G2 before the caller can overwrite it. Returns 0 or KVP_ENOSPC. */
int kvp__bm_take_g1(kvp_blockmgr_t *bm, uint32_t *block);

/* kvp__bm_take_g1 for each of ids[0..k), when G1 is known to have k blocks
 * to give (free, or cached and not pinned): one call for a sequence's new
 * blocks. */
void kvp__bm_take_g1_many(kvp_blockmgr_t *bm, uint32_t *ids, size_t k);

/* A G1 block's last reference is gone and it is cached: under write-through
 * it is copied to G2 now (its data is final). */
void kvp__bm_cached(kvp_blockmgr_t *bm, uint32_t block);

/* Grows the allocate scratch to n entries. Returns 0 or KVP_ENOMEM. */
int kvp__bm_scratch(kvp_blockmgr_t *bm, size_t n);

/* Frees a sequence's memory (not its blocks, not its link in bm). Inline
 * here so that the manager's destroy does not call back into seq.c. */
static inline void kvp__seq_free_memory(kvp_seq_t *s) {
  free(s->hashes);
  free(s->blocks);
  free(s->tail);
  free(s);
}

#endif
