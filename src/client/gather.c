/* Scatter-gather: one request, the replies of every advisor, one merged
 * answer; see "scatter-gather" in include/kvplane/client.h. */
#include <jansson.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/client_impl.h"
#include "common/errf.h"
#include "kvplane/client.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A reply's "partitions": count, owned and positions (arrays of the same
 * length). A reply without it (an advisor older than partitions) counts as
 * unpartitioned at position 0. Returns 0 or KVP_EPROTO. */
static int where(json_t *doc, uint32_t *count, json_t **owned, json_t **pos) {
  json_t *p = json_object_get(doc, "partitions");
  *count = 0;
  *owned = *pos = NULL;
  if (p == NULL)
    return 0;
  json_t *c = json_object_get(p, "count");
  *owned = json_object_get(p, "owned");
  *pos = json_object_get(p, "positions");
  if (!json_is_integer(c) || json_integer_value(c) < 0 ||
      json_integer_value(c) > KVP_PARTITIONS_MAX || !json_is_array(*owned) ||
      !json_is_array(*pos) || json_array_size(*owned) != json_array_size(*pos))
    return KVP_EPROTO;
  *count = (uint32_t)json_integer_value(c);
  for (size_t i = 0; i < json_array_size(*owned); i++) {
    json_t *o = json_array_get(*owned, i), *q = json_array_get(*pos, i);
    if (!json_is_integer(o) || !json_is_integer(q) || json_integer_value(o) < 0 ||
        json_integer_value(q) < 0 || (*count > 0 && json_integer_value(o) >= (json_int_t)*count))
      return KVP_EPROTO;
  }
  return 0;
}

static int by_length(const void *a, const void *b) {
  const kvp_match_t *x = a, *y = b;
  if (x->length != y->length)
    return x->length > y->length ? -1 : 1;
  int w = strcmp(x->worker, y->worker);
  if (w != 0)
    return w;
  if (x->dp_rank != y->dp_rank)
    return x->dp_rank < y->dp_rank ? -1 : 1;
  return x->tier - y->tier;
}

/* The merge over parsed replies (docs[i] NULL: skipped). */
static int merge(json_t **docs, size_t n, kvp_match_t *out, size_t cap, size_t *nmatches,
                 kvp_gather_info_t *info, char *err, size_t errlen) {
  static const int none = -1;
  int best[KVP_PARTITIONS_MAX];
  uint64_t bestpos[KVP_PARTITIONS_MAX];
  uint32_t count = 0;
  int rc = 0;
  kvp_match_t *rows = NULL;
  size_t nrows = 0, rcap = 0;

  *nmatches = 0;
  for (size_t i = 0; i < KVP_PARTITIONS_MAX; i++)
    best[i] = none;
  /* The deployment's count is the partitioned replies' (they must agree).
   * An unpartitioned advisor answering beside them (one still running
   * while the servers are switched to the mapping, docs/SCALE.md: its
   * stream takes nothing from then on) is counted as an error and skipped
   * below, not the answer's failure. */
  for (size_t i = 0; i < n; i++) {
    json_t *owned, *pos;
    uint32_t c;
    if (docs[i] == NULL || json_object_get(docs[i], "error") != NULL ||
        where(docs[i], &c, &owned, &pos) != 0 || c == 0)
      continue;
    if (count != 0 && c != count)
      return kvp__errf(err, errlen, KVP_EPROTO,
                       "the advisors disagree on the partition count (%u and %u): check their "
                       "[partitions] count against the servers' mapping",
                       count, c);
    count = c;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *owned, *pos;
    uint32_t c;
    if (docs[i] == NULL)
      continue;
    if (json_object_get(docs[i], "error") != NULL) {
      info->errors++;
      docs[i] = NULL; /* not ours to free: the caller's array still holds it */
      continue;
    }
    if (where(docs[i], &c, &owned, &pos) != 0 ||
        !json_is_array(json_object_get(docs[i], "matches"))) {
      /* Not a match reply (whoever answered): counted, not merged; its
       * partitions show as missing unless another reply covers them. */
      info->errors++;
      docs[i] = NULL;
      continue;
    }
    if (c != count) { /* unpartitioned, beside partitioned replies */
      info->errors++;
      docs[i] = NULL;
      continue;
    }
    size_t k = owned ? json_array_size(owned) : 0;
    if (c == 0 && k == 0) { /* an old advisor: the whole stream, position unknown */
      if (best[0] == none)
        best[0] = (int)i, bestpos[0] = 0;
      continue;
    }
    for (size_t j = 0; j < k; j++) {
      uint32_t p = c ? (uint32_t)json_integer_value(json_array_get(owned, j)) : 0;
      uint64_t q = (uint64_t)json_integer_value(json_array_get(pos, j));
      if (best[p] == none || q > bestpos[p])
        best[p] = (int)i, bestpos[p] = q;
    }
  }
  info->partitions = count;
  uint32_t parts = count ? count : 1;
  for (uint32_t p = 0; p < parts; p++)
    if (best[p] == none) {
      if (info->nmissing < KVP_GATHER_MISSING_MAX)
        info->missing[info->nmissing] = p;
      info->nmissing++;
    }
  for (size_t i = 0; i < n; i++) {
    int used = 0;
    if (docs[i] == NULL)
      continue;
    json_t *arr = json_object_get(docs[i], "matches");
    for (size_t j = 0; j < json_array_size(arr); j++) {
      kvp_match_t m;
      if (kvp__client_match_row(json_array_get(arr, j), &m) != 0) {
        rc = kvp__errf(err, errlen, KVP_EPROTO, "row %zu of reply %zu is malformed", j, i);
        goto out;
      }
      uint32_t p = count ? kvp_partition_of(m.worker, count) : 0;
      if (best[p] != (int)i)
        continue; /* a staler standby's, or a worker outside the advisor's partitions */
      if (nrows == rcap) {
        kvp_match_t *grown = realloc(rows, (rcap = rcap ? rcap * 2 : 64) * sizeof *rows);
        if (grown == NULL) {
          rc = kvp__errf(err, errlen, KVP_ENOMEM, "merge: out of memory");
          goto out;
        }
        rows = grown;
      }
      rows[nrows++] = m;
      used = 1;
    }
    for (uint32_t p = 0; !used && p < parts; p++)
      used = best[p] == (int)i;
    info->used += (uint32_t)used;
  }
  if (nrows > 1)
    qsort(rows, nrows, sizeof *rows, by_length);
  for (size_t i = 0; i < nrows && i < cap; i++)
    out[i] = rows[i];
  *nmatches = nrows;
out:
  free(rows);
  return rc;
}

