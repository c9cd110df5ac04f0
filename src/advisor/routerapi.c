/* The routers' indexer API: request decoder and answer; see routerapi.h. */
#include "advisor/routerapi.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/client.h"
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

/* Media names of the answer, by tier: the relay's table read backwards
 * (README, "Running vLLM or SGLang with the relay"). */
static const char *const medium[KVP_TIER_MAX + 1] = {NULL, "GPU", "CPU", "DISK", "EXTERNAL"};

/* Copies the JSON text, rewriting every integer literal in
 * (INT64_MAX, UINT64_MAX] as the int64 with the same bits: jansson reads
 * integers as json_int_t and refuses larger ones, while routers send u64
 * hashes as plain numbers. Strings, negative numbers and the digits of a
 * fraction or an exponent are copied untouched. A rewritten literal has at
 * least 19 digits and grows by at most one character. */
char *kvp__rapi_widen_u64(const char *in, size_t len, size_t *outlen) {
  char *out = malloc(len + len / 16 + 16), *o = out;
  int in_str = 0, esc = 0;
  size_t i = 0;

  if (out == NULL)
    return NULL;
  while (i < len) {
    char ch = in[i];
    if (in_str) {
      *o++ = ch;
      i++;
      if (esc)
        esc = 0;
      else if (ch == '\\')
        esc = 1;
      else if (ch == '"')
        in_str = 0;
      continue;
    }
    if (ch == '"') {
      in_str = 1;
      *o++ = ch;
      i++;
      continue;
    }
    /* A literal's first digit (not one of a fraction, an exponent or a
     * negative number; a leading 0 is JSON only alone, so 0123... is left for
     * the reader to refuse). */
    if (ch >= '1' && ch <= '9' && (i == 0 || !strchr("-+.eE", in[i - 1]))) {
      size_t j = i;
      while (j < len && in[j] >= '0' && in[j] <= '9')
        j++;
      int plain = j == len || (in[j] != '.' && in[j] != 'e' && in[j] != 'E');
      if (plain && j - i >= 19 && j - i <= 20) {
        char num[24];
        memcpy(num, in + i, j - i);
        num[j - i] = '\0';
        errno = 0;
        unsigned long long v = strtoull(num, NULL, 10);
        if (errno == 0 && v > (unsigned long long)INT64_MAX) {
          o += sprintf(o, "%" PRId64, kvp_hash_to_i64((uint64_t)v));
          i = j;
          continue;
        }
      }
      memcpy(o, in + i, j - i);
      o += j - i;
      i = j;
      continue;
    }
    *o++ = ch;
    i++;
  }
  *outlen = (size_t)(o - out);
  return out;
}

/* A string field (absent or null: def), or KVP_EPROTO. */
static int get_name(json_t *root, const char *key, const char *def, char *dst, size_t cap,
                    int int_ok, char *err, size_t errlen) {
  json_t *v = json_object_get(root, key);
  if (v == NULL || json_is_null(v)) {
    snprintf(dst, cap, "%s", def);
    return 0;
  }
  if (int_ok && json_is_integer(v)) {
    /* An id is a u64 (Dynamo's instance ids): one above INT64_MAX came
     * through kvp__rapi_widen_u64 as the negative i64 with its bits. */
    snprintf(dst, cap, "%" PRIu64, kvp_hash_from_i64(json_integer_value(v)));
    return 0;
  }
  if (!json_is_string(v) || json_string_length(v) >= cap) {
    snprintf(err, errlen, "%s: expected a string of at most %zu bytes", key, cap - 1);
    return KVP_EPROTO;
  }
  if (strlen(json_string_value(v)) != json_string_length(v)) {
    snprintf(err, errlen, "%s: contains a NUL character", key);
    return KVP_EPROTO;
  }
  snprintf(dst, cap, "%s", json_string_value(v));
  return 0;
}

