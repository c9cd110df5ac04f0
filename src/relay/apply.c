/* A decoded engine payload republished as kvplane events (state.h): the
 * hybrid-group and medium filters, kvplane's own sequence hashes computed
 * from token ids, and the engine-to-kvplane hash map. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "relay/state.h"

/* Publishes AllBlocksCleared for the worker and forgets its hashes. */
void kvp__relay_clear(kvp__relay_ep_t *ep, const char *why) {
  LOG(ep, "publishing AllBlocksCleared: %s", why);
  kvp__relay_map_clear(ep->map);
  if (kvp_publisher_cleared(ep->pub, KVP_TIER_ALL) == 0)
    CNT(ep, out_cleared);
  CNT(ep, clears);
}

/* Logs an unknown medium or kind once (the first KVP__RELAY_UNKNOWN_LOGGED
 * names are remembered; beyond them each occurrence is logged). what is
 * "medium" or "kind"; names are remembered with what in front. */
static void unknown_once(kvp__relay_ep_t *ep, const char *what, const kvp_relay_str_t *m,
                         const char *hint) {
  char key[32];
  int kl = snprintf(key, sizeof key, "%c%.*s", what[0], (int)(m->len < 30 ? m->len : 30), m->p);
  size_t len = (size_t)kl < sizeof key ? (size_t)kl : sizeof key - 1;
  for (size_t i = 0; i < ep->nunknown; i++)
    if (strlen(ep->unknown[i]) == len && memcmp(ep->unknown[i], key, len) == 0)
      return;
  if (ep->nunknown < KVP__RELAY_UNKNOWN_LOGGED) {
    memcpy(ep->unknown[ep->nunknown], key, len);
    ep->unknown[ep->nunknown++][len] = 0;
  }
  LOG(ep, "unknown %s \"%.*s\": its events are skipped%s", what, (int)m->len, m->p, hint);
}

/* 0 when the event belongs to the main group and its kind is indexed, else
 * 1 (counted by cause). Only group 0 is indexed: a hybrid model's other
 * groups hold the same prefixes under other hashes. */
static int skipped(kvp__relay_ep_t *ep, const kvp_relay_event_t *e) {
  int k = kvp__relay_kind_class(e->kind.p, e->kind.len);
  if (k < 0) {
    CNT(ep, skip_kind_unknown);
    unknown_once(ep, "kind", &e->kind, " (README, relay section: spec kinds)");
    return 1;
  }
  if (k == 0) {
    CNT(ep, skip_kind);
    return 1;
  }
  if (e->group_idx > 0 || (e->kind.len == 0 && e->sliding_window > 0)) {
    CNT(ep, skip_group);
    return 1;
  }
  return 0;
}

static int hbuf_reserve(kvp_relay_t *r, size_t n) {
  if (r->hcap >= n)
    return 0;
  uint64_t *h = realloc(r->hbuf, n * sizeof *h);
  if (!h)
    return KVP_ENOMEM;
  r->hbuf = h;
  r->hcap = n;
  return 0;
}

/* Publishes blocks hashes[0..n) as one Stored event. */
static void emit_stored(kvp__relay_ep_t *ep, const kvp_relay_event_t *e, int tier, uint32_t bs,
                        const uint64_t *hashes, size_t n, int has_parent, uint64_t parent,
                        int native) {
  kvp_event_t ev = {.type = KVP_EV_STORED,
                    .tier = tier,
                    .lora_id = e->lora_id,
                    .hashes = hashes,
                    .nhashes = n,
                    .has_parent = has_parent,
                    .parent_hash = parent,
                    .engine_native = native,
                    .block_tokens = bs};
  if (ep->silent)
    return; /* published before a relay restart: the map is what it rebuilds */
  if (native)
    CNTN(ep, blocks_native, n);
  else
    CNTN(ep, blocks_kvp, n);
  if (kvp_publisher_emit(ep->pub, &ev) == 0)
    CNT(ep, out_stored);
}

