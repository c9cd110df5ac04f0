/* Live rebalancing (docs/SCALE.md, "Moving a partition"): a running
 * partitioned advisor adds or drops partitions on a request addressed to
 * it, kvplane.api.<ns>.partitions.<consumer name> (kvplane partitions):
 *
 *   request  {"add": [p, ...], "drop": [p, ...], "tier": [p, ...],
 *            "untier": [p, ...]}   (any of them, or {}: the state only)
 *   reply    {"advisor": name, "count": C, "owned": [...], "ready": [...],
 *             "catching_up": [{"partition": p, "behind": N}, ...],
 *             "tiering": [...], "tiering_soon": [...]}
 *            or the same with {"error": "..."}, nothing changed when the
 *            request itself is wrong
 *
 * tier and untier move the tiering of an owned partition between a
 * partition's advisor and its standby ([tiering] partitions says which
 * tiers at start): untier on the old one (if it still runs), then tier on
 * the other; one advisor tiers a partition at a time (docs/SCALE.md). A
 * partition to tier that is still catching up is tiered once caught up
 * ("tiering_soon"). A partition added live is tiered once caught up when
 * [tiering] partitions is empty (every owned one), and only on request
 * otherwise.
 *
 * Why a request and not a configuration reload on SIGHUP: moving a
 * partition is a step between two advisors, usually on two machines, that
 * one operator (or tool) drives in order (add on the new owner, wait until
 * it is ready, drop on the old one); the request says when each step is
 * done and how far the new owner is behind, which a signal cannot. The
 * configuration stays the start-up truth: change [partitions] owned there
 * too, or the next start goes back to it.
 *
 * A request is taken on the loop thread once the write-behind and the
 * tiering engine are idle (kvp__adv_parts_poll). Its tier and untier
 * alone are applied at once. Adds and drops are a move
 * (rebalance_move.c, whose header has the steps and which threads take
 * them), with the loop answering queries all along; what a query sees:
 *   - drop p: from the request's start p is not in "owned" (nor "ready"
 *     nor "catching_up") in any reply, match, stats or partitions, so a
 *     gathering client takes p from another advisor or reports it
 *     missing, and the merge ignores p's rows still in this index (never
 *     a half-dropped p as whole), and the tiering engine stops tiering p
 *     (its objects are left to the next owner). What was applied is
 *     flushed (acked); then in one transaction the rows of p's workers,
 *     the blocks no one else holds and p's position leave the database
 *     (a kill -9 leaves them all or none); p's durable consumer is
 *     deleted; the workers leave the index (in slices) and the ingest.
 *   - add p: p is in no reply until the move ends; then p's consumer,
 *     made after the database's position for p (0: the stream's start,
 *     the case after a drop), is in place, and until it caught up with
 *     the stream as it stood then, replies list p under "catching_up" and
 *     not under "owned", so a gathering client takes p from another
 *     advisor or reports it missing, never an incomplete answer as whole;
 *     the tiering engine takes it then too (before, a scrub would find
 *     its objects in G4 without the locations the stream still brings).
 * The reply to the request goes when the move is done; a second request
 * meanwhile is answered "busy". */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/rebalance.h"

#include "advisor/advisor_impl.h"
#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

/* Reads a list of partitions (absent: none) into out. */
static int read_list(json_t *doc, const char *key, uint32_t count, uint32_t *out, int *n, char *err,
                     size_t errlen) {
  json_t *a = json_object_get(doc, key), *v;
  size_t i;
  *n = 0;
  if (a == NULL)
    return 0;
  if (!json_is_array(a) || json_array_size(a) > KVP__ADV_MAX_OWNED) {
    snprintf(err, errlen, "\"%s\" is not a list of at most %d partitions", key, KVP__ADV_MAX_OWNED);
    return KVP_EINVAL;
  }
  json_array_foreach(a, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= (json_int_t)count) {
      snprintf(err, errlen, "\"%s\": a partition is not an integer in 0..%" PRIu32, key, count - 1);
      return KVP_EINVAL;
    }
    out[(*n)++] = (uint32_t)json_integer_value(v);
  }
  return 0;
}

