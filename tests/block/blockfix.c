/* Block manager test fixture; see blockfix.h. */
#include "blockfix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

kvp_layout_t bf_layout(void) {
  return (kvp_layout_t){
      .num_layers = 2, .page_size = BF_PS, .inner_dim = 8, .elem_size = 2, .alignment = 64};
}

/* ---- hash -> parent map ------------------------------------------------ */

void bf_pmap_init(bf_pmap_t *m, size_t cap) {
  m->cap = cap;
  m->n = 0;
  m->key = calloc(cap, sizeof *m->key);
  m->parent = calloc(cap, sizeof *m->parent);
  m->used = calloc(cap, 1);
  assert_non_null(m->key);
  assert_non_null(m->parent);
  assert_non_null(m->used);
}

void bf_pmap_free(bf_pmap_t *m) {
  free(m->key);
  free(m->parent);
  free(m->used);
  memset(m, 0, sizeof *m);
}

static size_t pmap_slot(const bf_pmap_t *m, uint64_t h) {
  size_t i = (size_t)(h * UINT64_C(0x9e3779b97f4a7c15) >> 20) & (m->cap - 1);
  while (m->used[i] && m->key[i] != h)
    i = (i + 1) & (m->cap - 1);
  return i;
}

void bf_pmap_add_chain(bf_pmap_t *m, const uint64_t *hashes, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t s = pmap_slot(m, hashes[i]);
    uint64_t parent = i ? hashes[i - 1] : hashes[i];
    if (m->used[s]) {
      /* Chained hashes: the same hash always has the same parent. */
      assert_true(m->parent[s] == parent);
      continue;
    }
    assert_true(m->n + 1 < m->cap / 2);
    m->used[s] = 1;
    m->key[s] = hashes[i];
    m->parent[s] = parent;
    m->n++;
  }
}

int bf_pmap_get(const bf_pmap_t *m, uint64_t h, uint64_t *parent) {
  size_t s = pmap_slot(m, h);
  if (!m->used[s])
    return 0;
  *parent = m->parent[s];
  return 1;
}

/* ---- recording sink ---------------------------------------------------- */

void bf_rec_init(bf_rec_t *r, int keep) {
  memset(r, 0, sizeof *r);
  r->keep = keep;
}

void bf_rec_clear_list(bf_rec_t *r) {
  for (size_t i = 0; i < r->nev; i++)
    free(r->ev[i].hashes);
  r->nev = 0;
}

void bf_rec_free(bf_rec_t *r) {
  bf_rec_clear_list(r);
  free(r->ev);
  for (int t = 0; t <= KVP_TIER_MAX; t++)
    free(r->set[t]);
  memset(r, 0, sizeof *r);
}

static ptrdiff_t set_find(const bf_rec_t *r, int tier, uint64_t h) {
  for (size_t i = 0; i < r->nset[tier]; i++)
    if (r->set[tier][i] == h)
      return (ptrdiff_t)i;
  return -1;
}

int bf_rec_has(const bf_rec_t *r, int tier, uint64_t h) {
  return tier >= 0 && tier <= KVP_TIER_MAX && set_find(r, tier, h) >= 0;
}

static void rec_bad(bf_rec_t *r, const char *what, const kvp_event_t *ev, uint64_t h) {
  if (r->bad)
    return;
  r->bad = 1;
  snprintf(r->why, sizeof r->why, "event %llu (%s %s): %s %016llx", (unsigned long long)r->total,
           kvp_event_type_name(ev->type), kvp_tier_name(ev->tier), what, (unsigned long long)h);
}

static void set_add(bf_rec_t *r, int tier, uint64_t h) {
  if (r->nset[tier] == r->capset[tier]) {
    size_t cap = r->capset[tier] ? 2 * r->capset[tier] : 64;
    uint64_t *s = realloc(r->set[tier], cap * sizeof *s);
    assert_non_null(s);
    r->set[tier] = s;
    r->capset[tier] = cap;
  }
  r->set[tier][r->nset[tier]++] = h;
}

