/* The block manager's G3 and G4: offload workers, the G3 registry, verified
 * reads (see tiers.h). */
#include "block/tiers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "block/pool.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/map64.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

typedef struct job_s {
  uint64_t hash, parent;
  int32_t lora_id;
  uint8_t has_parent;
  void *bytes;
} job_t;

struct kvp__tiers_s {
  kvp_volume_t *g3, *g4;
  const kvp_pool_t *g2;
  char ns[65];
  size_t block_bytes;
  uint32_t page;
  kvp_layout_t layout;
  uint32_t min_hits;
  kvp_event_sink_t sink;
  pthread_mutex_t mu;
  pthread_cond_t work, idle, room;
  int wait_for_room;
  job_t *q;
  size_t qcap, qhead, qlen, busy;
  int stopping;
  pthread_t *threads;
  uint32_t nthreads;
  kvp__map64_t reg; /* the hashes this manager put in G3 -> their parents */
  _Atomic uint64_t offloads, failed, dropped, hits3, hits4, gone, corrupt, full;
  /* G3's room (under mu): the volume's stat, taken at most every STAT_MS,
   * plus the bytes put since. */
  uint64_t cap3, used3, put3, stat3_ns;
};

/* How often G3's stat is asked for at most. */
#define STAT_MS 100

/* --- offload workers ------------------------------------------------------ */

static void emit_stored_g3(kvp__tiers_t *t, const job_t *j) {
  kvp_event_t ev = {.type = KVP_EV_STORED,
                    .tier = KVP_TIER_G3,
                    .volume = kvp_volume_name(t->g3),
                    .has_parent = j->has_parent,
                    .parent_hash = j->parent,
                    .hashes = &j->hash,
                    .nhashes = 1,
                    .block_tokens = t->page,
                    .block_bytes = t->block_bytes,
                    .lora_id = j->lora_id};
  if (t->sink.emit != NULL)
    t->sink.emit(t->sink.ctx, &ev);
}

/* Whether a put of need bytes keeps G3 within its capacity (the plugin's
 * stat; 0: no bound); if so the bytes are counted as put. The stat is
 * refreshed at most every STAT_MS; in between, the puts of this manager
 * since the last one are added to its used. A failed stat leaves the last
 * figures (the put then says what is wrong). Called with mu unlocked. */
static int g3_room(kvp__tiers_t *t, uint64_t need) {
  uint64_t now = kvp__now_ns();
  kvp_volume_stat_t st;
  char err[256];

  pthread_mutex_lock(&t->mu);
  int refresh = t->stat3_ns == 0 || now - t->stat3_ns >= STAT_MS * 1000000ull;
  if (refresh)
    t->stat3_ns = now; /* one thread asks */
  pthread_mutex_unlock(&t->mu);
  int got = refresh && kvp_volume_stat(t->g3, &st, err, sizeof err) == 0;
  pthread_mutex_lock(&t->mu);
  if (got) {
    t->cap3 = st.capacity;
    t->used3 = st.used;
    t->put3 = 0;
  }
  int ok = t->cap3 == 0 || t->used3 + t->put3 + need <= t->cap3;
  if (ok)
    t->put3 += need;
  pthread_mutex_unlock(&t->mu);
  return ok;
}

