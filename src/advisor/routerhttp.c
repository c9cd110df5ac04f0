/* The routers' indexer API over libmicrohttpd; see routerhttp.h. */
#include "advisor/routerhttp.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "advisor/routerapi.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "metrics/httpguard.h"
#include "metrics/server.h"

/* One decoded query waiting for the loop thread. */
typedef struct job_s {
  struct job_s *next;
  const kvp__rapi_req_t *req;
  char *json; /* the answer (malloc'd), set by the loop */
  int rc;     /* KVP_EAGAIN: not ready (behind: messages still to apply) */
  uint64_t behind;
  int done;
} job_t;

struct kvp__rapi_http_s {
  kvp__http_guard_t *guard;
  int fd, port;
  const kvp__index_t *ix;
  char ns[128];
  uint32_t default_block_size;
  kvp__rapi_ready_fn ready; /* NULL: always */
  void *ready_ctx;

  uv_async_t wake; /* loop: answer the queued jobs */
  pthread_mutex_t lock;
  pthread_cond_t answered;
  job_t *head;     /* under lock */
  int closed;      /* under lock: no more jobs, waiters leave */
  size_t buffered; /* HTTP thread: the bytes held for request bodies, at most
                    * KVP__RAPI_MAX_BUFFERED */
};

/* A request's body as it arrives. */
typedef struct body_s {
  char *buf;
  size_t len, cap;
  int too_big;
  int crowded; /* refused: the bodies being read held KVP__RAPI_MAX_BUFFERED */
} body_t;

/* HTTP thread: drops b's buffer from what h holds. */
static void body_drop(kvp__rapi_http_t *h, body_t *b) {
  h->buffered -= b->cap < h->buffered ? b->cap : h->buffered;
  free(b->buf);
  b->buf = NULL;
  b->len = b->cap = 0;
}

#define JSON_TYPE "application/json"

/* allow: an Allow header's value, or NULL; close: the connection closes
 * after this reply. */
static enum MHD_Result reply_on(struct MHD_Connection *c, unsigned status, char *json,
                                const char *allow, int close) {
  static const char oom[] = "{\"error\":\"out of memory\"}";
  struct MHD_Response *r =
      json ? MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE)
           : MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
  if (r == NULL) {
    free(json);
    return MHD_NO;
  }
  if (json == NULL)
    status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, JSON_TYPE);
  if (allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  if (close)
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *json,
                             const char *allow) {
  return reply_on(c, status, json, allow, 0);
}

static enum MHD_Result error(struct MHD_Connection *c, unsigned status, const char *msg,
                             const char *allow) {
  return reply(c, status, kvp__rapi_error_json(msg), allow);
}

/* The headers that frame a request's body. */
typedef struct framing_s {
  const char *length; /* the first Content-Length */
  int lengths, differ, chunked;
} framing_t;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
  framing_t *f = cls;
  (void)kind;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    if (f->lengths++ == 0)
      f->length = value;
    else if (value == NULL || f->length == NULL || strcmp(value, f->length) != 0)
      f->differ = 1;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    f->chunked = 1;
  }
  return MHD_YES;
}

/* A body framed two ways: Content-Length headers that disagree, or one
 * beside Transfer-Encoding. libmicrohttpd takes the first length; a proxy
 * in front may take the other framing, and the rest of the connection is
 * then a request to one and a body to the other (request smuggling). RFC
 * 9112 6.3: a 400, and the connection closed. NULL when the framing is
 * one. */
static const char *framed_twice(struct MHD_Connection *c) {
  framing_t f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
  if (f.differ)
    return "bad request: Content-Length headers that disagree";
  if (f.lengths > 0 && f.chunked)
    return "bad request: Content-Length beside Transfer-Encoding";
  return NULL;
}

/* Loop thread: answers every queued job. */
static void on_wake(uv_async_t *a) {
  kvp__rapi_http_t *h = a->data;
  pthread_mutex_lock(&h->lock);
  job_t *j = h->head;
  h->head = NULL;
  pthread_mutex_unlock(&h->lock);
  uint64_t behind = 0;
  int ready = j == NULL || h->ready == NULL || h->ready(h->ready_ctx, &behind);
  while (j) {
    job_t *next = j->next;
    char *json = NULL;
    int rc = ready ? kvp__rapi_answer(h->ix, h->ns, j->req, &json) : KVP_EAGAIN;
    pthread_mutex_lock(&h->lock);
    j->json = json;
    j->rc = rc;
    j->behind = behind;
    j->done = 1;
    pthread_mutex_unlock(&h->lock);
    j = next;
  }
  pthread_mutex_lock(&h->lock);
  pthread_cond_broadcast(&h->answered);
  pthread_mutex_unlock(&h->lock);
}