static void replay(bf_rec_t *r, const kvp_event_t *ev) {
  int tier = ev->tier;

  if (ev->type == KVP_EV_CLEARED) {
    if (tier == KVP_TIER_ALL) {
      for (int t = 0; t <= KVP_TIER_MAX; t++)
        r->nset[t] = 0;
    } else if (tier > 0 && tier <= KVP_TIER_MAX) {
      r->nset[tier] = 0;
    } else {
      rec_bad(r, "bad tier", ev, 0);
    }
    return;
  }
  if (tier != KVP_TIER_G1 && tier != KVP_TIER_G2) {
    rec_bad(r, "bad tier", ev, 0);
    return;
  }
  if (ev->nhashes == 0)
    rec_bad(r, "no hashes", ev, 0);
  if (ev->type == KVP_EV_STORED && r->pmap) {
    for (size_t i = 0; i < ev->nhashes; i++) {
      uint64_t want;
      int has;
      if (!bf_pmap_get(r->pmap, ev->hashes[i], &want)) {
        rec_bad(r, "unknown hash stored", ev, ev->hashes[i]);
        break;
      }
      has = want != ev->hashes[i];
      if (i == 0 && (has != (ev->has_parent != 0) || (has && ev->parent_hash != want)))
        rec_bad(r, "wrong parent for", ev, ev->hashes[i]);
      if (i > 0 && (!has || want != ev->hashes[i - 1]))
        rec_bad(r, "not a chain at", ev, ev->hashes[i]);
    }
  }
  for (size_t i = 0; i < ev->nhashes; i++) {
    ptrdiff_t at = set_find(r, tier, ev->hashes[i]);
    switch (ev->type) {
    case KVP_EV_STORED:
      if (at >= 0)
        rec_bad(r, "stored again", ev, ev->hashes[i]);
      else
        set_add(r, tier, ev->hashes[i]);
      break;
    case KVP_EV_REMOVED:
      if (at < 0)
        rec_bad(r, "removed absent", ev, ev->hashes[i]);
      else
        r->set[tier][at] = r->set[tier][--r->nset[tier]];
      break;
    case KVP_EV_ACCESSED:
      if (at < 0)
        rec_bad(r, "accessed absent", ev, ev->hashes[i]);
      break;
    default:
      rec_bad(r, "unexpected type", ev, 0);
    }
  }
}

static int rec_emit(void *ctx, const kvp_event_t *ev) {
  bf_rec_t *r = ctx;

  replay(r, ev);
  r->total++;
  if (r->keep) {
    if (r->nev == r->capev) {
      size_t cap = r->capev ? 2 * r->capev : 32;
      bf_ev_t *e = realloc(r->ev, cap * sizeof *e);
      assert_non_null(e);
      r->ev = e;
      r->capev = cap;
    }
    bf_ev_t *e = &r->ev[r->nev++];
    memset(e, 0, sizeof *e);
    e->type = ev->type;
    e->tier = ev->tier;
    e->has_parent = ev->has_parent;
    e->parent = ev->has_parent ? ev->parent_hash : 0;
    e->n = ev->nhashes;
    if (ev->nhashes) {
      e->hashes = malloc(ev->nhashes * sizeof *e->hashes);
      assert_non_null(e->hashes);
      memcpy(e->hashes, ev->hashes, ev->nhashes * sizeof *e->hashes);
    }
    e->block_tokens = ev->block_tokens;
    e->block_bytes = ev->block_bytes;
    e->lora_id = ev->lora_id;
    e->has_hit_counts = ev->hit_counts != NULL;
  }
  return r->fail_rc;
}

