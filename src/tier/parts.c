/* Partitioned tiering (engine_impl.h; docs/SCALE.md, "Tiering across
 * partitions"): the partitions the engine tiers and the filter from a
 * location to its partition.
 *
 * Several advisors, each owning some partitions, may tier at once over
 * the same G4 volumes, and none manages another's objects:
 *   - an advisor's index holds only the workers of its partitions (its
 *     consumers read only those streams), and the engine moves a location
 *     only when its worker's partition is one it tiers (kvp__tier_part_of;
 *     a G3 volume is a worker's, so its moves are its partition's);
 *   - the objects of partition p's blocks are kept under the key namespace
 *     <ns>-p<p> in every volume (kvp_partition_volume_ns): a block held by
 *     workers of two partitions is two objects, one per partition, each
 *     managed (moved, evicted, scrubbed) by its partition's advisor alone;
 *     a scrub lists one part's namespace at a time, so the objects of
 *     partitions it does not tier are never orphans to it;
 *   - the G4 locations of p's blocks are held and announced by the
 *     partition's advisor worker (kvp_partition_advisor_worker), named so
 *     that its events land in p's stream: p's standby and p's next owner
 *     learn them from the stream like any worker's;
 *   - each advisor counts a G4 volume's fill against its share of the
 *     capacity, capacity * owned / count (the index places only its own
 *     partitions' bytes there).
 * Not partitioned: one part, the engine's namespace, worker _advisor.
 * Loop thread. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/log.h"
#include "common/map64.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

int kvp__tier_parts_publish(const kvp__tier_engine_t *e) {
  return e->pub_nats != NULL && e->pub_nats->servers[0] != '\0';
}

/* A part's snapshot context: the engine and the part's index worker (a
 * part_t moves when e->parts grows). */
typedef struct part_snap_s {
  kvp__tier_engine_t *e;
  uint16_t worker;
} part_snap_t;

/* The run of a (volume, shape) in a snapshot: runs are few (the volumes
 * times the block shapes), found through a map of a mix of the three. */
typedef struct run_find_s {
  kvp__map64_t by_key; /* mix -> run id of the first run with that mix */
  kvp_snapshot_run_t *r;
  uint16_t *vol;
  size_t nr, cap;
} run_find_t;

static uint64_t run_mix(uint16_t vol, uint32_t tokens, uint64_t bytes) {
  return ((uint64_t)vol << 48 ^ (uint64_t)tokens << 16 ^ bytes) * 0x9e3779b97f4a7c15ull;
}

/* The id of the run of (vol, tokens, bytes), a new one if none; SIZE_MAX
 * when out of memory. */
static size_t run_of(run_find_t *f, const kvp__index_t *ix, uint16_t vol, uint32_t tokens,
                     uint64_t bytes) {
  uint64_t mix = run_mix(vol, tokens, bytes), id;
  if (kvp__map64_get(&f->by_key, mix, &id) == 0 && f->vol[id] == vol &&
      f->r[id].block_tokens == tokens && f->r[id].block_bytes == bytes)
    return (size_t)id;
  for (size_t j = 0; j < f->nr; j++) /* a mix shared by two runs: rare */
    if (f->vol[j] == vol && f->r[j].block_tokens == tokens && f->r[j].block_bytes == bytes)
      return j;
  if (KVP_ARRAY_RESERVE(f->r, f->cap, f->nr + 1, 8) != 0)
    return SIZE_MAX;
  uint16_t *nv = realloc(f->vol, f->cap * sizeof *nv);
  if (nv == NULL)
    return SIZE_MAX;
  f->vol = nv;
  const char *name = kvp__index_volume_name(ix, vol);
  f->r[f->nr] = (kvp_snapshot_run_t){.block_tokens = tokens, .block_bytes = bytes};
  snprintf(f->r[f->nr].volume, sizeof f->r[f->nr].volume, "%s", name ? name : "");
  f->vol[f->nr] = vol;
  if (kvp__map64_get(&f->by_key, mix, NULL) != 0 && kvp__map64_put(&f->by_key, mix, f->nr) != 0)
    return SIZE_MAX;
  return f->nr++;
}

