/* The tiering engine's compaction (engine_impl.h): a volume whose plugin
 * can compact and reports its garbage (volume ABI 2: dead and total bytes,
 * e.g. the posix plugin's packed layout) is looked at once every
 * compact_ms; when its dead bytes are at least compact_ratio of its total,
 * the job calls the plugin's compact step by step (each step rewrites one
 * unit, e.g. a segment) until the ratio is half the threshold, nothing is
 * left, or COMPACT_BUDGET_MS has passed, so that one round's compaction
 * is bounded and the moves queued after it wait at most that long.
 *
 * Journaled like a move: a migrations row with from_volume = to_volume
 * (the volume), hash 0, bytes the dead bytes it started from, state
 * 'copying' while it runs, then 'compacted' (error: what it reclaimed) or
 * 'failed'. A crash mid-compaction leaves a 'copying' row, which the
 * engine's recovery marks failed: the plugin's own recovery keeps every
 * object (for posix, records carry versions: a segment and its copies
 * both present load as one object each). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"

/* A compaction op stops after this long, more to do or not. */
#define COMPACT_BUDGET_MS 2000

void kvp__tier_compact_queue(kvp__tier_engine_t *e, uint64_t now) {
  if (e->compact_ratio <= 0)
    return;
  for (size_t v = 0; v < e->nvols; v++) {
    vol_t *vol = &e->vols[v];
    if (!vol->compactable || vol->offline || now < vol->compact_due_ms ||
        now < vol->backoff_until_ms)
      continue;
    if (KVP_ARRAY_RESERVE(e->ops, e->ops_cap, e->nops + 1, 64) != 0)
      return;
    vol->compact_due_ms = now + e->compact_ms;
    e->ops[e->nops++] = (op_t){.kind = OP_COMPACT, .from = (uint32_t)v, .journal_id = -1};
  }
}

static double ratio(uint64_t dead, uint64_t total) {
  return total ? (double)dead / (double)total : 0;
}

/* The job's part: garbage, then compaction steps while worth it. o->bytes
 * gets the bytes reclaimed, o->dead and o->total the garbage after. */
void kvp__tier_compact_run(kvp__tier_engine_t *e, op_t *o) {
  vol_t *v = &e->vols[o->from];
  uint64_t dead0, total0, t0 = kvp__unix_ms();
  int steps = 0, rc;

  o->rc = kvp_volume_garbage(v->v, &dead0, &total0, o->err, sizeof o->err);
  o->dead = dead0;
  o->total = total0;
  if (o->rc != 0 || ratio(dead0, total0) < e->compact_ratio)
    return;
  int64_t id = kvp__journal_insert(e->db, 0, v->tier, v->name, v->tier, v->name, NULL, dead0, t0);
  kvp__journal_set(e->db, id, "copying", NULL);
  do {
    rc = kvp_volume_compact(v->v, o->err, sizeof o->err);
    steps += rc == 1;
    if (rc == 1 && kvp_volume_garbage(v->v, &o->dead, &o->total, o->err, sizeof o->err) != 0)
      break;
  } while (rc == 1 && ratio(o->dead, o->total) >= e->compact_ratio / 2 &&
           kvp__unix_ms() - t0 < COMPACT_BUDGET_MS);
  o->rc = rc < 0 ? rc : 0;
  o->bytes = dead0 > o->dead ? dead0 - o->dead : 0;
  o->tokens = (uint32_t)steps;
  if (o->rc == 0) {
    char what[128];
    snprintf(what, sizeof what,
             "reclaimed %" PRIu64 " of %" PRIu64 " dead bytes in %d step(s), %" PRIu64 " ms",
             o->bytes, dead0, steps, kvp__unix_ms() - t0);
    kvp__journal_set(e->db, id, "compacted", what);
  } else {
    kvp__journal_set(e->db, id, "failed", o->err);
  }
}

/* The loop's part: counters, the volume's garbage figures, a log line. */
void kvp__tier_compact_apply(kvp__tier_engine_t *e, const op_t *o) {
  vol_t *v = &e->vols[o->from];
  if (o->rc == KVP_EOFFLINE) {
    /* Found offline here first: as a failed move would (engine_job.c). */
    if (!v->offline)
      kvp_log_warn("tiering: volume %s is offline, no moves into or out of it until its "
                   "identity is back: %s",
                   v->name, o->err);
    v->offline = 1;
    v->st.offline = 1;
    return;
  }
  if (o->rc != 0) {
    e->st.compact_failed++;
    kvp__tier_vol_warn(v, kvp__unix_ms(), "tiering: compaction of %s failed: %s", v->name, o->err);
    return;
  }
  v->st.dead_bytes = o->dead;
  v->st.store_bytes = o->total;
  if (o->tokens == 0)
    return;
  e->st.compactions++;
  e->st.compacted_bytes += o->bytes;
  v->st.compacted_bytes += o->bytes;
  kvp_log_info("tiering: compacted %s: %" PRIu64 " dead bytes reclaimed in %u step(s); %" PRIu64
               " of %" PRIu64 " bytes dead now",
               v->name, o->bytes, o->tokens, o->dead, o->total);
}
