/* The s3 plugin's HTTP requests (s3.h): libcurl with SigV4 signing
 * (CURLOPT_AWS_SIGV4) and x-amz-content-sha256 (OpenSSL), a pool of curl
 * handles, retries with backoff, and HTTP statuses mapped to KVP_E* codes.
 *
 * libcurl signs, fed canonical input: libcurl (7.88 as 8.x for service
 * "s3") signs the URL's path as given and, before 8.2, the query in the
 * order given. S3 canonicalises the request it receives: the path decoded
 * and URI-encoded again (unreserved characters only, uppercase hex), the
 * query parameters encoded the same way and sorted. So every URL is built
 * in that form already (kvp__s3_url_of, list.c's query in sorted order)
 * and what libcurl signs is what S3 computes; tests/tools/s3_verify.py
 * checks it with botocore for every request of the tests. */
#include <curl/curl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "kvplane/status.h"
#include "s3.h"

/* libcurl's buffer sizes for a transfer of big blocks. */
#define BIG_BUFFER (256 * 1024)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

void kvp__s3_global_init(void) {
  pthread_once(&curl_once, curl_init);
}

void kvp__s3_free_handles(s3_t *s) {
  for (int i = 0; i < s->npool; i++)
    curl_easy_cleanup(s->pool[i]);
  s->npool = 0;
}

/* The status line comes before the body: a 2xx body of a download goes to
 * the caller's buffers, any other body (an error document) to text. */
