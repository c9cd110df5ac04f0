/* Advisor queries; see api.h. */
#include "advisor/api.h"

#include "advisor/routerapi.h"
#include "tier/engine.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/event.h"
#include "kvplane/status.h"
#include "metrics/build_info.h"

static int parse_hex(const char *s, uint64_t *out) {
  char *end;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    s += 2;
  if (*s == '\0' || strlen(s) > 16)
    return KVP_EPROTO;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 16);
  if (errno != 0 || *end != '\0')
    return KVP_EPROTO;
  *out = v;
  return 0;
}

int kvp__adv_api_parse_match(const void *data, size_t len, uint64_t **hashes, size_t *n, char *err,
                             size_t errlen) {
  const uint8_t *p = data;
  json_t *root = NULL, *arr;
  json_error_t jerr;
  uint64_t *h = NULL;
  size_t cnt;
  int rc = KVP_EPROTO;

  *hashes = NULL;
  *n = 0;
  if (len >= 4 && memcmp(p, KVP_MATCH_MAGIC, 4) == 0) {
    if ((len - 4) % 8 != 0) {
      snprintf(err, errlen, "binary request: length %zu is not 4 + 8n", len);
      return KVP_EPROTO;
    }
    cnt = (len - 4) / 8;
    if (cnt > KVP_MATCH_MAX)
      return KVP_ETOOBIG;
    if (cnt && (h = malloc(cnt * sizeof *h)) == NULL)
      return KVP_ENOMEM;
    for (size_t i = 0; i < cnt; i++) {
      uint64_t v = 0;
      for (int b = 7; b >= 0; b--)
        v = v << 8 | p[4 + i * 8 + (size_t)b];
      h[i] = v;
    }
    *hashes = h;
    *n = cnt;
    return 0;
  }
  /* u64 hashes as JSON numbers above INT64_MAX (client.h: "read as the
   * same 64 bits"): jansson refused them as "too big integer". */
  size_t wlen;
  char *text = kvp__rapi_widen_u64(data, len, &wlen);
  if (text == NULL)
    return KVP_ENOMEM;
  root = json_loadb(text, wlen, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (root == NULL) {
    snprintf(err, errlen, "bad JSON: %s", jerr.text);
    return KVP_EPROTO;
  }
  arr = json_object_get(root, "hashes");
  if (!json_is_array(arr)) {
    snprintf(err, errlen, "expected {\"hashes\": [...]}");
    goto done;
  }
  cnt = json_array_size(arr);
  if (cnt > KVP_MATCH_MAX) {
    rc = KVP_ETOOBIG;
    snprintf(err, errlen, "more than %d hashes", KVP_MATCH_MAX);
    goto done;
  }
  if (cnt && (h = malloc(cnt * sizeof *h)) == NULL) {
    rc = KVP_ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < cnt; i++) {
    json_t *v = json_array_get(arr, i);
    if (json_is_string(v) && parse_hex(json_string_value(v), &h[i]) == 0)
      continue;
    if (json_is_integer(v)) {
      h[i] = (uint64_t)json_integer_value(v);
      continue;
    }
    snprintf(err, errlen, "hashes[%zu]: expected a hex string or an integer", i);
    goto done;
  }
  *hashes = h;
  *n = cnt;
  h = NULL;
  rc = 0;
done:
  free(h);
  json_decref(root);
  return rc;
}

static int dump(json_t *o, char **reply) {
  *reply = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return *reply ? 0 : KVP_ENOMEM;
}

static int by_length(const void *a, const void *b) {
  const kvp__index_match_t *x = a, *y = b;
  if (x->length != y->length)
    return x->length > y->length ? -1 : 1;
  if (x->worker != y->worker)
    return x->worker < y->worker ? -1 : 1;
  return x->tier - y->tier;
}

void kvp__adv_api_add_where(void *obj, const kvp__adv_api_where_t *w) {
  json_t *o = obj, *owned, *pos;
  if (o == NULL || w == NULL)
    return;
  owned = json_array();
  pos = json_array();
  for (int i = 0; owned && pos && i < w->n; i++) {
    json_array_append_new(owned, json_integer((json_int_t)w->owned[i]));
    json_array_append_new(pos, json_integer((json_int_t)w->positions[i]));
  }
  json_t *parts = json_pack("{s:I, s:o, s:o}", "count", (json_int_t)w->count, "owned",
                            owned ? owned : json_array(), "positions", pos ? pos : json_array());
  if (parts != NULL && w->ncatching > 0) {
    json_t *c = json_array();
    for (int i = 0; c && i < w->ncatching; i++)
      json_array_append_new(c, json_pack("{s:I, s:I}", "partition", (json_int_t)w->catching[i],
                                         "behind", (json_int_t)w->behind[i]));
    json_object_set_new(parts, "catching_up", c ? c : json_array());
  }
  json_object_set_new(o, "partitions", parts);
  if (w->advisor != NULL)
    json_object_set_new(o, "advisor", json_string(w->advisor));
  json_object_set_new(o, "ready", json_boolean(w->ready));
  json_object_set_new(o, "ready_ms", json_integer((json_int_t)w->ready_ms));
}

int kvp__adv_api_match(const kvp__index_t *ix, const void *data, size_t len, char **reply) {
  return kvp__adv_api_match_at(ix, NULL, data, len, reply);
}

int kvp__adv_api_match_at(const kvp__index_t *ix, const kvp__adv_api_where_t *w, const void *data,
                          size_t len, char **reply) {
  uint64_t *h = NULL;
  size_t n, cap = 4 * (kvp__index_worker_count(ix) + 1);
  kvp__index_match_t *rows = NULL;
  char err[256];
  json_t *o = NULL, *arr;
  size_t nrows = 0;
  int rc;

  rc = kvp__adv_api_parse_match(data, len, &h, &n, err, sizeof err);
  if (rc == KVP_ETOOBIG)
    snprintf(err, sizeof err, "more than %d hashes", KVP_MATCH_MAX);
  if (rc != 0 && rc != KVP_ENOMEM)
    return dump(json_pack("{s:s}", "error", err), reply);
  if (rc != 0)
    return rc;
  if ((rows = malloc(cap * sizeof *rows)) == NULL) {
    rc = KVP_ENOMEM;
    goto done;
  }
  /* cap covers every (worker, tier) pair: KVP_ENOSPC cannot happen, and
   * would leave the first cap rows. */
  (void)kvp__index_match(ix, h, n, rows, cap, &nrows);
  qsort(rows, nrows, sizeof *rows, by_length);
  o = json_pack("{s:I, s:[]}", "hashes", (json_int_t)n, "matches");
  arr = o ? json_object_get(o, "matches") : NULL;
  for (size_t i = 0; arr && i < nrows; i++) {
    uint32_t dp = 0;
    const char *w = kvp__index_worker_name(ix, rows[i].worker, &dp);
    json_array_append_new(arr, json_pack("{s:s, s:I, s:s, s:I}", "worker", w, "dp_rank",
                                         (json_int_t)dp, "tier", kvp_tier_name(rows[i].tier),
                                         "length", (json_int_t)rows[i].length));
  }
  kvp__adv_api_add_where(o, w);
  rc = dump(o, reply);
done:
  free(rows);
  free(h);
  return rc;
}

int kvp__adv_api_stats(const kvp__index_t *ix, const kvp__adv_ingest_t *ing,
                       const kvp__adv_api_extra_t *x, char **reply) {
  kvp__index_stats_t s;
  const kvp__adv_ingest_counters_t *c = kvp__adv_ingest_counters(ing);
  json_t *tiers = json_object();

  kvp__index_stats(ix, &s);
  for (int t = 1; tiers && t <= KVP_TIER_MAX; t++)
    json_object_set_new(tiers, kvp_tier_name(t),
                        json_pack("{s:I, s:I}", "locations", (json_int_t)s.tier_locations[t],
                                  "bytes", (json_int_t)s.tier_bytes[t]));
  json_t *ingest = json_pack(
      "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
      "s:I, s:I, s:I, s:I, s:I}",
      "messages", (json_int_t)c->messages, "batches", (json_int_t)c->batches, "heartbeats",
      (json_int_t)c->heartbeats, "events", (json_int_t)c->events, "block_events",
      (json_int_t)c->block_events, "malformed", (json_int_t)c->malformed, "oversized",
      (json_int_t)c->oversized, "bad_events", (json_int_t)c->bad_events, "duplicates",
      (json_int_t)c->duplicates, "stale", (json_int_t)c->stale, "gaps", (json_int_t)c->gaps,
      "resyncs", (json_int_t)c->resyncs, "snapshots", (json_int_t)c->snapshots, "epochs",
      (json_int_t)c->epochs, "downs", (json_int_t)c->downs, "unknown_removes",
      (json_int_t)c->unknown_removes, "foreign", (json_int_t)c->foreign, "mispartitioned",
      (json_int_t)c->mispartitioned, "spoofed", (json_int_t)c->spoofed, "unpartitioned",
      (json_int_t)c->unpartitioned, "own", (json_int_t)c->own);
  json_t *store =
      json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "stream_seq", (json_int_t)x->stream_seq,
                "committed_seq", (json_int_t)x->committed_seq, "flushes", (json_int_t)x->flushes,
                "flush_errors", (json_int_t)x->flush_errors, "last_flush_ms",
                (json_int_t)x->last_flush_ms, "last_flush_blocks", (json_int_t)x->last_flush_blocks,
                "dirty", (json_int_t)x->dirty, "history_dropped", (json_int_t)x->history_dropped);
  json_t *fresh = json_pack(
      "{s:I, s:I, s:I, s:I, s:I}", "apply_lag_ms", (json_int_t)x->apply_lag_ms, "apply_lag_max_ms",
      (json_int_t)x->apply_lag_max_ms, "flush_lag_ms", (json_int_t)x->flush_lag_ms,
      "flush_lag_max_ms", (json_int_t)x->flush_lag_max_ms, "pending_ms", (json_int_t)x->pending_ms);
  json_t *o =
      json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:I}", "version",
                kvp__build_version(), "namespace", x->ns, "mode", x->mode, "uptime_ms",
                (json_int_t)x->uptime_ms, "blocks", (json_int_t)s.blocks, "locations",
                (json_int_t)s.locations, "workers", (json_int_t)kvp__index_worker_count(ix),
                "workers_up", (json_int_t)kvp__adv_ingest_workers_up(ing), "index_memory_bytes",
                (json_int_t)s.memory_bytes, "tiers", tiers, "ingest", ingest, "store", store,
                "freshness", fresh, "queue_dropped", (json_int_t)x->queue_dropped);
  if (o != NULL)
    json_object_set_new(
        o, "index",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "memory_used_bytes",
                  (json_int_t)x->memory_used, "max_memory", (json_int_t)x->max_memory,
                  "max_locations", (json_int_t)x->max_locations, "headroom_bytes",
                  (json_int_t)x->headroom_bytes, "headroom_locations",
                  (json_int_t)x->headroom_locations, "evicted_locations", (json_int_t)x->evicted,
                  "evictions", (json_int_t)x->evict_rounds, "load_ms", (json_int_t)x->load_ms));
  if (o == NULL || x->tier == NULL)
    json_decref(x->leases); /* not placed below: the reply took nothing */
  if (o != NULL && x->tier != NULL) {
    json_t *vols = json_array();
    for (size_t i = 0; vols && i < x->ntier_vols; i++) {
      const kvp__tier_vol_stats_t *v = &x->tier_vols[i];
      json_t *jv = json_pack(
          "{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "name", v->name,
          "tier", v->tier, "capacity", (json_int_t)v->capacity, "used", (json_int_t)v->used,
          "moved_in", (json_int_t)v->moved_in, "moved_out", (json_int_t)v->moved_out, "bytes_in",
          (json_int_t)v->bytes_in, "bytes_out", (json_int_t)v->bytes_out, "evicted",
          (json_int_t)v->evicted, "failed_full", (json_int_t)v->failed_full, "failed_other",
          (json_int_t)v->failed_other, "missing", (json_int_t)v->missing, "queued",
          (json_int_t)v->queued, "backoff", v->backoff);
      if (jv && v->capacity)
        json_object_set_new(jv, "fill", json_real((double)v->used / (double)v->capacity));
      if (jv && v->tier == 3) {
        json_object_set_new(jv, "above_high_ms", json_integer((json_int_t)v->above_high_ms));
        json_object_set_new(jv, "above_high_max_ms",
                            json_integer((json_int_t)v->above_high_max_ms));
      }
      if (jv)
        json_object_set_new(jv, "pinned_bytes", json_integer((json_int_t)v->pinned_bytes));
      if (jv && v->store_bytes) { /* a compactable volume's garbage (compact.c) */
        json_object_set_new(jv, "dead_bytes", json_integer((json_int_t)v->dead_bytes));
        json_object_set_new(jv, "store_bytes", json_integer((json_int_t)v->store_bytes));
        json_object_set_new(jv, "compacted_bytes", json_integer((json_int_t)v->compacted_bytes));
      }
      json_array_append_new(vols, jv);
    }
    json_object_set_new(
        o, "tiering",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:o}",
                  "rounds", (json_int_t)x->tier->rounds, "demoted", (json_int_t)x->tier->demoted,
                  "evicted", (json_int_t)x->tier->evicted, "sources_deleted",
                  (json_int_t)x->tier->sources_deleted, "failed", (json_int_t)x->tier->failed,
                  "bytes_moved", (json_int_t)x->tier->bytes_moved, "promoted",
                  (json_int_t)x->tier->promoted, "prefetched", (json_int_t)x->tier->prefetched,
                  "throttled", (json_int_t)x->tier->throttled, "hits_dropped",
                  (json_int_t)x->tier->hits_dropped, "events_published",
                  (json_int_t)x->tier->events_published, "events_dropped",
                  (json_int_t)x->tier->events_dropped, "high_watermark", x->high_watermark,
                  "low_watermark", x->low_watermark, "volumes", vols ? vols : json_array()));
    const kvp__tier_stats_t *t = x->tier;
    json_t *jt = json_object_get(o, "tiering");
    json_object_set_new(
        jt, "scrub",
        json_pack("{s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                  "running", t->scrub_running, "volume", t->scrub_volume, "progress_objects",
                  (json_int_t)t->scrub_progress_objects, "progress_verified",
                  (json_int_t)t->scrub_progress_verified, "passes", (json_int_t)t->scrubs,
                  "objects", (json_int_t)t->scrub_objects, "verified",
                  (json_int_t)t->scrub_verified, "verified_bytes",
                  (json_int_t)t->scrub_verified_bytes, "missing", (json_int_t)t->scrub_missing,
                  "orphans", (json_int_t)t->scrub_orphans, "orphans_deleted",
                  (json_int_t)t->orphans_deleted, "orphans_adopted", (json_int_t)t->orphans_adopted,
                  "corrupt", (json_int_t)t->scrub_corrupt, "ms", (json_int_t)t->scrub_ms));
    if (x->where != NULL && x->where->count > 0) {
      json_t *tp = json_array();
      for (size_t i = 0; i < x->ntiered; i++)
        json_array_append_new(tp, json_integer(x->tiered[i]));
      json_object_set_new(jt, "partitions", tp);
    }
    if (x->leases != NULL) {
      json_object_set_new(jt, "leases", x->leases); /* takes it, or frees it */
      json_object_set_new(jt, "leases_held", json_integer((json_int_t)x->leases_held));
    }
    if (x->ns_lease_holder != NULL)
      json_object_set_new(jt, "legacy",
                          json_pack("{s:s, s:b, s:s, s:I, s:I, s:I}", "namespace", x->ns, "held",
                                    x->ns_lease, "holder", x->ns_lease_holder, "deleted",
                                    (json_int_t)t->legacy_deleted, "deleted_bytes",
                                    (json_int_t)t->legacy_deleted_bytes, "failed",
                                    (json_int_t)t->legacy_failed));
    json_object_set_new(jt, "quarantined", json_integer((json_int_t)t->quarantined));
    json_object_set_new(jt, "parallel_peak", json_integer((json_int_t)t->parallel_peak));
    json_object_set_new(jt, "compactions", json_integer((json_int_t)t->compactions));
    json_object_set_new(jt, "compacted_bytes", json_integer((json_int_t)t->compacted_bytes));
    json_object_set_new(jt, "pins", json_integer((json_int_t)t->pins));
    json_object_set_new(jt, "pinned_blocks", json_integer((json_int_t)t->pinned_blocks));
    json_object_set_new(jt, "operator_ops", json_integer((json_int_t)t->operator_ops));
  }
  kvp__adv_api_add_where(o, x->where);
  return dump(o, reply);
}
