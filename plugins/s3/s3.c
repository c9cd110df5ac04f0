/* kvplane volume plugin "s3": blocks as objects in any S3-compatible store
 * over HTTP(S), with libcurl. Parameters (docs/volumes.md):
 *
 *   endpoint        http(s)://host[:port] (required)
 *   bucket          (required)
 *   region          signing region (default us-east-1)
 *   prefix          key prefix (default ""): objects are <prefix><ns>/<hash hex>
 *   addressing      path (default: endpoint/bucket/key) | virtual (bucket.host/key)
 *   access_key, secret_key, session_token
 *                   credentials; default the AWS_ACCESS_KEY_ID,
 *                   AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables
 *   capacity        quota in bytes (K/M/G/T suffixes; 0: none); S3 has no
 *                   bound of its own, so usage is counted here and rebuilt
 *                   by listing the prefix at open
 *   timeout_ms      bound of one HTTP request (default 10000)
 *   connect_timeout_ms (default 2000)
 *   retries         attempts after the first for 5xx, throttling, timeouts
 *                   and broken connections, with exponential backoff and
 *                   jitter (default 4; other errors are not retried)
 *   ca_file         CA bundle for https (default: the system's)
 *
 * Requests are signed with AWS SigV4 by libcurl (CURLOPT_AWS_SIGV4), with
 * x-amz-content-sha256 set to the payload's SHA-256 (OpenSSL), so stores
 * that verify payloads can. Errors: 403 is KVP_EAUTH (a wrong key or
 * signature), 404 KVP_ENOENT (a missing key, or at open a missing bucket),
 * 503 SlowDown KVP_EAGAIN after the retries, a refused or dropped
 * connection KVP_ECONN, a timeout KVP_ETIMEDOUT, other HTTP errors KVP_EIO;
 * the message names the bucket, key and HTTP status or curl's cause.
 *
 * Thread-safe per volume: each call takes a curl handle from a small pool
 * (connections are reused through the handles), usage counters are under
 * a mutex.
 *
 * About 710 lines in one file: a plugin is one shared object built from its
 * own sources, and its parts (requests with retries, listing, the
 * operations) share the volume struct and the request helpers only. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "plugin_util.h"

#define MAX_HANDLES 16

typedef struct s3_s {
  char endpoint[512], bucket[256], region[64], prefix[256];
  char access[256], secret[256], token[2048];
  char ca_file[1024];
  int virtual_host;
  uint64_t capacity;
  long timeout_ms, connect_ms;
  int retries;
  pthread_mutex_t mu;
  CURL *pool[MAX_HANDLES];
  int npool;
  uint64_t used, blocks;
  unsigned seed;
} s3_t;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* --- requests ---------------------------------------------------------------- */

typedef struct req_s {
  /* upload */
  const struct iovec *up;
  int nup, upi;
  size_t upoff;
  /* download into iovecs, or into a growable text buffer (listings) */
  const struct iovec *down;
  int ndown;
  size_t got, cap;
  int overflow;
  char *text;
  size_t ntext, captext;
  /* result */
  long hstatus;    /* the status line seen so far (routes the body) */
  long status;     /* the final status */
  curl_off_t clen; /* Content-Length of the response, -1 unknown */
  char code[64];   /* the <Code> of an error body */
} req_t;

/* The status line comes before the body: a 2xx body of a download goes to
 * the caller's buffers, any other body (an error document) to text. */
static size_t header_cb(char *data, size_t size, size_t nitems, void *ctx) {
  req_t *r = ctx;
  size_t n = size * nitems;
  if (n > 5 && memcmp(data, "HTTP/", 5) == 0) {
    const char *sp = memchr(data, ' ', n);
    if (sp != NULL)
      r->hstatus = strtol(sp + 1, NULL, 10);
  }
  return n;
}