/* kvp_snapshot_runs_fn of a part's publisher, called by its poll on the
 * loop thread, where the index changes and the moves are announced: the
 * snapshot is the stream's state at its point. The advisor worker holds G3
 * and G4 locations only. Each run (a volume and a block shape) keeps the
 * records' order: a chain's blocks stay in order, and the consumers store
 * them in consecutive records (advisor/ingest.c). Two passes over the
 * locations, no sort: about 44 bytes per location at the peak (the held
 * list, a run id and a parent each, then the two arrays out). */
static int part_snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents,
                         kvp_snapshot_run_t **runs, size_t *nruns) {
  part_snap_t *c = ctx;
  kvp__index_held_t *held = NULL;
  run_find_t f = {0};
  uint32_t *rid = NULL;
  uint64_t *par = NULL, *h = NULL, *p = NULL;
  size_t n = 0, *off = NULL;
  int rc;

  *hashes = *parents = NULL;
  *runs = NULL;
  *nruns = 0;
  if ((rc = kvp__index_held(c->e->ix, c->worker, tier, &held, &n)) != 0 || n == 0)
    return rc;
  rc = KVP_ENOMEM;
  kvp__map64_init(&f.by_key, 0);
  if ((rid = malloc(n * sizeof *rid)) == NULL || (par = malloc(n * sizeof *par)) == NULL)
    goto done;
  for (size_t i = 0; i < n; i++) {
    kvp__index_block_t b;
    size_t j;
    if (kvp__index_get(c->e->ix, held[i].hash, &b, NULL, 0, NULL) != 0) {
      rid[i] = UINT32_MAX; /* gone meanwhile: left out */
      continue;
    }
    if ((j = run_of(&f, c->e->ix, held[i].volume, b.tokens, b.bytes)) == SIZE_MAX)
      goto done;
    rid[i] = (uint32_t)j;
    par[i] = b.parent;
    f.r[j].n++;
  }
  if ((off = malloc((f.nr ? f.nr : 1) * sizeof *off)) == NULL ||
      (h = malloc(n * sizeof *h)) == NULL || (p = malloc(n * sizeof *p)) == NULL)
    goto done;
  for (size_t j = 0, at = 0; j < f.nr; j++) {
    off[j] = at;
    at += f.r[j].n;
  }
  for (size_t i = 0; i < n; i++)
    if (rid[i] != UINT32_MAX) {
      size_t at = off[rid[i]]++;
      h[at] = held[i].hash;
      p[at] = par[i];
    }
  *hashes = h;
  *parents = p;
  *runs = f.r;
  *nruns = f.nr;
  h = p = NULL;
  f.r = NULL;
  rc = 0;
done:
  free(held);
  free(rid);
  free(par);
  free(off);
  free(h);
  free(p);
  free(f.r);
  free(f.vol);
  kvp__map64_free(&f.by_key);
  return rc;
}

void kvp__tier_parts_poll(kvp__tier_engine_t *e) {
  for (size_t i = 0; i < e->nparts; i++) {
    int rc = e->parts[i].pub ? kvp_publisher_poll(e->parts[i].pub) : 0;
    if (rc < 0 && rc != KVP_EOVERFLOW)
      kvp_log_warn("tiering: worker %s: no snapshot for a resync: %s (tried again)",
                   e->parts[i].worker, kvp_strerror(rc));
  }
}

static int open_publisher(kvp__tier_engine_t *e, part_t *pt, char *err, size_t errlen) {
  kvp_publisher_opts_t po;
  char why[512];
  int rc;

  if (!kvp__tier_parts_publish(e))
    return 0;
  free(pt->snap);
  if ((pt->snap = malloc(sizeof *pt->snap)) == NULL)
    return KVP_ENOMEM;
  pt->snap->e = e;
  pt->snap->worker = pt->worker_id;
  kvp_publisher_opts_init(&po);
  po.nats = *e->pub_nats;
  po.ns = e->ns;
  po.worker_id = pt->worker;
  po.model = "kvplane-advisor";
  po.mode = e->pub_js ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  po.stream = e->pub_stream[0] ? e->pub_stream : NULL;
  po.partitions = e->partitions;
  po.overflow = KVP_OVERFLOW_DROP;
  po.snapshot_tiers = 1u << KVP_TIER_G3 | 1u << KVP_TIER_G4;
  po.snapshot_runs = part_snapshot;
  po.snapshot_ctx = pt->snap;
  if ((rc = kvp_publisher_open(&po, &pt->pub, why, sizeof why)) != 0) {
    snprintf(err, errlen, "tiering: the publisher of worker %s: %s", pt->worker, why);
    return rc;
  }
  /* Its events are applied here as they are announced: the advisor's
   * ingest skips them when NATS brings them back (index.h). */
  if ((rc = kvp__index_set_source(e->ix, pt->worker_id, kvp_publisher_epoch(pt->pub))) != 0)
    snprintf(err, errlen, "tiering: worker %s: %s", pt->worker, kvp_strerror(rc));
  return rc;
}