/* A store without the tokens to hash (an offloading connector's placeholder
 * copy: token_ids [], block_size 0): each block takes the identity its
 * engine hash already has, else stays engine-native; runs of each kind go
 * out as one event. */
static void stored_by_lookup(kvp_relay_t *r, kvp__relay_ep_t *ep, const kvp_relay_event_t *e,
                             int tier, uint32_t bs) {
  size_t n = e->nhashes, run = 0;
  uint64_t parent = e->parent;
  int has_parent = e->has_parent, run_native = -1;
  if (has_parent && kvp__relay_map_get(ep->map, e->parent, &parent) == 0)
    parent = e->parent;
  for (size_t i = 0; i < n; i++) {
    uint64_t id;
    int native = kvp__relay_map_get(ep->map, e->hashes[i], &id) != 1;
    if (native)
      id = e->hashes[i];
    if (run > 0 && native != run_native) {
      emit_stored(ep, e, tier, bs, r->hbuf + i - run, run, has_parent, parent, run_native);
      has_parent = 1;
      parent = r->hbuf[i - 1];
      run = 0;
    }
    /* The parent as published: the one before in this event, else the
     * event's (mapped when it could be); a placeholder without one keeps
     * what the block's first store recorded. */
    int hp = i > 0 || has_parent ? 1 : -1;
    uint64_t par = i > 0 ? r->hbuf[i - 1] : parent;
    if (kvp__relay_map_put_child(ep->map, e->hashes[i], id, tier, native, hp, par))
      CNT(ep, map_evictions);
    r->hbuf[i] = id;
    run_native = native;
    run++;
  }
  if (run > 0)
    emit_stored(ep, e, tier, bs, r->hbuf + n - run, run, has_parent, parent, run_native);
}

#define MM_PER_BLOCK 64 /* multimodal objects per block hashed; more: engine-native */

/* 1 when no block of e holds more multimodal objects than MM_PER_BLOCK. */
static int mm_fits(const kvp_relay_event_t *e) {
  const uint64_t *mm = e->mm;
  for (size_t i = 0; mm && i < e->nhashes; i++) {
    if (*mm > MM_PER_BLOCK)
      return 0;
    mm += 1 + *mm;
  }
  return 1;
}

static void stored(kvp_relay_t *r, kvp__relay_ep_t *ep, const kvp_relay_event_t *e, int tier) {
  size_t n = e->nhashes;
  uint32_t bs = e->block_size ? e->block_size : r->block_size;
  if (n == 0 || hbuf_reserve(r, n) != 0)
    return;
  int own =
      e->token_ids && !e->extra_opaque && bs > 0 && e->ntokens >= (size_t)bs * n && mm_fits(e);
  uint64_t parent = 0;
  int has_parent = 0;
  if (own && e->has_parent) {
    has_parent = kvp__relay_map_get(ep->map, e->parent, &parent) == 1;
    if (!has_parent)
      own = 0; /* parent unknown to us, or native: cannot chain */
  }
  if (!own && !e->extra_opaque) {
    stored_by_lookup(r, ep, e, tier, bs);
    return;
  }
  if (!own) {
    for (size_t i = 0; i < n; i++)
      if (kvp__relay_map_put_child(ep->map, e->hashes[i], e->hashes[i], tier, 1,
                                   i > 0 || e->has_parent, i > 0 ? e->hashes[i - 1] : e->parent))
        CNT(ep, map_evictions);
    emit_stored(ep, e, tier, bs, e->hashes, n, e->has_parent, e->parent, 1);
    return;
  }
  /* The adapter salts the hash: its name, else its id (older vLLM and
   * SGLang send only lora_id) as "lora_id:<n>"; else the cache salt. */
  char salt[256];
  const kvp_relay_str_t *s = e->lora_name.len ? &e->lora_name : &e->cache_salt;
  size_t sl = s->len < sizeof salt - 1 ? s->len : sizeof salt - 1;
  if (sl)
    memcpy(salt, s->p, sl);
  salt[sl] = 0;
  if (!e->lora_name.len && e->lora_id != 0)
    snprintf(salt, sizeof salt, "lora_id:%" PRId32, e->lora_id);
  uint64_t seed = kvp_hash_seed(salt);
  /* The engine's token_ids cover exactly these blocks; the last n full
   * blocks are the ones announced. */
  const uint32_t *tok = e->token_ids + (e->ntokens - (size_t)bs * n);
  const uint64_t *mm = e->mm;
  uint64_t prev = parent, mmbuf[MM_PER_BLOCK];
  for (size_t i = 0; i < n; i++) {
    uint64_t local;
    size_t nmm = mm ? (size_t)*mm++ : 0;
    if (nmm == 0) {
      local = kvp_hash_block(tok + i * bs, bs, seed);
    } else {
      /* Dynamo's rule for a block with multimodal objects (kvplane/hash.h) */
      memcpy(mmbuf, mm, nmm * sizeof *mm);
      local = kvp_hash_block_mm(tok + i * bs, bs, mmbuf, nmm, seed);
    }
    mm += nmm;
    prev = (i == 0 && !has_parent) ? local : kvp_hash_chain(prev, local, seed);
    if (kvp__relay_map_put_child(ep->map, e->hashes[i], prev, tier, 0, i > 0 || has_parent,
                                 i > 0 ? r->hbuf[i - 1] : parent))
      CNT(ep, map_evictions);
    r->hbuf[i] = prev;
  }
  emit_stored(ep, e, tier, bs, r->hbuf, n, has_parent, parent, 0);
}

