/* Advisor client: match and other api requests over NATS; see
 * kvplane/client.h. */
#include "kvplane/client.h"

#include <jansson.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "kvplane/event.h"
#include "common/errf.h"
#include "kvplane/status.h"
#include "nats/conn.h"

struct kvp_client_s {
  natsConnection *nc;
  char ns[KVP_SUBJECT_TOKEN_MAX + 1];
  uint32_t grace_ms;
  atomic_uint parts_seen; /* kvp__client_parts_seen */
  /* The gathering calls' reply subscription, on <inbox>.*, made once: a
   * request is <inbox>.<id>, so the server adds and removes no
   * subscription per request. One call uses it at a time (rmu); a call
   * that finds it taken makes its own, as before. */
  pthread_mutex_t rmu;
  natsSubscription *rsub;
  char rinbox[96];
  uint64_t rid;
};

int kvp__client_reply_take(kvp_client_t *c, void **sub, char *subject, size_t len) {
  natsInbox *inbox = NULL;
  *sub = NULL;
  if (pthread_mutex_trylock(&c->rmu) != 0)
    return 0;
  if (c->rsub == NULL) {
    char wild[sizeof c->rinbox + 2];
    if (natsInbox_Create(&inbox) != NATS_OK) {
      pthread_mutex_unlock(&c->rmu);
      return 0;
    }
    snprintf(c->rinbox, sizeof c->rinbox, "%s", (const char *)inbox);
    natsInbox_Destroy(inbox);
    snprintf(wild, sizeof wild, "%s.*", c->rinbox);
    if (natsConnection_SubscribeSync(&c->rsub, c->nc, wild) != NATS_OK) {
      c->rsub = NULL;
      pthread_mutex_unlock(&c->rmu);
      return 0;
    }
  }
  snprintf(subject, len, "%s.%llu", c->rinbox, (unsigned long long)++c->rid);
  *sub = c->rsub;
  return 1;
}

void kvp__client_reply_give(kvp_client_t *c) {
  pthread_mutex_unlock(&c->rmu);
}

void kvp_client_set_grace(kvp_client_t *c, uint32_t grace_ms) {
  c->grace_ms = grace_ms;
}

uint32_t kvp__client_grace_ms(const kvp_client_t *c) {
  return c->grace_ms;
}

uint32_t kvp__client_parts_seen(kvp_client_t *c) {
  return atomic_load(&c->parts_seen);
}

void kvp__client_parts_saw(kvp_client_t *c, uint32_t count) {
  atomic_store(&c->parts_seen, count);
}

int kvp_client_open(const kvp_nats_opts_t *nats, const char *ns, kvp_client_t **out, char *err,
                    size_t errlen) {
  char buf[512];
  kvp_client_t *c;
  int rc;

  *out = NULL;
  if (ns == NULL)
    ns = "default";
  if (!kvp_subject_token_valid(ns))
    return kvp__errf(err, errlen, KVP_EINVAL, "ns: '%s' must be 1..64 of [A-Za-z0-9_-]", ns);
  if ((rc = kvp_nats_opts_check(nats, NULL, buf, sizeof buf)) != 0)
    return kvp__errf(err, errlen, rc, "%s", buf);
  if ((c = calloc(1, sizeof *c)) == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "client: out of memory");
  snprintf(c->ns, sizeof c->ns, "%s", ns);
  pthread_mutex_init(&c->rmu, NULL);
  /* A gathered request is a plain publish: sent at once, not when nats.c's
   * flusher thread gets to it (milliseconds later). */
  kvp__nats_conn_args_t a = {.name = "kvplane-client", .send_asap = 1};
  if ((rc = kvp__nats_connect(nats, &a, &c->nc, buf, sizeof buf)) != 0) {
    pthread_mutex_destroy(&c->rmu);
    free(c);
    return kvp__errf(err, errlen, rc, "%s", buf);
  }
  *out = c;
  return 0;
}

/* Sends data to kvplane.api.<ns>.<call>; *rep gets the reply message. */
static int request(kvp_client_t *c, const char *call, const void *data, size_t len,
                   uint32_t timeout_ms, natsMsg **rep, char *err, size_t errlen) {
  char subj[KVP_SUBJECT_MAX];
  natsStatus s;

  *rep = NULL;
  if (kvp_subject_api(subj, sizeof subj, c->ns, call) != 0)
    return kvp__errf(err, errlen, KVP_EINVAL, "call: '%s' must be 1..64 of [A-Za-z0-9_-]", call);
  if (len > (size_t)INT32_MAX)
    return kvp__errf(err, errlen, KVP_ETOOBIG, "%s: request of %zu bytes is too big", subj, len);
  s = natsConnection_Request(rep, c->nc, subj, data, (int)len, (int64_t)timeout_ms);
  if (s == NATS_OK)
    return 0;
  if (s == NATS_NO_RESPONDERS)
    return kvp__errf(err, errlen, KVP_ENOENT, "%s: no advisor listens on this subject", subj);
  if (s == NATS_TIMEOUT)
    return kvp__errf(err, errlen, KVP_ETIMEDOUT, "%s: no reply within %u ms", subj, timeout_ms);
  return kvp__errf(err, errlen, kvp__nats_status(s), "%s: request failed: %s", subj,
                   natsStatus_GetText(s));
}

