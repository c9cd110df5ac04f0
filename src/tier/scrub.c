/* The tiering engine's scrub (engine_impl.h): every scrub_ms one volume,
 * in turn, gets a pass on a thread of its own, within [tiering]
 * scrub_files_per_s (objects listed or read per second) and
 * scrub_bytes_per_s (bytes read per second):
 *   - the thread lists the volume with the plugin's iterate and, with
 *     scrub_verify, reads every object back through the frame's checks
 *     (a full-checksum scrub), noting the ones that fail;
 *   - the loop then compares the listing with the index: a location the
 *     index places there without an object is dropped and announced
 *     (Removed), unless its block was stored or accessed since the pass
 *     started (a put the listing may have missed; the index keeps
 *     seconds, so since the second before), the engine moved it there
 *     during the pass, or it is a moved block's source; a listing cut at SCRUB_MAX_KEYS drops
 * nothing;
 *   - an object no location names is an orphan: counted when first found;
 *     when the volume's next pass finds it orphaned still (the grace
 *     period: one full turn over the volumes), the next job adopts it if
 *     the index wants it (it knows the block and has no G3/G4 copy of it)
 *     and its frame reads back valid, else deletes it; either is a
 *     migrations row (adopted, orphan_deleted);
 *   - a copy whose frame failed is quarantined by the next job through the
 *     path a move's failed verification takes (engine_job.c): deleted, its
 *     location dropped and announced, a migrations row, once.
 * Each pass is a row of the scrubs table (running, then done, failed or
 * stopped, with its figures); the engine's stats carry the same figures
 * and the running pass's progress.
 *
 * Partitioned, with the namespace's lease, a pass also deletes what its
 * listing finds under the key namespace <ns> itself (legacy.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

/* What the pass's thread returns when it was stopped (or its listing cut
 * at SCRUB_MAX_KEYS: keys_truncated). */
#define STOPPED KVP_ECLOSED

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int kvp__tier_located(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v, int part) {
  size_t n = 0;
  if (kvp__tier_get_block(e, hash, NULL, &n) != 0)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (e->locs[i].tier == v->tier && e->locs[i].volume == v->id &&
        (part < 0 || kvp__tier_part_of(e, e->locs[i].worker) == part))
      return 1;
  return 0;
}

/* Whether the index wants hash adopted by part: it knows the block, a
 * worker of part holds it, and no G3 or G4 copy of it is part's (one copy
 * between G3 and G4, per partition: parts.c). */
static int wanted(kvp__tier_engine_t *e, uint64_t hash, int part) {
  size_t n = 0;
  int held = e->partitions == 0;
  if (kvp__tier_get_block(e, hash, NULL, &n) != 0)
    return 0;
  for (size_t i = 0; i < n; i++) {
    if (kvp__tier_part_of(e, e->locs[i].worker) != part)
      continue;
    held = 1;
    if (e->locs[i].tier == 3 || e->locs[i].tier == 4)
      return 0;
  }
  return held;
}

/* --- the pass's thread ----------------------------------------------------------- */

/* Sleeps until files objects and bytes bytes since t0 are within the
 * limits, in slices that notice a stop. Returns 1 when stopped. */
int kvp__tier_scrub_pace(kvp__tier_engine_t *e, uint64_t t0, uint64_t files, uint64_t bytes) {
  for (;;) {
    if (__atomic_load_n(&e->scrub_stop, __ATOMIC_RELAXED))
      return 1;
    double due = 0;
    if (e->scrub_files_per_s > 0)
      due = (double)files * 1000.0 / (double)e->scrub_files_per_s;
    if (e->scrub_bytes_per_s > 0 && (double)bytes * 1000.0 / (double)e->scrub_bytes_per_s > due)
      due = (double)bytes * 1000.0 / (double)e->scrub_bytes_per_s;
    uint64_t now = kvp__unix_ms(), at = t0 + (uint64_t)due;
    if (now >= at)
      return 0;
    uint64_t ms = at - now;
    usleep((useconds_t)(ms < 50 ? ms : 50) * 1000);
  }
}

typedef struct pass_s {
  kvp__tier_engine_t *e;
  uint64_t t0, files, bytes; /* what pace counts */
} pass_t;

