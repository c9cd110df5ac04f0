/* kvplane volume plugin "s3": blocks as objects in any S3-compatible store
 * over HTTP(S), with libcurl. Parameters (docs/volumes.md):
 *
 *   endpoint        http(s)://host[:port] (default: the chain, below, then
 *                   https://s3.<region>.amazonaws.com, virtual-hosted
 *                   unless the bucket is not one DNS label: creds.c)
 *   bucket          (required)
 *   region          signing region (default: the chain, then us-east-1)
 *   prefix          key prefix (default ""): objects are <prefix><ns>/<hash hex>
 *   addressing      path (default: endpoint/bucket/key) | virtual (bucket.host/key)
 *   access_key, secret_key, session_token
 *                   credentials; default the chain: AWS_ACCESS_KEY_ID,
 *                   AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, else the
 *                   profile in ~/.aws/credentials and ~/.aws/config
 *                   (creds.c has the order)
 *   profile         the profile to read (default AWS_PROFILE, "default")
 *   capacity        quota in bytes (K/M/G/T suffixes; 0: none); S3 has no
 *                   bound of its own, so usage is counted here and rebuilt
 *                   by listing the prefix at open
 *   connect_timeout_ms (default 3000)
 *   stall_timeout_ms a request that moves no byte for this long fails and
 *                   is retried (default 30000)
 *   timeout_ms      cap on one request however it progresses (default 0:
 *                   none, so a 48 MiB block on a slow link is not cut off)
 *   retries         attempts after the first for 5xx, throttling, 400
 *                   RequestTimeout, timeouts and broken connections, with
 *                   exponential backoff and jitter (default 4; other errors
 *                   are not retried)
 *   backoff_max_ms  cap on one wait between attempts (default 20000); a
 *                   Retry-After the store sends is waited, up to this cap
 *   ca_file         CA bundle for https (default AWS_CA_BUNDLE, the
 *                   profile's ca_bundle, the system's); a named file that
 *                   cannot be read fails the open
 *
 * Requests are signed with AWS SigV4 by libcurl (CURLOPT_AWS_SIGV4), fed
 * canonical URLs (request.c says why), with
 * x-amz-content-sha256 set to the payload's SHA-256 (OpenSSL), so stores
 * that verify payloads can. Errors: 403 is KVP_EAUTH (a wrong key or
 * signature), 404 KVP_ENOENT (a missing key, or at open a missing bucket),
 * 503 SlowDown KVP_EAGAIN after the retries, a refused or dropped
 * connection KVP_ECONN, a timeout KVP_ETIMEDOUT, other HTTP errors KVP_EIO;
 * the message names the bucket, key and HTTP status or curl's cause.
 *
 * Thread-safe per volume: each call takes a curl handle from a small pool
 * (connections are reused through the handles), usage counters are under
 * a mutex, and a put or delete looks up the size it replaces or removes
 * under its key's lock (one HEAD per put), so the usage and the quota count
 * every object once.
 *
 * This file: the parameters and the operations. creds.c resolves the
 * credential chain, request.c makes the HTTP requests, list.c lists a
 * prefix; s3.h is what they share. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "plugin_util.h"
#include "s3.h"

static int count(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  s3_t *s = ctx;
  (void)ns;
  (void)hash;
  s->used += bytes;
  s->blocks++;
  return 0;
}

/* --- operations ------------------------------------------------------------- */

static void s3_close(void *vol) {
  s3_t *s = vol;
  if (s == NULL)
    return;
  kvp__s3_free_handles(s);
  pthread_mutex_destroy(&s->mu);
  for (int i = 0; i < KEY_LOCKS; i++)
    pthread_mutex_destroy(&s->key_mu[i]);
  free(s);
}

static int set_str(char *dst, size_t cap, const char *key, const char *v, char *err,
                   size_t errlen) {
  if (strlen(v) >= cap) {
    snprintf(err, errlen, "%s: longer than %zu bytes", key, cap - 1);
    return KVP_ECONFIG;
  }
  snprintf(dst, cap, "%s", v);
  return 0;
}

