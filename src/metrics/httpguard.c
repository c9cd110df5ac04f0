/* Bounds on a libmicrohttpd server's clients; see httpguard.h. */
#define _GNU_SOURCE /* vsnprintf, pthread_condattr_setclock */
#include "metrics/httpguard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"
#include "kvplane/status.h"

#define LOG_INTERVAL_MS 10000

/* Where a connection's current request stands. */
enum { READING, ANSWERING, IDLE };

/* One open connection (libmicrohttpd's socket context); in g->conns,
 * under g->mu. */
typedef struct conn_s {
  struct conn_s *prev, *next;
  kvp__http_guard_t *g;
  int fd;
  int state;
  int calls;         /* handler calls of the current request */
  int cut;           /* shut down at the deadline */
  uint64_t start_ms; /* READING: when the request began */
  uint64_t rx_mark;  /* IDLE: bytes received when the last answer was done */
  char peer[64];     /* address:port */
  int family;        /* of the client's address: AF_INET, AF_INET6, or 0 (unknown) */
  uint8_t addr[16];  /* the address without its port, for the per-client limit */
} conn_t;

/* A log line at most every LOG_INTERVAL_MS; the next says how many were
 * left out. */
typedef struct ratelog_s {
  uint64_t last_ms, suppressed;
} ratelog_t;

struct kvp__http_guard_s {
  struct MHD_Daemon *d;
  char what[32];
  kvp__http_limits_t lim;
  kvp__http_counts_t *counts;
  MHD_AccessHandlerCallback handler;
  void *handler_cls;
  MHD_RequestCompletedCallback done;
  void *done_cls;

  pthread_mutex_t mu;
  pthread_cond_t wake;
  int stop;      /* under mu: the watchdog leaves */
  conn_t *conns; /* under mu */
  ratelog_t cut_log;
  pthread_mutex_t mhd_log_mu; /* libmicrohttpd's messages (its thread, and stop's) */
  ratelog_t mhd_log;
  ratelog_t refuse_log; /* under mhd_log_mu */
  pthread_t watchdog;
};

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Returns 1 when a line may be written now (*suppressed: how many were not
 * since the last one), else 0 and counts this one. */
static int ratelog_take(ratelog_t *r, uint64_t now, uint64_t *suppressed) {
  if (r->last_ms != 0 && now - r->last_ms < LOG_INTERVAL_MS) {
    r->suppressed++;
    return 0;
  }
  *suppressed = r->suppressed;
  r->suppressed = 0;
  r->last_ms = now;
  return 1;
}

/* Bytes the kernel has received on fd; 0 with *ok 0 when it cannot say
 * (a kernel before 4.1: the deadline then runs from the last answer). */
static uint64_t rx_bytes(int fd, int *ok) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  memset(&ti, 0, sizeof ti);
  *ok = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received;
  return *ok ? ti.tcpi_bytes_received : 0;
}

static void peer_name(const struct sockaddr *sa, char *out, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (sa != NULL && sa->sa_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    port = ntohs(s4->sin_port);
    snprintf(out, len, "%s:%u", host, port);
  } else if (sa != NULL && sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    port = ntohs(s6->sin6_port);
    snprintf(out, len, "[%s]:%u", host, port);
  } else {
    snprintf(out, len, "an unknown address");
  }
}

/* The client's address without its port: its family (0 when unknown) and
 * bytes. */
static int addr_key(const struct sockaddr *sa, uint8_t out[16]) {
  memset(out, 0, 16);
  if (sa != NULL && sa->sa_family == AF_INET) {
    memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return AF_INET;
  }
  if (sa != NULL && sa->sa_family == AF_INET6) {
    memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return AF_INET6;
  }
  return 0;
}

static conn_t *conn_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci != NULL ? ci->socket_context : NULL;
}

/* --- libmicrohttpd's thread ------------------------------------------------ */