/* A part stops announcing: its publisher is closed on a libuv worker, not
 * on the loop, since the close flushes for up to its close timeout (5 s)
 * and the lease it follows is often lost because NATS is away. pt->pub is
 * NULL at once; the loop's last run at a stop waits for the close. */
typedef struct closing_s {
  uv_work_t req;
  kvp_publisher_t *pub;
} closing_t;

static void close_work(uv_work_t *req) {
  kvp_publisher_close(((closing_t *)req->data)->pub);
}

static void close_done(uv_work_t *req, int status) {
  (void)status;
  free(req->data);
}

static void retire_publisher(kvp__tier_engine_t *e, part_t *pt) {
  closing_t *c;
  if (pt->pub == NULL)
    return;
  if ((c = malloc(sizeof *c)) == NULL) {
    kvp_publisher_close(pt->pub); /* no memory: here, as before */
  } else {
    c->pub = pt->pub;
    c->req.data = c;
    if (uv_queue_work(e->loop, &c->req, close_work, close_done) != 0) {
      kvp_publisher_close(pt->pub);
      free(c);
    }
  }
  pt->pub = NULL;
  /* The echo of its last epoch, still on its way, is applied. */
  kvp__index_set_source(e->ix, pt->worker_id, 0);
  free(pt->snap); /* called only by a poll, and none polls it now */
  pt->snap = NULL;
}

/* Appends the part of partition p (not partitioned: the one part). */
static int add_part(kvp__tier_engine_t *e, uint32_t p, char *err, size_t errlen) {
  part_t *grown = realloc(e->parts, (e->nparts + 1) * sizeof *e->parts);
  int rc;
  if (grown == NULL)
    return KVP_ENOMEM;
  e->parts = grown;
  part_t *pt = &e->parts[e->nparts];
  memset(pt, 0, sizeof *pt);
  if (e->partitions == 0) {
    snprintf(pt->ns, sizeof pt->ns, "%s", e->ns);
    snprintf(pt->worker, sizeof pt->worker, "%s", ADVISOR_WORKER);
  } else {
    pt->p = p;
    if ((rc = kvp_partition_volume_ns(pt->ns, sizeof pt->ns, e->ns, p)) != 0 ||
        (rc = kvp_partition_advisor_worker(pt->worker, sizeof pt->worker, p, e->partitions)) != 0) {
      snprintf(err, errlen,
               "tiering: partition %" PRIu32 " of namespace %s: no key namespace or advisor "
               "worker: %s",
               p, e->ns, kvp_strerror(rc));
      return rc;
    }
  }
  if ((rc = kvp__index_worker(e->ix, pt->worker, 0, &pt->worker_id)) != 0) {
    snprintf(err, errlen, "tiering: cannot register worker %s: %s", pt->worker, kvp_strerror(rc));
    return rc;
  }
  e->nparts++;
  /* Leased: a part's publisher is open only while it is tiered here (see
   * kvp__tier_engine_partition, kvp__tier_engine_announce). */
  return e->leased ? 0 : open_publisher(e, pt, err, errlen);
}

/* A G4 volume is shared by the advisors of every partition: this one
 * fills its share, capacity * (partitions tiered here) / count. */
static void share(kvp__tier_engine_t *e) {
  size_t n = 0;
  if (e->partitions == 0)
    return;
  for (size_t i = 0; i < e->nparts; i++)
    n += !e->parts[i].retired;
  for (size_t v = 0; v < e->nvols; v++) {
    vol_t *vol = &e->vols[v];
    if (vol->tier != 4 || vol->capacity_whole == 0)
      continue;
    vol->capacity = (uint64_t)((unsigned __int128)vol->capacity_whole * n / e->partitions);
    vol->st.capacity = vol->capacity;
    kvp_log_info("tiering: volume %s is shared by %" PRIu32 " partitions: this advisor's %zu take "
                 "%" PRIu64 " of its %" PRIu64 " bytes",
                 vol->name, e->partitions, n, vol->capacity, vol->capacity_whole);
  }
}

