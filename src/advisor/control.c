/* The operator's tiering controls over NATS (control.h): pin, unpin, move
 * and delete, carried out by the tiering engine (src/tier/control.c) on the
 * advisor's loop thread.
 *
 * Request: {"op": "pin" | "unpin" | "move" | "delete",
 *           "hashes": ["<hex>", ...]            sequence hashes, or
 *           "tokens": [int, ...], "block_tokens": N, "lora": "<name>"
 *                                              a prefix by its token ids:
 *                                              the hashes of its full blocks,
 *           "tier": 3 | 4 (move; delete: optional, both when absent),
 *           "volume": "<name>" (move, optional), "note": "<text>" (pin)}
 * Reply:   {"op": ..., "blocks": N, then for pin/unpin "changed", "pins",
 *           "pinned_blocks"; for move/delete "queued", "skipped",
 *           "in_flight" (blocks a running round moves now: decided after
 *           it, src/tier/engine.h); for delete "continuations" (blocks
 *           below the prefix deleted with it, their copies in "queued":
 *           src/tier/continuations.c)} or
 *          {"error": "<cause>"}, and in both "advisor": its name; an
 *          advisor with tiering off adds "tiering": false to its error.
 *          A partitioned advisor's success adds "partitions": {"count",
 *          "owned": [the partitions it tiers], "positions": [0, ...]},
 *          which a gathering client (kvp_client_tier_all) covers the
 *          deployment's partitions by: each advisor acts only on its own
 *          partitions' blocks. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/control.h"
#include "kvplane/client.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

static const char *const op_names[] = {"pin", "unpin", "move", "delete"};

static int hashes_of(json_t *arr, kvp__adv_ctl_t *c, char *err, size_t errlen) {
  size_t n = json_array_size(arr);
  if (n == 0 || n > KVP_MATCH_MAX) {
    snprintf(err, errlen, "hashes: 1 to %d of them", KVP_MATCH_MAX);
    return KVP_ETOOBIG;
  }
  if ((c->hashes = malloc(n * sizeof *c->hashes)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (json_is_string(v) && kvp_hash_parse(json_string_value(v), &c->hashes[i]) == 0)
      continue;
    snprintf(err, errlen,
             "hashes[%zu]: expected a hash (0x-prefixed hex, 16 hex digits, or decimal)", i);
    return KVP_EPROTO;
  }
  c->n = n;
  return 0;
}

static int tokens_of(json_t *root, json_t *arr, kvp__adv_ctl_t *c, char *err, size_t errlen) {
  json_t *bt = json_object_get(root, "block_tokens"), *lora = json_object_get(root, "lora");
  size_t n = json_array_size(arr);
  json_int_t b = json_is_integer(bt) ? json_integer_value(bt) : 0;
  if (b < 1 || b > 1 << 20) {
    snprintf(err, errlen, "block_tokens: required with tokens, 1 to %d", 1 << 20);
    return KVP_EPROTO;
  }
  if (lora != NULL && !json_is_string(lora)) {
    snprintf(err, errlen, "lora: expected the adapter's name");
    return KVP_EPROTO;
  }
  if (n / (size_t)b == 0 || n / (size_t)b > KVP_MATCH_MAX) {
    snprintf(err, errlen, "tokens: at least one full block of %d, at most %d blocks", (int)b,
             KVP_MATCH_MAX);
    return KVP_ETOOBIG;
  }
  uint32_t *t = malloc(n * sizeof *t);
  if (t == NULL || (c->hashes = malloc(n / (size_t)b * sizeof *c->hashes)) == NULL) {
    free(t);
    return KVP_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX) {
      snprintf(err, errlen, "tokens[%zu]: expected a token id (0 to 2^32 - 1)", i);
      free(t);
      return KVP_EPROTO;
    }
    t[i] = (uint32_t)json_integer_value(v);
  }
  c->n = kvp_hash_sequence(t, n, (size_t)b, kvp_hash_seed(lora ? json_string_value(lora) : NULL),
                           c->hashes, n / (size_t)b);
  free(t);
  return 0;
}

int kvp__adv_ctl_parse(const void *data, size_t len, kvp__adv_ctl_t *c, char *err, size_t errlen) {
  json_error_t jerr;
  json_t *root, *v;
  int rc = KVP_EPROTO;

  memset(c, 0, sizeof *c);
  if ((root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
    snprintf(err, errlen, "bad JSON: %s", jerr.text);
    return KVP_EPROTO;
  }
  if (!json_is_object(root)) {
    snprintf(err, errlen, "expected a JSON object");
    goto done;
  }
  v = json_object_get(root, "op");
  size_t k = 0;
  while (k < 4 && !(json_is_string(v) && strcmp(json_string_value(v), op_names[k]) == 0))
    k++;
  if (k == 4) {
    snprintf(err, errlen, "op: expected pin, unpin, move or delete");
    goto done;
  }
  c->op = (kvp__adv_ctl_op_t)k;
  if ((v = json_object_get(root, "tier")) != NULL) {
    json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
    if (t != 3 && t != 4) {
      snprintf(err, errlen, "tier: 3 or 4");
      goto done;
    }
    c->tier = (int)t;
  }
  if (c->op == KVP__CTL_MOVE && c->tier == 0) {
    snprintf(err, errlen, "tier: required by move (3 or 4)");
    goto done;
  }
  if ((v = json_object_get(root, "volume")) != NULL) {
    if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof c->volume) {
      snprintf(err, errlen, "volume: a volume's name");
      goto done;
    }
    snprintf(c->volume, sizeof c->volume, "%s", json_string_value(v));
  }
  if ((v = json_object_get(root, "note")) != NULL) {
    if (!json_is_string(v)) {
      snprintf(err, errlen, "note: a string");
      goto done;
    }
    snprintf(c->note, sizeof c->note, "%s", json_string_value(v));
  }
  json_t *h = json_object_get(root, "hashes"), *t = json_object_get(root, "tokens");
  if (json_is_array(h) == json_is_array(t)) {
    snprintf(err, errlen, "expected one of \"hashes\": [...] or \"tokens\": [...]");
    goto done;
  }
  rc = json_is_array(h) ? hashes_of(h, c, err, errlen) : tokens_of(root, t, c, err, errlen);
done:
  if (rc != 0) {
    free(c->hashes);
    c->hashes = NULL;
    c->n = 0;
  }
  json_decref(root);
  return rc;
}

/* "partitions" of a partitioned advisor's reply: the ones e tiers. */
static json_t *tiered(const kvp__tier_engine_t *e, uint32_t count) {
  uint32_t parts[KVP_PARTITIONS_MAX];
  size_t n = kvp__tier_engine_tiered(e, parts, KVP_PARTITIONS_MAX);
  json_t *owned = json_array(), *pos = json_array();
  for (size_t i = 0; i < n && i < KVP_PARTITIONS_MAX; i++) {
    json_array_append_new(owned, json_integer(parts[i]));
    json_array_append_new(pos, json_integer(0)); /* not a query: no freshness to prefer */
  }
  return json_pack("{s:I, s:o, s:o}", "count", (json_int_t)count, "owned", owned, "positions", pos);
}