static int get_hashes(json_t *arr, const char *key, kvp__rapi_req_t *req, char *err,
                      size_t errlen) {
  size_t n = json_array_size(arr);
  if (n > KVP_MATCH_MAX) {
    snprintf(err, errlen, "%s: more than %d hashes", key, KVP_MATCH_MAX);
    return KVP_ETOOBIG;
  }
  if (n && (req->hashes = malloc(n * sizeof *req->hashes)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (json_is_integer(v)) {
      req->hashes[i] = kvp_hash_from_i64(json_integer_value(v));
      continue;
    }
    if (json_is_string(v) && kvp_hash_parse(json_string_value(v), &req->hashes[i]) == 0)
      continue;
    snprintf(err, errlen, "%s[%zu]: expected an integer (u64, or its i64 form) or a hex string",
             key, i);
    return KVP_EPROTO;
  }
  req->n = n;
  return 0;
}

/* The salt, as the relay takes it from an engine's event. */
static int get_salt(json_t *root, char *salt, size_t cap, char *err, size_t errlen) {
  char lora[KVP__RAPI_NAME_MAX], cache[KVP__RAPI_NAME_MAX];
  json_t *id = json_object_get(root, "lora_id");
  int rc;

  if ((rc = get_name(root, "lora_name", "", lora, sizeof lora, 0, err, errlen)) != 0 ||
      (rc = get_name(root, "cache_salt", "", cache, sizeof cache, 0, err, errlen)) != 0)
    return rc;
  if (id != NULL && !json_is_null(id)) {
    if (!json_is_integer(id)) {
      snprintf(err, errlen, "lora_id: expected an integer");
      return KVP_EPROTO;
    }
    /* 0 is no adapter, as the relay reads an engine's lora_id (vLLM's
     * LoRA ids start at 1): the base model's hashes, salted by cache_salt. */
    if (json_integer_value(id) == 0)
      id = NULL;
  }
  if (id != NULL && !json_is_null(id)) {
    if (lora[0]) {
      snprintf(err, errlen, "lora_id and lora_name: give one (lora_id is deprecated)");
      return KVP_EPROTO;
    }
    snprintf(salt, cap, "lora_id:%" JSON_INTEGER_FORMAT, json_integer_value(id));
    return 0;
  }
  snprintf(salt, cap, "%s", lora[0] ? lora : cache);
  return 0;
}

static int get_tokens(json_t *root, kvp__rapi_req_t *req, char *err, size_t errlen) {
  json_t *arr = json_object_get(root, "token_ids");
  char salt[KVP__RAPI_NAME_MAX + 32];
  uint32_t *tok = NULL;
  size_t n;
  int rc;

  if (!json_is_array(arr)) {
    snprintf(err, errlen, "token_ids: required, an array of token ids");
    return KVP_EPROTO;
  }
  if ((rc = get_salt(root, salt, sizeof salt, err, errlen)) != 0)
    return rc;
  n = json_array_size(arr);
  if (n / req->block_size > KVP_MATCH_MAX) {
    snprintf(err, errlen, "token_ids: more than %d blocks of %" PRIu32 " tokens", KVP_MATCH_MAX,
             req->block_size);
    return KVP_ETOOBIG;
  }
  if (n && (tok = malloc(n * sizeof *tok)) == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX) {
      snprintf(err, errlen, "token_ids[%zu]: expected an integer in 0..4294967295", i);
      free(tok);
      return KVP_EPROTO;
    }
    tok[i] = (uint32_t)json_integer_value(v);
  }
  size_t nb = n / req->block_size;
  if (nb && (req->hashes = malloc(nb * sizeof *req->hashes)) == NULL) {
    free(tok);
    return KVP_ENOMEM;
  }
  req->n = kvp_hash_sequence(tok, n, req->block_size, kvp_hash_seed(salt), req->hashes, nb);
  free(tok);
  return 0;
}