static void tier_caught_up(kvp_advisor_t *adv);

/* p is tiered once caught up (tier_caught_up). */
static void tier_soon(kvp_advisor_t *adv, uint32_t p) {
  int k = 0;
  while (k < adv->ntier_wait && adv->tier_wait[k] != p)
    k++;
  if (k == adv->ntier_wait && adv->ntier_wait < KVP__ADV_MAX_OWNED)
    adv->tier_wait[adv->ntier_wait++] = p;
  kvp__adv_lease_want(adv->lease, p, 1);
}

void kvp__adv_tier_soon(kvp_advisor_t *adv, uint32_t p) {
  tier_soon(adv, p);
}

/* p is not to be tiered here (untier, drop): its lease is released, once
 * the engine stopped tiering p (the callers' next step, the engine idle). */
void kvp__adv_tier_not_soon(kvp_advisor_t *adv, uint32_t p) {
  for (int k = 0; k < adv->ntier_wait; k++)
    if (adv->tier_wait[k] == p)
      adv->tier_wait[k--] = adv->tier_wait[--adv->ntier_wait];
  kvp__adv_lease_want(adv->lease, p, 0);
}

/* 0, or KVP_EINVAL with err when a partition is in both a (na) and b (nb)
 * (or twice in a when b is a). */
static int disjoint(const uint32_t *a, int na, const uint32_t *b, int nb, const char *what,
                    char *err, size_t errlen) {
  for (int i = 0; i < na; i++)
    for (int k = a == b ? i + 1 : 0; k < nb; k++)
      if (a[i] == b[k]) {
        snprintf(err, errlen, "partition %" PRIu32 " is named twice (%s)", a[i], what);
        return KVP_EINVAL;
      }
  return 0;
}

int kvp__adv_parts_parse(const void *data, size_t len, uint32_t count, kvp__adv_parts_req_t *r,
                         char *err, size_t errlen) {
  json_t *doc = json_loadb(data, len, 0, NULL);
  int rc;

  r->nadd = r->ndrop = r->ntier = r->nuntier = 0;
  if (!json_is_object(doc)) {
    json_decref(doc);
    snprintf(err, errlen, "the request is not a JSON object");
    return KVP_EINVAL;
  }
  rc = read_list(doc, "add", count, r->add, &r->nadd, err, errlen);
  if (rc == 0)
    rc = read_list(doc, "drop", count, r->drop, &r->ndrop, err, errlen);
  if (rc == 0)
    rc = read_list(doc, "tier", count, r->tier, &r->ntier, err, errlen);
  if (rc == 0)
    rc = read_list(doc, "untier", count, r->untier, &r->nuntier, err, errlen);
  json_decref(doc);
  if (rc == 0)
    rc = disjoint(r->add, r->nadd, r->add, r->nadd, "add", err, errlen);
  if (rc == 0)
    rc = disjoint(r->drop, r->ndrop, r->drop, r->ndrop, "drop", err, errlen);
  if (rc == 0)
    rc = disjoint(r->tier, r->ntier, r->tier, r->ntier, "tier", err, errlen);
  if (rc == 0)
    rc = disjoint(r->untier, r->nuntier, r->untier, r->nuntier, "untier", err, errlen);
  if (rc == 0)
    rc = disjoint(r->add, r->nadd, r->drop, r->ndrop, "add and drop", err, errlen);
  if (rc == 0)
    rc = disjoint(r->tier, r->ntier, r->untier, r->nuntier, "tier and untier", err, errlen);
  if (rc == 0)
    rc = disjoint(r->drop, r->ndrop, r->tier, r->ntier, "drop and tier", err, errlen);
  if (rc != 0)
    r->nadd = r->ndrop = r->ntier = r->nuntier = 0;
  return rc;
}

/* Whether p is among the n partitions of l. */
static int in(const uint32_t *l, int n, uint32_t p) {
  for (int i = 0; i < n; i++)
    if (l[i] == p)
      return 1;
  return 0;
}