int kvp__tier_parts_open(kvp__tier_engine_t *e, const kvp__tier_opts_t *o, char *err,
                         size_t errlen) {
  size_t n = o->partitions > 0 ? o->nowned : 1;
  int rc;

  if (n == 0)
    return KVP_EINVAL;
  e->partitions = o->partitions;
  e->leased = o->leased;
  e->pub_nats = o->nats;
  /* Every announcement of a move names its volume, and so does each run of
   * a snapshot: a name the publisher cannot carry would leave them all out
   * (kvp_publisher_stored refuses it) and the snapshots would cut it. */
  for (size_t v = 0; kvp__tier_parts_publish(e) && v < e->nvols; v++)
    if (strlen(e->vols[v].name) >= sizeof(((kvp_snapshot_run_t *)0)->volume)) {
      snprintf(err, errlen,
               "tiering: volume %s: its moves are announced on NATS, which takes a volume name "
               "of at most %zu characters",
               e->vols[v].name, sizeof(((kvp_snapshot_run_t *)0)->volume) - 1);
      return KVP_ECONFIG;
    }
  e->pub_js = o->jetstream;
  snprintf(e->pub_stream, sizeof e->pub_stream, "%s", o->stream ? o->stream : "");
  for (size_t v = 0; v < e->nvols; v++)
    e->vols[v].capacity_whole = e->vols[v].capacity;
  for (size_t i = 0; i < n; i++)
    if ((rc = add_part(e, o->partitions ? o->owned[i] : 0, err, errlen)) != 0)
      return rc;
  share(e);
  return 0;
}

int kvp__tier_engine_partition(kvp__tier_engine_t *e, uint32_t p, int add, char *err,
                               size_t errlen) {
  size_t k = 0;
  int rc = 0;
  if (e->partitions == 0 || p >= e->partitions) {
    snprintf(err, errlen, "tiering: partition %" PRIu32 ": not a partition of this advisor", p);
    return KVP_EINVAL;
  }
  if (kvp__tier_engine_busy(e)) {
    snprintf(err, errlen, "tiering: a job or scrub runs");
    return KVP_EBUSY;
  }
  while (k < e->nparts && e->parts[k].p != p)
    k++;
  if (add > 0 && k < e->nparts) {
    e->parts[k].retired = 0;
  } else if (add > 0) {
    rc = add_part(e, p, err, errlen);
  } else if (k < e->nparts) {
    e->parts[k].retired = 1;
    /* Its advisor worker falls silent here: a publisher left open would go
     * on sending heartbeats under its own epoch, and the one that tiers p
     * now (a newer epoch, or an older one: its events then stale) would
     * lose its announcements on every advisor. */
    retire_publisher(e, &e->parts[k]);
    /* Sources waiting for their grace period stay: the next owner sees
     * both copies in the stream and keeps one. Kept (add -1, a lease
     * waited for): deleted once p is tiered here again. */
    for (size_t i = 0; add == 0 && i < e->npend; i++)
      if (e->pend[i].part == k)
        e->pend[i].done = 1;
    kvp__tier_pend_compact(e);
  }
  /* Tiered here: its moves are announced from now on, under a new epoch
   * of its advisor worker. */
  if (rc == 0 && add > 0 && k < e->nparts && e->parts[k].pub == NULL)
    rc = open_publisher(e, &e->parts[k], err, errlen);
  /* Not tiered unannounced (its standby and the routers would never learn
   * its moves): the caller tries again. */
  if (rc != 0 && add > 0 && k < e->nparts)
    e->parts[k].retired = 1;
  if (e->wpart_cap)
    memset(e->wpart, 0, e->wpart_cap * sizeof *e->wpart); /* looked up again */
  share(e);
  if (rc == 0)
    kvp_log_info("tiering: partition %" PRIu32 " %s", p,
                 add > 0 ? "is tiered here from now on" : "is no longer tiered here");
  return rc;
}