/* HTTP thread: the loop's answer to req, or 503 when stopping. */
static enum MHD_Result ask_loop(kvp__rapi_http_t *h, struct MHD_Connection *c,
                                const kvp__rapi_req_t *req) {
  job_t j = {.req = req};
  pthread_mutex_lock(&h->lock);
  if (!h->closed) {
    j.next = h->head;
    h->head = &j;
    uv_async_send(&h->wake); /* under the lock: stop closes the handle after closed is set */
  }
  while (!h->closed && !j.done)
    pthread_cond_wait(&h->answered, &h->lock);
  if (!j.done) { /* closed: take the job back if the loop did not */
    for (job_t **p = &h->head; *p; p = &(*p)->next)
      if (*p == &j) {
        *p = j.next;
        break;
      }
  }
  pthread_mutex_unlock(&h->lock);
  if (!j.done)
    return error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the advisor is stopping", NULL);
  if (j.rc == KVP_EAGAIN) { /* never an answer from an index still catching up */
    char msg[160];
    snprintf(msg, sizeof msg,
             "not ready: catching up with the stream, %llu messages still to apply",
             (unsigned long long)j.behind);
    return error(c, MHD_HTTP_SERVICE_UNAVAILABLE, msg, NULL);
  }
  if (j.rc != 0) {
    free(j.json);
    return error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, kvp_strerror(j.rc), NULL);
  }
  return reply(c, MHD_HTTP_OK, j.json, NULL);
}

static enum MHD_Result answer_query(kvp__rapi_http_t *h, struct MHD_Connection *c, int by_hash,
                                    const body_t *b) {
  kvp__rapi_req_t req;
  char err[512];
  enum MHD_Result ret;

  if (b->too_big) {
    snprintf(err, sizeof err, "request body over %u bytes", KVP__RAPI_MAX_BODY);
    return error(c, MHD_HTTP_CONTENT_TOO_LARGE, err, NULL);
  }
  if (b->crowded) {
    snprintf(err, sizeof err,
             "busy: the request bodies being read hold %u MiB, the most this server holds; retry",
             KVP__RAPI_MAX_BUFFERED >> 20);
    return error(c, MHD_HTTP_SERVICE_UNAVAILABLE, err, NULL);
  }
  int rc = kvp__rapi_parse(by_hash, b->buf ? b->buf : "", b->len, h->default_block_size, &req, err,
                           sizeof err);
  if (rc == KVP_EPROTO)
    ret = error(c, MHD_HTTP_BAD_REQUEST, err, NULL);
  else if (rc == KVP_ETOOBIG)
    ret = error(c, MHD_HTTP_CONTENT_TOO_LARGE, err, NULL);
  else if (rc != 0)
    ret = error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, kvp_strerror(rc), NULL);
  else
    ret = ask_loop(h, c, &req);
  kvp__rapi_req_free(&req);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls) {
  kvp__rapi_http_t *h = cls;
  body_t *b = *req_cls;
  int by_hash = strcmp(url, "/query_by_hash") == 0;
  (void)version;

  if (b == NULL) { /* the first call: headers only */
    int known = by_hash || strcmp(url, "/query") == 0;
    if (strcmp(url, "/register") == 0 || strcmp(url, "/unregister") == 0)
      return error(c, MHD_HTTP_NOT_IMPLEMENTED,
                   "kvplane-advisor subscribes to no engine: workers publish to NATS "
                   "(engines through kvplane-relay) and appear by themselves",
                   NULL);
    if (!known)
      return error(c, MHD_HTTP_NOT_FOUND,
                   "not found: the paths are POST /query and POST /query_by_hash", NULL);
    if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
      return error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use POST", "POST");
    const char *twice = framed_twice(c);
    if (twice != NULL)
      return reply_on(c, MHD_HTTP_BAD_REQUEST, kvp__rapi_error_json(twice), NULL, 1);
    /* A client that waits for "100 Continue" before its body is told now
     * that the body is too large (RFC 9110, 10.1.1), rather than sent the
     * go-ahead, read 16 MiB and more, and told then. Without Expect the
     * body is on its way: it is read and dropped as before, so that the
     * client reads the answer instead of a reset. */
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    const char *clen =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (expect != NULL && strcasecmp(expect, "100-continue") == 0 && clen != NULL &&
        strtoull(clen, NULL, 10) > KVP__RAPI_MAX_BODY) {
      char why[128];
      snprintf(why, sizeof why, "request body over %u bytes", KVP__RAPI_MAX_BODY);
      return error(c, MHD_HTTP_CONTENT_TOO_LARGE, why, NULL);
    }
    if ((b = calloc(1, sizeof *b)) == NULL)
      return MHD_NO;
    *req_cls = b;
    return MHD_YES;
  }
  if (*upload_len > 0) {
    size_t n = *upload_len;
    *upload_len = 0;
    if (b->too_big || b->crowded || b->len + n > KVP__RAPI_MAX_BODY) {
      b->too_big |= !b->crowded;
      body_drop(h, b);
      return MHD_YES; /* read and dropped: the reply comes at the end */
    }
    if (b->len + n > b->cap) {
      size_t cap = b->cap ? b->cap : 4096;
      while (cap < b->len + n)
        cap *= 2;
      /* All connections' bodies together are bounded too (256 connections
       * of 16 MiB would be 4 GiB): past the bound this one is refused. */
      if (h->buffered - b->cap + cap > KVP__RAPI_MAX_BUFFERED) {
        b->crowded = 1;
        body_drop(h, b);
        return MHD_YES;
      }
      char *nb = realloc(b->buf, cap);
      if (nb == NULL)
        return MHD_NO;
      h->buffered += cap - b->cap;
      b->buf = nb;
      b->cap = cap;
    }
    memcpy(b->buf + b->len, upload, n);
    b->len += n;
    return MHD_YES;
  }
  return answer_query(h, c, by_hash, b);
}