/* The request's tier and untier, once its adds and drops are done:
 * untier stops at once (the engine is idle here), tier starts now when p
 * is caught up, else once it is. */
int kvp__adv_apply_tiering(kvp_advisor_t *adv, const kvp__adv_parts_req_t *r, char *err,
                           size_t errlen) {
  int rc;
  for (int i = 0; i < r->nuntier; i++) {
    kvp__adv_tier_not_soon(adv, r->untier[i]);
    uint32_t t[KVP_PARTITIONS_MAX];
    size_t nt = kvp__tier_engine_tiered(adv->tier, t, KVP_PARTITIONS_MAX);
    /* Also one waiting for its lease (its kept source deletes go). */
    if ((in(t, (int)(nt < KVP_PARTITIONS_MAX ? nt : KVP_PARTITIONS_MAX), r->untier[i]) ||
         adv->lease != NULL) &&
        (rc = kvp__tier_engine_partition(adv->tier, r->untier[i], 0, err, errlen)) != 0)
      return rc;
  }
  for (int i = 0; i < r->ntier; i++)
    tier_soon(adv, r->tier[i]);
  tier_caught_up(adv);
  return 0;
}

/* Applies the request: its tier and untier at once when it moves
 * nothing, else starts the move (rebalance_move.c), which replies when
 * done (*taken set). Returns 0 or an error with err (nothing changed when
 * the request itself is wrong). */
static int apply_request(kvp_advisor_t *adv, natsMsg *msg, int *taken, char *err, size_t errlen) {
  kvp__adv_partset_t *ps = &adv->parts;
  kvp__adv_parts_req_t r;
  int rc;

  *taken = 0;
  if (ps->count == 0) {
    snprintf(err, errlen, "this advisor is not partitioned");
    return KVP_EINVAL;
  }
  if ((rc = kvp__adv_parts_parse(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg),
                                 ps->count, &r, err, errlen)) != 0)
    return rc;
  int n = ps->n;
  for (int i = 0; i < r.nadd; i++)
    n += kvp__adv_partset_slot(ps, r.add[i]) < 0; /* owned already: nothing to do */
  for (int i = 0; i < r.ndrop; i++)
    n -= kvp__adv_partset_slot(ps, r.drop[i]) >= 0;
  if (n < 1 || n > KVP__ADV_MAX_OWNED) {
    snprintf(err, errlen, "an advisor owns 1..%d partitions; this request leaves %d",
             KVP__ADV_MAX_OWNED, n);
    return KVP_EINVAL;
  }
  if ((r.ntier || r.nuntier) && adv->tier == NULL) {
    snprintf(err, errlen, "tiering is off on this advisor ([tiering] enabled = false)");
    return KVP_EINVAL;
  }
  for (int i = 0; i < r.ntier; i++)
    if (kvp__adv_partset_slot(ps, r.tier[i]) < 0 && !in(r.add, r.nadd, r.tier[i])) {
      snprintf(err, errlen, "partition %" PRIu32 " is not owned here: add it to tier it",
               r.tier[i]);
      return KVP_EINVAL;
    }
  rc = kvp__adv_move_start(adv, msg, &r);
  if (rc == 0) {
    *taken = 1;
    return 0;
  }
  if (rc != KVP_ENOENT) {
    snprintf(err, errlen, "the move cannot start: %s", kvp_strerror(rc));
    return rc;
  }
  /* Nothing to add or drop. */
  return adv->tier != NULL ? kvp__adv_apply_tiering(adv, &r, err, errlen) : 0;
}

int kvp__adv_parts_view(kvp_advisor_t *adv, uint32_t *owned, uint64_t *pos, uint32_t *catching,
                        uint64_t *behind, int *ncatching) {
  int n = 0;
  *ncatching = 0;
  for (int i = 0; i < adv->parts.n; i++) {
    uint64_t b = 0;
    if (adv->leaving[i])
      continue; /* being dropped (rebalance_move.c): answered for no more */
    if (adv->parts.count == 0 ||
        kvp__adv_consumer_slot_ready(adv->consumer, i, adv->applied_pos[i], &b)) {
      owned[n] = adv->parts.p[i];
      pos[n++] = adv->applied_pos[i];
    } else {
      catching[*ncatching] = adv->parts.p[i];
      behind[(*ncatching)++] = b;
    }
  }
  return n;
}