int kvp_match_merge(const char *const *replies, const size_t *lens, size_t n, kvp_match_t *out,
                    size_t cap, size_t *nmatches, kvp_gather_info_t *info, char *err,
                    size_t errlen) {
  json_t **docs, **keep;
  int rc = 0;

  memset(info, 0, sizeof *info);
  *nmatches = 0;
  if (out == NULL && cap > 0)
    return kvp__errf(err, errlen, KVP_EINVAL, "merge: no room for %zu rows (out is NULL)", cap);
  if ((docs = calloc(n + 1, sizeof *docs)) == NULL ||
      (keep = calloc(n + 1, sizeof *keep)) == NULL) {
    free(docs);
    return kvp__errf(err, errlen, KVP_ENOMEM, "merge: out of memory");
  }
  info->replies = (uint32_t)n;
  for (size_t i = 0; i < n; i++) /* not JSON: not a match reply, counted as one */
    if ((docs[i] = keep[i] = json_loadb(replies[i], lens[i], 0, NULL)) == NULL)
      info->errors++;
  rc = merge(docs, n, out, cap, nmatches, info, err, errlen);
  for (size_t i = 0; i < n; i++)
    json_decref(keep[i]);
  free(docs);
  free(keep);
  return rc;
}

/* Replies received for one request: the messages and their parsed JSON. */
typedef struct gathered_s {
  natsMsg *msg[KVP_PARTITIONS_MAX];
  json_t *doc[KVP_PARTITIONS_MAX];
  size_t n;
  uint32_t count;         /* the partitioned replies' count; 0: none yet */
  int have_count;         /* a valid reply came, partitioned or not */
  uint32_t unpartitioned; /* valid replies of unpartitioned advisors */
  uint8_t covered[KVP_PARTITIONS_MAX];
  uint32_t ncovered;
  uint64_t elapsed_us;
} gathered_t;

static void gathered_free(gathered_t *g) {
  for (size_t i = 0; i < g->n; i++) {
    natsMsg_Destroy(g->msg[i]);
    json_decref(g->doc[i]);
  }
  free(g);
}

/* Notes which partitions a reply covers. */
static void note(gathered_t *g, json_t *doc) {
  json_t *owned, *pos;
  uint32_t c;
  if (doc == NULL || json_object_get(doc, "error") != NULL || where(doc, &c, &owned, &pos) != 0)
    return;
  g->have_count = 1;
  if (c == 0) {
    g->unpartitioned++;
    return;
  }
  if (g->count == 0)
    g->count = c;
  if (c != g->count)
    return; /* the merge reports the disagreement */
  for (size_t j = 0; j < json_array_size(owned); j++) {
    uint32_t p = (uint32_t)json_integer_value(json_array_get(owned, j));
    if (!g->covered[p])
      g->ncovered++;
    g->covered[p] = 1;
  }
}