int kvp__rapi_parse(int by_hash, const void *body, size_t len, uint32_t default_block_size,
                    kvp__rapi_req_t *req, char *err, size_t errlen) {
  json_error_t jerr;
  json_t *root = NULL, *v;
  size_t wlen;
  char *text;
  int rc = KVP_EPROTO;

  memset(req, 0, sizeof *req);
  if ((text = kvp__rapi_widen_u64(body, len, &wlen)) == NULL)
    return KVP_ENOMEM;
  root = json_loadb(text, wlen, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (root == NULL) {
    snprintf(err, errlen, "bad JSON: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    return KVP_EPROTO;
  }
  if (!json_is_object(root)) {
    snprintf(err, errlen, "expected a JSON object");
    goto done;
  }
  if ((rc = get_name(root, "tenant_id", "default", req->tenant, sizeof req->tenant, 0, err,
                     errlen)) != 0 ||
      (rc = get_name(root, "instance_id", "", req->instance, sizeof req->instance, 1, err,
                     errlen)) != 0)
    goto done;
  rc = KVP_EPROTO;
  v = json_object_get(root, "model");
  if (v != NULL && !json_is_null(v) && !json_is_string(v)) {
    snprintf(err, errlen, "model: expected a string");
    goto done;
  }
  v = json_object_get(root, "block_size");
  if (v == NULL || json_is_null(v)) {
    if (default_block_size == 0) {
      snprintf(err, errlen,
               "block_size: required (tokens per block; [http] block_size is not set)");
      goto done;
    }
    req->block_size = default_block_size;
  } else if (!json_is_integer(v) || json_integer_value(v) < 1 ||
             json_integer_value(v) > KVP__RAPI_MAX_BLOCK_SIZE) {
    snprintf(err, errlen, "block_size: expected an integer in 1..%u", KVP__RAPI_MAX_BLOCK_SIZE);
    goto done;
  } else {
    req->block_size = (uint32_t)json_integer_value(v);
  }
  if (!by_hash) {
    rc = get_tokens(root, req, err, errlen);
    goto done;
  }
  static const char *const keys[] = {"seq_hashes", "block_hash", "block_hashes"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    if ((v = json_object_get(root, keys[k])) == NULL)
      continue;
    if (!json_is_array(v)) {
      snprintf(err, errlen, "%s: expected an array of hashes", keys[k]);
      goto done;
    }
    rc = get_hashes(v, keys[k], req, err, errlen);
    goto done;
  }
  snprintf(err, errlen, "seq_hashes: required, an array of rolling sequence hashes");
done:
  json_decref(root);
  return rc;
}

void kvp__rapi_req_free(kvp__rapi_req_t *req) {
  free(req->hashes);
  req->hashes = NULL;
  req->n = 0;
}

char *kvp__rapi_error_json(const char *msg) {
  json_t *o = json_pack("{s:s}", "error", msg);
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static json_t *new_instance(void) {
  json_t *o = json_pack("{s:I}", "longest_matched", (json_int_t)0);
  for (int t = 1; o && t <= KVP_TIER_MAX; t++)
    json_object_set_new(o, medium[t], json_integer(0));
  if (o) {
    json_object_set_new(o, "DP", json_object());
    json_object_set_new(o, "rank_matches", json_object());
  }
  return o;
}

static void set_max(json_t *o, const char *key, json_int_t v) {
  json_t *cur = json_object_get(o, key);
  if (cur == NULL || json_integer_value(cur) < v)
    json_object_set_new(o, key, json_integer(v));
}

/* The cumulative figures (Mooncake's PR #3088): every rank of every
 * instance in the answer gets rank_matches (its G1 -> G2 -> G3 -> G4
 * boundaries, lowercase as the conductor spells them), a DP entry (0 for
 * a rank without a hit) and longest_matched is the largest final boundary.
 * An instance enters the answer when one of its ranks holds the first
 * block (or when it was asked for). */
static int add_paths(const kvp__index_t *ix, const kvp__rapi_req_t *req, json_t *tenant) {
  static const char *const lower[KVP_TIER_MAX + 1] = {NULL, "gpu", "cpu", "disk", "external"};
  kvp__rapi_path_t *p = NULL;
  size_t np = 0;
  int rc = kvp__rapi_paths(ix, req->hashes, req->n, req->instance, &p, &np);
  if (rc != 0)
    return rc;
  for (int pass = 0; pass < 2 && rc == 0; pass++)
    for (size_t w = 0; w < np && rc == 0; w++) {
      uint32_t dp = 0;
      const char *name = kvp__index_worker_name(ix, (uint16_t)w, &dp);
      json_t *inst = name ? json_object_get(tenant, name) : NULL;
      if (name == NULL || (req->instance[0] && strcmp(name, req->instance) != 0))
        continue;
      if (pass == 0) {
        if (inst == NULL && p[w].bound[KVP_TIER_MAX] > 0 &&
            ((inst = new_instance()) == NULL || json_object_set_new(tenant, name, inst) != 0))
          rc = KVP_ENOMEM;
        continue;
      }
      if (inst == NULL)
        continue;
      char rank[16];
      json_t *rm = json_object();
      snprintf(rank, sizeof rank, "%" PRIu32, dp);
      for (int t = 1; rm && t <= KVP_TIER_MAX; t++)
        json_object_set_new(rm, lower[t],
                            json_integer((json_int_t)(p[w].bound[t] * req->block_size)));
      if (rm == NULL || json_object_set_new(json_object_get(inst, "rank_matches"), rank, rm) != 0) {
        rc = KVP_ENOMEM;
        break;
      }
      set_max(json_object_get(inst, "DP"), rank, 0);
      set_max(inst, "longest_matched", (json_int_t)(p[w].bound[KVP_TIER_MAX] * req->block_size));
    }
  free(p);
  return rc;
}

int kvp__rapi_answer(const kvp__index_t *ix, const char *ns, const kvp__rapi_req_t *req,
                     char **json) {
  size_t cap = 4 * (kvp__index_worker_count(ix) + 1), nrows = 0;
  kvp__index_match_t *rows = malloc(cap * sizeof *rows);
  json_t *root = json_object(), *tenant = json_object();
  int rc = KVP_ENOMEM;

  *json = NULL;
  if (rows == NULL || root == NULL || tenant == NULL)
    goto done;
  json_object_set(root, req->tenant, tenant);
  if (strcmp(req->tenant, ns) != 0 && strcmp(req->tenant, "default") != 0)
    goto dump; /* not this advisor's namespace: no instance of it here */
  /* cap covers every (worker, tier) pair, as in the NATS match reply. */
  (void)kvp__index_match(ix, req->hashes, req->n, rows, cap, &nrows);
  if (req->instance[0]) {
    json_t *inst = new_instance();
    if (inst == NULL || json_object_set_new(tenant, req->instance, inst) != 0)
      goto done;
  }
  /* Each medium: that tier's own prefix, the NATS match reply's figure;
   * DP: a rank's longest over its tiers. */
  for (size_t i = 0; i < nrows; i++) {
    uint32_t dp = 0;
    const char *w = kvp__index_worker_name(ix, rows[i].worker, &dp);
    if (w == NULL || (req->instance[0] && strcmp(w, req->instance) != 0) || rows[i].tier < 1 ||
        rows[i].tier > KVP_TIER_MAX)
      continue;
    json_t *inst = json_object_get(tenant, w);
    if (inst == NULL) {
      if ((inst = new_instance()) == NULL || json_object_set_new(tenant, w, inst) != 0)
        goto done;
    }
    json_int_t tokens = (json_int_t)(rows[i].length * req->block_size);
    char rank[16];
    snprintf(rank, sizeof rank, "%" PRIu32, dp);
    set_max(inst, medium[rows[i].tier], tokens);
    set_max(json_object_get(inst, "DP"), rank, tokens);
  }
  if (add_paths(ix, req, tenant) != 0)
    goto done;
dump:
  *json = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
  rc = *json ? 0 : KVP_ENOMEM;
done:
  json_decref(tenant);
  json_decref(root);
  free(rows);
  return rc;
}
