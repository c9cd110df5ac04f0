/* Sequences: a request's tokens, its chained hashes and its G1 blocks. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "block/bm.h"
#include "common/array.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  return kvp__array_reserve(arr, cap, need, elem, 4, KVP_ARRAY_DOUBLE);
}

/* A sequence with room for nfull hashes and its tail, linked into bm. */
static int seq_new(kvp_blockmgr_t *bm, size_t nfull, size_t ntail, const char *lora_name,
                   int32_t lora_id, kvp_seq_t **out) {
  kvp_seq_t *s;

  if ((s = calloc(1, sizeof *s)) == NULL)
    return KVP_ENOMEM;
  s->bm = bm;
  s->seed = kvp_hash_seed(lora_name);
  s->lora_id = lora_id;
  s->ntail = ntail;
  if (grow((void **)&s->hashes, &s->hashes_cap, nfull + 1, sizeof *s->hashes) != 0 ||
      grow((void **)&s->blocks, &s->blocks_cap, nfull + 1, sizeof *s->blocks) != 0 ||
      (s->tail = malloc((size_t)bm->page * sizeof *s->tail)) == NULL) {
    kvp__seq_free_memory(s);
    return KVP_ENOMEM;
  }
  s->next = bm->seqs;
  if (bm->seqs)
    bm->seqs->prev = s;
  bm->seqs = s;
  bm->nseqs++;
  *out = s;
  return 0;
}

int kvp_seq_create(kvp_blockmgr_t *bm, const uint32_t *tokens, size_t ntokens,
                   const char *lora_name, int32_t lora_id, kvp_seq_t **out) {
  kvp_seq_t *s;
  size_t nfull;
  int rc;

  if (out)
    *out = NULL;
  if (bm == NULL || out == NULL || (ntokens > 0 && tokens == NULL))
    return KVP_EINVAL;
  nfull = ntokens / bm->page;
  if ((rc = seq_new(bm, nfull, ntokens % bm->page, lora_name, lora_id, &s)) != 0)
    return rc;
  s->nhashes = kvp_hash_sequence(tokens, ntokens, bm->page, s->seed, s->hashes, nfull);
  if (s->ntail > 0)
    memcpy(s->tail, tokens + nfull * bm->page, s->ntail * sizeof *s->tail);
  *out = s;
  return 0;
}

int kvp_seq_create_hashed(kvp_blockmgr_t *bm, const uint64_t *hashes, size_t nhashes,
                          const char *lora_name, int32_t lora_id, kvp_seq_t **out) {
  kvp_seq_t *s;
  int rc;

  if (out)
    *out = NULL;
  if (bm == NULL || out == NULL || (nhashes > 0 && hashes == NULL))
    return KVP_EINVAL;
  if ((rc = seq_new(bm, nhashes, 0, lora_name, lora_id, &s)) != 0)
    return rc;
  if (nhashes > 0)
    memcpy(s->hashes, hashes, nhashes * sizeof *hashes);
  s->nhashes = nhashes;
  *out = s;
  return 0;
}

/* Emits Stored G1 for each run of blocks this call registered. */
static void stored_runs(kvp_seq_t *s, size_t from, size_t to) {
  kvp_blockmgr_t *bm = s->bm;
  size_t i = from;

  while (i < to) {
    if (!bm->fresh[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < to && bm->fresh[j])
      j++;
    kvp__bm_stored(bm, KVP_TIER_G1, i > 0 ? &s->hashes[i - 1] : NULL, &s->hashes[i], j - i,
                   s->lora_id);
    i = j;
  }
}

static void accessed(kvp_blockmgr_t *bm, int tier, const uint64_t *hashes, size_t n) {
  kvp_event_t ev = {.type = KVP_EV_ACCESSED, .tier = tier, .hashes = hashes, .nhashes = n};
  if (n > 0)
    kvp__bm_emit(bm, &ev);
}

/* Accessed events for the blocks read from tier (G3 or G4): the runs of
 * hashes whose tiers[i] is tier, with the tier's volume. */
static void accessed_lower(kvp_blockmgr_t *bm, int tier, const uint64_t *hashes,
                           const uint8_t *tiers, size_t n) {
  const char *vol =
      tier == KVP_TIER_G3 ? kvp__tiers_g3_name(bm->tiers) : kvp__tiers_g4_name(bm->tiers);
  for (size_t i = 0; i < n;) {
    if (tiers[i] != tier) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < n && tiers[j] == tier)
      j++;
    kvp_event_t ev = {.type = KVP_EV_ACCESSED,
                      .tier = tier,
                      .volume = vol,
                      .hashes = hashes + i,
                      .nhashes = j - i};
    kvp__bm_emit(bm, &ev);
    i = j;
  }
}

/* Registers ids[j] (Reset, filled at once, or Complete) under hashes[j];
 * when another block holds that hash already, shares it instead. Returns 1
 * when ids[j] was registered, 0 when it was replaced by the existing
 * block. */
