/* Advisor ingest; see ingest.h.
 *
 * Why this file is long: it is one state machine per (worker, dp rank):
 * duplicate and gap detection, epochs, snapshot staging and resync
 * requests all read and write the private wstate_t, and the accessors at
 * the end (worker rows for the store, worker state for the stats) are its
 * read side; splitting them off would publish wstate_t to a second file. */
#include "advisor/ingest.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

typedef struct staging_s {
  int active;
  uint64_t snapshot_id;
  uint32_t next_chunk;
  size_t n, cap;
  uint64_t *hashes, *parents;
  uint32_t *tokens;
  uint64_t *bytes;
  uint16_t *volumes;
} staging_t;

typedef struct wstate_s {
  int present;
  kvp__adv_worker_state_t st;
  int resync_pending;
  uint64_t resync_sent_ms;
  staging_t snap[KVP_TIER_MAX + 1];
} wstate_t;

struct kvp__adv_ingest_s {
  kvp__index_t *ix;
  kvp__adv_ingest_opts_t opts;
  wstate_t *w; /* by index worker id */
  size_t nw, wcap;
  kvp__adv_ingest_counters_t c;
  uint64_t last_batch_ms; /* timestamp of the last batch applied */
};

#define G12_MASK ((1u << KVP_TIER_G1) | (1u << KVP_TIER_G2))
#define ALL_MASK (G12_MASK | (1u << KVP_TIER_G3) | (1u << KVP_TIER_G4))

static void staging_reset(staging_t *s) {
  s->active = 0;
  s->n = 0;
  s->next_chunk = 0;
}

static void staging_free(staging_t *s) {
  free(s->hashes);
  free(s->parents);
  free(s->tokens);
  free(s->bytes);
  free(s->volumes);
  memset(s, 0, sizeof *s);
}

/* Room for need staged blocks in the five columns. Returns 0 or KVP_ENOMEM
 * (what was staged stays). */
static int staging_reserve(staging_t *s, size_t need) {
  void **const cols[] = {(void **)&s->hashes, (void **)&s->parents, (void **)&s->tokens,
                         (void **)&s->bytes, (void **)&s->volumes};
  const size_t elems[] = {sizeof *s->hashes, sizeof *s->parents, sizeof *s->tokens,
                          sizeof *s->bytes, sizeof *s->volumes};
  return kvp__array_reserve_n(cols, elems, 5, &s->cap, need, 256) == 0 ? 0 : KVP_ENOMEM;
}

int kvp__adv_ingest_create(kvp__index_t *ix, const kvp__adv_ingest_opts_t *opts,
                           kvp__adv_ingest_t **out) {
  kvp__adv_ingest_t *ing = calloc(1, sizeof *ing);
  *out = NULL;
  if (ing == NULL)
    return KVP_ENOMEM;
  ing->ix = ix;
  if (opts)
    ing->opts = *opts;
  if (ing->opts.resync_retry_ms == 0)
    ing->opts.resync_retry_ms = 5000;
  *out = ing;
  return 0;
}

void kvp__adv_ingest_destroy(kvp__adv_ingest_t *ing) {
  if (ing == NULL)
    return;
  for (size_t i = 0; i < ing->nw; i++)
    for (int t = 0; t <= KVP_TIER_MAX; t++)
      staging_free(&ing->w[i].snap[t]);
  free(ing->w);
  free(ing);
}

static wstate_t *wstate(kvp__adv_ingest_t *ing, uint16_t id) {
  if (id >= ing->nw) {
    size_t n = (size_t)id + 1;
    if (KVP_ARRAY_RESERVE(ing->w, ing->wcap, n, 16) != 0)
      return NULL;
    memset(ing->w + ing->nw, 0, (n - ing->nw) * sizeof *ing->w);
    ing->nw = n;
  }
  return &ing->w[id];
}

static void request_resync(kvp__adv_ingest_t *ing, wstate_t *ws, const char *reason,
                           uint64_t now_ms) {
  uint32_t dp = 0;
  const char *name = kvp__index_worker_name(ing->ix, ws->st.id, &dp);
  ws->resync_pending = 1;
  ws->resync_sent_ms = now_ms;
  ing->c.resyncs++;
  kvp_log_info("advisor: worker %s dp %" PRIu32 " epoch %" PRIu64 ": resync requested (%s)", name,
               dp, ws->st.epoch, reason);
  if (ing->opts.resync)
    ing->opts.resync(ing->opts.resync_ctx, name, dp, ws->st.epoch, reason);
}

