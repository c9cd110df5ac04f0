/* The block manager: the pools of one worker, offload G1 -> G2, events,
 * snapshots and figures. Sequences are in seq.c. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "block/bm.h"
#include "common/array.h"
#include "kvplane/status.h"

void kvp_blockmgr_opts_init(kvp_blockmgr_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->offload = KVP_OFFLOAD_ON_EVICT;
}

int kvp_blockmgr_create(const kvp_blockmgr_opts_t *o, kvp_blockmgr_t **out) {
  kvp_blockmgr_t *bm;
  kvp_pool_opts_t po;
  int rc;

  *out = NULL;
  if (o == NULL || o->g1_blocks == 0)
    return KVP_EINVAL;
  if (o->offload != KVP_OFFLOAD_ON_EVICT && o->offload != KVP_OFFLOAD_WRITE_THROUGH &&
      o->offload != KVP_OFFLOAD_NONE)
    return KVP_EINVAL;
  if ((rc = kvp_layout_check(&o->layout)) != 0)
    return rc;
  /* G1 and G2 share one hash table (pool.h), which addresses 2^31 - 1. */
  uint64_t both = (uint64_t)o->g1_blocks + o->g2_blocks;
  if (both > KVP__POOL_MAX_BLOCKS)
    return KVP_ETOOBIG;
  if ((bm = calloc(1, sizeof *bm)) == NULL)
    return KVP_ENOMEM;
  bm->page = o->layout.page_size;
  bm->block_bytes = kvp_layout_block_stride(&o->layout);
  bm->offload = o->offload;
  bm->min_hits = o->offload_min_hits;
  bm->sink = o->sink;

  memset(&po, 0, sizeof po);
  po.layout = o->layout;
  po.tier = KVP_TIER_G1;
  po.num_blocks = o->g1_blocks;
  po.storage = o->g1_storage;
  if ((rc = kvp__pool_create(&po, both, NULL, &bm->g1)) != 0)
    goto fail;
  if (o->g2_blocks > 0) {
    po.tier = KVP_TIER_G2;
    po.num_blocks = o->g2_blocks;
    po.storage = o->g2_storage;
    if ((rc = kvp__pool_create(&po, o->g2_blocks, bm->g1, &bm->g2)) != 0)
      goto fail;
    /* Evictions prefetch the first bytes of their victims where an offload
     * will copy them (G1, offloading on eviction) or overwrite them (G2):
     * up to KVP__SMALL_COPY, the hardware following a longer copy. */
    uint32_t head =
        (uint32_t)(bm->block_bytes < KVP__SMALL_COPY ? bm->block_bytes : KVP__SMALL_COPY);
    if (kvp__pool_is_system(bm->g2))
      kvp__pool_set_prefetch_bytes(bm->g2, head);
    if (kvp__pool_is_system(bm->g1) && bm->offload == KVP_OFFLOAD_ON_EVICT)
      kvp__pool_set_prefetch_bytes(bm->g1, head);
  }
  if (o->g3 != NULL || o->g4 != NULL) {
    if ((rc = kvp__tiers_create(o, bm->block_bytes, &bm->tiers)) != 0)
      goto fail;
    /* G2's victims go to G3 before they are overwritten. */
    if (bm->g2 != NULL && o->g3 != NULL)
      kvp__pool_set_victim_hook(bm->g2, kvp__tiers_victim, bm->tiers);
  }
  *out = bm;
  return 0;

fail:
  kvp_blockmgr_destroy(bm);
  return rc;
}

void kvp_blockmgr_destroy(kvp_blockmgr_t *bm) {
  if (bm == NULL)
    return;
  kvp__tiers_destroy(bm->tiers); /* finishes the queued offloads first */
  while (bm->seqs) {
    kvp_seq_t *s = bm->seqs;
    bm->seqs = s->next;
    kvp__seq_free_memory(s);
  }
  kvp_pool_destroy(bm->g2); /* may use G1's hash table */
  kvp_pool_destroy(bm->g1);
  free(bm->g2_ids);
  free(bm->fresh);
  free(bm->lower_tier);
  kvp__bm_events_free(bm);
  free(bm);
}

void kvp_blockmgr_set_sink(kvp_blockmgr_t *bm, kvp_event_sink_t sink) {
  bm->sink = sink;
  if (bm->tiers != NULL)
    kvp__tiers_set_sink(bm->tiers, sink);
}