void kvp__adv_parts_reply(kvp_advisor_t *adv, natsMsg *msg, int rc, const char *err) {
  uint32_t owned[KVP__ADV_MAX_OWNED], catching[KVP__ADV_MAX_OWNED];
  uint64_t pos[KVP__ADV_MAX_OWNED], behind[KVP__ADV_MAX_OWNED];
  char name[128];
  int nc = 0, n = kvp__adv_parts_view(adv, owned, pos, catching, behind, &nc);
  json_t *o = json_object(), *all = json_array(), *ready = json_array(), *cu = json_array();

  kvp__adv_consumer_name(&adv->cfg, name, sizeof name);
  for (int i = 0; i < adv->parts.n; i++)
    if (!adv->leaving[i])
      json_array_append_new(all, json_integer(adv->parts.p[i]));
  for (int i = 0; i < n; i++)
    json_array_append_new(ready, json_integer(owned[i]));
  for (int i = 0; i < nc; i++)
    json_array_append_new(cu, json_pack("{s:I, s:I}", "partition", (json_int_t)catching[i],
                                        "behind", (json_int_t)behind[i]));
  json_object_set_new(o, "advisor", json_string(name));
  json_object_set_new(o, "count", json_integer(adv->parts.count));
  json_object_set_new(o, "owned", all);
  json_object_set_new(o, "ready", ready);
  json_object_set_new(o, "catching_up", cu);
  if (adv->tier != NULL) {
    uint32_t t[KVP_PARTITIONS_MAX];
    size_t nt = kvp__tier_engine_tiered(adv->tier, t, KVP_PARTITIONS_MAX);
    json_t *tl = json_array(), *soon = json_array();
    for (size_t i = 0; i < nt && i < KVP_PARTITIONS_MAX; i++)
      json_array_append_new(tl, json_integer(t[i]));
    for (int i = 0; i < adv->ntier_wait; i++)
      json_array_append_new(soon, json_integer(adv->tier_wait[i]));
    json_object_set_new(o, "tiering", tl);
    json_object_set_new(o, "tiering_soon", soon);
    json_t *leases = kvp__adv_leases_json(adv);
    if (leases != NULL)
      json_object_set_new(o, "tiering_leases", leases);
  }
  if (rc != 0)
    json_object_set_new(o, "error", json_string(err));
  char *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  kvp__adv_consumer_reply(adv->consumer, msg, text ? text : "{\"error\": \"out of memory\"}");
  free(text);
}

void kvp__adv_parts_request(kvp_advisor_t *adv, natsMsg *msg) {
  if (adv->parts_req != NULL || adv->move != NULL) {
    kvp__adv_parts_reply(adv, msg, KVP_EBUSY,
                         "another rebalance request is being applied; ask again");
    natsMsg_Destroy(msg);
    return;
  }
  /* Applied on the flush timer, never from inside a drain: the change
   * drains the inbox itself, and a nested drain would apply newer
   * messages before the older ones the outer drain still holds (which
   * would then look like redeliveries and be dropped). */
  adv->parts_req = msg;
}

/* Partitions added live that caught up start being tiered. */
static void tier_caught_up(kvp_advisor_t *adv) {
  char err[256];
  for (int k = 0; k < adv->ntier_wait; k++) {
    int slot = kvp__adv_partset_slot(&adv->parts, adv->tier_wait[k]);
    if (slot >= 0 &&
        (!kvp__adv_consumer_slot_ready(adv->consumer, slot, adv->applied_pos[slot], NULL) ||
         (adv->lease != NULL && !kvp__adv_lease_held(adv->lease, adv->tier_wait[k]))))
      continue; /* not caught up, or another advisor tiers it (its lease) */
    if (slot < 0)
      kvp__adv_lease_want(adv->lease, adv->tier_wait[k], 0);
    if (slot >= 0 &&
        kvp__tier_engine_partition(adv->tier, adv->tier_wait[k], 1, err, sizeof err) != 0) {
      /* Its publisher did not open (parts.c): not tiered. With a lease it
       * waits on, tried again at each tick while the lease is held (the
       * open blocks the loop up to its connect timeout: not once the
       * servers are away long enough for the lease to lapse). */
      kvp_log_warn("advisor: rebalance: partition %" PRIu32 " is consumed but not tiered: %s%s",
                   adv->tier_wait[k], err,
                   adv->lease != NULL ? " (tried again at the next tick)" : "");
      if (adv->lease != NULL)
        continue;
    }
    adv->tier_wait[k--] = adv->tier_wait[--adv->ntier_wait];
  }
}

