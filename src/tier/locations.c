/* The tiering engine's view of the index (engine_impl.h): a block with all
 * its locations, and dropping a volume's locations of a block. The round
 * (engine.c), the job's completion (engine_job.c) and recovery
 * (engine_open.c) use these; they call nothing of those files. Loop
 * thread. */
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>

#include "common/array.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

/* Looks hash up with all its locations, however many workers hold it, into
 * the engine's location scratch (e->locs). Returns 0 or KVP_ENOENT /
 * KVP_ENOMEM. */
int kvp__tier_get_block(kvp__tier_engine_t *e, uint64_t hash, kvp__index_block_t *b, size_t *n) {
  int rc = kvp__index_get(e->ix, hash, b, e->locs, e->locs_cap, n);
  if (rc == 0 && *n > e->locs_cap) {
    if (KVP_ARRAY_RESERVE(e->locs, e->locs_cap, *n, 64) != 0)
      return KVP_ENOMEM;
    rc = kvp__index_get(e->ix, hash, b, e->locs, e->locs_cap, n);
  }
  return rc;
}

/* Removes every location of hash in (tier, volume) held by a worker of
 * part (-1: whoever holds it). */
void kvp__tier_drop_locations(kvp__tier_engine_t *e, uint64_t hash, const vol_t *v, int part) {
  size_t n = 0;
  if (kvp__tier_get_block(e, hash, NULL, &n) != 0)
    return;
  /* Backwards: a removal does not move the locations before it in e->locs
   * (the copy), and the index is asked for each one by its key. */
  for (size_t i = n; i-- > 0;)
    if (e->locs[i].tier == v->tier && e->locs[i].volume == v->id &&
        (part < 0 || kvp__tier_part_of(e, e->locs[i].worker) == part))
      kvp__index_remove(e->ix, hash, e->locs[i].worker, v->tier, v->id);
}

void kvp__tier_vol_warn(vol_t *v, uint64_t now, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  if (v->log_ms != 0 && now - v->log_ms < LOG_INTERVAL_MS) {
    v->suppressed++;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (v->suppressed)
    kvp_log_warn("%s (and %" PRIu64 " more warnings about volume %s in the last %d s)", line,
                 v->suppressed, v->name, LOG_INTERVAL_MS / 1000);
  else
    kvp_log_warn("%s", line);
  v->log_ms = now;
  v->suppressed = 0;
}

int kvp__tier_pend_add(kvp__tier_engine_t *e, uint64_t hash, uint64_t due_ms, uint32_t from,
                       uint16_t part, int64_t journal_id) {
  uint64_t *mask = kvp__map64_find(&e->pendset, hash);
  if (KVP_ARRAY_RESERVE(e->pend, e->pend_cap, e->npend + 1, 64) != 0)
    return KVP_ENOMEM;
  if (mask != NULL)
    *mask |= 1ull << from; /* volumes are at most KVP__TIER_MAX_VOLUMES, 64 */
  else if (kvp__map64_put(&e->pendset, hash, 1ull << from) != 0)
    return KVP_ENOMEM;
  e->pend[e->npend++] = (pend_t){
      .hash = hash, .due_ms = due_ms, .from = from, .part = part, .journal_id = journal_id};
  return 0;
}

void kvp__tier_pend_compact(kvp__tier_engine_t *e) {
  size_t k = 0;
  for (size_t i = 0; i < e->npend; i++) {
    if (!e->pend[i].done) {
      e->pend[k++] = e->pend[i];
      continue;
    }
    uint64_t *mask = kvp__map64_find(&e->pendset, e->pend[i].hash);
    if (mask != NULL && (*mask &= ~(1ull << e->pend[i].from)) == 0)
      kvp__map64_del(&e->pendset, e->pend[i].hash, NULL);
  }
  e->npend = k;
}

long kvp__tier_vol_of(const kvp__tier_engine_t *e, int tier, uint16_t id) {
  for (size_t v = 0; v < e->nvols; v++)
    if (e->vols[v].tier == tier && e->vols[v].id == id)
      return (long)v;
  return -1;
}