static int on_key(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  pass_t *p = ctx;
  kvp__tier_engine_t *e = p->e;
  if (e->legacy && strcmp(ns, e->ns) == 0) {
    kvp__tier_legacy_keep(e, hash, bytes);
    return kvp__tier_scrub_pace(e, p->t0, ++p->files, p->bytes) ? STOPPED : 0;
  }
  /* Only the key namespace of the pass's part: the objects of partitions
   * this engine does not tier are other advisors' (parts.c). */
  if (strcmp(ns, kvp__tier_ns(e, e->scrub_part)) != 0)
    return 0;
  if (e->nkeys >= e->scrub_max_keys ||
      KVP_ARRAY_RESERVE(e->keys, e->keys_cap, e->nkeys + 1, 1024) != 0) {
    e->keys_truncated = 1;
    /* STOPPED, which the pass thread tells from a stop by scrub_stop: the
     * plugin returns what this returns. (It returned 1: the pass of a
     * volume of more than SCRUB_MAX_KEYS objects failed, every time.) */
    if (!e->legacy)
      return STOPPED;
    /* A pass that sweeps <ns> (legacy.c) lists the volume whole: on,
     * keeping no more of its part's keys. */
    return kvp__tier_scrub_pace(e, p->t0, ++p->files, p->bytes) ? STOPPED : 0;
  }
  e->keys[e->nkeys++] = hash;
  __atomic_add_fetch(&e->scrub_listed, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&e->scrub_lbytes, bytes, __ATOMIC_RELAXED);
  return kvp__tier_scrub_pace(e, p->t0, ++p->files, p->bytes) ? STOPPED : 0;
}

/* Reads every listed object back (scrub_verify): the frame's checks are
 * the plugin-independent ones of kvp_volume_get_block. */
static int verify(kvp__tier_engine_t *e, vol_t *v, pass_t *p) {
  void *buf = NULL;
  size_t cap = 0;
  int rc = 0;
  char err[256];

  for (size_t i = 0; i < e->nkeys && rc == 0; i++) {
    kvp_frame_t m;
    int r = kvp_volume_get_block(v->v, kvp__tier_ns(e, e->scrub_part), e->keys[i], &m, buf, cap,
                                 err, sizeof err);
    if (r == KVP_ETOOBIG) {
      void *nb = realloc(buf, (size_t)m.payload_len);
      if (nb == NULL) {
        rc = KVP_ENOMEM;
        break;
      }
      buf = nb;
      cap = (size_t)m.payload_len;
      r = kvp_volume_get_block(v->v, kvp__tier_ns(e, e->scrub_part), e->keys[i], &m, buf, cap, err,
                               sizeof err);
    }
    uint64_t got = r == 0 ? m.payload_len + KVP_FRAME_HEADER : 0;
    if (r == KVP_ECORRUPT) {
      if (e->nbad == 0)
        snprintf(e->bad_err, sizeof e->bad_err, "%s", err);
      if (KVP_ARRAY_RESERVE(e->bad, e->bad_cap, e->nbad + 1, 64) == 0)
        e->bad[e->nbad++] = e->keys[i];
    } else if (r == KVP_EOFFLINE) {
      snprintf(e->scrub_err, sizeof e->scrub_err, "%s", err);
      rc = r;
      break;
    }
    /* Other errors (gone meanwhile, a read that failed) are not a
     * finding: the next pass reads the object again. */
    __atomic_add_fetch(&e->scrub_verified, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->scrub_vbytes, got, __ATOMIC_RELAXED);
    p->bytes += got;
    if (kvp__tier_scrub_pace(e, p->t0, ++p->files, p->bytes))
      rc = STOPPED;
  }
  free(buf);
  return rc;
}

static void pass_thread(void *arg) {
  kvp__tier_engine_t *e = arg;
  vol_t *v = &e->vols[e->scrub_vol];
  pass_t p = {.e = e, .t0 = kvp__unix_ms()};

  int rc = kvp_volume_iterate(v->v, on_key, &p, e->scrub_err, sizeof e->scrub_err);
  e->legacy_whole = rc == 0;
  if (rc == STOPPED && !__atomic_load_n(&e->scrub_stop, __ATOMIC_RELAXED))
    rc = 0; /* the listing was cut at SCRUB_MAX_KEYS (keys_truncated) */
  if (rc == 0 && e->nlegacy > 0)
    rc = kvp__tier_legacy_delete(e, v, p.t0, &p.files, p.bytes);
  if (rc == 0 && e->nkeys > 0)
    qsort(e->keys, e->nkeys, sizeof *e->keys, cmp_u64);
  if (rc == 0 && e->scrub_verify)
    rc = verify(e, v, &p);
  e->scrub_rc = rc;
  __atomic_store_n(&e->scrub_done, 1, __ATOMIC_RELEASE);
  if (e->async_ready)
    uv_async_send(&e->async);
}

