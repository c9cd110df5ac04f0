/* Belady's MIN (the offline optimum) over a recorded lower-tier stream, for
 * kvp-bench policy (bench_policy.h). No suite of its own. */
#include <stdlib.h>

#include "bench_policy.h"
#include "common/map64.h"

#define NEVER UINT64_MAX

/* A max-heap of (next reference, hash); entries whose next reference is
 * no longer the block's (re-keyed, or the block left) are skipped when
 * they come to the top. */
typedef struct ent_s {
  uint64_t next, hash;
} ent_t;

typedef struct heap_s {
  ent_t *v;
  size_t n, cap;
} heap_t;

static int push(heap_t *h, ent_t e) {
  if (h->n == h->cap) {
    size_t ncap = h->cap ? 2 * h->cap : 1024;
    ent_t *v = realloc(h->v, ncap * sizeof *v);
    if (v == NULL)
      return -1;
    h->v = v;
    h->cap = ncap;
  }
  size_t k = h->n++;
  while (k > 0 && h->v[(k - 1) / 2].next < e.next) {
    h->v[k] = h->v[(k - 1) / 2];
    k = (k - 1) / 2;
  }
  h->v[k] = e;
  return 0;
}

static ent_t pop(heap_t *h) {
  ent_t top = h->v[0], last = h->v[--h->n];
  size_t k = 0;
  for (;;) {
    size_t l = 2 * k + 1, r = l + 1, m = k;
    uint64_t mv = last.next;
    if (l < h->n && h->v[l].next > mv)
      m = l, mv = h->v[l].next;
    if (r < h->n && h->v[r].next > mv)
      m = r;
    if (m == k)
      break;
    h->v[k] = h->v[m];
    k = m;
  }
  if (h->n > 0)
    h->v[k] = last;
  return top;
}

/* The top entry that is current (the block kept, with that next
 * reference), stale ones dropped. */
static int top(heap_t *h, kvp__map64_t *kept, ent_t *out) {
  while (h->n > 0) {
    uint64_t nx;
    if (kvp__map64_get(kept, h->v[0].hash, &nx) == 0 && nx == h->v[0].next) {
      *out = h->v[0];
      return 1;
    }
    pop(h);
  }
  return 0;
}

int bench_policy_min(const stream_ev_t *ev, size_t n, size_t capacity, min_result_t *out) {
  uint64_t *next = malloc((n ? n : 1) * sizeof *next);
  kvp__map64_t last = {0}, kept = {0}, live = {0};
  heap_t h = {0};
  int rc = -1;

  *out = (min_result_t){0};
  if (next == NULL || kvp__map64_init(&last, 0) != 0 || kvp__map64_init(&kept, capacity) != 0 ||
      kvp__map64_init(&live, 0) != 0)
    goto out;
  /* next[i]: the position of the next reference of ev[i]'s block. */
  for (size_t i = n; i-- > 0;) {
    uint64_t *p = kvp__map64_find(&last, ev[i].hash);
    next[i] = p ? *p : NEVER;
    if (ev[i].kind == STREAM_REF) {
      if (p)
        *p = i;
      else if (kvp__map64_put(&last, ev[i].hash, i) != 0)
        goto out;
    }
  }
  for (size_t i = 0; i < n; i++) {
    /* Live: read again later (every read follows the block's write). */
    if (next[i] == NEVER)
      kvp__map64_del(&live, ev[i].hash, NULL);
    else if (kvp__map64_find(&live, ev[i].hash) == NULL &&
             kvp__map64_put(&live, ev[i].hash, 1) != 0)
      goto out;
    if (kvp__map64_count(&live) > out->live_max)
      out->live_max = kvp__map64_count(&live);
    uint64_t *k = kvp__map64_find(&kept, ev[i].hash);
    int ref = ev[i].kind == STREAM_REF;
    out->refs += ref;
    out->written += !ref;
    if (k != NULL) {
      out->hits += ref;
      *k = next[i];
      if (next[i] != NEVER && push(&h, (ent_t){next[i], ev[i].hash}) != 0)
        goto out;
      if (next[i] == NEVER)
        kvp__map64_del(&kept, ev[i].hash, NULL); /* never read again: it can go */
      continue;
    }
    if (next[i] == NEVER)
      continue; /* not worth keeping */
    ent_t far;
    if (kvp__map64_count(&kept) >= capacity) {
      if (!top(&h, &kept, &far) || far.next <= next[i])
        continue; /* every kept block is read sooner: bypass */
      pop(&h);
      kvp__map64_del(&kept, far.hash, NULL);
      out->demoted++;
    }
    if (kvp__map64_put(&kept, ev[i].hash, next[i]) != 0 ||
        push(&h, (ent_t){next[i], ev[i].hash}) != 0)
      goto out;
    out->promoted += ref;
  }
  rc = 0;
out:
  free(next);
  free(h.v);
  kvp__map64_free(&last);
  kvp__map64_free(&kept);
  kvp__map64_free(&live);
  return rc;
}