static int s3_open(const kvp_volume_param_t *params, size_t n, void **vol, char *err,
                   size_t errlen) {
  s3_t *s = calloc(1, sizeof *s);
  const char *ns = NULL;
  int rc = 0;

  if (s == NULL)
    return KVP_ENOMEM;
  kvp__s3_global_init();
  pthread_mutex_init(&s->mu, NULL);
  for (int i = 0; i < KEY_LOCKS; i++)
    pthread_mutex_init(&s->key_mu[i], NULL);
  snprintf(s->region, sizeof s->region, "us-east-1");
  s->timeout_ms = 0;
  s->connect_ms = 3000;
  s->stall_ms = 30000;
  s->backoff_max_ms = 20000;
  s->retries = 4;
  s->id_ttl_ms = 2000;
  s->seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)s;
  s3_given_t given = {0};
  for (size_t i = 0; i < n && rc == 0; i++) {
    const char *k = params[i].key, *v = params[i].value ? params[i].value : "";
    char *end;
    if (strcmp(k, "endpoint") == 0)
      rc = set_str(s->endpoint, sizeof s->endpoint, k, v, err, errlen), given.endpoint = 1;
    else if (strcmp(k, "bucket") == 0)
      rc = set_str(s->bucket, sizeof s->bucket, k, v, err, errlen);
    else if (strcmp(k, "region") == 0)
      rc = set_str(s->region, sizeof s->region, k, v, err, errlen), given.region = 1;
    else if (strcmp(k, "prefix") == 0)
      rc = set_str(s->prefix, sizeof s->prefix, k, v, err, errlen);
    else if (strcmp(k, "namespace") == 0)
      ns = v; /* added by kvp_volume_open_ns (KVP_VOLUME_KNOWS_NAMESPACE) */
    else if (strcmp(k, "profile") == 0)
      rc = set_str(s->profile, sizeof s->profile, k, v, err, errlen);
    else if (strcmp(k, "access_key") == 0)
      rc = set_str(s->access, sizeof s->access, k, v, err, errlen), given.access = 1;
    else if (strcmp(k, "secret_key") == 0)
      rc = set_str(s->secret, sizeof s->secret, k, v, err, errlen), given.secret = 1;
    else if (strcmp(k, "session_token") == 0)
      rc = set_str(s->token, sizeof s->token, k, v, err, errlen), given.token = 1;
    else if (strcmp(k, "ca_file") == 0)
      rc = set_str(s->ca_file, sizeof s->ca_file, k, v, err, errlen), given.ca_file = 1;
    else if (strcmp(k, "addressing") == 0) {
      given.addressing = 1;
      if (strcmp(v, "path") != 0 && strcmp(v, "virtual") != 0) {
        snprintf(err, errlen, "addressing: '%s' is not path or virtual", v);
        rc = KVP_ECONFIG;
      }
      s->virtual_host = strcmp(v, "virtual") == 0;
    } else if (strcmp(k, "capacity") == 0) {
      if (kvp_plugin_parse_size(v, &s->capacity) != 0) {
        snprintf(err, errlen, "capacity: '%s' is not a size (bytes, or with K/M/G/T)", v);
        rc = KVP_ECONFIG;
      }
    } else if (strcmp(k, "timeout_ms") == 0 || strcmp(k, "connect_timeout_ms") == 0 ||
               strcmp(k, "stall_timeout_ms") == 0 || strcmp(k, "backoff_max_ms") == 0 ||
               strcmp(k, "retries") == 0 || strcmp(k, "identity_ttl_ms") == 0) {
      /* timeout_ms 0 is no cap; the others need a bound. */
      long x = strtol(v, &end, 10), lo = strcmp(k, "timeout_ms") == 0 ? 0 : 1;
      if (strcmp(k, "retries") == 0)
        lo = 0;
      if (*v == '\0' || *end != '\0' || x < lo || x > 3600000 ||
          (strcmp(k, "retries") == 0 && x > 20)) {
        snprintf(err, errlen, "%s: '%s' is out of range", k, v);
        rc = KVP_ECONFIG;
      } else if (strcmp(k, "timeout_ms") == 0)
        s->timeout_ms = x;
      else if (strcmp(k, "connect_timeout_ms") == 0)
        s->connect_ms = x;
      else if (strcmp(k, "stall_timeout_ms") == 0)
        s->stall_ms = x;
      else if (strcmp(k, "backoff_max_ms") == 0)
        s->backoff_max_ms = x;
      else if (strcmp(k, "identity_ttl_ms") == 0)
        s->id_ttl_ms = x;
      else
        s->retries = (int)x;
    } else {
      snprintf(err, errlen,
               "unknown parameter '%s' (endpoint, bucket, region, prefix, addressing, access_key, "
               "secret_key, session_token, profile, capacity, connect_timeout_ms, "
               "stall_timeout_ms, timeout_ms, retries, backoff_max_ms, ca_file, identity_ttl_ms, "
               "namespace)",
               k);
      rc = KVP_ECONFIG;
    }
  }
  if (rc == 0 && !s->bucket[0]) {
    snprintf(err, errlen, "bucket is required");
    rc = KVP_ECONFIG;
  }
  if (rc == 0)
    rc = kvp__s3_resolve(s, &given, err, errlen);
  size_t el = strlen(s->endpoint);
  if (rc == 0 && el > 0 && s->endpoint[el - 1] == '/')
    s->endpoint[el - 1] = '\0';
  /* The bucket must answer, and its listing is the usage. */
  if (rc == 0)
    rc = kvp__s3_list(s, count, s, err, errlen);
  if (rc == 0)
    rc = kvp__s3_identity_open(s, ns, err, errlen);
  if (rc != 0) {
    s3_close(s);
    return rc;
  }
  *vol = s;
  return 0;
}