int kvp__tier_engine_announce(kvp__tier_engine_t *e, int on, char *err, size_t errlen) {
  part_t *pt = e->nparts > 0 ? &e->parts[0] : NULL;
  if (e->partitions != 0 || pt == NULL) {
    snprintf(err, errlen, "tiering: partitioned: each partition's publisher follows its tiering");
    return KVP_EINVAL;
  }
  if (on && pt->pub == NULL)
    return open_publisher(e, pt, err, errlen);
  if (!on && pt->pub != NULL) {
    if (kvp__tier_engine_busy(e)) {
      snprintf(err, errlen, "tiering: a job or scrub runs");
      return KVP_EBUSY;
    }
    retire_publisher(e, pt);
  }
  return 0;
}

int kvp__tier_engine_announcing(const kvp__tier_engine_t *e) {
  return e->nparts > 0 && e->parts[0].pub != NULL;
}

void kvp__tier_engine_set_scrub_max_keys(kvp__tier_engine_t *e, size_t n) {
  e->scrub_max_keys = n;
}

void kvp__tier_engine_set_gate(kvp__tier_engine_t *e, kvp__tier_gate_fn fn, void *ctx) {
  e->gate = fn;
  e->gate_ctx = ctx;
}

size_t kvp__tier_engine_tiered(const kvp__tier_engine_t *e, uint32_t *parts, size_t cap) {
  size_t n = 0;
  if (e->partitions == 0)
    return 0;
  for (size_t i = 0; i < e->nparts; i++)
    if (!e->parts[i].retired) {
      if (n < cap)
        parts[n] = e->parts[i].p;
      n++;
    }
  return n;
}

void kvp__tier_parts_close(kvp__tier_engine_t *e) {
  for (size_t i = 0; i < e->nparts; i++) {
    kvp_publisher_close(e->parts[i].pub); /* flushes what is queued, within its close timeout */
    if (e->parts[i].pub != NULL)
      kvp__index_set_source(e->ix, e->parts[i].worker_id, 0);
    free(e->parts[i].snap);
  }
  free(e->parts);
  e->parts = NULL;
  e->nparts = 0;
  free(e->wpart);
  e->wpart = NULL;
}

int kvp__tier_part_of(kvp__tier_engine_t *e, uint16_t worker) {
  if (e->partitions == 0)
    return 0;
  if (worker >= e->wpart_cap) {
    size_t old = e->wpart_cap;
    if (KVP_ARRAY_RESERVE(e->wpart, e->wpart_cap, (size_t)worker + 1, 64) != 0)
      return -1; /* no memory: left alone this round */
    memset(e->wpart + old, 0, (e->wpart_cap - old) * sizeof *e->wpart);
  }
  if (e->wpart[worker] != 0)
    return e->wpart[worker] > 0 ? e->wpart[worker] - 1 : -1;
  const char *name = kvp__index_worker_name(e->ix, worker, NULL);
  int part = -1;
  if (name != NULL) {
    /* An advisor worker is ours only by its exact name: another advisor's
     * (or an unpartitioned one's _advisor) is left alone. */
    int advisor = kvp_worker_is_advisor(name);
    uint32_t p = kvp_partition_of(name, e->partitions);
    for (size_t i = 0; i < e->nparts && part < 0; i++)
      if (!e->parts[i].retired &&
          (advisor ? strcmp(name, e->parts[i].worker) == 0 : e->parts[i].p == p))
        part = (int)i;
  }
  e->wpart[worker] = part >= 0 ? part + 1 : -1;
  return part;
}

uint16_t kvp__tier_recover_part(kvp__tier_engine_t *e, const char *ns, uint64_t hash, long from,
                                long to) {
  if (e->nparts == 1)
    return 0;
  /* The journal row's namespace names the part (schema 8). */
  for (size_t i = 0; ns != NULL && i < e->nparts; i++)
    if (strcmp(e->parts[i].ns, ns) == 0)
      return (uint16_t)i;
  if (ns != NULL)
    kvp_log_warn("tiering: a journal row of %016" PRIx64 " names key namespace %s, which no "
                 "partition tiered here has: recovered by where its object is",
                 hash, ns);
  /* A row without one (written before schema 8): the part whose namespace
   * holds the object where the move began (or ended). A block of two
   * parts with an interrupted move in each takes the first. */
  for (int pass = 0; pass < 2; pass++) {
    long v = pass == 0 ? from : to;
    if (v < 0)
      continue;
    for (size_t i = 0; i < e->nparts; i++)
      if (kvp_volume_exists(e->vols[v].v, e->parts[i].ns, hash) == 1)
        return (uint16_t)i;
  }
  return 0;
}