static int register_or_share(kvp_seq_t *s, size_t j) {
  kvp_blockmgr_t *bm = s->bm;
  kvp_pool_t *g1 = bm->g1;
  uint32_t b = s->blocks[j], e;
  int rc =
      kvp__pool_register_own(g1, b, s->hashes[j], j > 0 ? &s->hashes[j - 1] : NULL, s->lora_id, &e);

  if (rc == KVP_EEXIST) {
    kvp_pool_acquire(g1, e);
    kvp__pool_hit(g1, e);
    kvp_pool_release(g1, b); /* not Registered: back to Reset and free */
    s->blocks[j] = e;
    bm->dedups++;
    return 0;
  }
  assert(rc == 0);
  return 1;
}

int kvp_seq_allocate(kvp_seq_t *s) {
  kvp_blockmgr_t *bm;
  kvp_pool_t *g1, *g2;
  size_t n, h1 = 0, h2 = 0, onboarded = 0, pinned = 0, need, avail, tailb, pf = 0;
  uint32_t *ids;
  int rc;

  if (s == NULL || s->allocated)
    return KVP_EINVAL;
  bm = s->bm;
  g1 = bm->g1;
  g2 = bm->g2;
  n = s->nhashes;
  tailb = s->ntail > 0;
  if ((rc = kvp__bm_scratch(bm, n + 1)) != 0 ||
      (rc = grow((void **)&s->blocks, &s->blocks_cap, n + 1, sizeof *s->blocks)) != 0)
    return rc;
  ids = s->blocks;

  /* Read-only pass: the longest prefix registered in G1, then the blocks
   * after it found in G2. Nothing changes until the blocks are known to be
   * there. */
  for (; h1 < n; h1++) {
    kvp__pool_prefetch_ahead(g1, s->hashes, n, h1, &pf);
    uint32_t b = kvp__pool_find(g1, s->hashes[h1]);
    /* A block met twice (hashes from kvp_seq_create_hashed are the
     * engine's; chained ones cannot repeat) ends the prefix, so every
     * pinned block is counted once. */
    if (b == KVP__NIL || kvp__pool_lent(g1, b))
      break;
    kvp__pool_lend(g1, b, 1);
    ids[h1] = b;
    pinned += kvp__pool_refs(g1, b) == 0;
  }
  for (size_t i = 0; i < h1; i++)
    kvp__pool_lend(g1, ids[i], 0);
  if (g2) {
    for (; h1 + h2 < n; h2++) {
      kvp__pool_prefetch_ahead(g2, s->hashes, n, h1 + h2, &pf);
      uint32_t b = kvp__pool_find(g2, s->hashes[h1 + h2]);
      if (b == KVP__NIL)
        break;
      bm->g2_ids[h2] = b;
    }
  }
  need = (n - h1) + tailb;
  avail = kvp__pool_available(g1); /* pinned <= cached: each counted once */
  if (pinned > avail || need > avail - pinned)
    return KVP_ENOSPC;

  /* Pin the hits so that evictions below cannot take them. */
  for (size_t i = 0; i < h1; i++) {
    kvp_pool_acquire(g1, ids[i]);
    kvp__pool_hit(g1, ids[i]);
  }
  for (size_t i = 0; i < h2; i++)
    kvp_pool_acquire(g2, bm->g2_ids[i]);
  kvp__bm_take_g1_many(bm, ids + h1, need); /* counted above: free + cached - pinned >= need */
  memset(bm->fresh + h1, 0, need);

  /* Onboard G2 hits by copying their bytes into the new G1 blocks. A copy
   * that fails ends the onboarded prefix: the rest is computed again. The
   * evictions may have pushed out the lines prefetched by the passes
   * above: from here on they are prefetched again (hash groups, and the G2
   * blocks' first lines, which are anywhere in G2). */
  pf = h1;
  for (size_t i = 0, pfb = 0, k; i < h2; i++) {
    size_t j = h1 + i;
    uint32_t g = bm->g2_ids[i];
    kvp__pool_prefetch_ahead(g1, s->hashes, n, j, &pf);
    if (kvp__pool_is_system(g2) && kvp__burst_due(h2, i, &pfb, &k))
      for (; k < pfb; k++)
        kvp__pool_prefetch_block(g2, bm->g2_ids[k]);
    if (onboarded == i && kvp__pool_copy_raw(g1, ids[j], g2, g) == 0) {
      /* Shared instead when another sequence registered the hash in G1
       * meanwhile: the copy is dropped, the G1 block served. */
      bm->fresh[j] = (uint8_t)register_or_share(s, j);
      if (bm->fresh[j]) {
        kvp__pool_set_hits(g1, ids[j], kvp__pool_rec(g2, g)->hits);
        kvp__pool_hit(g1, ids[j]);
        bm->onboards++;
      }
      kvp__pool_hit(g2, g);
      onboarded++;
    }
    kvp_pool_release(g2, g);
  }
  /* After G2, the next blocks from G3, then G4, read straight into their
   * new G1 blocks and verified; the first miss ends the prefix. */
  size_t lower = 0, lower_from = h1 + onboarded;
  int lower_tier[2] = {0, 0}; /* runs are announced per tier below */
  if (bm->tiers != NULL && onboarded == h2) {
    for (size_t j = lower_from; j < n; j++) {
      void *dst = kvp_pool_block_layer(g1, ids[j], 0);
      int tier = kvp__tiers_read(bm->tiers, s->hashes[j], dst);
      if (tier == 0)
        break;
      bm->fresh[j] = (uint8_t)register_or_share(s, j);
      bm->lower_tier[j - lower_from] = (uint8_t)tier;
      lower_tier[tier - KVP_TIER_G3] = 1;
      lower++;
    }
  }
  /* New blocks: full ones registered, a partial tail left Partial. */
  for (size_t j = h1 + onboarded + lower; j < n; j++) {
    kvp__pool_prefetch_ahead(g1, s->hashes, n, j, &pf);
    bm->fresh[j] = (uint8_t)register_or_share(s, j);
  }
  if (tailb)
    kvp_block_init_sequence(g1, ids[n]);

  s->nblocks = n + tailb;
  s->allocated = 1;
  s->cached_tokens = (h1 + onboarded + lower) * bm->page;
  bm->lookups += n;
  bm->hits_g1 += h1;
  bm->hits_g2 += onboarded;
  kvp__bm_flush(bm);
  accessed(bm, KVP_TIER_G1, s->hashes, h1);
  accessed(bm, KVP_TIER_G2, s->hashes + h1, onboarded);
  for (int t = 0; t < 2; t++)
    if (lower_tier[t])
      accessed_lower(bm, KVP_TIER_G3 + t, s->hashes + lower_from, bm->lower_tier, lower);
  stored_runs(s, h1, n);
  return 0;
}