static size_t read_cb(char *buf, size_t size, size_t nitems, void *ctx) {
  req_t *r = ctx;
  size_t room = size * nitems, n = 0;
  while (room > 0 && r->upi < r->nup) {
    const struct iovec *v = &r->up[r->upi];
    size_t k = v->iov_len - r->upoff < room ? v->iov_len - r->upoff : room;
    memcpy(buf + n, (const char *)v->iov_base + r->upoff, k);
    n += k;
    room -= k;
    r->upoff += k;
    if (r->upoff == v->iov_len) {
      r->upi++;
      r->upoff = 0;
    }
  }
  return n;
}

static int seek_cb(void *ctx, curl_off_t offset, int origin) {
  req_t *r = ctx;
  if (origin != SEEK_SET || offset != 0)
    return CURL_SEEKFUNC_CANTSEEK;
  r->upi = 0; /* a retry or a redirect starts the body again */
  r->upoff = 0;
  return CURL_SEEKFUNC_OK;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *ctx) {
  req_t *r = ctx;
  size_t n = size * nmemb;
  if (r->down != NULL && r->hstatus >= 200 && r->hstatus < 300) {
    /* Object bytes into the caller's buffers, in order. */
    size_t left = n, off = 0;
    if (r->got + n > r->cap) {
      r->overflow = 1;
      r->got += n;
      return n; /* keep reading to learn the size; nothing more is written */
    }
    size_t pos = r->got;
    for (int i = 0; i < r->ndown && left > 0; i++) {
      if (pos >= r->down[i].iov_len) {
        pos -= r->down[i].iov_len;
        continue;
      }
      size_t k = r->down[i].iov_len - pos < left ? r->down[i].iov_len - pos : left;
      memcpy((char *)r->down[i].iov_base + pos, data + off, k);
      off += k;
      left -= k;
      pos = 0;
    }
    r->got += n;
    return n;
  }
  /* Text: a listing, or an error body (bounded). */
  if (r->ntext + n + 1 > r->captext) {
    size_t cap = (r->ntext + n + 1) * 2;
    if (cap > (64u << 20))
      return 0;
    char *t = realloc(r->text, cap);
    if (t == NULL)
      return 0;
    r->text = t;
    r->captext = cap;
  }
  memcpy(r->text + r->ntext, data, n);
  r->ntext += n;
  r->text[r->ntext] = '\0';
  return n;
}

static CURL *take_handle(s3_t *s) {
  CURL *c = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->npool > 0)
    c = s->pool[--s->npool];
  pthread_mutex_unlock(&s->mu);
  return c ? c : curl_easy_init();
}

