/* The tiering engine's open (engine_impl.h): its volumes, its publisher,
 * recovery of unfinished moves from the journal and reconciliation of the
 * moves finished before a crash. Loop thread, before the rounds start. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "tier/engine_impl.h"
#include "store/journal.h"

static int open_volume(kvp__tier_engine_t *e, const kvp__tier_opts_t *o,
                       const kvp__tier_volume_conf_t *c, vol_t *v, char *err, size_t errlen) {
  kvp_volume_param_t p[32];
  size_t np = 0;
  char buf[sizeof c->params];
  snprintf(buf, sizeof buf, "%s", c->params);
  for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line && np < 32;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    p[np++] = (kvp_volume_param_t){line, eq + 1};
  }
  snprintf(v->name, sizeof v->name, "%s", c->name);
  v->tier = c->tier;
  v->capacity = (uint64_t)c->capacity;
  /* The namespace goes into a new volume's identity marker, and a volume
   * of another namespace is refused (plugins with
   * KVP_VOLUME_KNOWS_NAMESPACE). */
  int rc = kvp_volume_open_ns(o->plugin_dir && o->plugin_dir[0] ? o->plugin_dir : NULL, c->plugin,
                              c->name, o->ns, p, np, &v->v, err, errlen);
  if (rc == 0) {
    /* Compactable: the plugin can, and this volume has garbage to report
     * (posix answers KVP_ENOTSUP but with layout=packed). */
    uint64_t dead, total;
    char ignore[256];
    v->compactable = kvp_volume_garbage(v->v, &dead, &total, ignore, sizeof ignore) != KVP_ENOTSUP;
    rc = kvp__index_volume(e->ix, c->name, &v->id);
  }
  return rc;
}

/* One unfinished move of an earlier run: a move that did not commit is
 * failed and its partial copy deleted; an eviction is finished or failed by
 * whether its object is still there; a committed move is recorded at its
 * destination again and its source deleted after the grace period. */
static void recover_row(void *ctx, int64_t id, uint64_t hash, const char *fv, const char *tv,
                        const char *state, const char *ns) {
  kvp__tier_engine_t *e = ctx;
  long from = -1, to = -1;
  char err[256];
  kvp__index_block_t b;

  for (size_t v = 0; v < e->nvols; v++) {
    if (fv && strcmp(e->vols[v].name, fv) == 0)
      from = (long)v;
    if (tv && strcmp(e->vols[v].name, tv) == 0)
      to = (long)v;
  }
  if (fv && tv && fv[0] && strcmp(fv, tv) == 0) {
    /* A compaction (compact.c), interrupted: the plugin's own recovery
     * keeps every object; the next look at its garbage starts again. */
    kvp__journal_set(e->db, id, "failed", "compaction interrupted by a restart");
    kvp_log_info("tiering: compaction %" PRId64 " of %s interrupted by a restart", id, fv);
    return;
  }
  uint16_t part = kvp__tier_recover_part(e, ns, hash, from, to);
  if (strcmp(state, "committed") != 0 && (tv == NULL || tv[0] == '\0') && from >= 0) {
    int gone = kvp_volume_exists(e->vols[from].v, kvp__tier_ns(e, part), hash) == 0;
    if (gone)
      kvp__tier_drop_locations(e, hash, &e->vols[from], e->nparts > 1 ? part : -1);
    kvp__journal_set(e->db, id, gone ? "source_deleted" : "failed",
                     gone ? NULL : "interrupted by a restart; the block stays");
  } else if (strcmp(state, "committed") != 0) {
    if (to >= 0 && !e->leased)
      kvp_volume_delete(e->vols[to].v, kvp__tier_ns(e, part), hash, err,
                        sizeof err); /* a partial copy (leased: the holder's scrub's) */
    kvp__journal_set(e->db, id, "failed", "interrupted by a restart before it committed");
    kvp_log_info("tiering: move %" PRId64 " of %016" PRIx64 " interrupted; the source stays", id,
                 hash);
  } else if (from >= 0 && to >= 0 && kvp__index_get(e->ix, hash, &b, NULL, 0, NULL) == 0) {
    kvp__index_store(e->ix, hash, b.parent != hash, b.parent, e->parts[part].worker_id,
                     e->vols[to].tier, e->vols[to].id, b.tokens, b.bytes, kvp__unix_ms());
    kvp__tier_pend_add(e, hash, kvp__unix_ms() + e->grace_ms, (uint32_t)from, part, id);
    kvp_log_info("tiering: move %" PRId64 " of %016" PRIx64 " committed before a restart; its "
                 "source is deleted after the grace period",
                 id, hash);
  } else {
    kvp__journal_set(e->db, id, "failed",
                     "committed, but its volumes or block are gone; source kept");
  }
}

