/* Simulated worker for the advisor tests; see testworker.h. */
#include "testworker.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/subjects.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

#define MAXEV 64
#define MAXH 4096

/* A set of hashes with O(1) random pick: map hash -> dense index + 1. */
typedef struct hset_s {
  uint64_t *keys; /* open addressing; 0 = empty (hash 0 is never used) */
  uint32_t *pos;
  size_t cap;
  uint64_t *dense;
  uint64_t *parent;
  size_t n, dcap;
} hset_t;

struct tw_s {
  char ns[64], worker[65], subj[192];
  uint32_t dp_rank;
  uint64_t epoch, next_id, rng, snap_id;
  hset_t tier[5];
  kvp_event_t ev[MAXEV];
  uint64_t hbuf[MAXEV][MAXH / MAXEV];
  uint32_t hits[MAXH / MAXEV];
  uint8_t *out;
  size_t outcap;
};

static const char *const volume_of[5] = {"", "", "", "vol-a", "vol-b"};

static uint64_t rnd(tw_t *w) {
  uint64_t x = w->rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return w->rng = x;
}

static size_t hslot(uint64_t h, size_t cap) {
  return (size_t)((h * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static void hs_grow(hset_t *s) {
  size_t ncap = s->cap ? s->cap * 2 : 1024;
  uint64_t *k = calloc(ncap, sizeof *k);
  uint32_t *p = calloc(ncap, sizeof *p);
  for (size_t i = 0; i < s->cap; i++) {
    if (s->keys[i] == 0)
      continue;
    size_t j = hslot(s->keys[i], ncap);
    while (k[j])
      j = (j + 1) & (ncap - 1);
    k[j] = s->keys[i];
    p[j] = s->pos[i];
  }
  free(s->keys);
  free(s->pos);
  s->keys = k;
  s->pos = p;
  s->cap = ncap;
}

static size_t hs_find(const hset_t *s, uint64_t h) {
  if (s->cap == 0)
    return SIZE_MAX;
  for (size_t j = hslot(h, s->cap);; j = (j + 1) & (s->cap - 1)) {
    if (s->keys[j] == h)
      return j;
    if (s->keys[j] == 0)
      return SIZE_MAX;
  }
}

static int hs_add(hset_t *s, uint64_t h, uint64_t parent) {
  if (hs_find(s, h) != SIZE_MAX)
    return 0;
  if ((s->n + 1) * 2 > s->cap)
    hs_grow(s);
  if (s->n == s->dcap) {
    s->dcap = s->dcap ? s->dcap * 2 : 1024;
    s->dense = realloc(s->dense, s->dcap * sizeof *s->dense);
    s->parent = realloc(s->parent, s->dcap * sizeof *s->parent);
  }
  size_t j = hslot(h, s->cap);
  while (s->keys[j])
    j = (j + 1) & (s->cap - 1);
  s->keys[j] = h;
  s->pos[j] = (uint32_t)s->n;
  s->dense[s->n] = h;
  s->parent[s->n] = parent;
  s->n++;
  return 1;
}

static void hs_del(hset_t *s, uint64_t h) {
  size_t j = hs_find(s, h);
  if (j == SIZE_MAX)
    return;
  uint32_t p = s->pos[j];
  uint64_t last = s->dense[s->n - 1];
  s->dense[p] = last;
  s->parent[p] = s->parent[s->n - 1];
  s->pos[hs_find(s, last)] = p;
  s->n--;
  /* Rebuild the probe chain after removing j (backward shift). */
  size_t i = j;
  for (size_t k = (j + 1) & (s->cap - 1); s->keys[k]; k = (k + 1) & (s->cap - 1)) {
    size_t home = hslot(s->keys[k], s->cap);
    if (((k - home) & (s->cap - 1)) >= ((k - i) & (s->cap - 1))) {
      s->keys[i] = s->keys[k];
      s->pos[i] = s->pos[k];
      i = k;
    }
  }
  s->keys[i] = 0;
}

static void hs_clear(hset_t *s) {
  if (s->cap)
    memset(s->keys, 0, s->cap * sizeof *s->keys);
  s->n = 0;
}

static void hs_free(hset_t *s) {
  free(s->keys);
  free(s->pos);
  free(s->dense);
  free(s->parent);
}

tw_t *tw_create(const char *ns, const char *worker, uint32_t dp_rank, uint64_t epoch,
                uint64_t seed) {
  tw_t *w = calloc(1, sizeof *w);
  if (w == NULL || kvp_subject_events(w->subj, sizeof w->subj, ns, worker) != 0) {
    free(w);
    return NULL;
  }
  snprintf(w->ns, sizeof w->ns, "%s", ns);
  snprintf(w->worker, sizeof w->worker, "%s", worker);
  w->dp_rank = dp_rank;
  w->epoch = epoch;
  w->next_id = 1;
  w->rng = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  w->snap_id = 1;
  return w;
}

void tw_destroy(tw_t *w) {
  if (w == NULL)
    return;
  for (int t = 0; t < 5; t++)
    hs_free(&w->tier[t]);
  free(w->out);
  free(w);
}

const char *tw_name(const tw_t *w) {
  return w->worker;
}

static uint64_t fresh(tw_t *w) {
  uint64_t h;
  do
    h = rnd(w);
  while (h == 0);
  return h;
}

/* A shared block: the same 512 hashes for every worker. */
static uint64_t shared(tw_t *w) {
  uint64_t i = rnd(w) % 512 + 1;
  return i * 0xd6e8feb86659fd93ull;
}

static uint64_t pick(tw_t *w, int tier) {
  hset_t *s = &w->tier[tier];
  return s->dense[rnd(w) % s->n];
}

/* Fills event e (hash storage hb) with one random change. */
static void make_event(tw_t *w, kvp_event_t *e, uint64_t *hb) {
  unsigned r = (unsigned)(rnd(w) % 100);
  memset(e, 0, sizeof *e);
  e->event_id = w->next_id++;
  e->block_tokens = 16;
  if (r < 45 || w->tier[1].n < 8) {
    /* A new chain in G1, sometimes continuing an existing G1 block. */
    size_t n = 1 + rnd(w) % 8;
    e->type = KVP_EV_STORED;
    e->tier = KVP_TIER_G1;
    e->block_bytes = 1 << 20;
    if (w->tier[1].n && rnd(w) % 2) {
      e->has_parent = 1;
      e->parent_hash = pick(w, 1);
    }
    for (size_t i = 0; i < n; i++) {
      uint64_t h = (i == 0 && rnd(w) % 4 == 0) ? shared(w) : fresh(w);
      if (w->tier[1].dense && hs_find(&w->tier[1], h) != SIZE_MAX)
        h = fresh(w);
      hb[i] = h;
      uint64_t parent = i ? hb[i - 1] : (e->has_parent ? e->parent_hash : h);
      hs_add(&w->tier[1], h, parent);
    }
    e->hashes = hb;
    e->nhashes = n;
  } else if (r < 70) {
    /* Offload: a G1 block goes to G2 (stored) and leaves G1 (removed in
     * the next event would need two events; one event per change here). */
    int to = (r < 60) ? KVP_TIER_G2 : KVP_TIER_G3 + (int)(rnd(w) % 2);
    uint64_t h = pick(w, 1);
    e->type = KVP_EV_STORED;
    e->tier = to;
    e->volume = volume_of[to];
    e->block_bytes = 1 << 20;
    hb[0] = h;
    e->hashes = hb;
    e->nhashes = 1;
    size_t j = hs_find(&w->tier[1], h);
    uint64_t parent = w->tier[1].parent[w->tier[1].pos[j]];
    if (parent != h) {
      e->has_parent = 1;
      e->parent_hash = parent;
    }
    hs_add(&w->tier[to], h, parent);
  } else if (r < 92) {
    /* Eviction from a random non-empty tier. */
    int t = 1 + (int)(rnd(w) % 4);
    if (w->tier[t].n == 0)
      t = 1;
    size_t n = 1 + rnd(w) % 3, k = 0;
    for (size_t i = 0; i < n && w->tier[t].n; i++) {
      uint64_t h = pick(w, t);
      hs_del(&w->tier[t], h);
      hb[k++] = h;
    }
    e->type = KVP_EV_REMOVED;
    e->tier = t;
    e->volume = volume_of[t];
    e->hashes = hb;
    e->nhashes = k;
  } else {
    e->type = KVP_EV_ACCESSED;
    e->tier = KVP_TIER_G1;
    hb[0] = pick(w, 1);
    e->hashes = hb;
    e->nhashes = 1;
    e->hit_counts = w->hits;
    w->hits[0] = 1 + (uint32_t)(rnd(w) % 5);
  }
}

static int encode(tw_t *w, const kvp_batch_t *b, const uint8_t **buf, size_t *len) {
  size_t need = kvp_wire_encoded_size(b);
  if (need == 0)
    return KVP_EINVAL;
  if (need > w->outcap) {
    free(w->out);
    w->out = malloc(need);
    w->outcap = need;
  }
  *buf = w->out;
  return kvp_wire_encode(b, w->out, w->outcap, len);
}

int tw_batch(tw_t *w, int nevents, const uint8_t **buf, size_t *len) {
  if (nevents > MAXEV)
    nevents = MAXEV;
  uint64_t first = w->next_id;
  for (int i = 0; i < nevents; i++)
    make_event(w, &w->ev[i], w->hbuf[i]);
  kvp_batch_t b = {.ns = w->ns,
                   .worker_id = w->worker,
                   .dp_rank = w->dp_rank,
                   .epoch = w->epoch,
                   .first_event_id = first,
                   .timestamp_ms = 1,
                   .events = w->ev,
                   .nevents = (size_t)nevents};
  return encode(w, &b, buf, len);
}

int tw_heartbeat(tw_t *w, const uint8_t **buf, size_t *len) {
  kvp_batch_t b = {.ns = w->ns,
                   .worker_id = w->worker,
                   .dp_rank = w->dp_rank,
                   .epoch = w->epoch,
                   .first_event_id = w->next_id};
  return encode(w, &b, buf, len);
}

void tw_restart(tw_t *w, uint64_t epoch) {
  w->epoch = epoch;
  w->next_id = 1;
  hs_clear(&w->tier[1]);
  hs_clear(&w->tier[2]);
}

int tw_publish(tw_t *w, natsConnection *nc, jsCtx *js, const uint8_t *buf, size_t len) {
  if (js) {
    jsPubAck *ack = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(&ack, js, w->subj, buf, (int)len, NULL, &jerr);
    jsPubAck_Destroy(ack);
    return s == NATS_OK ? 0 : -1;
  }
  return natsConnection_Publish(nc, w->subj, buf, (int)len) == NATS_OK ? 0 : -1;
}

int tw_publish_snapshot(tw_t *w, natsConnection *nc, jsCtx *js, size_t chunk_max) {
  uint64_t sid = w->snap_id++;
  for (int t = 1; t <= 4; t++) {
    hset_t *s = &w->tier[t];
    size_t off = 0;
    uint32_t chunk = 0;
    do {
      size_t n = s->n - off < chunk_max ? s->n - off : chunk_max;
      kvp_event_t e = {.event_id = w->next_id,
                       .type = KVP_EV_SNAPSHOT,
                       .tier = t,
                       .volume = volume_of[t],
                       .snapshot_id = sid,
                       .chunk = chunk++,
                       .last = off + n == s->n,
                       .hashes = n ? s->dense + off : NULL,
                       .parent_hashes = n ? s->parent + off : NULL,
                       .nhashes = n,
                       .block_tokens = 16,
                       .block_bytes = 1 << 20};
      kvp_batch_t b = {.ns = w->ns,
                       .worker_id = w->worker,
                       .dp_rank = w->dp_rank,
                       .epoch = w->epoch,
                       .first_event_id = w->next_id++,
                       .events = &e,
                       .nevents = 1};
      const uint8_t *buf;
      size_t len;
      if (encode(w, &b, &buf, &len) != 0 || tw_publish(w, nc, js, buf, len) != 0)
        return -1;
      off += n;
    } while (off < s->n);
  }
  return 0;
}

size_t tw_size(const tw_t *w) {
  size_t n = 0;
  for (int t = 1; t <= 4; t++)
    n += w->tier[t].n;
  return n;
}

int tw_has(const tw_t *w, int tier, uint64_t hash) {
  return hs_find(&w->tier[tier], hash) != SIZE_MAX;
}

size_t tw_hashes(const tw_t *w, int tier, uint64_t *out, size_t cap) {
  size_t n = w->tier[tier].n < cap ? w->tier[tier].n : cap;
  if (n)
    memcpy(out, w->tier[tier].dense, n * sizeof *out);
  return w->tier[tier].n;
}

int tw_check_db(const tw_t *w, sqlite3 *db, char *why, size_t whylen) {
  sqlite3_stmt *s = NULL;
  size_t rows = 0;
  int rc = -1;
  if (sqlite3_prepare_v2(db,
                         "SELECT hash, tier, volume FROM block_locations"
                         " WHERE worker = ?1 AND dp_rank = ?2",
                         -1, &s, NULL) != SQLITE_OK) {
    snprintf(why, whylen, "prepare: %s", sqlite3_errmsg(db));
    return -1;
  }
  sqlite3_bind_text(s, 1, w->worker, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 2, w->dp_rank);
  int r;
  while ((r = sqlite3_step(s)) == SQLITE_ROW) {
    uint64_t h = (uint64_t)sqlite3_column_int64(s, 0);
    int t = sqlite3_column_int(s, 1);
    const char *vol = (const char *)sqlite3_column_text(s, 2);
    if (t < 1 || t > 4 || !tw_has(w, t, h)) {
      snprintf(why, whylen, "%s: DB has %016" PRIx64 " in G%d, the worker does not", w->worker, h,
               t);
      goto done;
    }
    if (strcmp(vol ? vol : "", volume_of[t]) != 0) {
      snprintf(why, whylen, "%s: %016" PRIx64 " in G%d on volume '%s'", w->worker, h, t, vol);
      goto done;
    }
    rows++;
  }
  if (r != SQLITE_DONE) {
    snprintf(why, whylen, "step: %s", sqlite3_errmsg(db));
    goto done;
  }
  if (rows != tw_size(w)) {
    snprintf(why, whylen, "%s: DB has %zu locations, the worker %zu (G1 %zu G2 %zu G3 %zu G4 %zu)",
             w->worker, rows, tw_size(w), w->tier[1].n, w->tier[2].n, w->tier[3].n, w->tier[4].n);
    goto done;
  }
  rc = 0;
done:
  sqlite3_finalize(s);
  return rc;
}