/* 404 NoSuchBucket after open is the volume being away, not a missing key:
 * a get or a delete that said KVP_ENOENT would have its caller drop the
 * location (and the identity check, fresh for identity_ttl_ms, does not
 * look). The next call looks at the marker again. */
static int bucket_gone(s3_t *s, const req_t *r, int rc, char *err, size_t errlen) {
  if (rc != KVP_ENOENT || strcmp(r->code, "NoSuchBucket") != 0)
    return rc;
  pthread_mutex_lock(&s->mu);
  s->id_checked_ms = 0;
  pthread_mutex_unlock(&s->mu);
  size_t n = strlen(err);
  snprintf(err + n, errlen - n, ": bucket %s is gone: offline", s->bucket);
  return KVP_EOFFLINE;
}

static size_t iov_total(const struct iovec *iov, int n) {
  size_t t = 0;
  for (int i = 0; i < n; i++)
    t += iov[i].iov_len;
  return t;
}

/* 1 with *size set when key exists, 0 when not, or a negative code. */
static int head(s3_t *s, const char *key, size_t *size, char *err, size_t errlen) {
  char url[4096], what[1400];
  req_t r = {0};
  snprintf(what, sizeof what, "bucket %s: HEAD %s", s->bucket, key);
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  int rc = kvp__s3_perform(s, "HEAD", url, &r, what, err, errlen);
  free(r.text);
  if (rc != 0)
    return rc;
  if (r.status == 404)
    return 0;
  if (r.status != 200)
    return kvp__s3_http_error(&r, what, err, errlen);
  if (size)
    *size = r.clen > 0 ? (size_t)r.clen : 0;
  return 1;
}

static int s3_put(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  char *err, size_t errlen) {
  s3_t *s = vol;
  char key[512], url[4096], what[1400];
  size_t len = iov_total(iov, iovcnt), old = 0;
  int rc;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  if ((rc = kvp__s3_identity(s, err, errlen)) != 0)
    return rc;
  kvp__s3_key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: PUT %s", s->bucket, key);
  /* A replaced object is counted once, in the usage and the quota: its old
   * size is looked up under the key's lock, and a put in flight reserves
   * its bytes. */
  pthread_mutex_t *km = &s->key_mu[hash % KEY_LOCKS];
  pthread_mutex_lock(km);
  int existed = head(s, key, &old, err, errlen);
  if (existed < 0) {
    pthread_mutex_unlock(km);
    return existed;
  }
  pthread_mutex_lock(&s->mu);
  int full = s->capacity && s->used + s->reserved - old + len > s->capacity;
  uint64_t used = s->used + s->reserved;
  if (!full)
    s->reserved += len;
  pthread_mutex_unlock(&s->mu);
  if (full) {
    pthread_mutex_unlock(km);
    snprintf(err, errlen, "%s: %zu bytes over the %" PRIu64 "-byte quota (%" PRIu64 " used)", what,
             len, s->capacity, used);
    return KVP_ENOSPC;
  }
  req_t r = {.up = iov, .nup = iovcnt};
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  rc = kvp__s3_perform(s, "PUT", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 200)
    rc = bucket_gone(s, &r, kvp__s3_http_error(&r, what, err, errlen), err, errlen);
  free(r.text);
  pthread_mutex_lock(&s->mu);
  s->reserved -= len;
  if (rc == 0) {
    s->used = s->used - old + len;
    s->blocks += existed ? 0 : 1;
  }
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(km);
  return rc;
}

