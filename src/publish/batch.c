/* Batch window: merging, coalescing and encoding (see batch.h). */
#include "publish/batch.h"

#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/wire.h"

#define GROW(ptr, cap, need)                                                                       \
  do {                                                                                             \
    if ((need) > (cap)) {                                                                          \
      size_t nc_ = (cap) ? (cap) : 64;                                                             \
      while (nc_ < (need))                                                                         \
        nc_ *= 2;                                                                                  \
      void *np_ = realloc((ptr), nc_ * sizeof *(ptr));                                             \
      if (np_ == NULL)                                                                             \
        return KVP_ENOMEM;                                                                         \
      (ptr) = np_;                                                                                 \
      (cap) = nc_;                                                                                 \
    }                                                                                              \
  } while (0)

int kvp__batch_init(kvp__batch_t *b, int coalesce) {
  memset(b, 0, sizeof *b);
  b->coalesce = coalesce;
  return kvp__map64_init(&b->stored, 512); /* the 1024 slots the index started with */
}

void kvp__batch_destroy(kvp__batch_t *b) {
  free(b->ev);
  free(b->h);
  free(b->dead);
  free(b->x32);
  kvp__map64_free(&b->stored);
  free(b->out);
  free(b->buf);
  memset(b, 0, sizeof *b);
}

void kvp__batch_reset(kvp__batch_t *b) {
  b->nev = b->nh = b->nx = 0;
  b->blocks = 0;
  b->est_bytes = 0;
  b->oldest_ns = 0;
  kvp__map64_clear(&b->stored);
}

/* The coalescing index's key of (hash, tier). Two pairs may share one (a
 * hash 2^61 apart): a lookup checks the hash it finds, so the worst a
 * collision does is miss a coalescing. */
static uint64_t stored_key(uint64_t hash, int tier) {
  return hash ^ ((uint64_t)tier << 61);
}