static void *worker_main(void *arg) {
  kvp__tiers_t *t = arg;
  char err[512];

  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (t->qlen == 0 && !t->stopping)
      pthread_cond_wait(&t->work, &t->mu);
    if (t->qlen == 0)
      break; /* stopping, and everything queued is done */
    job_t j = t->q[t->qhead];
    t->qhead = (t->qhead + 1) % t->qcap;
    t->qlen--;
    t->busy++;
    pthread_cond_signal(&t->room);
    pthread_mutex_unlock(&t->mu);

    kvp_frame_t f = {.hash = j.hash,
                     .parent = j.parent,
                     .has_parent = j.has_parent,
                     .layout = t->layout,
                     .payload_len = t->block_bytes};
    if (!g3_room(t, t->block_bytes + KVP_FRAME_HEADER)) {
      /* Skipped, not written: G3 stays within its capacity. */
      free(j.bytes);
      atomic_fetch_add(&t->full, 1);
      pthread_mutex_lock(&t->mu);
      t->busy--;
      if (t->qlen == 0 && t->busy == 0)
        pthread_cond_broadcast(&t->idle);
      continue;
    }
    int rc = kvp_volume_put_block(t->g3, t->ns, &f, j.bytes, err, sizeof err);
    free(j.bytes);
    pthread_mutex_lock(&t->mu);
    if (rc == 0 && kvp__map64_put(&t->reg, j.hash, j.has_parent ? j.parent : j.hash) == 0) {
      atomic_fetch_add(&t->offloads, 1);
      /* Announced while the registry says so: a snapshot taken meanwhile
       * and this event agree. */
      emit_stored_g3(t, &j);
    } else {
      uint64_t n = atomic_fetch_add(&t->failed, 1) + 1;
      if ((n & (n - 1)) == 0) /* 1, 2, 4, ...: the log stays bounded */
        kvp_log_warn("block manager: offload to G3 failed (%llu so far): %s", (unsigned long long)n,
                     rc ? err : "out of memory");
    }
    t->busy--;
    if (t->qlen == 0 && t->busy == 0)
      pthread_cond_broadcast(&t->idle);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

void kvp__tiers_victim(void *ctx, const kvp_pool_evicted_t *x, const void *bytes) {
  kvp__tiers_t *t = ctx;

  if (t->g3 == NULL || x->hits < t->min_hits)
    return;
  pthread_mutex_lock(&t->mu);
  while (t->wait_for_room && t->qlen == t->qcap)
    pthread_cond_wait(&t->room, &t->mu);
  int full = t->qlen == t->qcap;
  pthread_mutex_unlock(&t->mu);
  void *copy = full ? NULL : malloc(t->block_bytes);
  if (copy == NULL) {
    atomic_fetch_add(&t->dropped, 1);
    return;
  }
  /* The copy is made here, on the scheduler thread, because the caller
   * overwrites the block as soon as this returns. */
  memcpy(copy, bytes, t->block_bytes);
  pthread_mutex_lock(&t->mu);
  if (t->qlen == t->qcap) { /* filled meanwhile by nobody else: only this thread queues */
    pthread_mutex_unlock(&t->mu);
    free(copy);
    atomic_fetch_add(&t->dropped, 1);
    return;
  }
  t->q[(t->qhead + t->qlen) % t->qcap] =
      (job_t){x->hash, x->parent_hash, x->lora_id, (uint8_t)x->has_parent, copy};
  t->qlen++;
  pthread_cond_signal(&t->work);
  pthread_mutex_unlock(&t->mu);
}

/* --- reads ------------------------------------------------------------------ */

/* 1 read, 0 missing, -1 corrupt or failed. */
static int read_from(kvp__tiers_t *t, kvp_volume_t *v, uint64_t hash, void *dst) {
  kvp_frame_t f;
  char err[512];
  int rc = kvp_volume_get_block(v, t->ns, hash, &f, dst, t->block_bytes, err, sizeof err);
  if (rc == 0 && f.payload_len == t->block_bytes)
    return 1;
  if (rc == KVP_ENOENT)
    return 0;
  uint64_t n = atomic_fetch_add(&t->corrupt, 1) + 1;
  if ((n & (n - 1)) == 0)
    kvp_log_warn("block manager: block %016llx not served from %s (%llu so far): %s",
                 (unsigned long long)hash, kvp_volume_name(v), (unsigned long long)n,
                 rc == 0 ? "another block size" : err);
  return -1;
}

int kvp__tiers_read(kvp__tiers_t *t, uint64_t hash, void *dst) {
  int mine = 0;
  if (t->g3 != NULL) {
    pthread_mutex_lock(&t->mu);
    mine = kvp__map64_get(&t->reg, hash, NULL) == 0;
    pthread_mutex_unlock(&t->mu);
    if (mine) {
      int r = read_from(t, t->g3, hash, dst);
      if (r == 1) {
        atomic_fetch_add(&t->hits3, 1);
        return KVP_TIER_G3;
      }
      if (r == 0) {
        /* Moved by the advisor (it announced the move): forget it. */
        atomic_fetch_add(&t->gone, 1);
        pthread_mutex_lock(&t->mu);
        kvp__map64_del(&t->reg, hash, NULL);
        pthread_mutex_unlock(&t->mu);
      }
    }
  }
  if (t->g4 != NULL && read_from(t, t->g4, hash, dst) == 1) {
    atomic_fetch_add(&t->hits4, 1);
    return KVP_TIER_G4;
  }
  /* Not put there by this manager, not (or no longer) in G4: the advisor
   * may have promoted it to G3 (and deleted the G4 copy after its grace
   * period). */
  if (t->g3 != NULL && !mine && read_from(t, t->g3, hash, dst) == 1) {
    atomic_fetch_add(&t->hits3, 1);
    return KVP_TIER_G3;
  }
  return 0;
}

const char *kvp__tiers_g3_name(const kvp__tiers_t *t) {
  return t->g3 ? kvp_volume_name(t->g3) : "";
}

const char *kvp__tiers_g4_name(const kvp__tiers_t *t) {
  return t->g4 ? kvp_volume_name(t->g4) : "";
}

int kvp__tiers_snapshot(kvp__tiers_t *t, uint64_t **hashes, uint64_t **parents, size_t *n) {
  size_t k = 0, count, it = 0;

  *hashes = *parents = NULL;
  *n = 0;
  pthread_mutex_lock(&t->mu);
  count = kvp__map64_count(&t->reg);
  if (count > 0) {
    *hashes = malloc(count * sizeof **hashes);
    *parents = malloc(count * sizeof **parents);
  }
  if (count > 0 && (*hashes == NULL || *parents == NULL)) {
    pthread_mutex_unlock(&t->mu);
    free(*hashes);
    free(*parents);
    *hashes = *parents = NULL;
    return KVP_ENOMEM;
  }
  for (uint64_t h, p; kvp__map64_next(&t->reg, &it, &h, &p); k++) {
    (*hashes)[k] = h;
    (*parents)[k] = p;
  }
  pthread_mutex_unlock(&t->mu);
  *n = k;
  return 0;
}

void kvp__tiers_clear(kvp__tiers_t *t) {
  uint64_t *h = NULL, *p = NULL;
  size_t n = 0;
  char err[512];

  kvp__tiers_drain(t);
  if (t->g3 == NULL || kvp__tiers_snapshot(t, &h, &p, &n) != 0)
    return;
  for (size_t i = 0; i < n; i++)
    if (kvp_volume_delete(t->g3, t->ns, h[i], err, sizeof err) != 0)
      kvp_log_warn("block manager: reset: %s", err); /* unannounced: harmless, reclaimable */
  pthread_mutex_lock(&t->mu);
  kvp__map64_free(&t->reg);
  pthread_mutex_unlock(&t->mu);
  free(h);
  free(p);
}

void kvp__tiers_drain(kvp__tiers_t *t) {
  pthread_mutex_lock(&t->mu);
  while (t->qlen > 0 || t->busy > 0)
    pthread_cond_wait(&t->idle, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

void kvp__tiers_stats(const kvp__tiers_t *t, kvp_blockmgr_stats_t *s) {
  kvp__tiers_t *m = (kvp__tiers_t *)t; /* the lock, not the state, changes */
  pthread_mutex_lock(&m->mu);
  s->g3_blocks = kvp__map64_count(&t->reg);
  pthread_mutex_unlock(&m->mu);
  s->offloads_g3 = atomic_load(&m->offloads);
  s->offloads_g3_failed = atomic_load(&m->failed);
  s->offloads_g3_dropped = atomic_load(&m->dropped);
  s->hits_g3 = atomic_load(&m->hits3);
  s->hits_g4 = atomic_load(&m->hits4);
  s->lower_gone = atomic_load(&m->gone);
  s->lower_corrupt = atomic_load(&m->corrupt);
  s->offloads_g3_full = atomic_load(&m->full);
}

int kvp__tiers_create(const kvp_blockmgr_opts_t *o, size_t block_bytes, kvp__tiers_t **out) {
  kvp__tiers_t *t;

  *out = NULL;
  if (o->g3 == NULL && o->g4 == NULL)
    return KVP_EINVAL;
  if (o->g1_storage.ops != NULL && !kvp__storage_is_system(&o->g1_storage))
    return KVP_ENOTSUP;
  if ((t = calloc(1, sizeof *t)) == NULL)
    return KVP_ENOMEM;
  t->g3 = o->g3;
  t->g4 = o->g4;
  snprintf(t->ns, sizeof t->ns, "%s", o->volume_ns && o->volume_ns[0] ? o->volume_ns : "default");
  t->block_bytes = block_bytes;
  t->page = o->layout.page_size;
  t->layout = o->layout;
  t->min_hits = o->g3_min_hits;
  t->sink = o->sink;
  t->qcap = o->g3_queue ? o->g3_queue : 64;
  t->nthreads = t->g3 ? (o->g3_threads ? o->g3_threads : 1) : 0;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->work, NULL);
  pthread_cond_init(&t->idle, NULL);
  pthread_cond_init(&t->room, NULL);
  t->wait_for_room = o->g3_wait;
  kvp__map64_init(&t->reg, 512); /* the 1024 slots the registry started with */
  if ((t->q = calloc(t->qcap, sizeof *t->q)) == NULL ||
      (t->nthreads && (t->threads = calloc(t->nthreads, sizeof *t->threads)) == NULL)) {
    kvp__tiers_destroy(t);
    return KVP_ENOMEM;
  }
  for (uint32_t i = 0; i < t->nthreads; i++)
    if (pthread_create(&t->threads[i], NULL, worker_main, t) != 0) {
      t->nthreads = i;
      kvp__tiers_destroy(t);
      return KVP_ENOMEM;
    }
  *out = t;
  return 0;
}

void kvp__tiers_set_sink(kvp__tiers_t *t, kvp_event_sink_t sink) {
  pthread_mutex_lock(&t->mu);
  t->sink = sink;
  pthread_mutex_unlock(&t->mu);
}

void kvp__tiers_destroy(kvp__tiers_t *t) {
  if (t == NULL)
    return;
  pthread_mutex_lock(&t->mu);
  t->stopping = 1;
  pthread_cond_broadcast(&t->work);
  pthread_mutex_unlock(&t->mu);
  for (uint32_t i = 0; i < t->nthreads; i++)
    pthread_join(t->threads[i], NULL);
  for (size_t i = 0; i < t->qlen; i++)
    free(t->q[(t->qhead + i) % t->qcap].bytes);
  pthread_cond_destroy(&t->work);
  pthread_cond_destroy(&t->idle);
  pthread_cond_destroy(&t->room);
  pthread_mutex_destroy(&t->mu);
  free(t->q);
  free(t->threads);
  kvp__map64_free(&t->reg);
  free(t);
}
