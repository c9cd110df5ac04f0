/* The stats of every advisor of a namespace, for status and top: gathered
 * with kvp_client_request_all (as `kvplane stats`), then made one object
 * (cli.h, kvp__cli_stats_merge): the figures summed over a cover of the
 * partitions, and per partition who answered and what is missing. */
#include <jansson.h>
#include <stdint.h>
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

/* A reply whose figures count: no error, and of the deployment's count
 * (an unpartitioned advisor still answering beside partitioned ones, while
 * the servers are switched to the mapping, reads a stream that takes
 * nothing any more: listed, not summed). */
static int usable(const json_t *r, json_int_t count) {
  return json_is_object(r) && json_object_get(r, "error") == NULL &&
         (count == 0 ||
          json_integer_value(json_object_get(json_object_get(r, "partitions"), "count")) == count);
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

/* The cover the figures are summed over: whole advisors (an advisor's
 * stats are its totals, not per partition) whose owned sets do not
 * overlap, so that no partition is counted twice, covering every partition
 * someone answered for. Per partition the freshest advisor is tried first
 * (then the first to answer), and another when that choice leaves a later
 * partition only to advisors overlapping it: a standby of {0, 7} beside
 * advisors of {0..4}, {5, 6} and {7} must not be summed with {0..4}. A
 * depth-first search bounded by COVER_BUDGET steps (the first complete
 * cover is taken; the steps only matter for sets that cannot be split
 * evenly); a partition that only overlapping advisors answered for is then
 * taken from its freshest, counted twice as the least bad choice. */
#define COVER_BUDGET 4096

typedef struct cover_s {
  size_t n;              /* replies */
  json_int_t parts;      /* partitions, 1 when unpartitioned */
  const json_int_t *pos; /* pos[i * parts + p]: reply i's position for p, -1 when not its */
  const size_t *by, *at; /* the replies owning p: by[at[p] .. at[p + 1]), freshest first */
  uint8_t *covered;
  size_t *pick, npick, *best, nbest;
  json_int_t best_skips;
  long steps;
} cover_t;

static int cover_disjoint(const cover_t *c, size_t i) {
  for (json_int_t p = 0; p < c->parts; p++)
    if (c->pos[i * (size_t)c->parts + (size_t)p] >= 0 && c->covered[p])
      return 0;
  return 1;
}

static void cover_mark(cover_t *c, size_t i, uint8_t v) {
  for (json_int_t p = 0; p < c->parts; p++)
    if (c->pos[i * (size_t)c->parts + (size_t)p] >= 0)
      c->covered[p] = v;
}

/* From partition p on, with skips partitions left to overlapping advisors
 * so far. Returns 1 once a cover with none was found (the search ends). */
static int cover_search(cover_t *c, json_int_t p, json_int_t skips) {
  if (skips >= c->best_skips || c->steps-- <= 0)
    return 0;
  while (p < c->parts && (c->covered[p] || c->at[p] == c->at[p + 1]))
    p++; /* covered, or nobody answered for it: missing */
  if (p == c->parts) {
    memcpy(c->best, c->pick, c->npick * sizeof *c->pick);
    c->nbest = c->npick;
    c->best_skips = skips;
    return skips == 0;
  }
  int any = 0;
  for (size_t k = c->at[p]; k < c->at[p + 1]; k++) {
    size_t i = c->by[k];
    if (!cover_disjoint(c, i))
      continue;
    any = 1;
    cover_mark(c, i, 1);
    c->pick[c->npick++] = i;
    int done = cover_search(c, p + 1, skips);
    c->npick--;
    cover_mark(c, i, 0);
    if (done)
      return 1;
  }
  return any ? 0 : cover_search(c, p + 1, skips + 1);
}

/* The replies whose figures are summed, in *pick (n at most), their number
 * returned; -1 when out of memory. */
static long cover_pick(const json_t *reps, size_t n, json_int_t count, size_t *pick) {
  json_int_t parts = count ? count : 1;
  json_int_t *pos = malloc(n * (size_t)parts * sizeof *pos);
  size_t *at = calloc((size_t)parts + 1, sizeof *at), *by = NULL, *best = NULL;
  uint8_t *covered = calloc((size_t)parts, 1), *taken = calloc(n, 1);
  long npick = -1;
  if (pos == NULL || at == NULL || covered == NULL || taken == NULL)
    goto out;
  for (size_t i = 0; i < n; i++)
    for (json_int_t p = 0; p < parts; p++) {
      const json_t *r = json_array_get(reps, i);
      json_int_t q = !usable(r, count) ? -1 : count ? position_of(r, p) : 0;
      pos[i * (size_t)parts + (size_t)p] = q;
      at[p + 1] += q >= 0;
    }
  for (json_int_t p = 0; p < parts; p++)
    at[p + 1] += at[p];
  if ((by = malloc((at[parts] ? at[parts] : 1) * sizeof *by)) == NULL ||
      (best = malloc((n ? n : 1) * sizeof *best)) == NULL)
    goto out;
  for (json_int_t p = 0; p < parts; p++) { /* freshest first, then in order of answer */
    size_t k = at[p];
    for (size_t i = 0; i < n; i++) {
      json_int_t q = pos[i * (size_t)parts + (size_t)p];
      if (q < 0)
        continue;
      size_t j = k++;
      while (j > at[p] && pos[by[j - 1] * (size_t)parts + (size_t)p] < q) {
        by[j] = by[j - 1];
        j--;
      }
      by[j] = i;
    }
  }
  cover_t c = {.n = n,
               .parts = parts,
               .pos = pos,
               .by = by,
               .at = at,
               .covered = covered,
               .pick = pick,
               .best = best,
               .best_skips = parts + 1,
               .steps = (long)parts + COVER_BUDGET};
  cover_search(&c, 0, 0);
  /* The best cover, then the freshest of each partition it left out. */
  memset(covered, 0, (size_t)parts);
  npick = 0;
  for (size_t k = 0; k < c.nbest; k++) {
    pick[npick++] = best[k];
    taken[best[k]] = 1;
    cover_mark(&c, best[k], 1);
  }
  for (json_int_t p = 0; p < parts; p++)
    if (!covered[p] && at[p] < at[p + 1] && !taken[by[at[p]]]) {
      pick[npick++] = by[at[p]];
      taken[by[at[p]]] = 1;
      cover_mark(&c, by[at[p]], 1);
    }
out:
  free(pos);
  free(at);
  free(by);
  free(best);
  free(covered);
  free(taken);
  return npick;
}

/* Adds reply r's figures into o (sums into sums, freshness into fresh). */
static void sum_reply(json_t *o, json_t *sums, json_t *fresh, const json_t *r) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)r, k, v) {
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

json_t *kvp__cli_stats_merge(const json_t *g) {
  json_t *reps = json_object_get(g, "replies");
  json_int_t count = json_integer_value(json_object_get(g, "partitions"));
  size_t n = json_array_size(reps);

  if (n == 0)
    return NULL;
  /* One unpartitioned advisor: its reply as it is, as before partitions. */
  if (n == 1 && count == 0)
    return json_incref(json_array_get(reps, 0));
  if (count < 0 || count > KVP_PARTITIONS_MAX)
    count = 0;
  json_t *o = json_object(), *advisors = json_array(), *table = json_array(),
         *summed = json_array();
  json_t *sums = json_object(), *fresh = json_object();
  size_t *pick = malloc(n * sizeof *pick);
  long npick = -1;
  if (o == NULL || advisors == NULL || table == NULL || summed == NULL || sums == NULL ||
      fresh == NULL || pick == NULL || (npick = cover_pick(reps, n, count, pick)) < 0)
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
  /* Per partition: who answered, at which position. */
  for (json_int_t p = 0; p < (count ? count : 1); p++) {
    json_t *row = json_pack("{s:I, s:[]}", "partition", p, "answered");
    json_t *ans = json_object_get(row, "answered");
    for (size_t i = 0; row && i < n; i++) {
      json_t *r = json_array_get(reps, i);
      json_int_t q = count ? position_of(r, p) : 0;
      if (usable(r, count) && q >= 0)
        json_array_append_new(
            ans, json_pack("{s:O?, s:I}", "advisor", json_object_get(r, "advisor"), "position", q));
    }
    if (row != NULL)
      json_array_append_new(table, row);
  }
  /* The figures, summed over the cover (cover_pick). */
  for (long k = 0; k < npick; k++) {
    json_t *r = json_array_get(reps, pick[k]);
    json_array_append(summed,
                      json_object_get(r, "advisor") ? json_object_get(r, "advisor") : json_null());
    sum_reply(o, sums, fresh, r);
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
  free(pick);
  return o;
fail:
  json_decref(o);
  json_decref(advisors);
  json_decref(table);
  json_decref(summed);
  json_decref(sums);
  json_decref(fresh);
  free(pick);
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