/* --- the loop's part ------------------------------------------------------------- */

/* The pass's figures; corrupt only once its thread is done. */
static kvp__journal_scrub_t figures(const kvp__tier_engine_t *e) {
  return (kvp__journal_scrub_t){
      .objects = __atomic_load_n(&e->scrub_listed, __ATOMIC_RELAXED),
      .bytes = __atomic_load_n(&e->scrub_lbytes, __ATOMIC_RELAXED),
      .verified = __atomic_load_n(&e->scrub_verified, __ATOMIC_RELAXED),
      .verified_bytes = __atomic_load_n(&e->scrub_vbytes, __ATOMIC_RELAXED),
      .missing = e->scrub_missing_pass,
      .orphans = e->scrub_orphans_pass,
      .orphans_confirmed = e->scrub_confirmed_pass,
      .corrupt = __atomic_load_n(&e->scrub_done, __ATOMIC_ACQUIRE) ? e->nbad : 0};
}

/* Starts the pass of the next online volume, for one part's key namespace
 * (each volume once per part, in turn). */
static void start_pass(kvp__tier_engine_t *e, uint64_t now) {
  size_t total = e->nvols * e->nparts;
  for (size_t k = 0; k < total; k++) {
    size_t at = (e->scrub_next + k) % total, v = at / e->nparts;
    if (e->vols[v].offline || e->parts[at % e->nparts].retired)
      continue; /* a retired part's objects are the next owner's (parts.c) */
    e->scrub_vol = (uint32_t)v;
    e->scrub_part = (uint16_t)(at % e->nparts);
    e->scrub_next = (at + 1) % total;
    e->scrub_t0 = now;
    e->nkeys = e->nbad = 0;
    e->keys_truncated = 0;
    e->scrub_err[0] = e->bad_err[0] = '\0';
    e->scrub_listed = e->scrub_lbytes = e->scrub_verified = e->scrub_vbytes = 0;
    e->scrub_missing_pass = e->scrub_orphans_pass = e->scrub_confirmed_pass = 0;
    e->scrub_stop = e->scrub_done = 0;
    kvp__tier_legacy_start(e);
    kvp__map64_free(&e->scrub_touched);
    kvp__map64_init(&e->scrub_touched, 0);
    e->scrub_row = e->sdb ? kvp__journal_scrub_start(e->sdb, e->vols[v].name, e->vols[v].tier,
                                                     e->scrub_verify, now)
                          : -1;
    e->scrub_row_ms = now;
    if (uv_thread_create(&e->scrub_thread, pass_thread, e) != 0) {
      kvp_log_warn("tiering: scrub of %s: no thread", e->vols[v].name);
      kvp__journal_scrub_t f = figures(e);
      if (e->sdb)
        kvp__journal_scrub_set(e->sdb, e->scrub_row, "failed", &f, "no thread", now);
      return;
    }
    e->scrub_running = 1;
    e->st.scrub_running = 1;
    snprintf(e->st.scrub_volume, sizeof e->st.scrub_volume, "%s", e->vols[v].name);
    return;
  }
}

