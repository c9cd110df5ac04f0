/* The operator's tiering controls, gathered (kvp_client_tier_all in
 * include/kvplane/client.h): one pin, unpin, move or delete request to
 * every advisor on kvplane.api.<ns>.tier, and one answer merged from their
 * replies.
 *
 * A partitioned deployment has one tiering advisor per partition, and each
 * acts only on its own partitions' blocks (docs/SCALE.md): a request that
 * reached only the first advisor to answer would pin or move some of the
 * prefix and say nothing of the rest. Each tiering advisor's reply names
 * the partitions it tiers ("partitions": {"count", "owned", ...}, the
 * shape kvp_client_request_all covers partitions by), so the gather waits
 * for every partition's advisor, and the merge says which did not answer.
 *
 * Merged reply: {"op", "blocks", then the sums of "changed", "queued",
 * "pinned_blocks", "continuations" and "in_flight", the largest "pins" and the
 * smallest "skipped" (a block one advisor skips is another's), "advisors": [names that acted],
 * "partitions": C, "missing": [p, ...]}, plus "error" when any advisor
 * refused (its cause, named by advisor; every refusal is in "errors") or
 * a partition had no tiering advisor answering. Advisors with tiering off
 * (a standby) answer "tiering": false and are listed in "not_tiering",
 * not counted as refusals. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "common/errf.h"
#include "kvplane/client.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

/* The integer fields of the replies and how they merge. */
typedef enum { SUM, MAX, MIN } how_t;

static const struct {
  const char *key;
  how_t how;
} fields[] = {
    {"changed", SUM}, {"queued", SUM},        {"pinned_blocks", SUM}, {"pins", MAX},
    {"skipped", MIN}, {"continuations", SUM}, {"in_flight", SUM},
};

static void merge_field(json_t *out, const char *key, how_t how, json_int_t v) {
  json_t *have = json_object_get(out, key);
  if (have != NULL) {
    json_int_t h = json_integer_value(have);
    v = how == SUM ? h + v : how == MAX ? (v > h ? v : h) : (v < h ? v : h);
  }
  json_object_set_new(out, key, json_integer(v));
}

static const char *name_of(json_t *rep) {
  const char *n = json_string_value(json_object_get(rep, "advisor"));
  return n ? n : "an advisor";
}

json_t *kvp__client_tier_merge(json_t *all, uint32_t timeout_ms) {
  json_t *out = json_object(), *acted = json_array(), *errors = json_array(), *off = json_array(),
         *reps = json_object_get(all, "replies"), *missing = json_object_get(all, "missing");
  char first[512] = "";
  size_t i;
  json_t *rep;

  if (out == NULL || acted == NULL || errors == NULL || off == NULL) {
    json_decref(out);
    out = NULL;
    goto done;
  }
  json_array_foreach(reps, i, rep) {
    json_t *e = json_object_get(rep, "error");
    if (!json_is_object(rep))
      continue;
    if (e != NULL) {
      if (json_is_false(json_object_get(rep, "tiering"))) {
        json_array_append_new(off, json_string(name_of(rep)));
        continue;
      }
      json_array_append_new(errors, json_pack("{s:s, s:O}", "advisor", name_of(rep), "error", e));
      if (first[0] == '\0')
        snprintf(first, sizeof first, "%s: %s", name_of(rep),
                 json_is_string(e) ? json_string_value(e) : "refused");
      continue;
    }
    json_array_append_new(acted, json_string(name_of(rep)));
    if (json_object_get(out, "op") == NULL && json_is_string(json_object_get(rep, "op")))
      json_object_set(out, "op", json_object_get(rep, "op"));
    if (json_is_integer(json_object_get(rep, "blocks")))
      json_object_set(out, "blocks", json_object_get(rep, "blocks"));
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
      json_t *v = json_object_get(rep, fields[f].key);
      if (json_is_integer(v))
        merge_field(out, fields[f].key, fields[f].how, json_integer_value(v));
    }
  }
  json_object_set(out, "partitions", json_object_get(all, "partitions"));
  json_object_set_new(out, "missing", missing ? json_incref(missing) : json_array());
  json_object_set(out, "advisors", acted);
  if (json_array_size(off) > 0)
    json_object_set(out, "not_tiering", off);
  if (json_array_size(errors) > 0)
    json_object_set(out, "errors", errors);
  if (first[0] != '\0') {
    json_object_set_new(out, "error", json_string(first));
  } else if (json_array_size(acted) == 0) {
    json_object_set_new(out, "error",
                        json_string(json_array_size(off) > 0
                                        ? "tiering is off on every advisor that answered"
                                        : "no advisor answered"));
  } else if (json_array_size(missing) > 0) {
    char list[256] = "";
    size_t at = 0;
    json_array_foreach(missing, i, rep) {
      if (at < sizeof list - 16)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%lld", i ? "," : "",
                               (long long)json_integer_value(rep));
    }
    char msg[400];
    snprintf(msg, sizeof msg,
             "partitions %s: no tiering advisor answered within %u ms (the others acted)", list,
             timeout_ms);
    json_object_set_new(out, "error", json_string(msg));
  }
done:
  json_decref(acted);
  json_decref(errors);
  json_decref(off);
  return out;
}

int kvp_client_tier_all(kvp_client_t *c, const char *body, uint32_t timeout_ms, char **reply,
                        char *err, size_t errlen) {
  char *raw = NULL;
  int rc;

  *reply = NULL;
  if (body == NULL)
    return kvp__errf(err, errlen, KVP_EINVAL, "tier: no request");
  if ((rc = kvp_client_request_all(c, KVP_API_TIER, body, timeout_ms, &raw, err, errlen)) != 0)
    return rc;
  json_t *all = json_loads(raw, 0, NULL);
  kvp_client_reply_free(raw);
  if (all == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "tier: out of memory");
  if (json_array_size(json_object_get(all, "replies")) == 0) {
    json_decref(all);
    return kvp__errf(err, errlen, KVP_ETIMEDOUT, "tier: no advisor answered within %u ms",
                     timeout_ms);
  }
  json_t *out = kvp__client_tier_merge(all, timeout_ms);
  json_decref(all);
  *reply = out ? json_dumps(out, JSON_COMPACT) : NULL;
  json_decref(out);
  if (*reply == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "tier: out of memory");
  return 0;
}
