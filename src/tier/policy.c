/* Tiering rules over a snapshot of candidates (see policy.h).
 * Why this file is long: the shared rules (the demotions to the low
 * watermark, the promotions and the room they make, G4's evictions with
 * the room the demotions need, the prefetch) work on one plan and its
 * heaps; split, they would share the plan's internals. */
#include "tier/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/map64.h"
#include "kvplane/status.h"

void kvp__tier_params_init(kvp__tier_params_t *p) {
  *p = (kvp__tier_params_t){.high_watermark = 0.90,
                            .low_watermark = 0.80,
                            .promote_freq = 4.0,
                            .keep_freq = 2.0,
                            .min_residence_ms = 60000,
                            .g4_high_watermark = 1.0,
                            .g4_low_watermark = 0.95,
                            .prefetch_depth = 8,
                            .prefetch_bytes = 64ull << 20};
}

int kvp__tier_params_check(const kvp__tier_params_t *p, char *err, size_t errlen) {
  const char *bad = NULL;
  if (!(p->high_watermark > 0 && p->high_watermark <= 1))
    bad = "high_watermark must be in (0, 1]";
  else if (!(p->low_watermark > 0 && p->low_watermark < p->high_watermark))
    bad = "low_watermark must be in (0, high_watermark)";
  else if (!(p->g4_high_watermark > 0 && p->g4_high_watermark <= 1))
    bad = "g4_high_watermark must be in (0, 1]";
  else if (!(p->g4_low_watermark > 0 && p->g4_low_watermark < p->g4_high_watermark))
    bad = "g4_low_watermark must be in (0, g4_high_watermark)";
  else if (!(p->keep_freq >= 0 && p->keep_freq <= p->promote_freq))
    bad = "keep_freq must be in [0, promote_freq]";
  if (bad == NULL)
    return 0;
  snprintf(err, errlen, "[tiering] %s", bad);
  return KVP_ECONFIG;
}

const char *kvp__tier_kind_name(int kind) {
  static const char *const names[] = {"prefetch", "demote", "promote", "evict"};
  return kind >= 0 && kind <= KVP__TIER_EVICT ? names[kind] : "?";
}

/* --- the snapshot's lookups -------------------------------------------------- */

/* (hash, volume) -> candidate index: a map from hash to the last candidate
 * of that hash, and per candidate the previous one of the same hash (a
 * block is in one or two volumes, so a chain is short). */
#define NO_CAND UINT32_MAX

typedef struct where_s {
  kvp__map64_t last; /* hash -> candidate index */
  uint32_t *prev;    /* per candidate: the one before of the same hash, or NO_CAND */
} where_t;