kvp_event_sink_t bf_rec_sink(bf_rec_t *r) {
  return (kvp_event_sink_t){rec_emit, r};
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void bf_assert_snapshot_matches(kvp_blockmgr_t *bm, const bf_rec_t *r, int tier) {
  uint64_t *h = NULL, *p = NULL, *mine = NULL;
  size_t n = 99;

  assert_int_equal(kvp_blockmgr_snapshot(bm, tier, &h, &p, &n), 0);
  assert_int_equal(n, r->nset[tier]);
  if (n == 0) {
    assert_null(h);
    assert_null(p);
    return;
  }
  assert_non_null(h);
  assert_non_null(p);
  if (r->pmap) {
    for (size_t i = 0; i < n; i++) {
      uint64_t want = 0;
      assert_true(bf_pmap_get(r->pmap, h[i], &want));
      assert_true(p[i] == want);
    }
  }
  mine = malloc(n * sizeof *mine);
  assert_non_null(mine);
  memcpy(mine, r->set[tier], n * sizeof *mine);
  qsort(h, n, sizeof *h, cmp_u64);
  qsort(mine, n, sizeof *mine, cmp_u64);
  for (size_t i = 0; i < n; i++) {
    assert_true(h[i] == mine[i]);
    if (i)
      assert_true(h[i] != h[i - 1]); /* a hash is registered once per tier */
  }
  free(mine);
  free(h);
  free(p);
}

void bf_assert_ev(const bf_rec_t *r, size_t i, int type, int tier, const uint64_t *hashes, size_t n,
                  int has_parent, uint64_t parent) {
  assert_true(i < r->nev);
  const bf_ev_t *e = &r->ev[i];
  if (e->type != type || e->tier != tier || e->n != n)
    fail_msg("event %zu: got %s %s with %zu hashes, want %s %s with %zu", i,
             kvp_event_type_name(e->type), kvp_tier_name(e->tier), e->n, kvp_event_type_name(type),
             kvp_tier_name(tier), n);
  for (size_t k = 0; k < n; k++)
    if (e->hashes[k] != hashes[k])
      fail_msg("event %zu (%s %s): hash %zu is %016llx, want %016llx", i, kvp_event_type_name(type),
               kvp_tier_name(tier), k, (unsigned long long)e->hashes[k],
               (unsigned long long)hashes[k]);
  if (type == KVP_EV_STORED) {
    assert_int_equal(!!e->has_parent, !!has_parent);
    if (has_parent)
      assert_true(e->parent == parent);
  }
}

/* ---- world capture ----------------------------------------------------- */

void bf_pool_take(const kvp_pool_t *p, bf_pool_snap_t *s) {
  memset(s, 0, sizeof *s);
  s->present = 1;
  kvp_pool_counts(p, &s->c);
  s->n = s->c.capacity;
  s->state = calloc(s->n, sizeof *s->state);
  s->refs = calloc(s->n, sizeof *s->refs);
  s->hash = calloc(s->n, sizeof *s->hash);
  assert_non_null(s->state);
  assert_non_null(s->refs);
  assert_non_null(s->hash);
  for (uint32_t b = 0; b < s->n; b++) {
    s->state[b] = kvp_pool_block_state(p, b);
    s->refs[b] = kvp_pool_block_refs(p, b);
    s->hash[b] = kvp_pool_block_hash(p, b);
  }
}

void bf_pool_snap_free(bf_pool_snap_t *s) {
  free(s->state);
  free(s->refs);
  free(s->hash);
  memset(s, 0, sizeof *s);
}

void bf_world_take(kvp_blockmgr_t *bm, const bf_rec_t *r, bf_world_t *w) {
  memset(w, 0, sizeof *w);
  for (int t = KVP_TIER_G1; t <= KVP_TIER_G2; t++) {
    kvp_pool_t *p = kvp_blockmgr_pool(bm, t);
    if (p)
      bf_pool_take(p, &w->pool[t]);
  }
  kvp_blockmgr_stats(bm, &w->st);
  w->events = r ? r->total : 0;
}

void bf_assert_counts_equal(const kvp_pool_counts_t *a, const kvp_pool_counts_t *b) {
  assert_int_equal(a->tier, b->tier);
  assert_int_equal(a->capacity, b->capacity);
  for (int i = 0; i < 4; i++)
    assert_int_equal(a->state[i], b->state[i]);
  assert_int_equal(a->active, b->active);
  assert_int_equal(a->inactive, b->inactive);
  assert_int_equal(a->free, b->free);
  assert_int_equal(a->cached, b->cached);
  assert_int_equal(a->evictions, b->evictions);
}

void bf_assert_stats_equal(const kvp_blockmgr_stats_t *a, const kvp_blockmgr_stats_t *b) {
  bf_assert_counts_equal(&a->g1, &b->g1);
  bf_assert_counts_equal(&a->g2, &b->g2);
  assert_int_equal(a->sequences, b->sequences);
  assert_int_equal(a->lookups, b->lookups);
  assert_int_equal(a->hits_g1, b->hits_g1);
  assert_int_equal(a->hits_g2, b->hits_g2);
  assert_int_equal(a->onboards, b->onboards);
  assert_int_equal(a->offloads, b->offloads);
  assert_int_equal(a->offloads_filtered, b->offloads_filtered);
  assert_int_equal(a->dedups, b->dedups);
  assert_int_equal(a->events, b->events);
  assert_int_equal(a->event_errors, b->event_errors);
  assert_true(a->hit_rate == b->hit_rate);
  assert_int_equal(a->metadata_bytes, b->metadata_bytes);
}

void bf_pool_assert_same(const bf_pool_snap_t *x, const bf_pool_snap_t *y, const char *what) {
  assert_int_equal(x->present, y->present);
  if (!x->present)
    return;
  bf_assert_counts_equal(&x->c, &y->c);
  for (uint32_t i = 0; i < x->n; i++) {
    if (x->state[i] != y->state[i] || x->refs[i] != y->refs[i] || x->hash[i] != y->hash[i])
      fail_msg("%s: block %u changed: state %d->%d refs %u->%u hash %016llx->%016llx", what, i,
               x->state[i], y->state[i], x->refs[i], y->refs[i], (unsigned long long)x->hash[i],
               (unsigned long long)y->hash[i]);
  }
}

void bf_world_assert_same(const bf_world_t *a, const bf_world_t *b) {
  bf_pool_assert_same(&a->pool[KVP_TIER_G1], &b->pool[KVP_TIER_G1], "G1");
  bf_pool_assert_same(&a->pool[KVP_TIER_G2], &b->pool[KVP_TIER_G2], "G2");
  bf_assert_stats_equal(&a->st, &b->st);
  assert_int_equal(a->events, b->events);
}

void bf_world_free(bf_world_t *w) {
  for (int t = 0; t < 3; t++)
    bf_pool_snap_free(&w->pool[t]);
  memset(w, 0, sizeof *w);
}

void bf_assert_pool_consistent(const kvp_pool_t *p) {
  kvp_pool_counts_t c;
  uint32_t state[4] = {0}, active = 0, free_ = 0, cached = 0;

  kvp_pool_counts(p, &c);
  for (uint32_t b = 0; b < c.capacity; b++) {
    int s = kvp_pool_block_state(p, b);
    uint32_t refs = kvp_pool_block_refs(p, b);
    assert_in_range(s, KVP_BLOCK_RESET, KVP_BLOCK_REGISTERED);
    state[s]++;
    if (refs)
      active++;
    else if (s == KVP_BLOCK_RESET)
      free_++;
    else if (s == KVP_BLOCK_REGISTERED)
      cached++;
    else
      fail_msg("block %u is %s without a reference", b, kvp_block_state_name(s));
    if (s == KVP_BLOCK_REGISTERED) {
      uint32_t found = UINT32_MAX;
      assert_int_equal(kvp_pool_lookup(p, kvp_pool_block_hash(p, b), &found), 0);
      assert_int_equal(found, b);
    } else {
      assert_true(kvp_pool_block_hash(p, b) == 0);
    }
  }
  for (int s = 0; s < 4; s++)
    assert_int_equal(c.state[s], state[s]);
  assert_int_equal(c.state[0] + c.state[1] + c.state[2] + c.state[3], c.capacity);
  assert_int_equal(c.active + c.inactive, c.capacity);
  assert_int_equal(c.active, active);
  assert_int_equal(c.free, free_);
  assert_int_equal(c.cached, cached);
  assert_int_equal(c.free + c.cached, c.inactive);
  assert_int_equal(kvp_pool_block_state(p, c.capacity), -1);
  assert_int_equal(kvp_pool_block_refs(p, c.capacity), 0);
  assert_true(kvp_pool_block_hash(p, c.capacity) == 0);
}

/* ---- helpers ----------------------------------------------------------- */

void bf_tokens(uint32_t *out, size_t n, uint32_t base) {
  for (size_t i = 0; i < n; i++)
    out[i] = base + (uint32_t)i;
}

size_t bf_hashes(const uint32_t *tokens, size_t n, const char *lora_name, uint64_t *out,
                 size_t cap) {
  return kvp_hash_sequence(tokens, n, BF_PS, kvp_hash_seed(lora_name), out, cap);
}

kvp_blockmgr_t *bf_mgr(uint32_t g1, uint32_t g2, int offload, uint32_t min_hits, bf_rec_t *rec) {
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm = NULL;

  kvp_blockmgr_opts_init(&o);
  o.layout = bf_layout();
  o.g1_blocks = g1;
  o.g2_blocks = g2;
  o.offload = offload;
  o.offload_min_hits = min_hits;
  if (rec)
    o.sink = bf_rec_sink(rec);
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  assert_non_null(bm);
  return bm;
}

kvp_seq_t *bf_seq(kvp_blockmgr_t *bm, const uint32_t *tokens, size_t n, const char *lora_name,
                  int32_t lora_id) {
  kvp_seq_t *s = NULL;
  assert_int_equal(kvp_seq_create(bm, tokens, n, lora_name, lora_id, &s), 0);
  assert_non_null(s);
  assert_int_equal(kvp_seq_allocate(s), 0);
  return s;
}

uint32_t bf_lookup(kvp_blockmgr_t *bm, int tier, uint64_t h) {
  uint32_t b = UINT32_MAX;
  kvp_pool_t *p = kvp_blockmgr_pool(bm, tier);
  assert_non_null(p);
  if (kvp_pool_lookup(p, h, &b) != 0)
    fail_msg("%s: hash %016llx not registered", kvp_tier_name(tier), (unsigned long long)h);
  return b;
}

/* ---- sequence helpers ------------------------------------------------- */

size_t bf_nblocks(const kvp_seq_t *s) {
  size_t n = 99;
  kvp_seq_blocks(s, &n);
  return n;
}

uint32_t bf_blk(const kvp_seq_t *s, size_t i) {
  size_t n = 0;
  const uint32_t *b = kvp_seq_blocks(s, &n);
  assert_non_null(b);
  assert_true(i < n);
  return b[i];
}

kvp_pool_t *bf_g1(kvp_blockmgr_t *bm) {
  return kvp_blockmgr_pool(bm, KVP_TIER_G1);
}

void bf_expect_g1_counts(kvp_blockmgr_t *bm, uint32_t active, uint32_t free_, uint32_t cached) {
  kvp_pool_counts_t c;
  kvp_pool_counts(bf_g1(bm), &c);
  assert_int_equal(c.active, active);
  assert_int_equal(c.free, free_);
  assert_int_equal(c.cached, cached);
  bf_assert_pool_consistent(bf_g1(bm));
}

int bf_registered(kvp_blockmgr_t *bm, int tier, uint64_t h) {
  uint32_t b;
  kvp_pool_t *p = kvp_blockmgr_pool(bm, tier);
  return p && kvp_pool_lookup(p, h, &b) == 0;
}

void bf_hashes_equal(const kvp_seq_t *s, const uint64_t *want, size_t n) {
  size_t got = 99;
  const uint64_t *h = kvp_seq_hashes(s, &got);
  assert_int_equal(got, n);
  for (size_t i = 0; i < n; i++)
    assert_true(h[i] == want[i]);
}
