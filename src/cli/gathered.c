/* The stats of every advisor of a namespace, for status and top: gathered
 * with kvp_client_request_all (as `kvplane stats`), then made one object
 * (cli.h, kvp__cli_stats_merge): the figures summed over a cover of the
 * partitions, and per partition who answered and what is missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kvplane/client.h"
#include "kvplane/subjects.h"

/* The position of partition p in reply r, or -1 when r does not own it. */
static json_int_t position_of(const json_t *r, json_int_t p) {
  json_t *parts = json_object_get(r, "partitions");
  json_t *owned = json_object_get(parts, "owned"), *pos = json_object_get(parts, "positions");
  for (size_t i = 0; i < json_array_size(owned); i++)
    if (json_integer_value(json_array_get(owned, i)) == p)
      return json_integer_value(json_array_get(pos, i));
  return -1;
}

static int usable(const json_t *r) {
  return json_is_object(r) && json_object_get(r, "error") == NULL;
}

/* Adds the integers of src into dst (objects: recursively); freshness
 * figures take the maximum instead (the worst advisor's lag). */
static void add_into(json_t *dst, const json_t *src, int max) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)src, k, v) {
    json_t *d = json_object_get(dst, k);
    if (json_is_integer(v)) {
      json_int_t a = json_integer_value(d), b = json_integer_value(v);
      json_object_set_new(dst, k, json_integer(d == NULL ? b : max ? (a > b ? a : b) : a + b));
    } else if (json_is_object(v)) {
      if (d == NULL)
        json_object_set_new(dst, k, d = json_object());
      add_into(d, v, max);
    }
  }
}

json_t *kvp__cli_stats_merge(const json_t *g) {
  json_t *reps = json_object_get(g, "replies");
  json_int_t count = json_integer_value(json_object_get(g, "partitions"));
  size_t n = json_array_size(reps);

  if (n == 0)
    return NULL;
  /* One unpartitioned advisor: its reply as it is, as before partitions. */
  if (n == 1 && count == 0)
    return json_incref(json_array_get(reps, 0));
  json_t *o = json_object(), *advisors = json_array(), *table = json_array(),
         *summed = json_array();
  json_t *sums = json_object(), *fresh = json_object();
  uint8_t *taken = calloc(n, 1), *covered = calloc((size_t)(count ? count : 1), 1);
  if (o == NULL || advisors == NULL || table == NULL || summed == NULL || sums == NULL ||
      fresh == NULL || taken == NULL || covered == NULL)
    goto fail;
  /* Every reply, as the advisor it came from. */
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(reps, i), *parts = json_object_get(r, "partitions");
    json_t *e = json_object_get(r, "error");
    json_t *a = json_pack(
        "{s:O?, s:O?, s:O?, s:O?, s:O?}", "advisor", json_object_get(r, "advisor"), "owned",
        json_object_get(parts, "owned"), "ready", json_object_get(r, "ready"), "blocks",
        json_object_get(r, "blocks"), "locations", json_object_get(r, "locations"));
    if (a != NULL && e != NULL)
      json_object_set(a, "error", e);
    json_array_append_new(advisors, a ? a : json_null());
  }
  /* Per partition: who answered, at which position; the figures are summed
   * over a cover of the partitions (per partition not yet covered, its
   * freshest advisor, with all it owns), so a standby is not counted
   * twice. */
  for (json_int_t p = 0; p < (count ? count : 1); p++) {
    json_t *row = json_pack("{s:I, s:[]}", "partition", p, "answered");
    json_t *ans = json_object_get(row, "answered");
    long best = -1;
    json_int_t bestpos = -1;
    for (size_t i = 0; row && i < n; i++) {
      json_t *r = json_array_get(reps, i);
      json_int_t q = count ? position_of(r, p) : 0;
      if (!usable(r) || q < 0)
        continue;
      json_array_append_new(
          ans, json_pack("{s:O?, s:I}", "advisor", json_object_get(r, "advisor"), "position", q));
      if (q > bestpos)
        best = (long)i, bestpos = q;
    }
    if (row != NULL)
      json_array_append_new(table, row);
    if (best < 0 || covered[p] || taken[best])
      continue;
    json_t *r = json_array_get(reps, (size_t)best);
    taken[best] = 1;
    json_t *owned = json_object_get(json_object_get(r, "partitions"), "owned");
    for (size_t j = 0; j < json_array_size(owned); j++) {
      json_int_t q = json_integer_value(json_array_get(owned, j));
      if (q >= 0 && q < (count ? count : 1))
        covered[q] = 1;
    }
    covered[p] = 1;
    json_array_append(summed,
                      json_object_get(r, "advisor") ? json_object_get(r, "advisor") : json_null());
    const char *k;
    json_t *v;
    json_object_foreach(r, k, v) {
      if (strcmp(k, "freshness") == 0) {
        add_into(fresh, v, 1);
      } else if (strcmp(k, "uptime_ms") == 0 || strcmp(k, "ready_ms") == 0) {
        json_t *d = json_object_get(o, k); /* the youngest advisor's, the slowest to be ready */
        json_int_t b = json_integer_value(v), a = json_integer_value(d);
        json_object_set_new(o, k,
                            json_integer(d == NULL     ? b
                                         : k[0] == 'u' ? (a < b ? a : b)
                                                       : (a > b ? a : b)));
      } else if (strcmp(k, "tiering") == 0 || json_is_string(v)) {
        if (json_object_get(o, k) == NULL) /* the one tiering advisor's; mode, namespace */
          json_object_set(o, k, v);
      } else if ((json_is_integer(v) || strcmp(k, "ingest") == 0 || strcmp(k, "tiers") == 0 ||
                  strcmp(k, "index") == 0) &&
                 strcmp(k, "partitions") != 0) {
        json_t *one = json_pack("{s:O}", k, v);
        add_into(sums, one, 0);
        json_decref(one);
      }
    }
  }
  json_object_update(o, sums);
  json_object_set(o, "freshness", fresh);
  json_object_set_new(o, "gathered",
                      json_pack("{s:I, s:O, s:o, s:o, s:o}", "count", count, "missing",
                                json_object_get(g, "missing"), "partitions", table, "advisors",
                                advisors, "summed", summed));
  table = advisors = summed = NULL;
  json_decref(sums);
  json_decref(fresh);
  free(taken);
  free(covered);
  return o;
