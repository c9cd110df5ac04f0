/* Metrics HTTP server over libmicrohttpd; see server.h. */
#include "metrics/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "kvplane/status.h"
#include "metrics/httpguard.h"

struct kvp__metrics_server_s {
  kvp__http_guard_t *guard;
  kvp__http_counts_t counts;       /* this server's */
  const kvp__http_counts_t *other; /* the daemon's [http] server's, or NULL */
  int fd;
  int port;
  kvp__metrics_collect_fn collect;
  kvp__metrics_ready_fn ready;
  void *ctx;
  kvp__prom_t text; /* reused by every scrape; only MHD's thread touches it */
};

int kvp__metrics_parse_addr(const char *key, const char *addr, void *sa, unsigned *salen, char *err,
                            size_t errlen) {
  char host[64];
  const char *colon, *h = addr, *port_s;
  size_t hlen;
  char *end;

  memset(sa, 0, sizeof(struct sockaddr_storage));
  if (addr[0] == '[') {
    const char *rb = strchr(addr, ']');
    if (rb == NULL || rb[1] != ':')
      goto bad_form;
    h = addr + 1;
    hlen = (size_t)(rb - h);
    port_s = rb + 2;
  } else {
    if ((colon = strrchr(addr, ':')) == NULL || strchr(addr, ':') != colon)
      goto bad_form;
    hlen = (size_t)(colon - addr);
    port_s = colon + 1;
  }
  if (hlen == 0 || hlen >= sizeof host)
    goto bad_form;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  errno = 0;
  unsigned long port = strtoul(port_s, &end, 10);
  if (*port_s == '\0' || *end != '\0' || errno != 0 || port > 65535) {
    snprintf(err, errlen, "%s: '%s': port '%s' is not a number in 0..65535", key, addr, port_s);
    return KVP_ECONFIG;
  }
  if (strcmp(host, "localhost") == 0)
    snprintf(host, sizeof host, "127.0.0.1");
  struct sockaddr_in *s4 = sa;
  struct sockaddr_in6 *s6 = sa;
  if (addr[0] != '[' && inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    *salen = sizeof *s4;
    return 0;
  }
  if (addr[0] == '[' && inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    *salen = sizeof *s6;
    return 0;
  }
  snprintf(err, errlen, "%s: '%s': '%s' is not an IPv4 address, [IPv6 address] or localhost", key,
           addr, host);
  return KVP_ECONFIG;
bad_form:
  snprintf(err, errlen, "%s: '%s' is not host:port (e.g. 127.0.0.1:9464 or [::1]:9464)", key, addr);
  return KVP_ECONFIG;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body, size_t len, int copy) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, (void *)body, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
  if (r == NULL)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* The HTTP servers' own figures: this one's, and the other one's of the
 * daemon when it has one (README "Metrics"). */
static void write_http(const kvp__metrics_server_t *s, kvp__prom_t *p) {
  static const struct {
    const char *name, *help;
    size_t off;
  } fam[] = {
      {"kvplane_http_requests_timed_out_total",
       "Requests whose headers and body were not complete within request_timeout: connection "
       "closed, by server ([metrics] or [http]).",
       offsetof(kvp__http_counts_t, timed_out)},
      {"kvplane_http_connections_refused_total",
       "Connections refused at the server's connection limit or its per-client limit, by server.",
       offsetof(kvp__http_counts_t, refused)},
  };
  for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
    kvp__prom_family(p, fam[i].name, "counter", fam[i].help);
    const _Atomic uint64_t *v = (const _Atomic uint64_t *)((const char *)&s->counts + fam[i].off);
    kvp__prom_sample(p, fam[i].name, (const char *[]){"server", "metrics", NULL},
                     (double)atomic_load(v));
    if (s->other != NULL) {
      v = (const _Atomic uint64_t *)((const char *)s->other + fam[i].off);
      kvp__prom_sample(p, fam[i].name, (const char *[]){"server", "http", NULL},
                       (double)atomic_load(v));
    }
  }
}