static void give_handle(s3_t *s, CURL *c) {
  pthread_mutex_lock(&s->mu);
  if (s->npool < MAX_HANDLES) {
    s->pool[s->npool++] = c;
    c = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  if (c)
    curl_easy_cleanup(c);
}

static void hex_sha256(const struct iovec *iov, int n, char out[65]) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  for (int i = 0; i < n; i++)
    EVP_DigestUpdate(ctx, iov[i].iov_base, iov[i].iov_len);
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* The URL of key (NULL: the bucket itself) with an optional query. */
static void url_of(const s3_t *s, const char *key, const char *query, char *out, size_t len) {
  const char *scheme_end = strstr(s->endpoint, "://");
  if (s->virtual_host && scheme_end != NULL)
    snprintf(out, len, "%.*s://%s.%s/%s%s%s", (int)(scheme_end - s->endpoint), s->endpoint,
             s->bucket, scheme_end + 3, key ? key : "", query ? "?" : "", query ? query : "");
  else
    snprintf(out, len, "%s/%s/%s%s%s", s->endpoint, s->bucket, key ? key : "", query ? "?" : "",
             query ? query : "");
}

static void key_of(const s3_t *s, const char *ns, uint64_t hash, char *out, size_t len) {
  snprintf(out, len, "%s%s/%016" PRIx64, s->prefix, ns, hash);
}

static int retryable(CURLcode cc, long status) {
  if (cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_CONNECT || cc == CURLE_SEND_ERROR ||
      cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING || cc == CURLE_PARTIAL_FILE)
    return 1;
  return cc == CURLE_OK && (status >= 500 || status == 429);
}

static void error_code(req_t *r) {
  const char *a = r->text ? strstr(r->text, "<Code>") : NULL, *b;
  r->code[0] = '\0';
  if (a && (b = strstr(a, "</Code>")) != NULL && b - a - 6 < (long)sizeof r->code)
    snprintf(r->code, sizeof r->code, "%.*s", (int)(b - a - 6), a + 6);
}

/* Performs method on url with r's buffers, retrying what may pass on a
 * second try. Returns 0 (r->status holds the final HTTP status) or a
 * KVP_E* code for a transport failure, with err set. */
static int perform(s3_t *s, const char *method, const char *url, req_t *r, const char *what,
                   char *err, size_t errlen) {
  CURL *c = take_handle(s);
  char userpwd[520], sigv4[128], sha[65], hdr_sha[100], hdr_tok[2100];
  struct curl_slist *h = NULL;
  CURLcode cc = CURLE_OK;
  int attempt = 0;

  if (c == NULL) {
    snprintf(err, errlen, "%s: out of memory for a curl handle", what);
    return KVP_ENOMEM;
  }
  if (r->up != NULL)
    hex_sha256(r->up, r->nup, sha);
  else
    hex_sha256(NULL, 0, sha);
  snprintf(hdr_sha, sizeof hdr_sha, "x-amz-content-sha256: %s", sha);
  h = curl_slist_append(h, hdr_sha);
  if (s->token[0]) {
    snprintf(hdr_tok, sizeof hdr_tok, "x-amz-security-token: %s", s->token);
    h = curl_slist_append(h, hdr_tok);
  }
  if (r->up != NULL)
    h = curl_slist_append(h, "Content-Type: application/octet-stream");
  /* No "Expect:" override: libcurl 7.88 signs the emptied header and the
   * server never sees it (SignatureDoesNotMatch); large puts keep their
   * 100-continue round trip. */
  snprintf(userpwd, sizeof userpwd, "%s:%s", s->access, s->secret);
  snprintf(sigv4, sizeof sigv4, "aws:amz:%s:s3", s->region);
  for (;;) {
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
    curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, s->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, s->connect_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    if (s->ca_file[0])
      curl_easy_setopt(c, CURLOPT_CAINFO, s->ca_file);
    if (strcmp(method, "HEAD") == 0)
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (r->up != NULL) {
      curl_off_t total = 0;
      for (int i = 0; i < r->nup; i++)
        total += (curl_off_t)r->up[i].iov_len;
      r->upi = 0;
      r->upoff = 0;
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_READFUNCTION, read_cb);
      curl_easy_setopt(c, CURLOPT_READDATA, r);
      curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, seek_cb);
      curl_easy_setopt(c, CURLOPT_SEEKDATA, r);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, total);
    }
    r->got = 0;
    r->overflow = 0;
    r->ntext = 0;
    r->status = 0;
    r->hstatus = 0;
    r->clen = -1;
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &r->clen);
    if (!retryable(cc, r->status) || attempt >= s->retries)
      break;
    /* Exponential backoff with jitter: 50 ms, 100, 200, ... each +-50%. */
    long base = 50L << attempt, ms = base / 2 + (long)(rand_r(&s->seed) % (unsigned)(base + 1));
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    attempt++;
  }
  curl_slist_free_all(h);
  give_handle(s, c);
  if (cc != CURLE_OK) {
    int rc = cc == CURLE_OPERATION_TIMEDOUT ? KVP_ETIMEDOUT
             : cc == CURLE_OUT_OF_MEMORY    ? KVP_ENOMEM
                                            : KVP_ECONN;
    snprintf(err, errlen, "%s: %s (after %d attempts)", what, curl_easy_strerror(cc), attempt + 1);
    return rc;
  }
  return 0;
}

