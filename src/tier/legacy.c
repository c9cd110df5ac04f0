/* The sweep of the key namespace <ns> by a partitioned engine (engine.h,
 * KVP__TIER_NAMESPACE; docs/SCALE.md, "Switching a tiering deployment to
 * partitions"): the objects an unpartitioned tiering advisor (and the
 * workers of an unpartitioned deployment) left in the volumes under the
 * namespace itself. No partitioned advisor writes, reads or accounts for
 * them (theirs are under <ns>-p<P>, kvp_partition_volume_ns), and none
 * can be given to a partition (a frame names no worker), so they are
 * deleted, by the engine whose gate says the namespace's lease is held:
 * the lease keeps an unpartitioned tiering advisor from writing there
 * meanwhile (advisor/lease.h).
 *
 * No listing of its own: each scrub pass lists its volume anyway
 * (scrub.c). While the gate said 1 at the pass's start (legacy_start,
 * loop), the pass's thread keeps what it finds under <ns> (keep), then
 * deletes it within the scrub's pace, asking the gate again before each
 * delete as the job asks before each op (delete); once the thread is
 * joined the loop counts it and writes one line for the volume (done).
 * Nothing is journaled per object. A sweep (reset, swept) is every online
 * volume passed whole with nothing left under <ns>: the advisor then hands
 * the namespace's lease on to another advisor, whose volumes differ. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/array.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

void kvp__tier_legacy_start(kvp__tier_engine_t *e) {
  /* Asked here, and again before each delete on the pass's thread. */
  e->legacy = e->partitions > 0 && e->gate != NULL && e->gate(e->gate_ctx, KVP__TIER_NAMESPACE);
  e->legacy_pass_gen = e->legacy_gen;
  e->nlegacy = 0;
  e->legacy_cut = e->legacy_lost = 0;
  e->legacy_deleted = e->legacy_dbytes = e->legacy_failed = 0;
  e->legacy_err[0] = '\0';
}

void kvp__tier_legacy_keep(kvp__tier_engine_t *e, uint64_t hash, uint64_t bytes) {
  if (e->nlegacy >= LEGACY_MAX_KEYS ||
      KVP_ARRAY_RESERVE(e->legacy_keys, e->legacy_cap, 2 * (e->nlegacy + 1), 1024) != 0) {
    e->legacy_cut = 1; /* the rest at later passes; the pass's own listing goes on */
    return;
  }
  e->legacy_keys[2 * e->nlegacy] = hash;
  e->legacy_keys[2 * e->nlegacy + 1] = bytes;
  e->nlegacy++;
}

int kvp__tier_legacy_delete(kvp__tier_engine_t *e, vol_t *v, uint64_t t0, uint64_t *files,
                            uint64_t bytes) {
  char err[256];
  for (size_t i = 0; i < e->nlegacy; i++) {
    if (!e->gate(e->gate_ctx, KVP__TIER_NAMESPACE)) {
      e->legacy_lost = 1;
      return 0;
    }
    int r = kvp_volume_delete(v->v, e->ns, e->legacy_keys[2 * i], err, sizeof err);
    if (r == 0) {
      e->legacy_deleted++;
      e->legacy_dbytes += e->legacy_keys[2 * i + 1];
    } else if (r == KVP_EOFFLINE) {
      snprintf(e->scrub_err, sizeof e->scrub_err, "%s", err);
      return r;
    } else if (r != KVP_ENOENT && e->legacy_failed++ == 0) {
      snprintf(e->legacy_err, sizeof e->legacy_err, "%016" PRIx64 ": %.200s", e->legacy_keys[2 * i],
               err);
    }
    if (kvp__tier_scrub_pace(e, t0, ++*files, bytes))
      return KVP_ECLOSED;
  }
  return 0;
}

void kvp__tier_legacy_done(kvp__tier_engine_t *e, vol_t *v, int listed_all) {
  char more[400] = "";
  if (!e->legacy)
    return;
  e->legacy = 0;
  e->st.legacy_deleted += e->legacy_deleted;
  e->st.legacy_deleted_bytes += e->legacy_dbytes;
  e->st.legacy_failed += e->legacy_failed;
  if (e->nlegacy > 0) {
    v->legacy_seen = 1;
    if (e->legacy_lost)
      snprintf(more, sizeof more, "; stopped: the namespace's lease is no longer held here");
    else if (e->legacy_failed > 0)
      snprintf(more, sizeof more, "; %" PRIu64 " failed (the first %s), tried again later",
               e->legacy_failed, e->legacy_err);
    else if (e->legacy_cut || e->legacy_deleted < e->nlegacy)
      snprintf(more, sizeof more, "; the rest at later passes");
    kvp__log(e->legacy_failed > 0 ? KVP_LOG_WARN : KVP_LOG_INFO,
             "tiering: scrub: volume %s: %" PRIu64 " objects (%" PRIu64 " bytes) deleted of the "
             "%zu%s found under key namespace %s, left by an unpartitioned tiering advisor (this "
             "advisor holds the namespace's lease)%s",
             v->name, e->legacy_deleted, e->legacy_dbytes, e->nlegacy, e->legacy_cut ? "+" : "",
             e->ns, more);
  } else if (listed_all && v->legacy_seen) {
    v->legacy_seen = 0;
    kvp_log_info("tiering: scrub: volume %s holds no more objects under key namespace %s", v->name,
                 e->ns);
  }
  if (listed_all && !e->legacy_lost && !e->legacy_cut && e->legacy_deleted == e->nlegacy &&
      e->legacy_pass_gen == e->legacy_gen)
    v->legacy_swept = e->legacy_gen; /* nothing left under <ns> here in this sweep */
  e->nlegacy = 0;
  if (e->legacy_cap > 8192) { /* a large listing's memory goes back */
    free(e->legacy_keys);
    e->legacy_keys = NULL;
    e->legacy_cap = 0;
  }
}

void kvp__tier_engine_legacy_reset(kvp__tier_engine_t *e) {
  e->legacy_gen++;
}

int kvp__tier_engine_legacy_swept(const kvp__tier_engine_t *e) {
  size_t online = 0;
  if (e->legacy_gen == 0)
    return 0;
  for (size_t v = 0; v < e->nvols; v++) {
    if (e->vols[v].offline)
      continue;
    if (e->vols[v].legacy_swept != e->legacy_gen)
      return 0;
    online++;
  }
  /* None online: nothing it could sweep; another advisor's volumes may be. */
  return online > 0 ? 1 : 2;
}