void kvp__adv_ctl_handle(kvp__tier_engine_t *e, const char *off, const char *advisor,
                         uint32_t partitions, const void *data, size_t len, char **reply) {
  kvp__adv_ctl_t c;
  kvp__tier_stats_t st;
  char err[512] = "";
  kvp__tier_ctl_counts_t n = {0};
  size_t a = 0;
  json_t *o = NULL;
  int rc;

  if ((rc = kvp__adv_ctl_parse(data, len, &c, err, sizeof err)) == 0 && e == NULL) {
    snprintf(err, sizeof err, "tiering is off on this advisor (%s)",
             off ? off : "[tiering] enabled = false");
    rc = KVP_ENOTSUP;
  }
  if (rc == 0) {
    switch (c.op) {
    case KVP__CTL_PIN:
    case KVP__CTL_UNPIN:
      rc =
          kvp__tier_engine_pin(e, c.hashes, c.n, c.op == KVP__CTL_PIN, c.note, &a, err, sizeof err);
      break;
    case KVP__CTL_MOVE:
      rc = kvp__tier_engine_move(e, c.hashes, c.n, c.tier, c.volume, &n, err, sizeof err);
      break;
    case KVP__CTL_DELETE:
      rc = kvp__tier_engine_drop(e, c.hashes, c.n, c.tier, &n, err, sizeof err);
      break;
    }
  }
  if (rc != 0) {
    o = json_pack("{s:s}", "error", err[0] ? err : kvp_strerror(rc));
    if (o != NULL && e == NULL)
      json_object_set_new(o, "tiering", json_false());
  } else if (c.op == KVP__CTL_PIN || c.op == KVP__CTL_UNPIN) {
    kvp__tier_engine_stats(e, &st);
    o = json_pack("{s:s, s:I, s:I, s:I, s:I}", "op", op_names[c.op], "blocks", (json_int_t)c.n,
                  "changed", (json_int_t)a, "pins", (json_int_t)st.pins, "pinned_blocks",
                  (json_int_t)st.pinned_blocks);
  } else {
    o = json_pack("{s:s, s:I, s:I, s:I, s:I}", "op", op_names[c.op], "blocks", (json_int_t)c.n,
                  "queued", (json_int_t)n.queued, "skipped", (json_int_t)n.skipped, "in_flight",
                  (json_int_t)n.in_flight);
    if (o != NULL && c.op == KVP__CTL_DELETE)
      json_object_set_new(o, "continuations", json_integer((json_int_t)n.continuations));
  }
  if (o != NULL) {
    json_object_set_new(o, "advisor", json_string(advisor));
    if (rc == 0 && partitions > 0)
      json_object_set_new(o, "partitions", tiered(e, partitions));
  }
  free(c.hashes);
  *reply = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
}