/* Called by the guard (httpguard.h) when a request ends. */
static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  body_t *b = *req_cls;
  (void)c;
  (void)toe;
  if (b != NULL) {
    body_drop(cls, b);
    free(b);
    *req_cls = NULL;
  }
}

static int bind_socket(const char *key, const char *addr, int *fd_out, int *port_out, char *err,
                       size_t errlen, int *v6) {
  struct sockaddr_storage sa;
  unsigned salen;
  int one = 1, rc;

  if ((rc = kvp__metrics_parse_addr(key, addr, &sa, &salen, err, errlen)) != 0)
    return rc;
  *v6 = sa.ss_family == AF_INET6;
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s: socket: %s", key, addr, strerror(errno));
    return KVP_EIO;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, salen) != 0 || listen(fd, 64) != 0) {
    snprintf(err, errlen, "%s: cannot listen on %s: %s", key, addr, strerror(errno));
    close(fd);
    return KVP_EIO;
  }
  struct sockaddr_storage got;
  socklen_t glen = sizeof got;
  getsockname(fd, (struct sockaddr *)&got, &glen);
  *port_out = got.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&got)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&got)->sin_port);
  *fd_out = fd;
  return 0;
}

int kvp__rapi_http_start(uv_loop_t *loop, const kvp__index_t *ix, const char *ns,
                         uint32_t default_block_size, const char *key, const char *addr,
                         const kvp__rapi_http_limits_t *limits, kvp__http_counts_t *counts,
                         kvp__rapi_http_t **out, char *err, size_t errlen) {
  kvp__rapi_http_t *h;
  int rc, v6 = 0;

  *out = NULL;
  if ((h = calloc(1, sizeof *h)) == NULL)
    return KVP_ENOMEM;
  h->ix = ix;
  h->default_block_size = default_block_size;
  snprintf(h->ns, sizeof h->ns, "%s", ns);
  if ((rc = bind_socket(key, addr, &h->fd, &h->port, err, errlen, &v6)) != 0) {
    free(h);
    return rc;
  }
  pthread_mutex_init(&h->lock, NULL);
  pthread_cond_init(&h->answered, NULL);
  if (uv_async_init(loop, &h->wake, on_wake) != 0) {
    snprintf(err, errlen, "%s: %s: cannot set up the loop handle", key, addr);
    rc = KVP_ENOMEM;
    goto fail;
  }
  h->wake.data = h;
  /* poll(), not select(): an advisor holds more than FD_SETSIZE descriptors
   * (a packed volume keeps one per segment), and select() refuses every
   * socket numbered past it, the listening one included. */
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (v6)
    flags |= MHD_USE_IPv6;
  kvp__http_limits_t lim = {
      .request_timeout_ms = limits->request_timeout_ms,
      .per_client = limits->per_client,
      .max_connections = KVP__RAPI_MAX_CONNECTIONS,
      .idle_timeout_s = 30,
  };
  if ((rc = kvp__http_guard_start(key, &lim, counts, flags, h->fd, on_request, h, on_completed, h,
                                  &h->guard)) != 0) {
    snprintf(err, errlen, "%s: %s: the HTTP server (libmicrohttpd) did not start", key, addr);
    kvp__rapi_http_stop(h);
    return rc;
  }
  kvp_log_info("advisor: routers' indexer API (POST /query, /query_by_hash) on %s (port %d)", addr,
               h->port);
  *out = h;
  return 0;
fail:
  close(h->fd);
  pthread_cond_destroy(&h->answered);
  pthread_mutex_destroy(&h->lock);
  free(h);
  return rc;
}

void kvp__rapi_http_set_ready(kvp__rapi_http_t *h, kvp__rapi_ready_fn ready, void *ctx) {
  h->ready = ready;
  h->ready_ctx = ctx;
}

int kvp__rapi_http_port(const kvp__rapi_http_t *h) {
  return h->port;
}

static void on_closed(uv_handle_t *a) {
  kvp__rapi_http_t *h = a->data;
  pthread_cond_destroy(&h->answered);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

void kvp__rapi_http_stop(kvp__rapi_http_t *h) {
  if (h == NULL)
    return;
  pthread_mutex_lock(&h->lock);
  h->closed = 1;
  pthread_cond_broadcast(&h->answered);
  pthread_mutex_unlock(&h->lock);
  /* MHD_stop_daemon joins its thread (no request is left) and closes the
   * listening socket it was given (it was not quiesced): closing it again
   * here could close a descriptor another thread has just been given. */
  if (h->guard != NULL)
    kvp__http_guard_stop(h->guard);
  else
    close(h->fd);
  uv_close((uv_handle_t *)&h->wake, on_closed);
}