void kvp__tier_scrub_queue(kvp__tier_engine_t *e, uint64_t now) {
  size_t first = e->nops;
  for (size_t i = 0; i + 1 < e->norphq; i += 2) {
    uint64_t hash = e->orphq[i];
    uint32_t v = (uint32_t)(e->orphq[i + 1] & 0xffff);
    uint16_t part = (uint16_t)(e->orphq[i + 1] >> 16);
    if (e->vols[v].offline || e->parts[part].retired ||
        kvp__tier_located(e, hash, &e->vols[v], part))
      continue; /* a location came meanwhile (or the partition left): not an orphan */
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      break;
    e->ops[e->nops++] = (op_t){.kind = OP_ORPHAN,
                               .part = part,
                               .hash = hash,
                               .from = v,
                               .journal_id = -1,
                               .adopt = wanted(e, hash, part)};
  }
  e->norphq = 0;
  for (size_t i = 0; i + 1 < e->nbadq; i += 2) {
    uint32_t v = (uint32_t)(e->badq[i + 1] & 0xffff);
    uint16_t part = (uint16_t)(e->badq[i + 1] >> 16);
    if (e->vols[v].offline || e->parts[part].retired ||
        KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      continue; /* offline: its next pass finds it again */
    op_t *o = &e->ops[e->nops++];
    *o =
        (op_t){.kind = OP_SCRUB_BAD, .part = part, .hash = e->badq[i], .from = v, .journal_id = -1};
    snprintf(o->err, sizeof o->err, "%s", e->bad_err);
  }
  e->nbadq = 0;
  /* A new pass waits for a round without such ops: it would read the
   * copies they delete while they do, and find them again. */
  int queued = e->nops > first;
  if (!queued && e->scrub_ms > 0 && now >= e->scrub_due_ms && e->nvols > 0 && !e->scrub_running) {
    e->scrub_due_ms = now + e->scrub_ms;
    start_pass(e, now);
  } else if (e->scrub_running && e->sdb && now - e->scrub_row_ms >= 5000) {
    kvp__journal_scrub_t f = figures(e); /* the running pass's progress */
    kvp__journal_scrub_set(e->sdb, e->scrub_row, "running", &f, NULL, now);
    e->scrub_row_ms = now;
  }
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
    /* The index keeps last access in whole seconds: a block stored in
     * the second the pass started counts as stored since. A block the
     * engine moved into v during the pass is spared by name. */
    if ((e->nkeys > 0 && bsearch(&h, e->keys, e->nkeys, sizeof *e->keys, cmp_u64) != NULL) ||
        kvp__tier_get_block(e, h, &b, &nl) != 0 || b.last_access_ms + 1000 > e->scrub_t0 ||
        kvp__map64_find(&e->scrub_touched, h) != NULL)
      continue;
    const uint64_t *mask = kvp__map64_find(&e->pendset, h);
    if (mask != NULL && (*mask >> (v - e->vols) & 1))
      continue;
    if (!kvp__tier_located(e, h, v, e->scrub_part))
      continue; /* not there, or another part's location (its own pass looks) */
    op_t o = {
        .hash = h, .part = e->scrub_part, .parent = b.parent, .has_parent = b.parent != b.hash};
    kvp__tier_drop_locations(e, h, v, e->scrub_part);
    kvp__tier_publish(e, KVP_EV_REMOVED, v, &o);
    e->st.scrub_missing++;
    e->scrub_missing_pass++;
    v->st.missing++;
    kvp__tier_vol_warn(v, kvp__unix_ms(),
                       "tiering: scrub: block %016" PRIx64 " is not in %s: its location there "
                       "is dropped",
                       h, v->name);
  }
}

/* Orphans: counted when first found, queued for the next job when found
 * again by the next pass of the same volume and part. v->orphans maps
 * each hash to the bit mask of the parts whose last pass found it (a
 * volume's passes alternate between the parts, parts.c). */
static void find_orphans(kvp__tier_engine_t *e, vol_t *v) {
  uint64_t bit = 1ull << (e->scrub_part & 63), h, m;
  kvp__map64_t now_orphans;
  size_t it = 0;
  kvp__map64_init(&now_orphans, 0);
  /* The other parts' findings stay for their own next passes. */
  while (kvp__map64_next(&v->orphans, &it, &h, &m))
    if ((m & ~bit) != 0 && kvp__map64_put(&now_orphans, h, m & ~bit) != 0)
      break;
  for (size_t i = 0; i < e->nkeys; i++) {
    h = e->keys[i];
    if (kvp__tier_located(e, h, v, e->scrub_part) ||
        (e->nbad > 0 && bsearch(&h, e->bad, e->nbad, sizeof *e->bad, cmp_u64)))
      continue;
    const uint64_t *was = kvp__map64_find(&v->orphans, h);
    if (was != NULL && (*was & bit)) {
      if (KVP_ARRAY_RESERVE(e->orphq, e->orphq_cap, e->norphq + 2, 64) == 0) {
        e->orphq[e->norphq++] = h;
        e->orphq[e->norphq++] = (uint64_t)(v - e->vols) | (uint64_t)e->scrub_part << 16;
        e->scrub_confirmed_pass++;
      }
      continue;
    }
    e->st.scrub_orphans++;
    e->scrub_orphans_pass++;
    uint64_t *now = kvp__map64_find(&now_orphans, h);
    if (now != NULL)
      *now |= bit;
    else if (kvp__map64_put(&now_orphans, h, bit) != 0)
      break;
  }
  kvp__map64_free(&v->orphans);
  v->orphans = now_orphans;
}

void kvp__tier_scrub_touched(kvp__tier_engine_t *e, uint64_t hash, uint32_t v) {
  if (e->scrub_running && v == e->scrub_vol)
    kvp__map64_put(&e->scrub_touched, hash, 1); /* no memory: the seconds rule still holds */
}