/* Partitions tiered here whose lease is gone (lost to another advisor, or
 * not renewed in time) stop being tiered; they wait for their lease
 * again. The engine is idle: a running job skips their moves already
 * (the engine's gate). */
static void leases_lost(kvp_advisor_t *adv) {
  uint32_t t[KVP_PARTITIONS_MAX];
  char err[256], who[KVP__ADV_LEASE_HOLDER_MAX];
  size_t nt = kvp__tier_engine_tiered(adv->tier, t, KVP_PARTITIONS_MAX);
  for (size_t i = 0; i < nt && i < KVP_PARTITIONS_MAX; i++) {
    if (kvp__adv_lease_held(adv->lease, t[i]))
      continue;
    if (kvp__tier_engine_partition(adv->tier, t[i], -1, err, sizeof err) != 0) {
      kvp_log_warn("advisor: tiering: partition %" PRIu32 ": %s", t[i], err);
      continue;
    }
    kvp__adv_lease_wanted(adv->lease, t[i], who, sizeof who);
    kvp_log_warn("advisor: tiering: partition %" PRIu32 " is no longer tiered here: this "
                 "advisor does not hold its lease%s%s; it is tiered here again once it does",
                 t[i], who[0] ? ", held by " : "", who);
    tier_soon(adv, t[i]);
  }
}

json_t *kvp__adv_leases_json(kvp_advisor_t *adv) {
  if (adv->lease == NULL)
    return NULL;
  json_t *a = json_array();
  if (adv->parts.count == 0) { /* unpartitioned: the namespace's lease */
    char who[KVP__ADV_LEASE_HOLDER_MAX];
    kvp__adv_lease_wanted(adv->lease, 0, who, sizeof who);
    int held = kvp__adv_lease_held(adv->lease, 0);
    json_array_append_new(a, json_pack("{s:s, s:b, s:s}", "namespace", adv->cfg.ns, "held", held,
                                       "holder", held ? "this advisor" : who));
    return a;
  }
  for (uint32_t p = 0; p < adv->parts.count; p++) {
    char who[KVP__ADV_LEASE_HOLDER_MAX];
    if (!kvp__adv_lease_wanted(adv->lease, p, who, sizeof who))
      continue;
    int held = kvp__adv_lease_held(adv->lease, p);
    json_array_append_new(a, json_pack("{s:I, s:b, s:s}", "partition", (json_int_t)p, "held", held,
                                       "holder", held ? "this advisor" : who));
  }
  return a;
}

/* The namespace's lease ("all", lease.h) stands for the engine's
 * KVP__TIER_NAMESPACE in the gate. */
_Static_assert(KVP__ADV_LEASE_NS == KVP__TIER_NAMESPACE, "the namespace's lease and gate differ");

/* Partitioned: the namespace's lease is wanted while this advisor holds a
 * partition's lease, so whoever tiers anything may hold it and delete
 * what an unpartitioned deployment left under <ns> (tier/legacy.c); of
 * several, one holds it at a time. Its holder deletes only in its own
 * volumes, so it hands the lease on once its scrub swept them all (each
 * listed whole, nothing left under <ns>), and does not want it again for
 * NS_REST_TTLS lease TTLs: an advisor waiting for it, with other volumes,
 * takes it meanwhile (docs/SCALE.md, "Switching a tiering deployment to
 * partitions"). An advisor without scrub ([tiering] scrub_interval 0)
 * never sweeps: it does not want it (held, it would never hand it on).
 * Nor does one keep it while none of its volumes is online: it hands it
 * on as if swept, and takes it again when its rest is over. */