int kvp_client_request(kvp_client_t *c, const char *call, const char *body, uint32_t timeout_ms,
                       char **reply, char *err, size_t errlen) {
  natsMsg *rep = NULL;
  int rc;

  *reply = NULL;
  if (body == NULL)
    body = "{}";
  if ((rc = request(c, call, body, strlen(body), timeout_ms, &rep, err, errlen)) != 0)
    return rc;
  size_t n = (size_t)natsMsg_GetDataLength(rep);
  if ((*reply = malloc(n + 1)) == NULL) {
    rc = kvp__errf(err, errlen, KVP_ENOMEM, "%s reply: out of memory", call);
  } else {
    memcpy(*reply, natsMsg_GetData(rep), n);
    (*reply)[n] = '\0';
  }
  natsMsg_Destroy(rep);
  return rc;
}

void kvp_client_reply_free(char *reply) {
  free(reply);
}

static int tier_of(const char *name) {
  for (int t = KVP_TIER_G1; t <= KVP_TIER_MAX; t++)
    if (strcmp(kvp_tier_name(t), name) == 0)
      return t;
  return -1;
}

void *kvp__client_conn(kvp_client_t *c) {
  return c->nc;
}

const char *kvp__client_ns(const kvp_client_t *c) {
  return c->ns;
}

int kvp__client_match_row(void *row_, kvp_match_t *m) {
  json_t *row = row_;
  json_t *w = json_object_get(row, "worker"), *dp = json_object_get(row, "dp_rank"),
         *t = json_object_get(row, "tier"), *len = json_object_get(row, "length");
  if (!json_is_string(w) || !json_is_integer(dp) || !json_is_string(t) || !json_is_integer(len))
    return KVP_EPROTO;
  const char *ws = json_string_value(w);
  json_int_t d = json_integer_value(dp), l = json_integer_value(len);
  int tier = tier_of(json_string_value(t));
  if (strlen(ws) > KVP_SUBJECT_TOKEN_MAX || d < 0 || d > (json_int_t)UINT32_MAX || l < 0 ||
      tier < 0)
    return KVP_EPROTO;
  memset(m, 0, sizeof *m);
  snprintf(m->worker, sizeof m->worker, "%s", ws);
  m->dp_rank = (uint32_t)d;
  m->tier = tier;
  m->length = (uint64_t)l;
  return 0;
}

int kvp__client_match_parse(const void *data, size_t len, kvp_match_t *out, size_t cap,
                            size_t *nmatches, char *err, size_t errlen) {
  json_error_t jerr;
  json_t *doc, *arr, *e;
  int rc = 0;

  *nmatches = 0;
  if ((doc = json_loadb(data, len, 0, &jerr)) == NULL)
    return kvp__errf(err, errlen, KVP_EPROTO, "the reply is not JSON: %s", jerr.text);
  if ((e = json_object_get(doc, "error")) != NULL) {
    rc = kvp__errf(err, errlen, KVP_EPROTO, "the advisor refused the request: %s",
                   json_is_string(e) ? json_string_value(e) : "(no text)");
    goto out;
  }
  arr = json_object_get(doc, "matches");
  if (!json_is_array(arr)) {
    rc = kvp__errf(err, errlen, KVP_EPROTO, "the reply has no \"matches\" array");
    goto out;
  }
  for (size_t i = 0; i < json_array_size(arr); i++) {
    kvp_match_t m;
    if (kvp__client_match_row(json_array_get(arr, i), &m) != 0) {
      rc = kvp__errf(err, errlen, KVP_EPROTO, "row %zu of the reply is malformed", i);
      goto out;
    }
    if (i < cap)
      out[i] = m;
  }
  *nmatches = json_array_size(arr);
out:
  json_decref(doc);
  return rc;
}

int kvp_client_match(kvp_client_t *c, const uint64_t *hashes, size_t n, uint32_t timeout_ms,
                     kvp_match_t *out, size_t cap, size_t *nmatches, char *err, size_t errlen) {
  char subj[KVP_SUBJECT_MAX];
  natsMsg *rep = NULL;
  uint8_t *req;
  int rc;

  *nmatches = 0;
  if (n == 0 || n > KVP_MATCH_MAX)
    return kvp__errf(err, errlen, KVP_EINVAL, "match: %zu hashes (1..%d per request)", n,
                     KVP_MATCH_MAX);
  if (out == NULL && cap > 0)
    return kvp__errf(err, errlen, KVP_EINVAL, "match: no room for %zu rows (out is NULL)", cap);
  kvp_subject_api(subj, sizeof subj, c->ns, KVP_API_MATCH);
  /* The binary form: "KVPM" and little-endian u64s, no JSON to build. */
  if ((req = malloc(4 + 8 * n)) == NULL)
    return kvp__errf(err, errlen, KVP_ENOMEM, "match: out of memory for %zu hashes", n);
  memcpy(req, KVP_MATCH_MAGIC, 4);
  for (size_t i = 0; i < n; i++)
    for (int b = 0; b < 8; b++)
      req[4 + i * 8 + (size_t)b] = (uint8_t)(hashes[i] >> (8 * b));
  rc = request(c, KVP_API_MATCH, req, 4 + 8 * n, timeout_ms, &rep, err, errlen);
  free(req);
  if (rc != 0)
    return rc;
  rc = kvp__client_match_parse(natsMsg_GetData(rep), (size_t)natsMsg_GetDataLength(rep), out, cap,
                               nmatches, err, errlen);
  if (rc != 0 && err != NULL && errlen > 0) { /* name the subject in front of the cause */
    char why[512];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "%s: %s", subj, why);
  }
  natsMsg_Destroy(rep);
  return rc;
}

void kvp_client_close(kvp_client_t *c) {
  if (c == NULL)
    return;
  natsSubscription_Destroy(c->rsub);
  natsConnection_Destroy(c->nc);
  pthread_mutex_destroy(&c->rmu);
  free(c);
}