void kvp_blockmgr_drain(kvp_blockmgr_t *bm) {
  if (bm->tiers != NULL)
    kvp__tiers_drain(bm->tiers);
}

kvp_pool_t *kvp_blockmgr_pool(kvp_blockmgr_t *bm, int tier) {
  if (tier == KVP_TIER_G1)
    return bm->g1;
  if (tier == KVP_TIER_G2)
    return bm->g2;
  return NULL;
}

/* ---- offload ---- */

/* Copies G1 block b (registered, or leaving G1 with its bytes intact)
 * into a new G2 block registered under b's hash; with move a slot, b's
 * hash-table entry there becomes the G2 block's (kvp__pool_put_cached).
 * Skipped when G2 has no block to give (all referenced) or the copy fails:
 * G2 is a cache, losing a copy is allowed, serving wrong bytes is not.
 * Returns 1 when copied. */
KVP__HOT int copy_to_g2(kvp_blockmgr_t *bm, uint32_t b, uint64_t move) {
  const kvp__blk_t *x = kvp__pool_rec(bm->g1, b);
  uint64_t gone;
  uint32_t d;
  int evicted;
  int rc = kvp__pool_put_cached(bm->g2, bm->g1, b, move, &evicted, &gone, &d);

  if (evicted)
    kvp__bm_pend_removed_g2(bm, gone, d);
  if (rc != 0)
    return 0;
  bm->offloads++;
  kvp__bm_pend_stored_g2(bm, x, d);
  return 1;
}

/* Whether a block leaving G1's use, found in G2 as g (KVP__NIL: not
 * there), should be copied to G2; when it is there already, refreshes its
 * G2 recency instead. */
static int wants_g2(kvp_blockmgr_t *bm, uint32_t g, uint32_t hits) {
  if (g != KVP__NIL) {
    kvp__pool_touch(bm->g2, g);
    return 0;
  }
  if (hits < bm->min_hits) {
    bm->offloads_filtered++;
    return 0;
  }
  return 1;
}

KVP__HOT int take_g1(kvp_blockmgr_t *bm, uint32_t *block) {
  kvp_pool_t *g1 = bm->g1, *g2 = bm->g2;
  uint32_t b;

  if (kvp__pool_has_free(g1))
    return kvp_pool_alloc(g1, block, NULL);
  if ((b = kvp__pool_pop_lru(g1)) == KVP__NIL)
    return KVP_ENOSPC;
  const kvp__blk_t *x = kvp__pool_rec(g1, b);
  if (g2 && bm->offload == KVP_OFFLOAD_ON_EVICT) {
    /* G1 and G2 share the table. When G2 may hold b's hash (x->twin),
     * one pass over its probe sequence finds b's entry and the G2 copy;
     * otherwise b's record says where its entry is, and the offload moves
     * it to the G2 block with stores only, no table load to wait for. Not
     * copied (a copy exists, the filter, a failed copy): b's entry goes,
     * where it was found (entries never move). */
    uint32_t g = KVP__NIL;
    uint64_t slot = kvp__pool_slot_and_peer(g1, b, &g);
    assert(slot != UINT64_MAX); /* a cached block is mapped */
    if (!wants_g2(bm, g, x->hits) || !copy_to_g2(bm, b, slot))
      kvp__pool_delete_at(g1, slot, b);
  } else {
    kvp__pool_unmap(g1, b);
  }
  /* Under write-through the copy was made when the block was cached, or
   * the filter kept it out; only eviction-time offload copies above. */
  kvp__bm_pend_removed_g1(bm, x->hash);
  kvp__pool_reuse(g1, b);
  *block = b;
  return 0;
}

int kvp__bm_take_g1(kvp_blockmgr_t *bm, uint32_t *block) {
  return take_g1(bm, block);
}

void kvp__bm_take_g1_many(kvp_blockmgr_t *bm, uint32_t *ids, size_t k) {
  for (size_t i = 0; i < k; i++) {
    int rc = take_g1(bm, &ids[i]);
    assert(rc == 0);
    (void)rc;
  }
}

