/* Events of one block-manager call, coalesced.
 *
 * One kvp_seq_allocate that needs k new blocks may evict k cached G1 blocks
 * and offload them to G2, evicting there in turn: 3k one-hash events in
 * the order they happen. They are queued here instead and emitted when the
 * call ends (kvp__bm_flush) as at most one Removed G2, a few Stored G2 (one
 * per chain of offloaded blocks) and one Removed G1, in that order: a block
 * moving G1 -> G2 is announced in G2 before it leaves G1, so a consumer
 * never sees it nowhere.
 *
 * Reordering events of one tier is only wrong for the same hash. Within a
 * call the one case is a block offloaded to G2 and evicted from G2 again
 * before the call ends: its G2 block is lent while its Stored is queued,
 * and evicting a lent block flushes what is queued first, so the Stored
 * goes out before its Removed. (A block evicted from G2 and offloaded there
 * again is Removed, then Stored: the flush order.) */
#include <stdlib.h>

#include "block/bm.h"
#include "common/array.h"
#include "kvplane/status.h"

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  return kvp__array_reserve(arr, cap, need, elem, 64, KVP_ARRAY_DOUBLE);
}

static void removed_now(kvp_blockmgr_t *bm, int tier, const uint64_t *hashes, size_t n) {
  kvp_event_t ev = {.type = KVP_EV_REMOVED, .tier = tier, .hashes = hashes, .nhashes = n};
  if (n > 0)
    kvp__bm_emit(bm, &ev);
}

/* ---- queueing, rare paths ---- */

void kvp__bm_pend_removed_slow(kvp_blockmgr_t *bm, int tier, uint64_t hash) {
  int t = tier == KVP_TIER_G2;

  if (grow((void **)&bm->rm[t], &bm->rmcap[t], bm->nrm[t] + 1, sizeof(uint64_t)) != 0) {
    kvp__bm_flush(bm); /* out of memory: keep the order, unqueued */
    removed_now(bm, tier, &hash, 1);
    return;
  }
  bm->rm[t][bm->nrm[t]++] = hash;
}

void kvp__bm_pend_stored_g2_slow(kvp_blockmgr_t *bm, const kvp__bm_pend_t *e) {
  if (grow((void **)&bm->st2, &bm->st2cap, bm->nst2 + 1, sizeof *bm->st2) != 0) {
    kvp__bm_flush(bm);
    kvp__bm_stored(bm, KVP_TIER_G2, e->has_parent ? &e->parent : NULL, &e->hash, 1, e->lora_id);
    return;
  }
  bm->st2[bm->nst2++] = *e;
  kvp__pool_lend(bm->g2, e->block, 1);
}

/* Whether b continues a's chain downwards (b is a's child). */
static int child_of(const kvp__bm_pend_t *a, const kvp__bm_pend_t *b) {
  return b->has_parent && b->parent == a->hash && b->lora_id == a->lora_id;
}

/* Stored G2 events for the queued offloads, one per chain. Blocks leave
 * G1's LRU end tail first, so offloads usually come child before parent:
 * such runs are emitted reversed, root first, as a Stored event wants. */
static void flush_stored_g2(kvp_blockmgr_t *bm) {
  const kvp__bm_pend_t *e = bm->st2;
  size_t n = bm->nst2, i = 0;

  if (n == 0)
    return;
  if (grow((void **)&bm->run, &bm->runcap, n, sizeof *bm->run) != 0) {
    for (size_t k = 0; k < n; k++) /* one event each: no room to reverse */
      kvp__bm_stored(bm, KVP_TIER_G2, e[k].has_parent ? &e[k].parent : NULL, &e[k].hash, 1,
                     e[k].lora_id);
    return;
  }
  while (i < n) {
    size_t j = i + 1, len;
    const kvp__bm_pend_t *root;
    if (j < n && child_of(&e[i], &e[j])) {
      while (j < n && child_of(&e[j - 1], &e[j]))
        j++;
      len = j - i;
      root = &e[i];
      for (size_t k = 0; k < len; k++)
        bm->run[k] = e[i + k].hash;
    } else {
      while (j < n && child_of(&e[j], &e[j - 1]))
        j++;
      len = j - i;
      root = &e[j - 1];
      for (size_t k = 0; k < len; k++)
        bm->run[k] = e[j - 1 - k].hash;
    }
    kvp__bm_stored(bm, KVP_TIER_G2, root->has_parent ? &root->parent : NULL, bm->run, len,
                   root->lora_id);
    i = j;
  }
}

void kvp__bm_flush(kvp_blockmgr_t *bm) {
  removed_now(bm, KVP_TIER_G2, bm->rm[1], bm->nrm[1]);
  flush_stored_g2(bm);
  removed_now(bm, KVP_TIER_G1, bm->rm[0], bm->nrm[0]);
  for (size_t k = 0; k < bm->nst2; k++)
    kvp__pool_lend(bm->g2, bm->st2[k].block, 0);
  bm->nrm[0] = bm->nrm[1] = 0;
  bm->nst2 = 0;
}

void kvp__bm_events_free(kvp_blockmgr_t *bm) {
  free(bm->rm[0]);
  free(bm->rm[1]);
  free(bm->st2);
  free(bm->run);
}

/* Emitting (the manager and sequences call these; nothing here calls back). */

void kvp__bm_emit(kvp_blockmgr_t *bm, const kvp_event_t *ev) {
  if (bm->sink.emit == NULL)
    return;
  bm->events++;
  if (bm->sink.emit(bm->sink.ctx, ev) != 0)
    bm->event_errors++;
}

void kvp__bm_stored(kvp_blockmgr_t *bm, int tier, const uint64_t *parent, const uint64_t *hashes,
                    size_t n, int32_t lora_id) {
  kvp_event_t ev = {
      .type = KVP_EV_STORED,
      .tier = tier,
      .has_parent = parent != NULL,
      .parent_hash = parent ? *parent : 0,
      .hashes = hashes,
      .nhashes = n,
      .block_tokens = bm->page,
      .block_bytes = bm->block_bytes,
      .lora_id = lora_id,
  };
  if (n > 0)
    kvp__bm_emit(bm, &ev);
}