/* A move finished (source deleted) shortly before the last flush or after
 * it: the index as loaded may miss its destination location or still hold
 * its source location, if the process died before a flush wrote them.
 * What the volumes hold decides: a destination copy there is recorded, a
 * source copy no longer there is dropped. Idempotent. */
static void reconcile_row(void *ctx, int64_t id, uint64_t hash, const char *fv, const char *tv,
                          const char *state, const char *ns_row) {
  kvp__tier_engine_t *e = ctx;
  long from = -1, to = -1;
  kvp__index_block_t b;

  (void)id;
  (void)state;
  for (size_t v = 0; v < e->nvols; v++) {
    if (fv && strcmp(e->vols[v].name, fv) == 0)
      from = (long)v;
    if (tv && tv[0] && strcmp(e->vols[v].name, tv) == 0)
      to = (long)v;
  }
  if (kvp__index_get(e->ix, hash, &b, NULL, 0, NULL) != 0)
    return; /* the block left the index (a clear, a worker down): nothing to fix */
  uint16_t part = kvp__tier_recover_part(e, ns_row, hash, to, from);
  const char *ns = kvp__tier_ns(e, part);
  if (to >= 0 && kvp_volume_exists(e->vols[to].v, ns, hash) == 1)
    kvp__index_store(e->ix, hash, b.parent != hash, b.parent, e->parts[part].worker_id,
                     e->vols[to].tier, e->vols[to].id, b.tokens, b.bytes, b.last_access_ms);
  if (from >= 0 && kvp_volume_exists(e->vols[from].v, ns, hash) == 0)
    kvp__tier_drop_locations(e, hash, &e->vols[from], e->nparts > 1 ? part : -1);
}

/* Margin of kvp__journal_recent: a job's final journal commit and its
 * effects on the index (kvp__tier_job_after) are this close at most in practice. */
#define RECONCILE_MARGIN_MS 10000