static int s3_get(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  size_t *len, char *err, size_t errlen) {
  s3_t *s = vol;
  char key[512], url[4096], what[1400];
  int rc;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  kvp__s3_key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: GET %s", s->bucket, key);
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  req_t r = {.down = iov, .ndown = iovcnt, .cap = iov_total(iov, iovcnt)};
  rc = kvp__s3_perform(s, "GET", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 200) {
    rc = bucket_gone(s, &r, kvp__s3_http_error(&r, what, err, errlen), err, errlen);
  } else if (rc == 0 && r.overflow) {
    *len = r.got;
    snprintf(err, errlen, "%s: %zu bytes, more than the %zu-byte buffer", what, r.got, r.cap);
    rc = KVP_ETOOBIG;
  } else if (rc == 0) {
    *len = r.got;
  }
  free(r.text);
  /* A miss where the marker is gone is the volume being away. */
  if (rc == KVP_ENOENT && kvp__s3_identity(s, err, errlen) == KVP_EOFFLINE)
    rc = KVP_EOFFLINE;
  return rc;
}

static int s3_exists(void *vol, const char *ns, uint64_t hash, size_t *len) {
  s3_t *s = vol;
  char key[512], err[512];
  if (!kvp_plugin_ns_ok(ns))
    return KVP_EINVAL;
  kvp__s3_key_of(s, ns, hash, key, sizeof key);
  return head(s, key, len, err, sizeof err);
}

static int s3_del(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen) {
  s3_t *s = vol;
  char key[512], url[4096], what[1400];
  size_t size = 0;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  int irc = kvp__s3_identity(s, err, errlen);
  if (irc != 0)
    return irc;
  kvp__s3_key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: DELETE %s", s->bucket, key);
  /* S3 answers 204 for a missing key too: look first, so that a missing
   * key is KVP_ENOENT as the ABI says, and for the usage (under the key's
   * lock, see put). */
  pthread_mutex_t *km = &s->key_mu[hash % KEY_LOCKS];
  pthread_mutex_lock(km);
  int rc = head(s, key, &size, err, errlen);
  if (rc == 0) {
    snprintf(err, errlen, "%s: no such key", what);
    rc = KVP_ENOENT;
  }
  if (rc < 0) {
    pthread_mutex_unlock(km);
    return rc;
  }
  req_t r = {0};
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  rc = kvp__s3_perform(s, "DELETE", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 204 && r.status != 200)
    rc = bucket_gone(s, &r, kvp__s3_http_error(&r, what, err, errlen), err, errlen);
  free(r.text);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    s->used -= size < s->used ? size : s->used;
    s->blocks -= s->blocks ? 1 : 0;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(km);
  return rc;
}

static int s3_stat(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen) {
  s3_t *s = vol;
  int rc = kvp__s3_identity(s, err, errlen);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&s->mu);
  *st = (kvp_volume_stat_t){s->capacity, s->used, s->blocks};
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int s3_iterate(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  int rc = kvp__s3_identity(vol, err, errlen);
  return rc != 0 ? rc : kvp__s3_list(vol, fn, ctx, err, errlen);
}

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION,
    .name = "s3",
    .flags = KVP_VOLUME_KNOWS_NAMESPACE,
    .open = s3_open,
    .close = s3_close,
    .put = s3_put,
    .get = s3_get,
    .del = s3_del,
    .exists = s3_exists,
    .stat = s3_stat,
    .iterate = s3_iterate,
};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}
