/* The tiering engine's scrub (engine_impl.h): every scrub_ms one volume,
 * in turn, is listed with the plugin's iterate on the job's thread, as the
 * job's first op, so the listing precedes the job's own copies and
 * deletes; the loop then compares it with the index:
 *   - a location the index places there without an object is dropped and
 *     announced (Removed), unless its block was stored or accessed since
 *     the scrub was queued (a worker's put the listing may have missed) or
 *     it is a moved block's source; a listing cut at SCRUB_MAX_KEYS drops
 *     nothing;
 *   - an object no location names is an orphan: counted when first found,
 *     deleted when the volume's next scrub finds it orphaned still (the
 *     grace period: one full turn over the volumes) and the index still
 *     places it nowhere in that volume.
 * The rate limit is the interval: one volume's listing per scrub_ms. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Whether the index places hash in volume v. */
static int located(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v) {
  size_t n = 0;
  if (kvp__tier_get_block(e, hash, NULL, &n) != 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (e->locs[i].tier == v->tier && e->locs[i].volume == v->id)
      return 1;
  return 0;
}

void kvp__tier_scrub_queue(kvp__tier_engine_t *e, uint64_t now) {
  if (e->scrub_ms > 0 && now >= e->scrub_due_ms && e->nvols > 0) {
    e->scrub_due_ms = now + e->scrub_ms;
    /* The next online volume; none online: no scrub this time. */
    for (size_t k = 0; k < e->nvols; k++) {
      size_t v = (e->scrub_next + k) % e->nvols;
      if (e->vols[v].offline)
        continue;
      if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
        break;
      e->ops[e->nops++] = (op_t){.kind = OP_SCRUB, .from = (uint32_t)v, .journal_id = -1};
      e->scrub_next = (v + 1) % e->nvols;
      e->scrub_t0 = now;
      break;
    }
  }
  for (size_t i = 0; i + 1 < e->norphq; i += 2) {
    uint64_t hash = e->orphq[i];
    uint32_t v = (uint32_t)e->orphq[i + 1];
    if (e->vols[v].offline || located(e, hash, &e->vols[v]))
      continue; /* a location came meanwhile: not an orphan any more */
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      break;
    e->ops[e->nops++] = (op_t){.kind = OP_ORPHAN, .hash = hash, .from = v, .journal_id = -1};
  }
  e->norphq = 0;
}

typedef struct lister_s {
  kvp__tier_engine_t *e;
} lister_t;

static int on_key(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  kvp__tier_engine_t *e = ((lister_t *)ctx)->e;
  (void)bytes;
  if (strcmp(ns, e->ns) != 0)
    return 0;
  if (e->nkeys >= SCRUB_MAX_KEYS) {
    e->keys_truncated = 1;
    return 1;
  }
  if (KVP_ARRAY_RESERVE(e->keys, e->keys_cap, e->nkeys + 1, 1024) != 0) {
    e->keys_truncated = 1;
    return 1;
  }
  e->keys[e->nkeys++] = hash;
  return 0;
}

void kvp__tier_scrub_list(kvp__tier_engine_t *e, op_t *o) {
  lister_t l = {e};
  e->nkeys = 0;
  e->keys_truncated = 0;
  o->rc = kvp_volume_iterate(e->vols[o->from].v, on_key, &l, o->err, sizeof o->err);
  if (o->rc == KVP_EOFFLINE)
    __atomic_store_n(&e->vols[o->from].offline_job, 1, __ATOMIC_RELAXED);
  if (o->rc == 0)
    qsort(e->keys, e->nkeys, sizeof *e->keys, cmp_u64);
}

/* The locations the index places in v without an object in the listing:
 * dropped and announced. */
static void drop_missing(kvp__tier_engine_t *e, vol_t *v) {
  kvp__index_stats_t ist;
  kvp__index_stats(e->ix, &ist);
  size_t want = ist.tier_locations[v->tier];
  if (want == 0 || KVP_ARRAY_RESERVE(e->lru, e->lru_cap, want, 1024) != 0)
    return;
  size_t n = kvp__index_lru(e->ix, v->tier, e->lru, want);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = e->lru[i];
    kvp__index_block_t b;
    size_t nl = 0;
    if (bsearch(&h, e->keys, e->nkeys, sizeof *e->keys, cmp_u64) != NULL ||
        kvp__tier_get_block(e, h, &b, &nl) != 0 || b.last_access_ms >= e->scrub_t0)
      continue;
    const uint64_t *mask = kvp__map64_find(&e->pendset, h);
    if (mask != NULL && (*mask >> (v - e->vols) & 1))
      continue;
    if (!located(e, h, v))
      continue;
    op_t o = {.hash = h, .parent = b.parent, .has_parent = b.parent != b.hash};
    kvp__tier_drop_locations(e, h, v);
    kvp__tier_publish(e, KVP_EV_REMOVED, v, &o);
    e->st.scrub_missing++;
    v->st.missing++;
    kvp__tier_vol_warn(v, kvp__unix_ms(),
                       "tiering: scrub: block %016" PRIx64 " is not in %s: its location there "
                       "is dropped",
                       h, v->name);
  }
}

void kvp__tier_scrub_apply(kvp__tier_engine_t *e, op_t *o) {
  vol_t *v = &e->vols[o->from];
  kvp__map64_t now_orphans;

  if (o->rc != 0) {
    if (o->rc == KVP_EOFFLINE && !v->offline) {
      kvp_log_warn("tiering: volume %s is offline (scrub): %s", v->name, o->err);
      v->offline = 1;
      v->st.offline = 1;
    } else {
      kvp__tier_vol_warn(v, kvp__unix_ms(), "tiering: scrub of %s failed: %s", v->name, o->err);
    }
    return;
  }
  e->st.scrubs++;
  e->st.scrub_objects += e->nkeys;
  if (!e->keys_truncated)
    drop_missing(e, v);
  kvp__map64_init(&now_orphans, 0);
  for (size_t i = 0; i < e->nkeys; i++) {
    uint64_t h = e->keys[i];
    if (located(e, h, v))
      continue;
    if (kvp__map64_find(&v->orphans, h) != NULL) {
      /* Orphaned at two scrubs in a row: deleted next round. */
      if (KVP_ARRAY_RESERVE(e->orphq, e->orphq_cap, e->norphq + 2, 64) == 0) {
        e->orphq[e->norphq++] = h;
        e->orphq[e->norphq++] = o->from;
      }
      continue;
    }
    e->st.scrub_orphans++;
    if (kvp__map64_put(&now_orphans, h, 1) != 0)
      break;
  }
  kvp__map64_free(&v->orphans);
  v->orphans = now_orphans;
  if (e->keys_cap > 4096) { /* a large listing's memory goes back */
    free(e->keys);
    e->keys = NULL;
    e->keys_cap = 0;
  }
  e->nkeys = 0;
}