static int where_build(where_t *w, const kvp__tier_cand_t *c, size_t n) {
  if (kvp__map64_init(&w->last, n) != 0 ||
      (w->prev = malloc((n ? n : 1) * sizeof *w->prev)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    uint64_t *last = kvp__map64_find(&w->last, c[i].hash);
    w->prev[i] = last ? (uint32_t)*last : NO_CAND;
    if (last)
      *last = i;
    else if (kvp__map64_put(&w->last, c[i].hash, i) != 0)
      return KVP_ENOMEM;
  }
  return 0;
}

static long where_find(const where_t *w, const kvp__tier_cand_t *c, uint64_t hash, uint32_t vol) {
  uint64_t i;
  if (kvp__map64_get(&w->last, hash, &i) != 0)
    return -1;
  for (uint32_t k = (uint32_t)i; k != NO_CAND; k = w->prev[k])
    if (c[k].vol == vol)
      return (long)k;
  return -1;
}

static void where_free(where_t *w) {
  kvp__map64_free(&w->last);
  free(w->prev);
}

/* A binary heap of candidate indexes, coldest on top. */
typedef struct heap_s {
  uint32_t *v;
  size_t n, cap;
  const kvp__tier_order_t *ord;
  const kvp__tier_cand_t *c;
  uint64_t now;
  int hottest; /* inverted: hottest on top */
} heap_t;

static int above(const heap_t *h, uint32_t a, uint32_t b) {
  return h->hottest ? h->ord->colder(h->ord->ctx, &h->c[b], &h->c[a], h->now)
                    : h->ord->colder(h->ord->ctx, &h->c[a], &h->c[b], h->now);
}

static int heap_push(heap_t *h, uint32_t i) {
  if (KVP_ARRAY_RESERVE(h->v, h->cap, h->n + 1, 64) != 0)
    return KVP_ENOMEM;
  size_t k = h->n++;
  while (k > 0 && above(h, i, h->v[(k - 1) / 2])) {
    h->v[k] = h->v[(k - 1) / 2];
    k = (k - 1) / 2;
  }
  h->v[k] = i;
  return 0;
}

static uint32_t heap_pop(heap_t *h) {
  uint32_t top = h->v[0], last = h->v[--h->n];
  size_t k = 0;
  for (;;) {
    size_t l = 2 * k + 1, r = l + 1, m = k;
    uint32_t mv = last;
    if (l < h->n && above(h, h->v[l], mv))
      m = l, mv = h->v[l];
    if (r < h->n && above(h, h->v[r], mv))
      m = r, mv = h->v[r];
    if (m == k)
      break;
    h->v[k] = h->v[m];
    k = m;
  }
  if (h->n > 0)
    h->v[k] = last;
  return top;
}

/* --- planning ------------------------------------------------------------------ */

typedef struct plan_s {
  const kvp__tier_order_t *ord;
  const kvp__tier_params_t *prm;
  kvp__tier_vol_t *vols;
  size_t nvols;
  const kvp__tier_cand_t *c;
  size_t n;
  uint64_t now;
  where_t where;
  uint32_t *children; /* per candidate: its children in its own volume, not yet moved */
  uint8_t *moved;     /* per candidate: planned to leave its volume */
  kvp__tier_move_t *moves;
  size_t nmoves, cap;
} plan_t;

static int eligible(const plan_t *p, size_t i) {
  const kvp__tier_cand_t *x = &p->c[i];
  return !x->busy && !p->moved[i] && x->since_ms + p->prm->min_residence_ms <= p->now;
}

static double fill_after(const kvp__tier_vol_t *v, int64_t delta) {
  return v->capacity ? ((double)v->used + (double)delta) / (double)v->capacity : 0;
}

/* The volume of tier with the most room that takes bytes below limit (a
 * watermark), not in backoff; -1 when none. */
static long pick_dest(const plan_t *p, int tier, uint64_t bytes, double limit) {
  long best = -1;
  double best_free = -1;
  for (size_t v = 0; v < p->nvols; v++) {
    const kvp__tier_vol_t *d = &p->vols[v];
    if (d->tier != tier || d->backoff_until_ms > p->now)
      continue;
    double free_b =
        d->capacity ? limit * (double)d->capacity - (double)d->used - (double)bytes : 1e30;
    if (free_b >= 0 && free_b > best_free) {
      best = (long)v;
      best_free = free_b;
    }
  }
  return best;
}

static int add_move(plan_t *p, size_t i, uint32_t to, int kind) {
  const kvp__tier_cand_t *x = &p->c[i];
  if (KVP_ARRAY_RESERVE(p->moves, p->cap, p->nmoves + 1, 64) != 0)
    return KVP_ENOMEM;
  p->moves[p->nmoves++] = (kvp__tier_move_t){.hash = x->hash,
                                             .bytes = x->bytes,
                                             .from = x->vol,
                                             .to = to,
                                             .cand = (uint32_t)i,
                                             .kind = (uint8_t)kind};
  p->moved[i] = 1;
  p->vols[x->vol].used -= x->bytes < p->vols[x->vol].used ? x->bytes : p->vols[x->vol].used;
  if (to != KVP__TIER_NOWHERE)
    p->vols[to].used += x->bytes;
  return 0;
}

/* After candidate i left its volume, its parent there may be a leaf now. */
static int parent_freed(plan_t *p, size_t i, heap_t *leaves, int (*keep)(const plan_t *, size_t)) {
  const kvp__tier_cand_t *x = &p->c[i];
  if (!x->has_parent)
    return 0;
  long par = where_find(&p->where, p->c, x->parent, x->vol);
  if (par < 0 || --p->children[par] != 0 || !eligible(p, (size_t)par) ||
      (keep && !keep(p, (size_t)par)))
    return 0;
  return heap_push(leaves, (uint32_t)par);
}

/* The eligible leaves of volume v (optionally filtered by keep) in a heap. */
static int leaves_of(plan_t *p, uint32_t v, heap_t *h, int hottest,
                     int (*keep)(const plan_t *, size_t)) {
  *h = (heap_t){.ord = p->ord, .c = p->c, .now = p->now, .hottest = hottest};
  for (size_t i = 0; i < p->n; i++)
    if (p->c[i].vol == v && p->children[i] == 0 && eligible(p, i) && (!keep || keep(p, i)))
      if (heap_push(h, (uint32_t)i) != 0)
        return KVP_ENOMEM;
  return 0;
}

/* Moves the coldest leaves of volume v out (to the tier dest_tier, or
 * deleted when dest_tier is 0) until its fill is at most target. When no
 * volume of dest_tier has room for the next one, adds the bytes still to
 * move to *short_of (may be NULL) and stops. */
static int drain_volume(plan_t *p, uint32_t v, double target, int dest_tier, int kind,
                        int (*keep)(const plan_t *, size_t), uint64_t *short_of) {
  heap_t h;
  int rc = leaves_of(p, v, &h, 0, keep);
  while (rc == 0 && h.n > 0 && fill_after(&p->vols[v], 0) > target) {
    uint32_t i = heap_pop(&h);
    uint32_t to = KVP__TIER_NOWHERE;
    if (dest_tier != 0) {
      long d =
          pick_dest(p, dest_tier, p->c[i].bytes, dest_tier == 4 ? 1.0 : p->prm->high_watermark);
      if (d < 0) {
        /* Nowhere to go: stop, and say so through the short plan. */
        const kvp__tier_vol_t *s = &p->vols[v];
        if (short_of != NULL)
          *short_of += (uint64_t)((double)s->used - target * (double)s->capacity);
        break;
      }
      to = (uint32_t)d;
    }
    if ((rc = add_move(p, i, to, kind)) == 0)
      rc = parent_freed(p, i, &h, keep);
  }
  free(h.v);
  return rc;
}

static int below_keep(const plan_t *p, size_t i) {
  return p->c[i].freq < p->prm->keep_freq;
}

static int in_g3(const plan_t *p, uint64_t hash) {
  for (size_t v = 0; v < p->nvols; v++)
    if (p->vols[v].tier == 3) {
      long i = where_find(&p->where, p->c, hash, (uint32_t)v);
      if (i >= 0 && !p->moved[i])
        return 1;
    }
  return 0;
}

static int promote(plan_t *p) {
  heap_t hot = {.ord = p->ord, .c = p->c, .now = p->now, .hottest = 1};
  /* Per G3 volume, its leaves below keep_freq, coldest on top: built once,
   * when a promotion first needs room there, and kept for the next ones (a
   * heap per promotion made a round quadratic). */
  heap_t *cold = calloc(p->nvols ? p->nvols : 1, sizeof *cold);
  int rc = cold ? 0 : KVP_ENOMEM;

  for (size_t i = 0; i < p->n && rc == 0; i++)
    if (p->vols[p->c[i].vol].tier == 4 && eligible(p, i) && p->c[i].freq >= p->prm->promote_freq)
      rc = heap_push(&hot, (uint32_t)i);
  while (rc == 0 && hot.n > 0) {
    uint32_t i = heap_pop(&hot);
    if (in_g3(p, p->c[i].hash))
      continue;
    /* Room is what lies below the low watermark: promotions that filled G3
     * up to the high one would have the workers' next offloads push it
     * over, and the next round demote as much again (a ping-pong of a
     * tenth of G3 per round, measured by kvp-bench policy). */
    long d = pick_dest(p, 3, p->c[i].bytes, p->prm->low_watermark);
    if (d < 0) {
      /* Make room: demote a G3 block below keep_freq, colder than this one. */
      for (size_t v = 0; v < p->nvols && d < 0; v++) {
        if (p->vols[v].tier != 3 || p->vols[v].backoff_until_ms > p->now)
          continue;
        heap_t *h = &cold[v];
        if (h->ord == NULL && (rc = leaves_of(p, (uint32_t)v, h, 0, below_keep)) != 0)
          break;
        while (h->n > 0 && d < 0) {
          uint32_t victim = heap_pop(h);
          long g4 = -1;
          if (!p->ord->colder(p->ord->ctx, &p->c[victim], &p->c[i], p->now) ||
              (g4 = pick_dest(p, 4, p->c[victim].bytes, 1.0)) < 0) {
            rc = heap_push(h, victim); /* stays, for a colder promotion */
            break;
          }
          if ((rc = add_move(p, victim, (uint32_t)g4, KVP__TIER_DEMOTE)) != 0 ||
              (rc = parent_freed(p, victim, h, below_keep)) != 0)
            break;
          d = pick_dest(p, 3, p->c[i].bytes, p->prm->high_watermark);
        }
      }
    }
    if (rc == 0 && d >= 0)
      rc = add_move(p, i, (uint32_t)d, KVP__TIER_PROMOTE);
  }
  for (size_t v = 0; cold && v < p->nvols; v++)
    free(cold[v].v);
  free(cold);
  free(hot.v);
  return rc;
}

static int plan_init(plan_t *p) {
  if (where_build(&p->where, p->c, p->n) != 0 ||
      (p->children = calloc(p->n ? p->n : 1, sizeof *p->children)) == NULL ||
      (p->moved = calloc(p->n ? p->n : 1, 1)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < p->n; i++) {
    if (!p->c[i].has_parent)
      continue;
    long par = where_find(&p->where, p->c, p->c[i].parent, p->c[i].vol);
    if (par >= 0)
      p->children[par]++;
  }
  return 0;
}

static void plan_free(plan_t *p) {
  where_free(&p->where);
  free(p->children);
  free(p->moved);
}

/* Orders moves by kind, keeping each kind's order (coldest or hottest
 * first). Returns 0 or KVP_ENOMEM. */
static int order_by_kind(kvp__tier_move_t *m, size_t n) {
  kvp__tier_move_t *out;
  size_t k = 0;
  if (n < 2)
    return 0;
  if ((out = malloc(n * sizeof *out)) == NULL)
    return KVP_ENOMEM;
  for (int kind = KVP__TIER_PREFETCH; kind <= KVP__TIER_EVICT; kind++)
    for (size_t i = 0; i < n; i++)
      if (m[i].kind == kind)
        out[k++] = m[i];
  memcpy(m, out, n * sizeof *m);
  free(out);
  return 0;
}

int kvp__tier_plan(const kvp__tier_order_t *ord, const kvp__tier_params_t *prm,
                   kvp__tier_vol_t *vols, size_t nvols, const kvp__tier_cand_t *cands,
                   size_t ncands, uint64_t now_ms, kvp__tier_move_t **moves, size_t *nmoves) {
  plan_t p = {
      .ord = ord, .prm = prm, .vols = vols, .nvols = nvols, .c = cands, .n = ncands, .now = now_ms};
  int rc = plan_init(&p);

  /* Space first: demote from every G3 volume over its high watermark. */
  uint64_t g4_short = 0; /* what the demotions found no G4 room for */
  for (size_t v = 0; rc == 0 && v < nvols; v++)
    if (vols[v].tier == 3 && vols[v].capacity && fill_after(&vols[v], 0) > prm->high_watermark)
      rc = drain_volume(&p, (uint32_t)v, prm->low_watermark, 4, KVP__TIER_DEMOTE, NULL, &g4_short);
  if (rc == 0)
    rc = promote(&p);
  /* G4 evicts past its high watermark, and when the demotions found it
   * full: then its coldest go until there is room for what G3 still has
   * to move (shared among the G4 volumes that take moves), so the next
   * round demotes. (A demotion never fills G4 past its capacity, so with
   * eviction only past the high watermark, 1.0, a full G4 took no more
   * demotions and its G3 volumes stayed full, for good.) */
  size_t g4_open = 0;
  for (size_t v = 0; v < nvols; v++)
    g4_open += vols[v].tier == 4 && vols[v].capacity && vols[v].backoff_until_ms <= now_ms;
  for (size_t v = 0; rc == 0 && v < nvols; v++) {
    const kvp__tier_vol_t *g = &vols[v];
    if (g->tier != 4 || !g->capacity)
      continue;
    double target = prm->g4_low_watermark;
    if (g4_short > 0 && g4_open > 0 && g->backoff_until_ms <= now_ms) {
      double room = 1.0 - (double)g4_short / (double)g4_open / (double)g->capacity;
      target = room < 0 ? 0 : room < target ? room : target;
    } else if (fill_after(g, 0) <= prm->g4_high_watermark) {
      continue;
    }
    rc = drain_volume(&p, (uint32_t)v, target, 0, KVP__TIER_EVICT, NULL, NULL);
  }
  plan_free(&p);
  if (rc == 0)
    rc = order_by_kind(p.moves, p.nmoves);
  if (rc != 0) {
    free(p.moves);
    *moves = NULL;
    *nmoves = 0;
    return rc;
  }
  *moves = p.moves;
  *nmoves = p.nmoves;
  return 0;
}

/* Candidates by parent, for following a prefix's children. */
typedef struct child_s {
  uint64_t parent;
  uint32_t idx;
} child_t;

static int by_parent(const void *a, const void *b) {
  const child_t *x = a, *y = b;
  return x->parent < y->parent ? -1 : x->parent > y->parent;
}

/* The first position in kids (sorted by parent) whose parent is h. */
static size_t first_child(const child_t *kids, size_t n, uint64_t h) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (kids[mid].parent < h)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int kvp__tier_prefetch(const kvp__tier_params_t *prm, kvp__tier_vol_t *vols, size_t nvols,
                       const kvp__tier_cand_t *cands, size_t ncands, uint64_t hit, uint64_t now_ms,
                       kvp__tier_move_t **moves, size_t *nmoves) {
  plan_t p = {.ord = &kvp__tier_order_lru,
              .prm = prm,
              .vols = vols,
              .nvols = nvols,
              .c = cands,
              .n = ncands,
              .now = now_ms};
  uint64_t *frontier = NULL, *next = NULL, bytes = 0;
  child_t *kids = NULL;
  size_t nf = 1, capf = 0, nn = 0, capn = 0;
  int rc = plan_init(&p), spent = 0;

  size_t nkids = 0;
  if (rc == 0 && (kids = malloc((ncands ? ncands : 1) * sizeof *kids)) == NULL)
    rc = KVP_ENOMEM;
  for (size_t i = 0; rc == 0 && i < ncands; i++)
    if (cands[i].has_parent)
      kids[nkids++] = (child_t){cands[i].parent, (uint32_t)i};
  if (rc == 0)
    qsort(kids, nkids, sizeof *kids, by_parent);
  if (rc == 0 && (rc = KVP_ARRAY_RESERVE(frontier, capf, 1, 16)) == 0)
    frontier[0] = hit;
  for (uint32_t depth = 0; rc == 0 && !spent && depth < prm->prefetch_depth && nf > 0; depth++) {
    nn = 0;
    for (size_t k = 0; k < nf && rc == 0 && !spent; k++) {
      for (size_t j = first_child(kids, nkids, frontier[k]);
           j < nkids && kids[j].parent == frontier[k]; j++) {
        size_t i = kids[j].idx;
        const kvp__tier_cand_t *x = &cands[i];
        int dup = 0;
        for (size_t q = 0; q < nn && !dup; q++)
          dup = next[q] == x->hash;
        if (!dup) {
          if ((rc = KVP_ARRAY_RESERVE(next, capn, nn + 1, 16)) != 0)
            break;
          next[nn++] = x->hash;
        }
        if (vols[x->vol].tier != 4 || x->busy || p.moved[i] || in_g3(&p, x->hash))
          continue;
        long d = bytes + x->bytes <= prm->prefetch_bytes
                     ? pick_dest(&p, 3, x->bytes, prm->high_watermark)
                     : -1;
        if (d < 0) {
          spent = 1; /* the budget or the room is spent: stop here */
          break;
        }
        if ((rc = add_move(&p, i, (uint32_t)d, KVP__TIER_PREFETCH)) != 0)
          break;
        bytes += x->bytes;
      }
    }
    uint64_t *t = frontier;
    frontier = next;
    next = t;
    size_t tc = capf;
    capf = capn;
    capn = tc;
    nf = nn;
  }
  free(frontier);
  free(next);
  free(kids);
  plan_free(&p);
  if (rc != 0) {
    free(p.moves);
    p.moves = NULL;
    p.nmoves = 0;
  }
  *moves = p.moves;
  *nmoves = p.nmoves;
  return rc;
}