/* Whether the replies so far cover every partition: an unpartitioned
 * advisor covers everything, unless partitioned ones answered too (the
 * merge takes theirs: see merge) or did in the client's last gather
 * (seen: their count). An unpartitioned advisor left running while the
 * servers are switched to the mapping often answers first; its answer
 * alone, from a stream that takes nothing any more, is not the answer. */
static int is_covered(const gathered_t *g, uint32_t seen) {
  return g->count ? g->ncovered == g->count : g->unpartitioned > 0 && seen == 0;
}

/* Publishes data on kvplane.api.<ns>.<call> with a reply subject and takes
 * replies until they cover every partition or timeout_ms. The reply
 * subject is one of the client's long-lived subscription when it is free
 * (kvp__client_reply_take: replies to earlier requests still arriving
 * there are dropped by their subject), else an inbox of this call's own. */
static int gather(kvp_client_t *c, const char *call, const void *data, size_t len,
                  uint32_t timeout_ms, gathered_t **out, char *err, size_t errlen) {
  natsConnection *nc = kvp__client_conn(c);
  natsSubscription *sub = NULL;
  char subj[KVP_SUBJECT_MAX], reply[128];
  natsInbox *inbox = NULL;
  void *shared = NULL;
  gathered_t *g;
  natsStatus s = NATS_OK;
  int rc = 0, covered = 0, own;

  *out = NULL;
  if (kvp_subject_api(subj, sizeof subj, kvp__client_ns(c), call) != 0)
    return kvp__errf(err, errlen, KVP_EINVAL, "call: '%s' must be 1..64 of [A-Za-z0-9_-]", call);
  if (len > (size_t)INT32_MAX)
    return kvp__errf(err, errlen, KVP_ETOOBIG, "%s: request of %zu bytes is too big", subj, len);
  if ((g = calloc(1, sizeof *g)) == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "%s: out of memory", subj);
  uint64_t t0 = now_us(), deadline = t0 + (uint64_t)timeout_ms * 1000u;
  uint32_t seen = kvp__client_parts_seen(c);
  own = !kvp__client_reply_take(c, &shared, reply, sizeof reply);
  if (own) {
    if ((s = natsInbox_Create(&inbox)) == NATS_OK)
      snprintf(reply, sizeof reply, "%s", (const char *)inbox);
    if (s == NATS_OK)
      s = natsConnection_SubscribeSync(&sub, nc, reply);
  } else {
    sub = shared;
  }
  if (s != NATS_OK ||
      (s = natsConnection_PublishRequest(nc, subj, reply, data, (int)len)) != NATS_OK) {
    rc = kvp__errf(err, errlen, kvp__nats_status(s), "%s: request failed: %s", subj,
                   natsStatus_GetText(s));
    goto out;
  }
  uint64_t grace_end = 0;
  while (g->n < KVP_PARTITIONS_MAX) {
    uint64_t now = now_us();
    natsMsg *m = NULL;
    int64_t wait_ms;
    if (!covered) {
      if (now >= deadline)
        break;
      wait_ms = (int64_t)((deadline - now + 999) / 1000);
    } else if (now < grace_end) {
      wait_ms = (int64_t)((grace_end - now + 999) / 1000);
    } else {
      /* Past the grace: only the replies already here. */
      int pending = 0;
      if (natsSubscription_GetPending(sub, &pending, NULL) != NATS_OK || pending == 0)
        break;
      wait_ms = 1;
    }
    s = natsSubscription_NextMsg(&m, sub, wait_ms);
    if (s == NATS_TIMEOUT) {
      if (!covered && now_us() >= deadline)
        break;
      continue;
    }
    if (s == NATS_SLOW_CONSUMER && !own)
      continue; /* the shared subscription overflowed with late replies to
                 * earlier requests while nobody gathered; reported once */
    if (s != NATS_OK) {
      rc = kvp__errf(err, errlen, kvp__nats_status(s), "%s: reply failed: %s", subj,
                     natsStatus_GetText(s));
      goto out;
    }
    if (!own && strcmp(natsMsg_GetSubject(m), reply) != 0) { /* an earlier request's */
      natsMsg_Destroy(m);
      continue;
    }
    if (natsMsg_GetDataLength(m) == 0) { /* a no-responders status: nothing to merge */
      natsMsg_Destroy(m);
      continue;
    }
    g->msg[g->n] = m;
    g->doc[g->n] = json_loadb(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), 0, NULL);
    note(g, g->doc[g->n]);
    g->n++;
    if (!covered)
      g->elapsed_us = now_us() - t0;
    int done = is_covered(g, seen);
    if (!done)
      covered = 0; /* partitioned replies after an unpartitioned one's cover */
    if (done && !covered) {
      /* Every partition has an answer: standbys' replies already here are
       * taken too (the merge prefers the freshest), and more for the
       * client's grace, within the deadline. */
      covered = 1;
      grace_end = now_us() + (uint64_t)kvp__client_grace_ms(c) * 1000u;
      if (grace_end > deadline)
        grace_end = deadline;
    }
  }
  /* What the next gather expects: this one's partitioned count; 0 when
   * only unpartitioned advisors answered (the deployment went back). */
  if (g->count || g->unpartitioned)
    kvp__client_parts_saw(c, g->count);