int kvp__tier_engine_open(const kvp__tier_opts_t *o, uv_loop_t *loop, kvp__index_t *ix,
                          kvp__tier_engine_t **out, char *err, size_t errlen) {
  kvp__tier_engine_t *e = calloc(1, sizeof *e);
  int rc;

  *out = NULL;
  if (e == NULL)
    return KVP_ENOMEM;
  e->loop = loop;
  e->ix = ix;
  kvp__map64_init(&e->pendset, 0);
  kvp__map64_init(&e->pinned, 0);
  kvp__map64_init(&e->opset, 0);
  snprintf(e->ns, sizeof e->ns, "%s", o->ns);
  snprintf(e->db_path, sizeof e->db_path, "%s", o->db_path);
  kvp__tier_params_init(&e->prm);
  e->prm.high_watermark = o->high;
  e->prm.low_watermark = o->low;
  e->prm.promote_freq = o->promote_freq;
  e->prm.keep_freq = o->keep_freq;
  e->prm.min_residence_ms = (uint64_t)o->residence_ms;
  e->interval_ms = (uint64_t)o->interval_ms;
  e->grace_ms = (uint64_t)o->grace_ms;
  e->scrub_ms = o->scrub_ms > 0 ? (uint64_t)o->scrub_ms : 0;
  e->scrub_due_ms = kvp__unix_ms() + e->scrub_ms;
  e->compact_ms = o->compact_ms > 0 ? (uint64_t)o->compact_ms : 60000;
  e->compact_ratio = o->compact_ratio;
  e->max_moves = (size_t)o->max_moves;
  e->max_parallel = o->max_parallel > 0 ? (size_t)o->max_parallel : 1;
  e->scrub_files_per_s = o->scrub_files_per_s > 0 ? (uint64_t)o->scrub_files_per_s : 0;
  e->scrub_bytes_per_s = o->scrub_bytes_per_s > 0 ? (uint64_t)o->scrub_bytes_per_s : 0;
  e->scrub_verify = o->scrub_verify;
  e->scrub_max_keys = SCRUB_MAX_KEYS;
  e->scrub_row = -1;
  e->max_bytes_per_s = (double)o->max_bytes_per_s;
  e->budget = e->max_bytes_per_s;
  e->budget_ms = kvp__unix_ms();
  e->prm.prefetch_depth = (uint32_t)o->prefetch_depth;
  e->prm.prefetch_bytes = (uint64_t)o->prefetch_bytes;
  if ((rc = kvp__tier_params_check(&e->prm, err, errlen)) != 0 ||
      (rc = kvp__tier_pol_open(o->policy, o->policy_params, &e->pol, err, errlen)) != 0)
    goto fail;
  rc = KVP_ENOMEM;
  if ((e->vols = calloc((size_t)o->nvolumes + 1, sizeof *e->vols)) == NULL)
    goto fail;
  for (int i = 0; i < o->nvolumes; i++) {
    kvp__map64_init(&e->vols[i].orphans, 0);
    if ((rc = open_volume(e, o, &o->volumes[i], &e->vols[i], err, errlen)) != 0)
      goto fail;
    e->nvols++;
  }
  /* The partitions tiered, their advisor workers and publishers, and the
   * shares of shared volumes (parts.c). */
  if ((rc = kvp__tier_parts_open(e, o, err, errlen)) != 0)
    goto fail;
  if ((rc = kvp__journal_open(o->db_path, &e->db, err, errlen)) != 0 ||
      (rc = kvp__journal_open(o->db_path, &e->sdb, err, errlen)) != 0)
    goto fail;
  for (size_t v = 0; v < e->nvols && rc == 0; v++)
    rc = kvp__journal_volume(e->db, e->vols[v].name, e->vols[v].tier, e->vols[v].capacity,
                             kvp__unix_ms());
  if (rc == 0)
    rc = kvp__journal_recent(e->db, RECONCILE_MARGIN_MS, reconcile_row, e);
  if (rc == 0)
    rc = kvp__journal_unfinished(e->db, recover_row, e);
  if (rc == 0)
    rc = kvp__journal_scrub_recover(e->sdb, kvp__unix_ms());
  /* The scrub goes on where the last process left it: the volume whose
   * last finished pass is the oldest first. */
  for (size_t v = 0, oldest = UINT64_MAX; v < e->nvols && rc == 0; v++) {
    uint64_t t = kvp__journal_scrub_last(e->sdb, e->vols[v].name);
    if (t < oldest) {
      oldest = t;
      e->scrub_next = v * e->nparts;
    }
  }
  if (rc == 0 && (rc = kvp__journal_open(o->db_path, &e->ctl_db, err, errlen)) == 0 &&
      (rc = kvp__tier_pins_load(e)) != 0)
    snprintf(err, errlen, "tiering: loading the pins: %s", kvp__journal_errmsg(e->ctl_db));
  if (rc == 0 && e->npins > 0)
    kvp_log_info("tiering: %zu pins (%" PRIu64 " blocks pinned with their ancestors)", e->npins,
                 e->st.pinned_blocks);
  if (rc != 0) {
    snprintf(err, errlen, "tiering: %s: the volumes or migrations tables: %s", o->db_path,
             kvp__journal_errmsg(e->db));
    goto fail;
  }
  if (uv_timer_init(loop, &e->timer) != 0) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  e->timer.data = e;
  e->timer_ready = 1;
  e->handles_open++;
  if (uv_async_init(loop, &e->async, kvp__tier_job_progress) != 0) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  e->async.data = e;
  e->async_ready = 1;
  e->handles_open++;
  kvp_log_info("tiering: %zu volumes, policy %s, watermarks %.2f/%.2f, every %" PRIu64 " ms",
               e->nvols, e->pol->ops->name, e->prm.low_watermark, e->prm.high_watermark,
               e->interval_ms);
  *out = e;
  return 0;
fail:
  kvp__tier_engine_close(e);
  return rc;
}