#define TEXT "text/plain; charset=utf-8"
#define EXPOSITION "text/plain; version=0.0.4; charset=utf-8"

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls) {
  kvp__metrics_server_t *s = cls;
  (void)version;
  (void)upload;
  /* A request with a body arrives in several calls; the first has none, and
   * a reply queued then ends it (the body is discarded), so every request is
   * answered on its first call. */
  (void)req_cls;
  (void)upload_len;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    static const char m[] = "method not allowed: use GET\n";
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, TEXT, m, sizeof m - 1, 0);
  }
  if (strcmp(url, "/metrics") == 0) {
    kvp__prom_reset(&s->text);
    int rc = s->collect(s->ctx, &s->text);
    write_http(s, &s->text);
    if (rc == 0)
      rc = s->text.err;
    if (rc != 0) {
      char m[128];
      int n = snprintf(m, sizeof m, "metrics unavailable: %s\n",
                       rc == KVP_EAGAIN ? "no figures collected yet (starting)" : kvp_strerror(rc));
      return reply(c,
                   rc == KVP_EAGAIN ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_INTERNAL_SERVER_ERROR,
                   TEXT, m, (size_t)n, 1);
    }
    return reply(c, MHD_HTTP_OK, EXPOSITION, s->text.buf ? s->text.buf : "", s->text.len, 1);
  }
  if (strcmp(url, "/healthz") == 0) {
    static const char m[] = "ok\n";
    return reply(c, MHD_HTTP_OK, TEXT, m, sizeof m - 1, 0);
  }
  if (strcmp(url, "/readyz") == 0) {
    char why[256] = "not ready";
    const char *part = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "partition");
    int r = s->ready(s->ctx, part, why, sizeof why - 1);
    if (r == 1) {
      static const char m[] = "ready\n";
      return reply(c, MHD_HTTP_OK, TEXT, m, sizeof m - 1, 0);
    }
    size_t n = strlen(why);
    why[n++] = '\n';
    return reply(c,
                 r == KVP_ENOENT   ? MHD_HTTP_NOT_FOUND
                 : r == KVP_EINVAL ? MHD_HTTP_BAD_REQUEST
                                   : MHD_HTTP_SERVICE_UNAVAILABLE,
                 TEXT, why, n, 1);
  }
  static const char m[] = "not found: the paths are /metrics, /healthz, /readyz\n";
  return reply(c, MHD_HTTP_NOT_FOUND, TEXT, m, sizeof m - 1, 0);
}

/* The socket is bound here rather than by MHD so that a port in use is
 * reported with its errno and the address, not as a NULL daemon. */
static int bind_socket(const char *key, const char *addr, const struct sockaddr *sa, unsigned salen,
                       int *fd_out, int *port_out, char *err, size_t errlen) {
  int one = 1;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s: socket: %s", key, addr, strerror(errno));
    return KVP_EIO;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, sa, salen) != 0 || listen(fd, 64) != 0) {
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

void kvp__metrics_server_opts_init(kvp__metrics_server_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->request_timeout_ms = KVP__METRICS_REQUEST_TIMEOUT_MS;
  o->per_client = KVP__METRICS_PER_CLIENT;
}

int kvp__metrics_server_start(const char *key, const char *addr,
                              const kvp__metrics_server_opts_t *opts,
                              kvp__metrics_collect_fn collect, kvp__metrics_ready_fn ready,
                              void *ctx, kvp__metrics_server_t **out, char *err, size_t errlen) {
  struct sockaddr_storage sa;
  unsigned salen;
  kvp__metrics_server_t *s;
  kvp__metrics_server_opts_t dflt;
  int rc;

  *out = NULL;
  if (opts == NULL) {
    kvp__metrics_server_opts_init(&dflt);
    opts = &dflt;
  }
  if ((rc = kvp__metrics_parse_addr(key, addr, &sa, &salen, err, errlen)) != 0)
    return rc;
  if ((s = calloc(1, sizeof *s)) == NULL)
    return KVP_ENOMEM;
  s->collect = collect;
  s->ready = ready;
  s->ctx = ctx;
  s->other = opts->http;
  kvp__prom_init(&s->text);
  if ((rc = bind_socket(key, addr, (struct sockaddr *)&sa, salen, &s->fd, &s->port, err, errlen)) !=
      0) {
    free(s);
    return rc;
  }
  /* poll(), not select(): the process may hold more than FD_SETSIZE
   * descriptors (a packed volume keeps one per segment), and select()
   * refuses every socket numbered past it. */
  unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (sa.ss_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  kvp__http_limits_t lim = {
      .request_timeout_ms = opts->request_timeout_ms,
      .per_client = opts->per_client,
      .max_connections = KVP__METRICS_MAX_CONNECTIONS,
      .idle_timeout_s = 10,
  };
  if ((rc = kvp__http_guard_start(key, &lim, &s->counts, flags, s->fd, on_request, s, NULL, NULL,
                                  &s->guard)) != 0) {
    snprintf(err, errlen, "%s: %s: the HTTP server (libmicrohttpd) did not start", key, addr);
    close(s->fd);
    free(s);
    return rc;
  }
  kvp_log_info("metrics: serving /metrics, /healthz, /readyz on %s (port %d)", addr, s->port);
  *out = s;
  return 0;
}

int kvp__metrics_server_port(const kvp__metrics_server_t *s) {
  return s->port;
}

const kvp__http_counts_t *kvp__metrics_server_counts(const kvp__metrics_server_t *s) {
  return &s->counts;
}

void kvp__metrics_server_stop(kvp__metrics_server_t *s) {
  if (s == NULL)
    return;
  /* MHD_stop_daemon joins its thread and closes the listening socket it
   * was given (it was not quiesced): closing it again here could close a
   * descriptor another thread has just been given (the router API's
   * server had the same bug). */
  kvp__http_guard_stop(s->guard);
  kvp__prom_free(&s->text);
  free(s);
}