#define NS_REST_TTLS 3
static void follow_partition_leases(kvp_advisor_t *adv) {
  uint64_t now = kvp__now_ns() / 1000000u;
  int want = adv->cfg.tier_scrub_ms > 0 && kvp__adv_lease_count(adv->lease) > 0 &&
             now >= adv->ns_rest_until;
  int held = kvp__adv_lease_held(adv->lease, KVP__ADV_LEASE_NS);
  if (held && !adv->ns_held) /* taken (again): a sweep of its own, from the passes after now */
    kvp__tier_engine_legacy_reset(adv->tier);
  adv->ns_held = held;
  int swept = want && held ? kvp__tier_engine_legacy_swept(adv->tier) : 0;
  if (swept) {
    adv->ns_rest_until = now + NS_REST_TTLS * kvp__adv_lease_ttl(adv->lease);
    kvp_log_info("advisor: tiering: %s key namespace %s: the namespace's lease is handed on "
                 "(wanted again in %" PRIu64 " ms)",
                 swept == 2 ? "no volume of this advisor's is online to sweep for objects under"
                            : "this advisor's volumes hold nothing more under",
                 adv->cfg.ns, NS_REST_TTLS * kvp__adv_lease_ttl(adv->lease));
    want = 0;
  }
  kvp__adv_lease_want(adv->lease, KVP__ADV_LEASE_NS, want);
}

/* Unpartitioned: the engine announces its moves (worker _advisor's
 * publisher open) exactly while this advisor holds the namespace's lease;
 * its rounds wait for both (engine.h). */
static void follow_namespace_lease(kvp_advisor_t *adv) {
  char err[256];
  int held = kvp__adv_lease_held(adv->lease, 0);
  if (held == kvp__tier_engine_announcing(adv->tier) || (!held && kvp__tier_engine_busy(adv->tier)))
    return; /* a job of the lease's last moments finishes first */
  if (kvp__tier_engine_announce(adv->tier, held, err, sizeof err) != 0)
    kvp_log_warn("advisor: tiering: %s (tried again at the next tick)", err);
  else if (!held)
    kvp_log_warn("advisor: tiering: namespace %s is no longer tiered here: this advisor does not "
                 "hold its lease; it is tiered here again once it does",
                 adv->cfg.ns);
}

void kvp__adv_parts_poll(kvp_advisor_t *adv) {
  char err[512] = "";
  natsMsg *msg = adv->parts_req;
  if (adv->move != NULL) {
    kvp__adv_move_poll(adv); /* finished once the engine is idle */
    if (adv->move != NULL)
      return;
  }
  if (adv->lease != NULL && adv->parts.count == 0 && adv->tier != NULL && !adv->stopped)
    follow_namespace_lease(adv);
  if (adv->lease != NULL && adv->parts.count > 0 && !adv->stopped && adv->tier != NULL &&
      !kvp__tier_engine_busy(adv->tier))
    leases_lost(adv);
  if (adv->lease != NULL && adv->parts.count > 0 && !adv->stopped && adv->tier != NULL)
    follow_partition_leases(adv);
  if (adv->ntier_wait > 0 && !adv->stopped && adv->tier != NULL &&
      !kvp__tier_engine_busy(adv->tier))
    tier_caught_up(adv);
  if (msg == NULL || adv->stopped || kvp__adv_wb_busy(&adv->wb) ||
      (adv->tier != NULL && kvp__tier_engine_busy(adv->tier)))
    return; /* the next flush tick looks again */
  adv->parts_req = NULL;
  int taken = 0, rc = apply_request(adv, msg, &taken, err, sizeof err);
  if (taken)
    return; /* the move replies when done */
  if (rc != 0)
    kvp_log_warn("advisor: rebalance request refused or failed: %s", err);
  kvp__adv_parts_reply(adv, msg, rc, err);
  natsMsg_Destroy(msg);
}