static void apply_stored(kvp__adv_ingest_t *ing, uint16_t w, const kvp_event_t *ev,
                         uint64_t now_ms) {
  uint16_t vol;
  int rc = kvp__index_volume(ing->ix, ev->volume, &vol);
  for (size_t i = 0; rc == 0 && i < ev->nhashes; i++) {
    int hp = i > 0 || ev->has_parent;
    uint64_t parent = i > 0 ? ev->hashes[i - 1] : ev->parent_hash;
    rc = kvp__index_store(ing->ix, ev->hashes[i], hp, parent, w, ev->tier, vol, ev->block_tokens,
                          ev->block_bytes, now_ms);
  }
  if (rc != 0)
    ing->c.bad_events++;
}

/* The copy of hash in tier's volume vol is gone, whoever held it: a G3
 * source the tiering advisor deleted after its move (it announces the
 * removal as its own worker; the location is the worker's whose G3 it
 * was). Returns the locations removed. */
static size_t remove_from_volume(kvp__adv_ingest_t *ing, uint64_t hash, int tier, uint16_t vol) {
  kvp__index_loc_t locs[32];
  size_t n = 0, gone = 0;
  if (kvp__index_get(ing->ix, hash, NULL, locs, 32, &n) != 0)
    return 0;
  for (size_t i = n < 32 ? n : 32; i-- > 0;)
    if (locs[i].tier == tier && locs[i].volume == vol &&
        kvp__index_remove(ing->ix, hash, locs[i].worker, tier, vol) == 0)
      gone++;
  return gone;
}

static void apply_removed(kvp__adv_ingest_t *ing, uint16_t w, const kvp_event_t *ev) {
  uint16_t vol = KVP__INDEX_NO_VOLUME;
  if (ev->volume && ev->volume[0] && kvp__index_volume(ing->ix, ev->volume, &vol) != 0) {
    ing->c.bad_events++;
    return;
  }
  /* A tiering advisor removes the sources of its moves as itself: on
   * every other advisor of the partition (a standby, the next owner) the
   * location held by the volume's worker goes too, as on the mover, whose
   * engine dropped it directly (tier/locations.c). */
  int mover = vol != KVP__INDEX_NO_VOLUME &&
              kvp_worker_is_advisor(kvp__index_worker_name(ing->ix, w, NULL));
  for (size_t i = 0; i < ev->nhashes; i++)
    if (kvp__index_remove(ing->ix, ev->hashes[i], w, ev->tier, vol) != 0 &&
        (!mover || remove_from_volume(ing, ev->hashes[i], ev->tier, vol) == 0))
      ing->c.unknown_removes++;
}

static void apply_accessed(kvp__adv_ingest_t *ing, const kvp_event_t *ev, uint64_t now_ms) {
  for (size_t i = 0; i < ev->nhashes; i++) {
    uint32_t hits = ev->hit_counts ? ev->hit_counts[i] : 1;
    kvp__index_access(ing->ix, ev->hashes[i], ev->tier, hits, now_ms);
  }
  if (ing->opts.accessed != NULL && ev->nhashes > 0)
    ing->opts.accessed(ing->opts.accessed_ctx, ev->tier, ev->hashes, ev->nhashes);
}

/* A (hash, volume) of a snapshot's commit, and where it is staged. */
typedef struct snap_key_s {
  uint64_t hash;
  uint32_t i;
  uint16_t volume;
} snap_key_t;

static int cmp_key(const void *a, const void *b) {
  const snap_key_t *x = a, *y = b;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return x->volume < y->volume ? -1 : x->volume > y->volume;
}

/* The index's side of the merge, in the same order. */
static int cmp_held(const void *a, const void *b) {
  const kvp__index_held_t *x = a, *y = b;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return x->volume < y->volume ? -1 : x->volume > y->volume;
}

static int key_vs_held(const snap_key_t *k, const kvp__index_held_t *h) {
  kvp__index_held_t x = {.hash = k->hash, .volume = k->volume};
  return cmp_held(&x, h);
}