void kvp__bm_cached(kvp_blockmgr_t *bm, uint32_t block) {
  const kvp__blk_t *x = kvp__pool_rec(bm->g1, block);

  if (bm->offload != KVP_OFFLOAD_WRITE_THROUGH || !kvp__pool_is_cached(bm->g1, block) ||
      bm->g2 == NULL)
    return;
  if (wants_g2(bm, kvp__pool_find(bm->g2, x->hash), x->hits) && copy_to_g2(bm, block, KVP__NO_MOVE))
    kvp__pool_set_twin(bm->g1, block); /* G2 holds its hash now: its eviction must look */
}

int kvp__bm_scratch(kvp_blockmgr_t *bm, size_t n) {
  if (kvp__array_reserve((void **)&bm->g2_ids, &bm->g2_ids_cap, n, sizeof *bm->g2_ids, 64,
                         KVP_ARRAY_DOUBLE) != 0 ||
      kvp__array_reserve((void **)&bm->fresh, &bm->fresh_cap, n, sizeof *bm->fresh, 64,
                         KVP_ARRAY_DOUBLE) != 0 ||
      kvp__array_reserve((void **)&bm->lower_tier, &bm->lower_cap, n, sizeof *bm->lower_tier, 64,
                         KVP_ARRAY_DOUBLE) != 0)
    return KVP_ENOMEM;
  return 0;
}

/* ---- reset, snapshot, figures ---- */

int kvp_blockmgr_reset(kvp_blockmgr_t *bm) {
  kvp_event_t ev = {.type = KVP_EV_CLEARED, .tier = KVP_TIER_ALL};

  if (kvp__pool_busy(bm->g1) || (bm->g2 && kvp__pool_busy(bm->g2)))
    return KVP_EBUSY;
  kvp_pool_evict_all(bm->g1);
  if (bm->g2)
    kvp_pool_evict_all(bm->g2);
  if (bm->tiers != NULL)
    kvp__tiers_clear(bm->tiers);
  kvp__bm_emit(bm, &ev);
  return 0;
}

int kvp_blockmgr_snapshot(kvp_blockmgr_t *bm, int tier, uint64_t **hashes, uint64_t **parents,
                          size_t *n) {
  kvp_pool_t *p = kvp_blockmgr_pool(bm, tier);
  uint32_t count;

  *hashes = *parents = NULL;
  *n = 0;
  if (tier == KVP_TIER_G3 && bm->tiers != NULL)
    return kvp__tiers_snapshot(bm->tiers, hashes, parents, n);
  if (p == NULL)
    return KVP_ETIER;
  count = kvp__pool_registered(p);
  if (count == 0)
    return 0;
  *hashes = malloc(count * sizeof **hashes);
  *parents = malloc(count * sizeof **parents);
  if (*hashes == NULL || *parents == NULL) {
    free(*hashes);
    free(*parents);
    *hashes = *parents = NULL;
    return KVP_ENOMEM;
  }
  *n = kvp__pool_list_registered(p, *hashes, *parents, count);
  return 0;
}

int kvp_blockmgr_snapshot_fn(void *bm, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  return kvp_blockmgr_snapshot(bm, tier, hashes, parents, n);
}

void kvp_blockmgr_stats(const kvp_blockmgr_t *bm, kvp_blockmgr_stats_t *s) {
  memset(s, 0, sizeof *s);
  kvp_pool_counts(bm->g1, &s->g1);
  s->metadata_bytes = kvp_pool_metadata_bytes(bm->g1);
  if (bm->g2) {
    kvp_pool_counts(bm->g2, &s->g2);
    s->metadata_bytes += kvp_pool_metadata_bytes(bm->g2);
  } else {
    s->g2.tier = KVP_TIER_G2;
  }
  s->sequences = bm->nseqs;
  s->lookups = bm->lookups;
  s->hits_g1 = bm->hits_g1;
  s->hits_g2 = bm->hits_g2;
  s->onboards = bm->onboards;
  s->offloads = bm->offloads;
  s->offloads_filtered = bm->offloads_filtered;
  s->dedups = bm->dedups;
  s->events = bm->events;
  s->event_errors = bm->event_errors;
  if (bm->tiers != NULL)
    kvp__tiers_stats(bm->tiers, s);
  uint64_t hits = bm->hits_g1 + bm->hits_g2 + s->hits_g3 + s->hits_g4;
  s->hit_rate = bm->lookups ? (double)hits / (double)bm->lookups : 0.0;
}