fail:
  json_decref(o);
  json_decref(advisors);
  json_decref(table);
  json_decref(summed);
  json_decref(sums);
  json_decref(fresh);
  free(taken);
  free(covered);
  return NULL;
}

int kvp__cli_stats_all(const kvp__cli_args_t *a, long timeout, int quiet, json_t **doc) {
  return kvp__cli_stats_all_why(a, timeout, quiet, doc, NULL, 0);
}

int kvp__cli_stats_all_why(const kvp__cli_args_t *a, long timeout, int quiet, json_t **doc,
                           char *why, size_t whylen) {
  char err[512], *reply = NULL;
  kvp_client_t *c = NULL;
  int rc;

  *doc = NULL;
  if ((rc = kvp__cli_client_open_why(a, quiet, &c, why, whylen)) != KVP__CLI_EXIT_OK)
    return rc;
  kvp_client_set_grace(c, 100); /* standbys answering just after the cover are listed too */
  rc = kvp_client_request_all(c, KVP_API_STATS, "{}", (uint32_t)timeout, &reply, err, sizeof err);
  kvp_client_close(c);
  if (rc != 0) {
    if (!quiet)
      fprintf(stderr, "kvplane: %s\n", err);
    else if (why != NULL)
      snprintf(why, whylen, "%s", err);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  json_t *g = json_loads(reply, 0, NULL);
  kvp_client_reply_free(reply);
  *doc = kvp__cli_stats_merge(g);
  json_decref(g);
  if (*doc == NULL)
    return KVP__CLI_EXIT_UNREACHABLE;
  return json_object_get(*doc, "error") ? KVP__CLI_EXIT_ADVISOR_ERROR : KVP__CLI_EXIT_OK;
}