int kvp_seq_append(kvp_seq_t *s, uint32_t token) {
  kvp_blockmgr_t *bm;
  kvp_pool_t *g1;
  int rc;

  if (s == NULL || !s->allocated)
    return KVP_EINVAL;
  bm = s->bm;
  g1 = bm->g1;
  if (s->ntail == 0) {
    uint32_t b;
    /* Room for the block and its hash first, so that nothing below fails. */
    if ((rc = grow((void **)&s->blocks, &s->blocks_cap, s->nblocks + 1, sizeof *s->blocks)) != 0 ||
        (rc = grow((void **)&s->hashes, &s->hashes_cap, s->nhashes + 1, sizeof *s->hashes)) != 0)
      return rc;
    if ((rc = kvp__bm_take_g1(bm, &b)) != 0)
      return rc;
    kvp__bm_flush(bm);
    kvp_block_init_sequence(g1, b);
    s->blocks[s->nblocks++] = b;
  }
  s->tail[s->ntail++] = token;
  if (s->ntail == bm->page) {
    size_t j = s->nhashes;
    uint64_t local = kvp_hash_block(s->tail, bm->page, s->seed);
    s->hashes[j] = j == 0 ? local : kvp_hash_chain(s->hashes[j - 1], local, s->seed);
    s->nhashes++;
    s->ntail = 0;
    kvp_block_commit(g1, s->blocks[j]);
    if (register_or_share(s, j))
      kvp__bm_stored(bm, KVP_TIER_G1, j > 0 ? &s->hashes[j - 1] : NULL, &s->hashes[j], 1,
                     s->lora_id);
  }
  return 0;
}

void kvp_seq_free(kvp_seq_t *s) {
  kvp_blockmgr_t *bm;

  if (s == NULL)
    return;
  bm = s->bm;
  if (s->allocated) {
    if (bm->offload == KVP_OFFLOAD_WRITE_THROUGH) {
      for (size_t i = s->nblocks; i-- > 0;) {
        kvp_pool_release(bm->g1, s->blocks[i]);
        kvp__bm_cached(bm, s->blocks[i]);
      }
    } else {
      kvp__pool_release_own(bm->g1, s->blocks, s->nblocks);
    }
    kvp__bm_flush(bm);
  }
  if (s->prev)
    s->prev->next = s->next;
  else
    bm->seqs = s->next;
  if (s->next)
    s->next->prev = s->prev;
  bm->nseqs--;
  kvp__seq_free_memory(s);
}

size_t kvp_seq_num_tokens(const kvp_seq_t *s) {
  return s->nhashes * s->bm->page + s->ntail;
}

size_t kvp_seq_cached_tokens(const kvp_seq_t *s) {
  return s->cached_tokens;
}

const uint32_t *kvp_seq_blocks(const kvp_seq_t *s, size_t *n) {
  *n = s->allocated ? s->nblocks : 0;
  return s->allocated ? s->blocks : NULL;
}

const uint64_t *kvp_seq_hashes(const kvp_seq_t *s, size_t *n) {
  *n = s->nhashes;
  return s->hashes;
}