static size_t header_cb(char *data, size_t size, size_t nitems, void *ctx) {
  req_t *r = ctx;
  size_t n = size * nitems;
  if (n > 5 && memcmp(data, "HTTP/", 5) == 0) {
    const char *sp = memchr(data, ' ', n);
    if (sp != NULL)
      r->hstatus = strtol(sp + 1, NULL, 10);
    r->retry_after_ms = -1;
  } else if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
    /* Seconds; an HTTP date is left to the backoff. */
    char v[32];
    snprintf(v, sizeof v, "%.*s", (int)(n - 12 < sizeof v - 1 ? n - 12 : sizeof v - 1), data + 12);
    char *end;
    long sec = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\r' || *end == '\n')
      end++;
    if (end != v && *end == '\0' && sec >= 0)
      r->retry_after_ms = sec > 86400 ? 86400000L : sec * 1000;
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

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The stall timeout: no byte up or down for stall_ms aborts the attempt.
 * libcurl's CURLOPT_LOW_SPEED_* averages over a window of seconds, so a
 * burst before a stall hides it for up to 5 s more; this is exact to the
 * callback's period (under a second). */
static int progress_cb(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
  req_t *r = ctx;
  int64_t now = mono_ms();
  (void)dltotal;
  (void)ultotal;
  if (dlnow != r->last_dl || ulnow != r->last_ul || r->moved_at_ms == 0) {
    r->last_dl = dlnow;
    r->last_ul = ulnow;
    r->moved_at_ms = now;
    return 0;
  }
  if (now - r->moved_at_ms > r->stall_ms) {
    r->stalled = 1;
    return 1;
  }
  return 0;
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

int kvp__s3_uri_encode(const char *in, int keep_slash, char *out, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/');
    if (o + (plain ? 1 : 3) >= len)
      return -1;
    if (plain) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  if (o >= len)
    return -1;
  out[o] = '\0';
  return 0;
}

int kvp__s3_url_of(const s3_t *s, const char *key, const char *query, char *out, size_t len) {
  const char *scheme_end = strstr(s->endpoint, "://");
  char ekey[3 * 1024 + 1] = "";
  int n;
  if (key && kvp__s3_uri_encode(key, 1, ekey, sizeof ekey) != 0)
    return -1;
  if (s->virtual_host && scheme_end != NULL)
    n = snprintf(out, len, "%.*s://%s.%s/%s%s%s", (int)(scheme_end - s->endpoint), s->endpoint,
                 s->bucket, scheme_end + 3, ekey, query ? "?" : "", query ? query : "");
  else
    n = snprintf(out, len, "%s/%s/%s%s%s", s->endpoint, s->bucket, ekey, query ? "?" : "",
                 query ? query : "");
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

void kvp__s3_key_of(const s3_t *s, const char *ns, uint64_t hash, char *out, size_t len) {
  snprintf(out, len, "%s%s/%016" PRIx64, s->prefix, ns, hash);
}

static void error_code(req_t *r) {
  const char *a = r->text ? strstr(r->text, "<Code>") : NULL, *b;
  r->code[0] = '\0';
  if (a && (b = strstr(a, "</Code>")) != NULL && b - a - 6 < (long)sizeof r->code)
    snprintf(r->code, sizeof r->code, "%.*s", (int)(b - a - 6), a + 6);
}

/* S3's 400 RequestTimeout means the store gave up waiting for the body
 * (a slow upload): another try may pass, as for 5xx and throttling. */
static int retryable(CURLcode cc, req_t *r) {
  if (cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_COULDNT_CONNECT || cc == CURLE_SEND_ERROR ||
      cc == CURLE_RECV_ERROR || cc == CURLE_GOT_NOTHING || cc == CURLE_PARTIAL_FILE)
    return 1;
  if (cc != CURLE_OK)
    return 0;
  if (r->status == 400) {
    error_code(r);
    return strcmp(r->code, "RequestTimeout") == 0;
  }
  return r->status >= 500 || r->status == 429;
}

int kvp__s3_perform(s3_t *s, const char *method, const char *url, req_t *r, const char *what,
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
    /* S3 keys are names, not paths: "a/./b" and "a/../b" are keys of their
     * own, and libcurl would otherwise squash those segments (RFC 3986),
     * writing elsewhere than the listing of the prefix finds. */
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
    curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    /* A multi-MiB block on a slow link may take minutes and be fine: a
     * request ends when no byte moved for stall_ms (no progress for
     * that long, progress_cb), and at timeout_ms only when a cap is set. */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, s->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, s->connect_ms);
    r->stall_ms = s->stall_ms;
    r->moved_at_ms = 0;
    r->last_dl = r->last_ul = 0;
    r->stalled = 0;
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* Blocks move in big reads: libcurl's 16 KiB receive buffer made a
     * 16 MiB get 1,024 recv() calls and callbacks, about twice the client
     * CPU per GB of a 256 KiB one. A buffer the size of the block, at
     * most BIG_BUFFER (per pooled handle). */
    if (r->down != NULL && r->cap > 16 * 1024)
      curl_easy_setopt(c, CURLOPT_BUFFERSIZE, (long)(r->cap < BIG_BUFFER ? r->cap : BIG_BUFFER));
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
      if (total >= 2 * BIG_BUFFER)
        curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, (long)(2 * BIG_BUFFER));
    }
    r->got = 0;
    r->overflow = 0;
    r->ntext = 0;
    r->status = 0;
    r->hstatus = 0;
    r->clen = -1;
    r->retry_after_ms = -1;
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    cc = curl_easy_perform(c);
    if (cc == CURLE_ABORTED_BY_CALLBACK && r->stalled)
      cc = CURLE_OPERATION_TIMEDOUT;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &r->clen);
    if (!retryable(cc, r) || attempt >= s->retries)
      break;
    /* Exponential backoff with jitter: 50 ms, 100, 200, ... each +-50%,
     * at least what Retry-After asks, at most backoff_max_ms. */
    long base = 50L << (attempt < 20 ? attempt : 20);
    long ms = base / 2 + (long)(rand_r(&s->seed) % (unsigned)(base + 1));
    if (r->retry_after_ms > ms)
      ms = r->retry_after_ms;
    if (ms > s->backoff_max_ms)
      ms = s->backoff_max_ms;
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
    if (r->stalled)
      snprintf(err, errlen, "%s: no byte moved for %ld ms (after %d attempts)", what, s->stall_ms,
               attempt + 1);
    else
      snprintf(err, errlen, "%s: %s (after %d attempts)", what, curl_easy_strerror(cc),
               attempt + 1);
    return rc;
  }
  return 0;
}

int kvp__s3_http_error(req_t *r, const char *what, char *err, size_t errlen) {
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
