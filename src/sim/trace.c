/* Trace reader; see trace.h. zlib for gzip, jansson for JSON. */
#include "sim/trace.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "kvplane/status.h"

#define MAX_LINE (16u << 20)

struct kvp_trace_s {
  gzFile gz;
  char *line;
  size_t line_cap;
  uint64_t *ids;
  size_t ids_cap;
  uint64_t lineno;
};

int kvp_trace_open(const char *path, kvp_trace_t **out, char *err, size_t errlen) {
  kvp_trace_t *t = calloc(1, sizeof *t);

  *out = NULL;
  if (t == NULL)
    return KVP_ENOMEM;
  t->gz = gzopen(path, "rb");
  if (t->gz == NULL) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
    free(t);
    return KVP_EIO;
  }
  gzbuffer(t->gz, 1 << 17);
  *out = t;
  return 0;
}

void kvp_trace_close(kvp_trace_t *t) {
  if (t == NULL)
    return;
  gzclose(t->gz);
  free(t->line);
  free(t->ids);
  free(t);
}

static int get_u64(json_t *obj, const char *key, uint64_t *out, char *err, size_t errlen) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    snprintf(err, errlen, "\"%s\" missing or not a non-negative integer", key);
    return KVP_EPROTO;
  }
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int kvp_trace_parse_line(const char *line, size_t len, kvp_trace_req_t *req, uint64_t **ids,
                         size_t *cap, char *err, size_t errlen) {
  json_error_t jerr;
  json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr), *arr;
  int rc = KVP_EPROTO;

  if (root == NULL) {
    snprintf(err, errlen, "bad JSON at column %d: %s", jerr.column, jerr.text);
    return KVP_EPROTO;
  }
  if (!json_is_object(root)) {
    snprintf(err, errlen, "not a JSON object");
    goto out;
  }
  if (get_u64(root, "timestamp", &req->timestamp_ms, err, errlen) != 0)
    goto out;
  /* Lengths are informative; absent means 0. */
  req->input_length = req->output_length = 0;
  if (json_object_get(root, "input_length") &&
      get_u64(root, "input_length", &req->input_length, err, errlen) != 0)
    goto out;
  if (json_object_get(root, "output_length") &&
      get_u64(root, "output_length", &req->output_length, err, errlen) != 0)
    goto out;
  arr = json_object_get(root, "hash_ids");
  if (!json_is_array(arr)) {
    snprintf(err, errlen, "\"hash_ids\" missing or not an array");
    goto out;
  }
  size_t n = json_array_size(arr);
  if (n > *cap) {
    uint64_t *p = realloc(*ids, n * sizeof *p);
    if (p == NULL) {
      rc = KVP_ENOMEM;
      goto out;
    }
    *ids = p;
    *cap = n;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      snprintf(err, errlen, "hash_ids[%zu] is not a non-negative integer", i);
      goto out;
    }
    (*ids)[i] = (uint64_t)json_integer_value(v);
  }
  req->hash_ids = *ids;
  req->nhash_ids = n;
  rc = 0;
out:
  json_decref(root);
  return rc;
}

int kvp_trace_next(kvp_trace_t *t, kvp_trace_req_t *req, char *err, size_t errlen) {
  char why[256];

  for (;;) {
    size_t len = 0;
    int eof = 1;
    for (;;) {
      if (t->line_cap - len < 2) {
        size_t nc = t->line_cap ? t->line_cap * 2 : 1 << 16;
        char *p;
        if (nc > MAX_LINE + 2) {
          snprintf(err, errlen, "line %llu: longer than %u bytes",
                   (unsigned long long)t->lineno + 1, MAX_LINE);
          return KVP_ETOOBIG;
        }
        p = realloc(t->line, nc);
        if (p == NULL)
          return KVP_ENOMEM;
        t->line = p;
        t->line_cap = nc;
      }
      if (gzgets(t->gz, t->line + len, (int)(t->line_cap - len)) == NULL)
        break;
      eof = 0;
      len += strlen(t->line + len);
      if (len > 0 && t->line[len - 1] == '\n')
        break;
    }
    if (eof && len == 0) {
      int zerr;
      const char *msg = gzerror(t->gz, &zerr);
      if (zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(err, errlen, "line %llu: read error: %s", (unsigned long long)t->lineno + 1, msg);
        return KVP_EIO;
      }
      return 0;
    }
    t->lineno++;
    while (len > 0 && (t->line[len - 1] == '\n' || t->line[len - 1] == '\r'))
      len--;
    if (len == 0)
      continue; /* blank line */
    int rc = kvp_trace_parse_line(t->line, len, req, &t->ids, &t->ids_cap, why, sizeof why);
    if (rc != 0) {
      snprintf(err, errlen, "line %llu: %s", (unsigned long long)t->lineno, why);
      return rc;
    }
    return 1;
  }
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

void kvp_trace_block_tokens(uint64_t id, uint32_t *tokens, size_t n) {
  uint64_t base = mix64(id + 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; i++)
    tokens[i] = (uint32_t)(mix64(base + i) % 151936u);
}