static kvp__bev_t *find_event(kvp__batch_t *b, size_t hpos) {
  size_t lo = 0, hi = b->nev;
  while (lo < hi) { /* events are in h[] order */
    size_t mid = (lo + hi) / 2;
    if (b->ev[mid].hoff + b->ev[mid].n <= hpos)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < b->nev ? &b->ev[lo] : NULL;
}

static uint32_t unpack32(const uint64_t *w, size_t i) {
  return (uint32_t)(w[i / 2] >> ((i & 1) * 32));
}

static int push_hashes(kvp__batch_t *b, const uint64_t *src, size_t n) {
  if (n == 0)
    return 0;
  size_t oldcap = b->hcap;
  GROW(b->h, b->hcap, b->nh + n);
  if (b->hcap != oldcap || b->dead == NULL) {
    uint8_t *nd = realloc(b->dead, b->hcap);
    if (nd == NULL)
      return KVP_ENOMEM;
    b->dead = nd;
  }
  memcpy(b->h + b->nh, src, n * sizeof *src);
  memset(b->dead + b->nh, 0, n);
  b->nh += n;
  return 0;
}

static int add_removed(kvp__batch_t *b, const kvp__pubq_item_t *it, const uint64_t *hs, size_t n) {
  kvp__bev_t *e = NULL;
  int rc;
  for (size_t i = 0; i < n; i++) {
    if (b->coalesce) {
      uint64_t p;
      if (kvp__map64_get(&b->stored, stored_key(hs[i], it->tier), &p) == 0 && !b->dead[p] &&
          b->h[p] == hs[i]) {
        kvp__bev_t *se = find_event(b, p);
        if (se != NULL && se->type == KVP_EV_STORED && se->tier == it->tier &&
            strcmp(se->volume, it->volume) == 0) {
          b->dead[p] = 1;
          se->ndead++;
          b->blocks--;
          continue;
        }
      }
    }
    if (e == NULL) {
      GROW(b->ev, b->evcap, b->nev + 1);
      e = &b->ev[b->nev++];
      memset(e, 0, sizeof *e);
      e->type = KVP_EV_REMOVED;
      e->tier = it->tier;
      memcpy(e->volume, it->volume, sizeof e->volume);
      e->hoff = b->nh;
      b->est_bytes += 16 + strlen(e->volume);
    }
    if ((rc = push_hashes(b, &hs[i], 1)) != 0)
      return rc;
    e->n++;
    b->blocks++;
    b->est_bytes += 8;
  }
  return 0;
}

int kvp__batch_add(kvp__batch_t *b, const kvp__pubq_item_t *it, size_t from, size_t count) {
  const uint64_t *hs = it->words + from;
  kvp__bev_t *e;
  int rc;

  if (it->type == KVP_EV_REMOVED)
    return add_removed(b, it, hs, count);
  if (it->type == KVP_EV_CLEARED || it->type == KVP_EV_SNAPSHOT) {
    /* No coalescing across a clear or a snapshot: a removal after either
     * must reach the consumer, which no longer knows the earlier store. */
    kvp__map64_clear(&b->stored);
  }
  int has_parent = it->has_parent;
  uint64_t parent = it->parent_hash;
  if (from > 0 && it->type == KVP_EV_STORED) {
    has_parent = 1;
    parent = it->words[from - 1];
  }
  int tok = it->type == KVP_EV_STORED && it->ntok > 0 && it->block_tokens > 0 &&
            it->ntok == (size_t)it->nhashes * it->block_tokens;
  e = b->nev > 0 ? &b->ev[b->nev - 1] : NULL;
  if (it->type == KVP_EV_STORED && e != NULL && e->type == KVP_EV_STORED && has_parent &&
      e->tier == it->tier && e->lora_id == it->lora_id && e->engine_native == it->engine_native &&
      e->block_tokens == it->block_tokens && e->block_bytes == it->block_bytes &&
      (e->ntok > 0) == tok && e->n > 0 && !b->dead[e->hoff + e->n - 1] &&
      b->h[e->hoff + e->n - 1] == parent && e->hoff + e->n == b->nh && e->toff + e->ntok == b->nx &&
      strcmp(e->volume, it->volume) == 0) {
    /* Same chain: append to the previous Stored event. */
  } else {
    GROW(b->ev, b->evcap, b->nev + 1);
    e = &b->ev[b->nev++];
    memset(e, 0, sizeof *e);
    e->type = it->type;
    e->tier = it->tier;
    memcpy(e->volume, it->volume, sizeof e->volume);
    e->has_parent = has_parent;
    e->parent_hash = parent;
    e->hoff = b->nh;
    e->toff = b->nx;
    e->block_tokens = it->block_tokens;
    e->block_bytes = it->block_bytes;
    e->lora_id = it->lora_id;
    e->engine_native = it->engine_native;
    e->snapshot_id = it->snapshot_id;
    e->chunk = it->chunk;
    e->last = it->last;
    b->est_bytes += 40 + strlen(e->volume);
  }
  size_t h0 = b->nh;
  if ((rc = push_hashes(b, hs, count)) != 0)
    return rc;
  e->n += count;
  b->blocks += count;
  b->est_bytes += 9 * count;
  if (it->type == KVP_EV_STORED && b->coalesce) {
    for (size_t i = 0; i < count; i++)
      if ((rc = kvp__map64_put(&b->stored, stored_key(hs[i], it->tier), h0 + i)) != 0)
        return rc;
  }
  if (tok) {
    size_t nt = count * it->block_tokens, t0 = from * it->block_tokens;
    const uint64_t *tw = it->words + it->nhashes;
    GROW(b->x32, b->xcap, b->nx + nt);
    for (size_t i = 0; i < nt; i++)
      b->x32[b->nx + i] = unpack32(tw, t0 + i);
    b->nx += nt;
    e->ntok += nt;
    b->est_bytes += 5 * nt;
  } else if (it->type == KVP_EV_ACCESSED && it->has_hits) {
    const uint64_t *xw = it->words + it->nhashes;
    GROW(b->x32, b->xcap, b->nx + count);
    e->xoff = b->nx;
    e->has_x = 1;
    for (size_t i = 0; i < count; i++)
      b->x32[b->nx + i] = unpack32(xw, from + i);
    b->nx += count;
    b->est_bytes += 5 * count;
  } else if (it->type == KVP_EV_SNAPSHOT && it->has_parents) {
    e->xoff = b->nh;
    e->has_x = 1;
    if ((rc = push_hashes(b, it->words + it->nhashes + from, count)) != 0)
      return rc;
    b->est_bytes += 9 * count;
  }
  return 0;
}

/* Live runs of a stored event: each run becomes one wire event. */
static size_t runs_of(const kvp__batch_t *b, const kvp__bev_t *e) {
  if ((e->type == KVP_EV_STORED || e->type == KVP_EV_REMOVED || e->type == KVP_EV_ACCESSED) &&
      e->n == 0)
    return 0;
  if (e->type != KVP_EV_STORED || e->ndead == 0)
    return 1;
  size_t r = 0;
  for (size_t i = 0; i < e->n; i++)
    if (!b->dead[e->hoff + i] && (i == 0 || b->dead[e->hoff + i - 1]))
      r++;
  return r;
}

size_t kvp__batch_nevents(const kvp__batch_t *b) {
  size_t n = 0;
  for (size_t i = 0; i < b->nev; i++)
    n += runs_of(b, &b->ev[i]);
  return n;
}

static void to_wire(const kvp__batch_t *b, const kvp__bev_t *e, kvp_event_t *o, size_t i,
                    size_t n) {
  memset(o, 0, sizeof *o);
  o->type = e->type;
  o->tier = e->tier;
  o->volume = e->volume;
  o->has_parent = e->has_parent;
  o->parent_hash = e->parent_hash;
  if (i > 0) {
    o->has_parent = 1;
    o->parent_hash = b->h[e->hoff + i - 1];
  }
  o->hashes = b->h + e->hoff + i;
  o->nhashes = n;
  o->block_tokens = e->block_tokens;
  o->block_bytes = e->block_bytes;
  o->lora_id = e->lora_id;
  o->engine_native = e->engine_native;
  o->snapshot_id = e->snapshot_id;
  o->chunk = e->chunk;
  o->last = e->last;
  if (e->ntok > 0 && e->block_tokens > 0) {
    o->token_ids = b->x32 + e->toff + i * e->block_tokens;
    o->ntoken_ids = n * e->block_tokens;
  }
  if (e->has_x && e->type == KVP_EV_ACCESSED)
    o->hit_counts = b->x32 + e->xoff + i;
  if (e->has_x && e->type == KVP_EV_SNAPSHOT)
    o->parent_hashes = b->h + e->xoff + i;
}

int kvp__batch_encode(kvp__batch_t *b, kvp_batch_t *hdr, const uint8_t **buf, size_t *len) {
  size_t n = kvp__batch_nevents(b), k = 0;
  if (n > b->outcap) {
    kvp_event_t *no = realloc(b->out, n * sizeof *no);
    if (no == NULL)
      return KVP_ENOMEM;
    b->out = no;
    b->outcap = n;
  }
  for (size_t i = 0; i < b->nev; i++) {
    const kvp__bev_t *e = &b->ev[i];
    if (e->type != KVP_EV_STORED || e->ndead == 0) {
      if (e->type == KVP_EV_STORED || e->type == KVP_EV_REMOVED || e->type == KVP_EV_ACCESSED)
        if (e->n == 0)
          continue;
      to_wire(b, e, &b->out[k++], 0, e->n);
      continue;
    }
    for (size_t j = 0; j < e->n;) {
      if (b->dead[e->hoff + j]) {
        j++;
        continue;
      }
      size_t s = j;
      while (j < e->n && !b->dead[e->hoff + j])
        j++;
      to_wire(b, e, &b->out[k++], s, j - s);
    }
  }
  for (size_t i = 0; i < k; i++)
    b->out[i].event_id = hdr->first_event_id + i;
  hdr->events = b->out;
  hdr->nevents = k;
  size_t need = kvp_wire_encoded_size(hdr);
  if (need == 0)
    return KVP_EINVAL;
  if (need > b->bufcap) {
    uint8_t *nb = realloc(b->buf, need);
    if (nb == NULL)
      return KVP_ENOMEM;
    b->buf = nb;
    b->bufcap = need;
  }
  *buf = b->buf;
  return kvp_wire_encode(hdr, b->buf, b->bufcap, len);
}