/* libmicrohttpd's accept policy: the connection limits, in all and per
 * client address, counted here over the guarded connections (libmicrohttpd
 * runs one thread: a connection accepted is in g->conns before the next
 * accept). Its own per-address option only logged its refusals, in words
 * that change between its releases. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  kvp__http_guard_t *g = cls;
  uint8_t key[16];
  int family = addr_key(addrlen > 0 ? addr : NULL, key);
  unsigned all = 0, same = 0;
  pthread_mutex_lock(&g->mu);
  for (const conn_t *k = g->conns; k != NULL; k = k->next) {
    all++;
    if (family != 0 && k->family == family && memcmp(k->addr, key, 16) == 0)
      same++;
  }
  pthread_mutex_unlock(&g->mu);
  if (all < g->lim.max_connections && (g->lim.per_client == 0 || same < g->lim.per_client))
    return MHD_YES;
  atomic_fetch_add(&g->counts->refused, 1);
  char peer[64];
  uint64_t skipped, now = mono_ms();
  peer_name(addrlen > 0 ? addr : NULL, peer, sizeof peer);
  pthread_mutex_lock(&g->mhd_log_mu);
  int take = ratelog_take(&g->refuse_log, now, &skipped);
  pthread_mutex_unlock(&g->mhd_log_mu);
  if (take)
    kvp_log_warn("%s: %s: connection refused: %s (%u connections in all, %u per client "
                 "address)%s",
                 g->what, peer,
                 all >= g->lim.max_connections ? "the server is at its connection limit"
                                               : "its address is at the per-client limit",
                 g->lim.max_connections, g->lim.per_client,
                 skipped ? " (and more in the last 10 s)" : "");
  return MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  kvp__http_guard_t *g = cls;
  conn_t *k = *socket_context;

  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *sa =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    /* Without memory the connection goes unguarded (the idle timeout still
     * holds) rather than refused: nothing here can refuse it. */
    if (fd == NULL || (k = calloc(1, sizeof *k)) == NULL)
      return;
    k->g = g;
    k->fd = fd->connect_fd;
    k->state = READING;
    k->start_ms = mono_ms();
    peer_name(sa ? sa->client_addr : NULL, k->peer, sizeof k->peer);
    k->family = addr_key(sa ? sa->client_addr : NULL, k->addr);
    pthread_mutex_lock(&g->mu);
    k->next = g->conns;
    if (g->conns)
      g->conns->prev = k;
    g->conns = k;
    pthread_mutex_unlock(&g->mu);
    *socket_context = k;
    return;
  }
  /* MHD_CONNECTION_NOTIFY_CLOSED: called before libmicrohttpd closes the
   * socket, so the watchdog never shuts down a descriptor reused since. */
  if (k == NULL)
    return;
  pthread_mutex_lock(&g->mu);
  if (k->prev)
    k->prev->next = k->next;
  else
    g->conns = k->next;
  if (k->next)
    k->next->prev = k->prev;
  pthread_mutex_unlock(&g->mu);
  free(k);
  *socket_context = NULL;
}

static void set_state(kvp__http_guard_t *g, conn_t *k, int state) {
  pthread_mutex_lock(&g->mu);
  if (state == READING && k->state == IDLE)
    k->start_ms = mono_ms(); /* the watchdog did not see its first byte yet */
  if (state != READING || k->state == IDLE)
    k->state = state;
  pthread_mutex_unlock(&g->mu);
}

/* The server's handler, with the request's progress noted around it: a
 * call after the first one without upload data is the request complete
 * (headers and body), and a queued response is the answer under way. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls) {
  kvp__http_guard_t *g = cls;
  conn_t *k = conn_of(c);
  if (k != NULL) {
    int first = k->calls++ == 0;
    set_state(g, k, !first && *upload_len == 0 ? ANSWERING : READING);
  }
  enum MHD_Result r =
      g->handler(g->handler_cls, c, url, method, version, upload, upload_len, req_cls);
  if (k != NULL && r == MHD_YES &&
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS) != NULL)
    set_state(g, k, ANSWERING);
  return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
  kvp__http_guard_t *g = cls;
  conn_t *k = conn_of(c);
  if (g->done != NULL)
    g->done(g->done_cls, c, req_cls, toe);
  if (k != NULL) {
    int ok;
    uint64_t rx = rx_bytes(k->fd, &ok);
    pthread_mutex_lock(&g->mu);
    k->calls = 0;
    /* Without the kernel's count the next request is timed from now. */
    k->state = ok ? IDLE : READING;
    k->rx_mark = rx;
    k->start_ms = mono_ms();
    pthread_mutex_unlock(&g->mu);
  }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  kvp__http_guard_t *g = cls;
  char line[512];
  uint64_t skipped;
  int take;

  vsnprintf(line, sizeof line, fmt, ap);
  size_t n = strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    line[--n] = '\0';
  if (strstr(line, "connection limit") != NULL) {
    atomic_fetch_add(&g->counts->refused, 1);
    snprintf(line + n, sizeof line - n, " (%u connections in all, %u per client address)",
             g->lim.max_connections, g->lim.per_client);
  }
  pthread_mutex_lock(&g->mhd_log_mu);
  take = ratelog_take(&g->mhd_log, mono_ms(), &skipped);
  pthread_mutex_unlock(&g->mhd_log_mu);
  if (!take)
    return;
  if (skipped)
    kvp_log_warn("%s: libmicrohttpd: %s (and %llu more of its messages in the last %d s)", g->what,
                 line, (unsigned long long)skipped, LOG_INTERVAL_MS / 1000);
  else
    kvp_log_warn("%s: libmicrohttpd: %s", g->what, line);
}

/* --- the watchdog ---------------------------------------------------------- */