void kvp__tier_scrub_finish(kvp__tier_engine_t *e) {
  vol_t *v = &e->vols[e->scrub_vol];
  uint64_t now = kvp__unix_ms();

  uv_thread_join(&e->scrub_thread);
  e->scrub_running = 0;
  e->st.scrub_running = 0;
  e->st.scrub_verified += e->scrub_verified;
  e->st.scrub_verified_bytes += e->scrub_vbytes;
  e->st.scrub_objects += e->nkeys;
  e->st.scrub_ms += now - e->scrub_t0;
  kvp__tier_legacy_done(e, v, e->scrub_rc == 0 && e->legacy_whole);
  if (e->scrub_rc != 0) {
    if (e->scrub_rc == KVP_EOFFLINE && !v->offline) {
      kvp_log_warn("tiering: volume %s is offline (scrub): %s", v->name, e->scrub_err);
      v->offline = 1;
      v->st.offline = 1;
    } else if (e->scrub_rc != STOPPED) {
      kvp__tier_vol_warn(v, now, "tiering: scrub of %s failed: %s", v->name, e->scrub_err);
    }
  } else {
    e->st.scrubs++;
    if (e->nbad > 0) /* qsort's base may not be NULL, even for no element */
      qsort(e->bad, e->nbad, sizeof *e->bad, cmp_u64);
    if (!e->keys_truncated)
      drop_missing(e, v);
    find_orphans(e, v);
    for (size_t i = 0; i < e->nbad; i++)
      if (KVP_ARRAY_RESERVE(e->badq, e->badq_cap, e->nbadq + 2, 64) == 0) {
        e->badq[e->nbadq++] = e->bad[i];
        e->badq[e->nbadq++] = e->scrub_vol | (uint64_t)e->scrub_part << 16;
      }
    e->st.scrub_corrupt += e->nbad;
  }
  kvp__journal_scrub_t f = figures(e);
  if (e->sdb)
    kvp__journal_scrub_set(e->sdb, e->scrub_row,
                           e->scrub_rc == 0         ? "done"
                           : e->scrub_rc == STOPPED ? "stopped"
                                                    : "failed",
                           &f, e->scrub_rc == 0 ? NULL : e->scrub_err, now);
  if (e->keys_cap > 4096) { /* a large listing's memory goes back */
    free(e->keys);
    e->keys = NULL;
    e->keys_cap = 0;
  }
  e->nkeys = 0;
  kvp__map64_free(&e->scrub_touched);
}

void kvp__tier_scrub_stop(kvp__tier_engine_t *e) {
  if (!e->scrub_running)
    return;
  __atomic_store_n(&e->scrub_stop, 1, __ATOMIC_RELAXED);
  uv_thread_join(&e->scrub_thread);
  e->scrub_running = 0;
  e->st.scrub_running = 0;
  kvp__tier_legacy_done(e, &e->vols[e->scrub_vol], 0);
  kvp__journal_scrub_t f = figures(e);
  if (e->sdb)
    kvp__journal_scrub_set(e->sdb, e->scrub_row, "stopped", &f, "the engine stopped",
                           kvp__unix_ms());
  e->nkeys = 0;
  kvp__map64_free(&e->scrub_touched);
}

void kvp__tier_scrub_applied(kvp__tier_engine_t *e, op_t *o) {
  vol_t *v = &e->vols[o->from];
  uint64_t now = kvp__unix_ms();
  kvp__index_block_t b;
  size_t n = 0;

  if (o->adopted) {
    /* Still wanted and still not placed here (the job ran meanwhile). */
    if (!wanted(e, o->hash, o->part) || kvp__tier_get_block(e, o->hash, &b, &n) != 0)
      return;
    kvp__index_store(e->ix, o->hash, b.parent != b.hash, b.parent, e->parts[o->part].worker_id,
                     v->tier, v->id, b.tokens, b.bytes, b.last_access_ms);
    o->tokens = b.tokens;
    o->parent = b.parent;
    o->has_parent = b.parent != b.hash;
    kvp__tier_publish(e, KVP_EV_STORED, v, o);
    e->st.orphans_adopted++;
    kvp_log_info("tiering: scrub: orphan %016" PRIx64 " in %s adopted (valid frame, wanted)",
                 o->hash, v->name);
  } else if (o->rc == 0) {
    e->st.orphans_deleted++;
  } else if (o->rc != KVP_ENOENT) {
    kvp__tier_vol_warn(v, now, "tiering: scrub: orphan %016" PRIx64 " in %s: %s", o->hash, v->name,
                       o->err);
  }
}