static int cmp_staged(const void *a, const void *b) {
  const snap_key_t *x = a, *y = b;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* Replaces the worker's set of one tier with the staged snapshot, as a
 * difference: the locations it holds and the snapshot lacks go, the ones
 * the snapshot adds come, and the ones in both stay as they are (their
 * blocks keep their access times and hit counts, and their rows are not
 * written again). The ones it adds are stored in the snapshot's order, as
 * the events that stored them were: a chain then takes consecutive records
 * (its parents need no side table: index.c, "near"). Falls back to dropping
 * the tier and storing the whole snapshot when the difference finds no
 * memory. */
static void snapshot_commit(kvp__adv_ingest_t *ing, wstate_t *ws, int tier, uint64_t now_ms) {
  staging_t *s = &ws->snap[tier];
  kvp__index_held_t *held = NULL;
  size_t nheld = 0, nw = 0;
  snap_key_t *want = s->n ? malloc(s->n * sizeof *want) : NULL;
  int rc = 0;

  if ((s->n && want == NULL) || kvp__index_held(ing->ix, ws->st.id, tier, &held, &nheld) != 0) {
    kvp__index_drop(ing->ix, ws->st.id, 1u << tier);
    for (size_t i = 0; rc == 0 && i < s->n; i++)
      rc = kvp__index_store(ing->ix, s->hashes[i], s->parents[i] != s->hashes[i], s->parents[i],
                            ws->st.id, tier, s->volumes[i], s->tokens[i], s->bytes[i], now_ms);
    goto done;
  }
  for (size_t i = 0; i < s->n; i++)
    want[nw++] = (snap_key_t){.hash = s->hashes[i], .i = (uint32_t)i, .volume = s->volumes[i]};
  if (nw)
    qsort(want, nw, sizeof *want, cmp_key);
  if (nheld)
    qsort(held, nheld, sizeof *held, cmp_held);
  size_t a = 0, b = 0, nadd = 0;
  while (a < nw || b < nheld) {
    int c = a == nw ? 1 : b == nheld ? -1 : key_vs_held(&want[a], &held[b]);
    if (c > 0) { /* held, not in the snapshot */
      kvp__index_remove(ing->ix, held[b].hash, ws->st.id, tier, held[b].volume);
      b++;
      continue;
    }
    /* In the snapshot, not held: its staged position noted in want[nadd]
     * (nadd <= a; only .i is written, which the merge no longer reads
     * below a). */
    if (c < 0)
      want[nadd++].i = want[a].i;
    if (c == 0)
      b++;
    /* The same location twice in the snapshot: once. */
    for (a++; a < nw && cmp_key(&want[a - 1], &want[a]) == 0;)
      a++;
  }
  if (nadd > 1)
    qsort(want, nadd, sizeof *want, cmp_staged);
  for (size_t k = 0; rc == 0 && k < nadd; k++) {
    size_t i = want[k].i;
    rc = kvp__index_store(ing->ix, s->hashes[i], s->parents[i] != s->hashes[i], s->parents[i],
                          ws->st.id, tier, s->volumes[i], s->tokens[i], s->bytes[i], now_ms);
  }
done:
  free(want);
  free(held);
  if (rc != 0)
    ing->c.bad_events++;
  ing->c.snapshots++;
  ws->resync_pending = 0;
  staging_reset(s);
}

static void apply_snapshot(kvp__adv_ingest_t *ing, wstate_t *ws, const kvp_event_t *ev,
                           uint64_t now_ms) {
  staging_t *s;
  uint16_t vol;

  if (ev->tier < KVP_TIER_G1 || ev->tier > KVP_TIER_G4 ||
      kvp__index_volume(ing->ix, ev->volume, &vol) != 0) {
    ing->c.bad_events++;
    return;
  }
  s = &ws->snap[ev->tier];
  if (ev->chunk == 0) {
    staging_reset(s);
    s->active = 1;
    s->snapshot_id = ev->snapshot_id;
  } else if (!s->active || s->snapshot_id != ev->snapshot_id || s->next_chunk != ev->chunk) {
    kvp_log_warn("advisor: snapshot %" PRIu64 " chunk %" PRIu32 " out of order; discarded",
                 ev->snapshot_id, ev->chunk);
    staging_reset(s);
    ing->c.bad_events++;
    request_resync(ing, ws, "snapshot", now_ms);
    return;
  }
  if (staging_reserve(s, s->n + ev->nhashes) != 0) {
    staging_reset(s);
    ing->c.bad_events++;
    return;
  }
  for (size_t i = 0; i < ev->nhashes; i++) {
    s->hashes[s->n] = ev->hashes[i];
    s->parents[s->n] = ev->parent_hashes ? ev->parent_hashes[i] : ev->hashes[i];
    s->tokens[s->n] = ev->block_tokens;
    s->bytes[s->n] = ev->block_bytes;
    s->volumes[s->n] = vol;
    s->n++;
  }
  s->next_chunk = ev->chunk + 1;
  if (ev->last)
    snapshot_commit(ing, ws, ev->tier, now_ms);
}

/* Applies one event (or a part of one). Returns 0, or KVP_EPROTO for an
 * event type this advisor does not know (counted in bad_events). */
static int apply_part(kvp__adv_ingest_t *ing, wstate_t *ws, const kvp_event_t *ev,
                      uint64_t now_ms) {
  uint16_t w = ws->st.id;
  switch (ev->type) {
  case KVP_EV_STORED:
    apply_stored(ing, w, ev, now_ms);
    break;
  case KVP_EV_REMOVED:
    apply_removed(ing, w, ev);
    break;
  case KVP_EV_ACCESSED:
    apply_accessed(ing, ev, now_ms);
    break;
  case KVP_EV_CLEARED:
    kvp__index_drop(ing->ix, w, ev->tier == KVP_TIER_ALL ? ALL_MASK : 1u << ev->tier);
    break;
  case KVP_EV_SNAPSHOT:
    apply_snapshot(ing, ws, ev, now_ms);
    break;
  default:
    ing->c.bad_events++;
    return KVP_EPROTO;
  }
  return 0;
}

static void apply_event(kvp__adv_ingest_t *ing, wstate_t *ws, const kvp_event_t *ev,
                        uint64_t now_ms) {
  /* Chunks of 32: enough loads in flight, few enough to stay in cache. */
  if (ev->nhashes > 1 && ev->type != KVP_EV_SNAPSHOT) {
    for (size_t off = 0; off < ev->nhashes; off += 32) {
      kvp_event_t part = *ev;
      size_t n = ev->nhashes - off < 32 ? ev->nhashes - off : 32;
      part.hashes = ev->hashes + off;
      part.nhashes = n;
      part.hit_counts = ev->hit_counts ? ev->hit_counts + off : NULL;
      if (off > 0) {
        part.has_parent = 1;
        part.parent_hash = ev->hashes[off - 1];
      }
      kvp__index_prefetch(ing->ix, part.hashes, n);
      if (apply_part(ing, ws, &part, now_ms) != 0)
        return;
    }
  } else if (apply_part(ing, ws, ev, now_ms) != 0) {
    return;
  }
  ing->c.events++;
  ing->c.by_type[ev->type]++; /* a known type: apply_part refused the others */
  ing->c.block_events += ev->nhashes;
}

int kvp__adv_ingest_apply(kvp__adv_ingest_t *ing, const kvp_batch_t *b, uint64_t now_ms) {
  uint16_t id;
  wstate_t *ws;
  int rc;
  const char *need_resync = NULL;

  if (ing->opts.partitions > 0 && strcmp(b->worker_id, KVP_ADVISOR_WORKER) == 0) {
    if (ing->c.unpartitioned++ == 0)
      kvp_log_warn("advisor: worker %s: an unpartitioned tiering advisor's events are ignored by "
                   "a partitioned advisor (its objects are under the namespace's own key "
                   "namespace; docs/SCALE.md)",
                   b->worker_id);
    return 0;
  }
  if ((rc = kvp__index_worker(ing->ix, b->worker_id, b->dp_rank, &id)) != 0)
    return rc;
  if ((ws = wstate(ing, id)) == NULL)
    return KVP_ENOMEM;
  if (!ws->present) {
    ws->present = 1;
    ws->st.id = id;
  }
  if (ws->st.known && b->epoch < ws->st.epoch) {
    ing->c.stale++;
    return 0;
  }
  if (ws->st.known && b->epoch > ws->st.epoch) {
    size_t n = kvp__index_drop(ing->ix, id, G12_MASK);
    kvp_log_info("advisor: worker %s dp %" PRIu32 ": new epoch %" PRIu64 " (was %" PRIu64
                 "), %zu G1/G2 locations dropped",
                 b->worker_id, b->dp_rank, b->epoch, ws->st.epoch, n);
    ing->c.epochs++;
    ws->st.known = 0;
    ws->resync_pending = 0;
    for (int t = 0; t <= KVP_TIER_MAX; t++)
      staging_reset(&ws->snap[t]);
  }
  if (!ws->st.known) {
    ws->st.epoch = b->epoch;
    ws->st.last_event_id = b->first_event_id ? b->first_event_id - 1 : 0;
    ws->st.known = 1;
    if (b->first_event_id > 1)
      need_resync = "unknown";
  } else if (b->first_event_id > ws->st.last_event_id + 1) {
    need_resync = "gap";
  }
  if (b->dropped_events > 0)
    need_resync = "gap";
  if (ws->st.down) {
    ws->st.down = 0;
    ws->st.down_at_ms = 0;
    ws->st.locations_dropped = 0;
    need_resync = "down";
  }
  ws->st.last_seen_ms = now_ms;
  /* This process's tiering engine announced these events after applying
   * them here (index.h, kvp__index_set_source): applied again now, late, a
   * store would bring back a location removed since, and a snapshot (taken
   * before the engine's later moves) would remove those moves. Their ids
   * are followed; nothing is applied and no resync asked of oneself. */
  int own = b->epoch != 0 && kvp__index_source(ing->ix, id) == b->epoch;
  if (own)
    need_resync = NULL;
  if (need_resync) {
    if (strcmp(need_resync, "gap") == 0)
      ing->c.gaps++;
    if (!ws->resync_pending || now_ms - ws->resync_sent_ms >= ing->opts.resync_retry_ms)
      request_resync(ing, ws, need_resync, now_ms);
  }
  ing->c.batches++;
  if (b->nevents == 0) {
    ing->c.heartbeats++;
    /* A heartbeat carries the next id: everything before it was sent. */
    if (b->first_event_id > ws->st.last_event_id + 1)
      ws->st.last_event_id = b->first_event_id - 1;
    return 0;
  }
  for (size_t i = 0; i < b->nevents; i++) {
    const kvp_event_t *ev = &b->events[i];
    uint64_t eid = ev->event_id ? ev->event_id : b->first_event_id + i;
    if (eid <= ws->st.last_event_id) {
      ing->c.duplicates++;
      continue;
    }
    if (own)
      ing->c.own++;
    else
      apply_event(ing, ws, ev, now_ms);
    ws->st.last_event_id = eid;
  }
  return 0;
}

/* Few lines for a flood of bad messages: the first ten, then one in 1000. */
static int worth_logging(uint64_t count) {
  return count <= 10 || count % 1000 == 0;
}

/* Decodes and applies; when sender_worker is set, the batch must name that
 * worker (and sender_ns, when it carries a namespace). */
static int decode_apply(kvp__adv_ingest_t *ing, const char *subject, const char *sender_ns,
                        const char *sender_worker, const uint8_t *buf, size_t len,
                        const kvp_wire_limits_t *lim, uint64_t now_ms) {
  kvp_wire_batch_t *wb = NULL;
  const kvp_batch_t *b;
  int rc;

  ing->c.messages++;
  rc = kvp_wire_decode(buf, len, lim, &wb);
  if (rc != 0) {
    ing->c.malformed++;
    if (rc == KVP_ETOOBIG)
      ing->c.oversized++;
    if (worth_logging(ing->c.malformed))
      kvp_log_warn("advisor: message of %zu bytes on %s skipped: %s (%" PRIu64 " so far)", len,
                   subject ? subject : "-", kvp_strerror(rc), ing->c.malformed);
    return rc;
  }
  b = kvp_wire_batch_view(wb);
  if (sender_worker != NULL && (strcmp(b->worker_id, sender_worker) != 0 ||
                                (b->ns != NULL && b->ns[0] && strcmp(b->ns, sender_ns) != 0))) {
    ing->c.spoofed++;
    if (worth_logging(ing->c.spoofed))
      kvp_log_warn("advisor: batch on %s claims worker '%s' namespace '%s': rejected (%" PRIu64
                   " so far)",
                   subject, b->worker_id, b->ns ? b->ns : "", ing->c.spoofed);
    kvp_wire_batch_free(wb);
    return KVP_EAUTH;
  }
  rc = kvp__adv_ingest_apply(ing, b, now_ms);
  if (rc == KVP_EINVAL)
    ing->c.malformed++;
  if (rc == 0)
    ing->last_batch_ms = b->timestamp_ms;
  kvp_wire_batch_free(wb);
  return rc;
}

int kvp__adv_ingest_message(kvp__adv_ingest_t *ing, const uint8_t *buf, size_t len,
                            const kvp_wire_limits_t *lim, uint64_t now_ms) {
  return decode_apply(ing, NULL, NULL, NULL, buf, len, lim, now_ms);
}

int kvp__adv_ingest_message_on(kvp__adv_ingest_t *ing, const char *subject, const char *ns,
                               const uint8_t *buf, size_t len, const kvp_wire_limits_t *lim,
                               uint64_t now_ms) {
  char sns[KVP_SUBJECT_TOKEN_MAX + 1], worker[KVP_SUBJECT_TOKEN_MAX + 1];
  uint32_t part;

  /* kvplane.ev.<ns>.<worker>, or its partitioned form kvplane.pev.<ns>.<p>.<worker>
   * (the servers' mapping made it; the consumer's filter chose p). */
  if (kvp_subject_parse_any_events(subject, sns, worker, &part) != 0 || strcmp(sns, ns) != 0) {
    ing->c.messages++;
    ing->c.foreign++;
    if (worth_logging(ing->c.foreign))
      kvp_log_warn("advisor: message on %s is outside kvplane.ev.%s.<worker>: skipped (%" PRIu64
                   " so far)",
                   subject ? subject : "(none)", ns, ing->c.foreign);
    return KVP_EPROTO;
  }
  /* The servers' mapping chose part; this advisor's count must choose the
   * same, or its partitions hold other workers than the merge, the drops of
   * a move and the other advisors take them to (rows answered for the
   * wrong partition, then dropped at the next restart as not owned). */
  if (part != UINT32_MAX && ing->opts.partitions > 0 &&
      kvp_partition_of(worker, ing->opts.partitions) != part) {
    ing->c.messages++;
    ing->c.mispartitioned++;
    if (worth_logging(ing->c.mispartitioned))
      kvp_log_error("advisor: message on %s skipped: the servers' mapping put worker %s in "
                    "partition %" PRIu32 ", [partitions] count = %" PRIu32 " puts it in %" PRIu32
                    ": the count disagrees with the servers' mapping (kvplane nats-config %" PRIu32
                    " prints the mapping for this count) (%" PRIu64 " so far)",
                    subject, worker, part, ing->opts.partitions,
                    kvp_partition_of(worker, ing->opts.partitions), ing->opts.partitions,
                    ing->c.mispartitioned);
    return KVP_EPROTO;
  }
  return decode_apply(ing, subject, sns, worker, buf, len, lim, now_ms);
}

void kvp__adv_ingest_tick(kvp__adv_ingest_t *ing, uint64_t now_ms) {
  for (size_t i = 0; i < ing->nw; i++) {
    wstate_t *ws = &ing->w[i];
    if (!ws->present || ws->st.down)
      continue;
    if (ing->opts.heartbeat_timeout_ms && ws->st.last_seen_ms &&
        now_ms > ws->st.last_seen_ms + ing->opts.heartbeat_timeout_ms) {
      uint32_t dp = 0;
      const char *name = kvp__index_worker_name(ing->ix, ws->st.id, &dp);
      size_t n = kvp__index_drop(ing->ix, ws->st.id, G12_MASK);
      ws->st.down = 1;
      ws->st.down_at_ms = now_ms;
      ws->st.locations_dropped = n;
      ws->resync_pending = 0;
      ing->c.downs++;
      kvp_log_warn("advisor: worker %s dp %" PRIu32 " silent for %" PRIu64
                   " ms: marked down, %zu G1/G2 locations dropped",
                   name, dp, now_ms - ws->st.last_seen_ms, n);
      continue;
    }
    if (ws->resync_pending && now_ms - ws->resync_sent_ms >= ing->opts.resync_retry_ms)
      request_resync(ing, ws, "retry", now_ms);
  }
}

const kvp__adv_ingest_counters_t *kvp__adv_ingest_counters(const kvp__adv_ingest_t *ing) {
  return &ing->c;
}

uint64_t kvp__adv_ingest_last_batch_ms(const kvp__adv_ingest_t *ing) {
  return ing->last_batch_ms;
}

size_t kvp__adv_ingest_worker_count(const kvp__adv_ingest_t *ing) {
  return ing->nw;
}

int kvp__adv_ingest_worker_get(const kvp__adv_ingest_t *ing, size_t i,
                               kvp__adv_worker_state_t *st) {
  if (i >= ing->nw || !ing->w[i].present)
    return KVP_ENOENT;
  *st = ing->w[i].st;
  return 0;
}

int kvp__adv_ingest_worker_set(kvp__adv_ingest_t *ing, const kvp__adv_worker_state_t *st) {
  wstate_t *ws = wstate(ing, st->id);
  if (ws == NULL)
    return KVP_ENOMEM;
  ws->present = 1;
  ws->st = *st;
  return 0;
}

int kvp__adv_ingest_worker_rows(const kvp__adv_ingest_t *ing, kvp__store_worker_t **rows,
                                size_t *n) {
  kvp__store_worker_t *r = NULL;
  size_t k = 0;

  *rows = NULL;
  *n = 0;
  if (ing->nw && (r = malloc(ing->nw * sizeof *r)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < ing->nw; i++) {
    const kvp__adv_worker_state_t *st = &ing->w[i].st;
    if (!ing->w[i].present)
      continue;
    r[k].name = kvp__index_worker_name(ing->ix, st->id, &r[k].dp_rank);
    if (r[k].name == NULL)
      continue;
    r[k].epoch = st->epoch;
    r[k].last_event_id = st->last_event_id;
    r[k].last_seen_ms = st->last_seen_ms;
    r[k].known = st->known;
    r[k].down = st->down;
    r[k].down_at_ms = st->down_at_ms;
    r[k].locations_dropped = st->locations_dropped;
    k++;
  }
  *rows = r;
  *n = k;
  return 0;
}

int kvp__adv_ingest_load_worker(void *ctx, const kvp__store_worker_t *w) {
  kvp__adv_ingest_t *ing = ctx;
  kvp__adv_worker_state_t st = {0};
  if (kvp__index_worker(ing->ix, w->name, w->dp_rank, &st.id) != 0)
    return 0;
  st.epoch = w->epoch;
  st.last_event_id = w->last_event_id;
  st.last_seen_ms = w->last_seen_ms;
  st.known = w->known;
  st.down = w->down;
  st.down_at_ms = w->down_at_ms;
  st.locations_dropped = w->locations_dropped;
  return kvp__adv_ingest_worker_set(ing, &st);
}

size_t kvp__adv_ingest_workers_up(const kvp__adv_ingest_t *ing) {
  size_t n = 0;
  for (size_t i = 0; i < ing->nw; i++)
    n += ing->w[i].present && !ing->w[i].st.down;
  return n;
}

size_t kvp__adv_ingest_forget(kvp__adv_ingest_t *ing, int (*keep)(void *ctx, const char *worker),
                              void *ctx, uint8_t *marks, size_t nmarks) {
  size_t n = 0, nix = kvp__index_worker_count(ing->ix);
  /* Every index worker, the ones without ingest state too (the tiering
   * engine's advisor workers, whose locations came from its moves). */
  for (size_t i = 0; i < nix; i++) {
    const char *name = kvp__index_worker_name(ing->ix, (uint16_t)i, NULL);
    if (name == NULL || keep(ctx, name))
      continue;
    if (marks != NULL && i < nmarks)
      marks[i] = 1;
    else
      kvp__index_drop(ing->ix, (uint16_t)i, ALL_MASK);
    wstate_t *w = i < ing->nw ? &ing->w[i] : NULL;
    if (w != NULL && w->present) {
      for (int t = 0; t <= KVP_TIER_MAX; t++)
        staging_free(&w->snap[t]);
      memset(w, 0, sizeof *w);
      n++;
    }
  }
  return n;
}