static uint64_t tick_ms(const kvp__http_limits_t *lim) {
  int64_t t = lim->request_timeout_ms / 10;
  return (uint64_t)(t < 50 ? 50 : t > 500 ? 500 : t);
}

/* Under g->mu: cuts the requests past the deadline, and starts the clock
 * of a kept-alive connection whose next request has begun. */
static void sweep(kvp__http_guard_t *g, uint64_t now) {
  uint64_t limit = (uint64_t)g->lim.request_timeout_ms;
  for (conn_t *k = g->conns; k != NULL; k = k->next) {
    if (k->state == IDLE) {
      int ok;
      if (rx_bytes(k->fd, &ok) > k->rx_mark || !ok) {
        k->state = READING;
        k->start_ms = now;
      }
      continue;
    }
    if (k->state != READING || k->cut || now - k->start_ms < limit)
      continue;
    /* libmicrohttpd sees the end of the stream and closes the connection
     * on its thread; the descriptor stays open until then (see
     * on_connection). */
    shutdown(k->fd, SHUT_RDWR);
    k->cut = 1;
    atomic_fetch_add(&g->counts->timed_out, 1);
    uint64_t skipped;
    if (!ratelog_take(&g->cut_log, now, &skipped))
      continue;
    if (skipped)
      kvp_log_warn("%s: %s: request not complete (headers and body) within request_timeout "
                   "%.3g s: connection closed (and %llu more in the last %d s)",
                   g->what, k->peer, (double)limit / 1e3, (unsigned long long)skipped,
                   LOG_INTERVAL_MS / 1000);
    else
      kvp_log_warn("%s: %s: request not complete (headers and body) within request_timeout "
                   "%.3g s: connection closed",
                   g->what, k->peer, (double)limit / 1e3);
  }
}

static void *watchdog(void *arg) {
  kvp__http_guard_t *g = arg;
  uint64_t tick = tick_ms(&g->lim);
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(tick / 1000);
    ts.tv_nsec += (long)(tick % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&g->wake, &g->mu, &ts);
    if (!g->stop)
      sweep(g, mono_ms());
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

/* --- start and stop -------------------------------------------------------- */

int kvp__http_guard_start(const char *what, const kvp__http_limits_t *lim,
                          kvp__http_counts_t *counts, unsigned flags, int fd,
                          MHD_AccessHandlerCallback handler, void *handler_cls,
                          MHD_RequestCompletedCallback done, void *done_cls,
                          kvp__http_guard_t **out) {
  kvp__http_guard_t *g;
  pthread_condattr_t ca;

  *out = NULL;
  if ((g = calloc(1, sizeof *g)) == NULL)
    return KVP_ENOMEM;
  snprintf(g->what, sizeof g->what, "%s", what);
  g->lim = *lim;
  g->counts = counts;
  g->handler = handler;
  g->handler_cls = handler_cls;
  g->done = done;
  g->done_cls = done_cls;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->wake, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&g->mu, NULL);
  pthread_mutex_init(&g->mhd_log_mu, NULL);
  if (pthread_create(&g->watchdog, NULL, watchdog, g) != 0) {
    pthread_mutex_destroy(&g->mhd_log_mu);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->wake);
    free(g);
    return KVP_ENOMEM;
  }
  /* The logger first: libmicrohttpd warns about it otherwise. */
  g->d = MHD_start_daemon(flags, 0, on_accept, g, on_request, g, MHD_OPTION_EXTERNAL_LOGGER,
                          on_mhd_log, g, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_CONNECTION,
                          on_connection, g, MHD_OPTION_NOTIFY_COMPLETED, on_completed, g,
                          MHD_OPTION_CONNECTION_LIMIT, lim->max_connections + 1,
                          MHD_OPTION_CONNECTION_TIMEOUT, lim->idle_timeout_s, MHD_OPTION_END);
  if (g->d == NULL) {
    kvp__http_guard_stop(g);
    return KVP_EIO;
  }
  *out = g;
  return 0;
}

void kvp__http_guard_stop(kvp__http_guard_t *g) {
  if (g == NULL)
    return;
  /* First libmicrohttpd: its last connections leave g->conns as it closes
   * them, and no callback runs after it returns. */
  if (g->d != NULL)
    MHD_stop_daemon(g->d);
  pthread_mutex_lock(&g->mu);
  g->stop = 1;
  pthread_cond_signal(&g->wake);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->watchdog, NULL);
  /* libmicrohttpd reports every connection it closes at its stop; one it
   * did not (a start that failed half-way) is freed here. */
  while (g->conns != NULL) {
    conn_t *k = g->conns;
    g->conns = k->next;
    free(k);
  }
  pthread_mutex_destroy(&g->mhd_log_mu);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->wake);
  free(g);
}

int64_t kvp__http_guard_timeout_ms(const kvp__http_guard_t *g) {
  return g->lim.request_timeout_ms;
}