/* Removes the copies in tier; a copy other references (repeated
 * announcements, or remaining_copy_counts above 0) still hold stays. */
static void removed(kvp_relay_t *r, kvp__relay_ep_t *ep, const kvp_relay_event_t *e, int tier) {
  size_t n = 0;
  if (hbuf_reserve(r, e->nhashes) != 0)
    return;
  for (size_t i = 0; i < e->nhashes; i++) {
    uint64_t k;
    int64_t left = e->copies_left ? (int64_t)e->copies_left[i] : -1;
    int rc = kvp__relay_map_drop(ep->map, e->hashes[i], tier, left, &k);
    if (rc < 0)
      r->hbuf[n++] = e->hashes[i], CNT(ep, skip_unmapped); /* engine-native, or evicted */
    else if (rc == 0)
      r->hbuf[n++] = k;
  }
  if (n && !ep->silent && kvp_publisher_removed(ep->pub, tier, NULL, r->hbuf, n) == 0)
    CNT(ep, out_removed);
}

/* Applies one decoded payload. */
void kvp__relay_apply(kvp_relay_t *r, kvp__relay_ep_t *ep, const kvp_relay_decoded_t *d) {
  if (d->nevents == 0 && d->errors == 0)
    CNT(ep, heartbeats);
  if (d->errors) {
    uint64_t before = CNTN(ep, event_errors, d->errors);
    if (kvp__relay_worth_logging(before + 1))
      LOG(ep, "%zu malformed event(s) skipped (%" PRIu64 " so far)", d->errors, before + d->errors);
  }
  for (size_t i = 0; i < d->nevents; i++) {
    const kvp_relay_event_t *e = &d->events[i];
    int tier;
    switch (e->type) {
    case KVP_RELAY_EV_CLEARED:
      CNT(ep, in_cleared);
      kvp__relay_map_clear(ep->map);
      if (!ep->silent && kvp_publisher_cleared(ep->pub, KVP_TIER_ALL) == 0)
        CNT(ep, out_cleared);
      continue;
    case KVP_RELAY_EV_STORED:
      CNT(ep, in_stored);
      break;
    default:
      CNT(ep, in_removed);
      break;
    }
    if (skipped(ep, e))
      continue;
    tier = kvp__relay_media_tier(&r->media, e->medium.p, e->medium.len);
    if (tier == 0) {
      CNT(ep, skip_medium);
      unknown_once(ep, "medium", &e->medium, " (--media sets the table)");
      continue;
    }
    if (e->type == KVP_RELAY_EV_STORED)
      stored(r, ep, e, tier);
    else
      removed(r, ep, e, tier);
  }
}