/* The code for an HTTP status other than 2xx, with err naming it. */
static int http_error(req_t *r, const char *what, char *err, size_t errlen) {
  error_code(r);
  snprintf(err, errlen, "%s: HTTP %ld%s%s", what, r->status, r->code[0] ? " " : "", r->code);
  if (r->status == 403)
    return KVP_EAUTH;
  if (r->status == 404)
    return KVP_ENOENT;
  if (r->status == 503 || r->status == 429)
    return KVP_EAGAIN;
  return KVP_EIO;
}

/* --- listing ---------------------------------------------------------------- */

/* Calls fn for each object under the prefix; with ns_filter NULL, every
 * object named <prefix><ns>/<16 hex>. */
static int list_all(s3_t *s, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  char url[4096], query[1024], token[1024] = "", what[512];
  int rc = 0;

  snprintf(what, sizeof what, "bucket %s: list", s->bucket);
  for (;;) {
    req_t r = {0};
    char *esc = curl_easy_escape(NULL, s->prefix, 0), *etok = curl_easy_escape(NULL, token, 0);
    snprintf(query, sizeof query, "list-type=2&max-keys=1000%s%s%s%s",
             s->prefix[0] ? "&prefix=" : "", s->prefix[0] ? esc : "",
             token[0] ? "&continuation-token=" : "", token[0] ? etok : "");
    curl_free(esc);
    curl_free(etok);
    url_of(s, NULL, query, url, sizeof url);
    if ((rc = perform(s, "GET", url, &r, what, err, errlen)) != 0) {
      free(r.text);
      return rc;
    }
    if (r.status != 200) {
      rc = http_error(&r, what, err, errlen);
      if (rc == KVP_ENOENT)
        snprintf(err + strlen(err), errlen - strlen(err), " (does bucket %s exist?)", s->bucket);
      free(r.text);
      return rc;
    }
    const char *p = r.text ? r.text : "";
    while ((p = strstr(p, "<Contents>")) != NULL && rc == 0) {
      const char *end = strstr(p, "</Contents>"), *k = strstr(p, "<Key>"), *z = strstr(p, "<Size>");
      if (end == NULL || k == NULL || z == NULL || k > end || z > end)
        break;
      k += 5;
      const char *ke = strstr(k, "</Key>");
      char key[1024];
      if (ke == NULL || ke - k >= (long)sizeof key)
        break;
      snprintf(key, sizeof key, "%.*s", (int)(ke - k), k);
      uint64_t size = strtoull(z + 6, NULL, 10);
      /* <prefix><ns>/<16 hex> */
      const char *rest = key + strlen(s->prefix), *slash = strrchr(rest, '/');
      if (strncmp(key, s->prefix, strlen(s->prefix)) == 0 && slash && strlen(slash + 1) == 16) {
        char ns[80];
        char *hend;
        uint64_t hash = strtoull(slash + 1, &hend, 16);
        if (*hend == '\0' && slash - rest > 0 && slash - rest < (long)sizeof ns) {
          snprintf(ns, sizeof ns, "%.*s", (int)(slash - rest), rest);
          if (kvp_plugin_ns_ok(ns))
            rc = fn(ctx, ns, hash, size);
        }
      }
      p = end;
    }
    const char *trunc = strstr(r.text ? r.text : "", "<IsTruncated>true</IsTruncated>");
    const char *nt = r.text ? strstr(r.text, "<NextContinuationToken>") : NULL;
    token[0] = '\0';
    if (trunc && nt) {
      nt += strlen("<NextContinuationToken>");
      const char *ne = strstr(nt, "</NextContinuationToken>");
      if (ne && ne - nt < (long)sizeof token)
        snprintf(token, sizeof token, "%.*s", (int)(ne - nt), nt);
    }
    free(r.text);
    if (rc != 0 || token[0] == '\0')
      return rc;
  }
}

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
  for (int i = 0; i < s->npool; i++)
    curl_easy_cleanup(s->pool[i]);
  pthread_mutex_destroy(&s->mu);
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
  int rc = 0;

  if (s == NULL)
    return KVP_ENOMEM;
  pthread_once(&curl_once, curl_init);
  pthread_mutex_init(&s->mu, NULL);
  snprintf(s->region, sizeof s->region, "us-east-1");
  s->timeout_ms = 10000;
  s->connect_ms = 2000;
  s->retries = 4;
  s->seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)s;
  const char *env;
  if ((env = getenv("AWS_ACCESS_KEY_ID")) != NULL)
    snprintf(s->access, sizeof s->access, "%s", env);
  if ((env = getenv("AWS_SECRET_ACCESS_KEY")) != NULL)
    snprintf(s->secret, sizeof s->secret, "%s", env);
  if ((env = getenv("AWS_SESSION_TOKEN")) != NULL)
    snprintf(s->token, sizeof s->token, "%s", env);
  for (size_t i = 0; i < n && rc == 0; i++) {
    const char *k = params[i].key, *v = params[i].value ? params[i].value : "";
    char *end;
    if (strcmp(k, "endpoint") == 0)
      rc = set_str(s->endpoint, sizeof s->endpoint, k, v, err, errlen);
    else if (strcmp(k, "bucket") == 0)
      rc = set_str(s->bucket, sizeof s->bucket, k, v, err, errlen);
    else if (strcmp(k, "region") == 0)
      rc = set_str(s->region, sizeof s->region, k, v, err, errlen);
    else if (strcmp(k, "prefix") == 0)
      rc = set_str(s->prefix, sizeof s->prefix, k, v, err, errlen);
    else if (strcmp(k, "access_key") == 0)
      rc = set_str(s->access, sizeof s->access, k, v, err, errlen);
    else if (strcmp(k, "secret_key") == 0)
      rc = set_str(s->secret, sizeof s->secret, k, v, err, errlen);
    else if (strcmp(k, "session_token") == 0)
      rc = set_str(s->token, sizeof s->token, k, v, err, errlen);
    else if (strcmp(k, "ca_file") == 0)
      rc = set_str(s->ca_file, sizeof s->ca_file, k, v, err, errlen);
    else if (strcmp(k, "addressing") == 0) {
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
               strcmp(k, "retries") == 0) {
      long x = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || x < 0 || x > 3600000 ||
          (strcmp(k, "retries") == 0 && x > 20) || (strcmp(k, "retries") != 0 && x < 1)) {
        snprintf(err, errlen, "%s: '%s' is out of range", k, v);
        rc = KVP_ECONFIG;
      } else if (strcmp(k, "timeout_ms") == 0)
        s->timeout_ms = x;
      else if (strcmp(k, "connect_timeout_ms") == 0)
        s->connect_ms = x;
      else
        s->retries = (int)x;
    } else {
      snprintf(err, errlen,
               "unknown parameter '%s' (endpoint, bucket, region, prefix, addressing, access_key, "
               "secret_key, session_token, capacity, timeout_ms, connect_timeout_ms, retries, "
               "ca_file)",
               k);
      rc = KVP_ECONFIG;
    }
  }
  if (rc == 0 && (!s->endpoint[0] || !s->bucket[0])) {
    snprintf(err, errlen, "endpoint and bucket are required");
    rc = KVP_ECONFIG;
  }
  if (rc == 0 && (strncmp(s->endpoint, "http://", 7) != 0 && strncmp(s->endpoint, "https://", 8))) {
    snprintf(err, errlen, "endpoint: '%s' is not http:// or https://", s->endpoint);
    rc = KVP_ECONFIG;
  }
  if (rc == 0 && (!s->access[0] || !s->secret[0])) {
    snprintf(err, errlen,
             "no credentials: set access_key and secret_key, or AWS_ACCESS_KEY_ID "
             "and AWS_SECRET_ACCESS_KEY");
    rc = KVP_ECONFIG;
  }
  size_t el = strlen(s->endpoint);
  if (rc == 0 && el > 0 && s->endpoint[el - 1] == '/')
    s->endpoint[el - 1] = '\0';
  /* The bucket must answer, and its listing is the usage. */
  if (rc == 0)
    rc = list_all(s, count, s, err, errlen);
  if (rc != 0) {
    s3_close(s);
    return rc;
  }
  *vol = s;
  return 0;
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
  url_of(s, key, NULL, url, sizeof url);
  int rc = perform(s, "HEAD", url, &r, what, err, errlen);
  free(r.text);
  if (rc != 0)
    return rc;
  if (r.status == 404)
    return 0;
  if (r.status != 200)
    return http_error(&r, what, err, errlen);
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
  key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: PUT %s", s->bucket, key);
  /* The quota counts a replaced object once: its old size is looked up. */
  int existed = s->capacity ? head(s, key, &old, err, errlen) : 0;
  if (existed < 0)
    return existed;
  pthread_mutex_lock(&s->mu);
  int full = s->capacity && s->used - old + len > s->capacity;
  uint64_t used = s->used;
  pthread_mutex_unlock(&s->mu);
  if (full) {
    snprintf(err, errlen, "%s: %zu bytes over the %" PRIu64 "-byte quota (%" PRIu64 " used)", what,
             len, s->capacity, used);
    return KVP_ENOSPC;
  }
  req_t r = {.up = iov, .nup = iovcnt};
  url_of(s, key, NULL, url, sizeof url);
  rc = perform(s, "PUT", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 200)
    rc = http_error(&r, what, err, errlen);
  free(r.text);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    s->used = s->used - old + len;
    s->blocks += existed ? 0 : 1;
    pthread_mutex_unlock(&s->mu);
  }
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
  key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: GET %s", s->bucket, key);
  url_of(s, key, NULL, url, sizeof url);
  req_t r = {.down = iov, .ndown = iovcnt, .cap = iov_total(iov, iovcnt)};
  rc = perform(s, "GET", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 200) {
    rc = http_error(&r, what, err, errlen);
  } else if (rc == 0 && r.overflow) {
    *len = r.got;
    snprintf(err, errlen, "%s: %zu bytes, more than the %zu-byte buffer", what, r.got, r.cap);
    rc = KVP_ETOOBIG;
  } else if (rc == 0) {
    *len = r.got;
  }
  free(r.text);
  return rc;
}