out:
  if (own) {
    natsSubscription_Destroy(sub);
    natsInbox_Destroy(inbox);
  } else {
    kvp__client_reply_give(c);
  }
  if (rc != 0) {
    gathered_free(g);
    return rc;
  }
  *out = g;
  return 0;
}

int kvp_client_match_all(kvp_client_t *c, const uint64_t *hashes, size_t n, uint32_t timeout_ms,
                         kvp_match_t *out, size_t cap, size_t *nmatches, kvp_gather_info_t *info,
                         char *err, size_t errlen) {
  gathered_t *g = NULL;
  json_t *docs[KVP_PARTITIONS_MAX];
  uint8_t *req;
  int rc;

  memset(info, 0, sizeof *info);
  *nmatches = 0;
  if (n == 0 || n > KVP_MATCH_MAX)
    return kvp__errf(err, errlen, KVP_EINVAL, "match: %zu hashes (1..%d per request)", n,
                     KVP_MATCH_MAX);
  if (out == NULL && cap > 0)
    return kvp__errf(err, errlen, KVP_EINVAL, "match: no room for %zu rows (out is NULL)", cap);
  if ((req = malloc(4 + 8 * n)) == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "match: out of memory for %zu hashes", n);
  memcpy(req, KVP_MATCH_MAGIC, 4);
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < 8; b++)
      req[4 + i * 8 + (size_t)b] = (uint8_t)(hashes[i] >> (8 * b));
  rc = gather(c, KVP_API_MATCH, req, 4 + 8 * n, timeout_ms, &g, err, errlen);
  free(req);
  if (rc != 0)
    return rc;
  for (size_t i = 0; i < g->n; i++) {
    /* A reply that is not JSON (whoever answered on the subject) is not a
     * match reply: counted and skipped as one, not the whole answer's
     * failure (every router's query would fail while it answers). */
    info->errors += g->doc[i] == NULL;
    docs[i] = g->doc[i];
  }
  info->replies = (uint32_t)g->n;
  rc = merge(docs, g->n, out, cap, nmatches, info, err, errlen);
  info->elapsed_us = g->elapsed_us;
  gathered_free(g);
  return rc;
}

int kvp_client_request_all(kvp_client_t *c, const char *call, const char *body, uint32_t timeout_ms,
                           char **reply, char *err, size_t errlen) {
  gathered_t *g = NULL;
  int rc;

  *reply = NULL;
  if (body == NULL)
    body = "{}";
  if ((rc = gather(c, call, body, strlen(body), timeout_ms, &g, err, errlen)) != 0)
    return rc;
  json_t *o = json_object(), *missing = json_array(), *reps = json_array();
  uint32_t parts = g->have_count && g->count ? g->count : 1;
  for (uint32_t p = 0; missing && p < parts; p++)
    if (g->have_count ? (g->count ? !g->covered[p] : 0) : 1)
      json_array_append_new(missing, json_integer(p));
  for (size_t i = 0; reps && i < g->n; i++)
    json_array_append(reps, g->doc[i] ? g->doc[i] : json_null());
  if (o && missing && reps) {
    json_object_set_new(o, "partitions", json_integer(g->have_count ? g->count : 0));
    json_object_set_new(o, "missing", missing);
    json_object_set_new(o, "replies", reps);
    missing = reps = NULL;
    *reply = json_dumps(o, JSON_COMPACT);
  }
  json_decref(missing);
  json_decref(reps);
  json_decref(o);
  gathered_free(g);
  if (*reply == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "%s: out of memory", call);
  return 0;
}