static int s3_exists(void *vol, const char *ns, uint64_t hash, size_t *len) {
  s3_t *s = vol;
  char key[512], err[512];
  if (!kvp_plugin_ns_ok(ns))
    return KVP_EINVAL;
  key_of(s, ns, hash, key, sizeof key);
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
  key_of(s, ns, hash, key, sizeof key);
  snprintf(what, sizeof what, "bucket %s: DELETE %s", s->bucket, key);
  /* S3 answers 204 for a missing key too: look first, so that a missing
   * key is KVP_ENOENT as the ABI says, and for the usage. */
  int ex = head(s, key, &size, err, errlen);
  if (ex < 0)
    return ex;
  if (ex == 0) {
    snprintf(err, errlen, "%s: no such key", what);
    return KVP_ENOENT;
  }
  req_t r = {0};
  url_of(s, key, NULL, url, sizeof url);
  int rc = perform(s, "DELETE", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 204 && r.status != 200)
    rc = http_error(&r, what, err, errlen);
  free(r.text);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    s->used -= size < s->used ? size : s->used;
    s->blocks -= s->blocks ? 1 : 0;
    pthread_mutex_unlock(&s->mu);
  }
  return rc;
}

static int s3_stat(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen) {
  s3_t *s = vol;
  (void)err;
  (void)errlen;
  pthread_mutex_lock(&s->mu);
  *st = (kvp_volume_stat_t){s->capacity, s->used, s->blocks};
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int s3_iterate(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  return list_all(vol, fn, ctx, err, errlen);
}

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION,
    .name = "s3",
    .flags = 0,
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
