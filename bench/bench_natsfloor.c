/* kvp-bench natsfloor, and the floor printed under `kvp-bench scale`'s
 * gathered match: what a request answered by 4 processes costs against one
 * answered by 1 on this machine, through a real nats-server, with nothing
 * else in the way. The requester and the responders speak the NATS
 * protocol themselves over blocking sockets: no client library, no thread
 * but the caller's, no parsing beyond the MSG line, one write per answer.
 * Whatever a real client and a real advisor add comes on top; the ratio
 * here is what scheduling 4 answering processes (and nats-server's fan-out
 * and fan-in) costs on the machine's cores, which no client or advisor
 * code can take back.
 *
 * Not a NATS client: it knows INFO, PING, +OK, -ERR and MSG, as the
 * server sends them to a connection that asked for no headers, no echo
 * and no verbose acks; anything else ends the run with an error. The
 * responders are forked from a process that may have threads (the scale
 * suite's clients): a child calls only system calls and string functions
 * of its own stack, never malloc or stdio. */
#define _GNU_SOURCE
#include "bench_natsfloor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "natsd.h"

#define FLOOR_BUF 65536
#define FLOOR_REPLY_MAX 4096
#define FLOOR_WAIT_MS 2000
#define FLOOR_INBOX "_INBOX.kvpfloor"

typedef struct {
  int fd;
  size_t len;
  char buf[FLOOR_BUF];
} pconn_t;

static int send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Appends s to out at *at (room for it is the caller's). */
static void put(char *out, size_t *at, const char *s, size_t n) {
  memcpy(out + *at, s, n);
  *at += n;
}

static void put_u(char *out, size_t *at, size_t v) {
  char d[24];
  int n = 0;
  do
    d[n++] = (char)('0' + v % 10);
  while ((v /= 10) > 0);
  while (n > 0)
    out[(*at)++] = d[--n];
}

static int pc_connect(pconn_t *c, int port) {
  static const char hello[] = "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":false,"
                              "\"no_responders\":false,\"echo\":false}\r\n";
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  int one = 1;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  c->len = 0;
  if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
    return -1;
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
      send_all(c->fd, hello, sizeof hello - 1) != 0) {
    close(c->fd);
    c->fd = -1;
    return -1;
  }
  return 0;
}

/* The space-separated fields of line[0..n) into f (at most 5). */
static int fields(const char *line, size_t n, const char **f, size_t *fl) {
  int k = 0;
  for (size_t i = 0; i < n && k < 5;) {
    while (i < n && line[i] == ' ')
      i++;
    if (i == n)
      break;
    f[k] = line + i;
    while (i < n && line[i] != ' ')
      i++;
    fl[k] = (size_t)(line + i - f[k]);
    k++;
  }
  return k;
}

/* Reads until one MSG is whole and consumes it; its reply subject (NUL
 * ended) into reply when reply is not NULL. Answers PING. Returns 0, or -1
 * on EOF, a read error, -ERR, a line it does not know, or timeout_ms
 * (-1: none) without a byte. */
static int pc_next_msg(pconn_t *c, char *reply, size_t replylen, int timeout_ms) {
  for (;;) {
    char *eol = memmem(c->buf, c->len, "\r\n", 2);
    if (eol != NULL) {
      size_t ll = (size_t)(eol - c->buf) + 2, need = ll;
      int msg = ll >= 4 && memcmp(c->buf, "MSG ", 4) == 0;
      if (msg) {
        const char *f[5];
        size_t fl[5], size = 0;
        int k = fields(c->buf + 4, ll - 6, f, fl);
        if (k != 3 && k != 4)
          return -1;
        for (size_t i = 0; i < fl[k - 1]; i++) {
          if (f[k - 1][i] < '0' || f[k - 1][i] > '9' || size > FLOOR_BUF)
            return -1;
          size = size * 10 + (size_t)(f[k - 1][i] - '0');
        }
        need = ll + size + 2;
        if (need > FLOOR_BUF)
          return -1;
        if (c->len < need)
          goto more;
        if (reply != NULL) {
          if (k != 4 || fl[2] >= replylen)
            return -1;
          memcpy(reply, f[2], fl[2]);
          reply[fl[2]] = '\0';
        }
      } else if (ll >= 4 && memcmp(c->buf, "PING", 4) == 0) {
        if (send_all(c->fd, "PONG\r\n", 6) != 0)
          return -1;
      } else if (!(ll >= 4 && (memcmp(c->buf, "INFO", 4) == 0 || memcmp(c->buf, "PONG", 4) == 0 ||
                               memcmp(c->buf, "+OK", 3) == 0))) {
        return -1; /* -ERR, or a line this floor does not speak */
      }
      memmove(c->buf, c->buf + need, c->len - need);
      c->len -= need;
      if (msg)
        return 0;
      continue;
    }
    if (c->len == FLOOR_BUF)
      return -1;
  more:
    if (timeout_ms >= 0) {
      struct pollfd p = {.fd = c->fd, .events = POLLIN};
      int r;
      while ((r = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
      if (r <= 0)
        return -1;
    }
    ssize_t r = read(c->fd, c->buf + c->len, FLOOR_BUF - c->len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    c->len += (size_t)r;
  }
}

/* A responder: answers every request on subj with reply_bytes bytes, until
 * the connection ends or its parent dies. Never returns. */
static void responder(int port, const char *subj, size_t reply_bytes) {
  static pconn_t c;
  static char out[FLOOR_REPLY_MAX + 512];
  char reply[256];
  size_t at = 0;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (pc_connect(&c, port) != 0)
    _exit(1);
  put(out, &at, "SUB ", 4);
  put(out, &at, subj, strlen(subj));
  put(out, &at, " 1\r\n", 4);
  if (send_all(c.fd, out, at) != 0)
    _exit(1);
  for (;;) {
    if (pc_next_msg(&c, reply, sizeof reply, -1) != 0)
      _exit(0);
    at = 0;
    put(out, &at, "PUB ", 4);
    put(out, &at, reply, strlen(reply));
    put(out, &at, " ", 1);
    put_u(out, &at, reply_bytes);
    put(out, &at, "\r\n", 2);
    memset(out + at, 'x', reply_bytes);
    at += reply_bytes;
    put(out, &at, "\r\n", 2);
    if (send_all(c.fd, out, at) != 0)
      _exit(1);
  }
}

/* One request on subj, then its n answers. */
static int ask(pconn_t *c, const char *subj, int n) {
  char req[128];
  int len = snprintf(req, sizeof req, "PUB %s %s 5\r\nmatch\r\n", subj, FLOOR_INBOX);
  if (send_all(c->fd, req, (size_t)len) != 0)
    return -1;
  for (int k = 0; k < n; k++)
    if (pc_next_msg(c, NULL, 0, FLOOR_WAIT_MS) != 0)
      return -1;
  return 0;
}

int kvp_bench_nats_floor(int port, int queries, int warmup, size_t reply_bytes, uint64_t *lat1,
                         uint64_t *lat4) {
  static const char *const subj[2] = {"kvpfloor.one", "kvpfloor.four"};
  static pconn_t c;
  pid_t kids[5] = {0};
  int rc = -1;

  c.fd = -1;
  if (reply_bytes > FLOOR_REPLY_MAX)
    reply_bytes = FLOOR_REPLY_MAX;
  fflush(NULL); /* nothing buffered is written twice by a child */
  for (int i = 0; i < 5; i++) {
    if ((kids[i] = fork()) == 0)
      responder(port, subj[i == 0 ? 0 : 1], reply_bytes);
    if (kids[i] < 0) {
      fprintf(stderr, "bench natsfloor: fork: %s\n", strerror(errno));
      goto out;
    }
  }
  if (pc_connect(&c, port) != 0) {
    fprintf(stderr, "bench natsfloor: cannot connect to 127.0.0.1:%d: %s\n", port, strerror(errno));
    goto out;
  }
  if (send_all(c.fd, "SUB " FLOOR_INBOX " 1\r\n", sizeof("SUB " FLOOR_INBOX " 1\r\n") - 1) != 0)
    goto out;
  /* Every responder has subscribed once a request on each subject brings
   * all its answers; a request sent before that may get fewer (a missing
   * answer is waited for 2 s, then asked again). */
  for (int tries = 0;; tries++) {
    if (ask(&c, subj[0], 1) == 0 && ask(&c, subj[1], 4) == 0)
      break;
    if (tries == 10) {
      fprintf(stderr, "bench natsfloor: the responders did not all answer in %d tries\n", tries);
      goto out;
    }
    /* Answers still on the way are dropped with the connection. */
    close(c.fd);
    if (pc_connect(&c, port) != 0 ||
        send_all(c.fd, "SUB " FLOOR_INBOX " 1\r\n", sizeof("SUB " FLOOR_INBOX " 1\r\n") - 1) != 0)
      goto out;
  }
  for (int q = -warmup; q < queries; q++)
    for (int side = 0; side < 2; side++) {
      int four = ((q + side) % 2 + 2) % 2;
      uint64_t t0 = kvp_bench_now_ns();
      if (ask(&c, subj[four], four ? 4 : 1) != 0) {
        fprintf(stderr, "bench natsfloor: no whole answer to request %d on %s in %d ms\n", q,
                subj[four], FLOOR_WAIT_MS);
        goto out;
      }
      if (q >= 0)
        (four ? lat4 : lat1)[q] = kvp_bench_now_ns() - t0;
    }
  rc = 0;
out:
  if (c.fd >= 0)
    close(c.fd);
  c.fd = -1;
  for (int i = 0; i < 5; i++)
    if (kids[i] > 0) {
      kill(kids[i], SIGKILL);
      waitpid(kids[i], NULL, 0);
    }
  return rc;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

KVP_BENCH_SUITE(natsfloor, "the floor of a gathered request here: 4 answering processes vs 1 "
                           "through nats-server, raw protocol, p50/p99") {
  int queries = 5000, warmup = 200;
  long bytes = 512;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--queries") == 0 && i + 1 < argc)
      queries = atoi(argv[++i]);
    else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
      warmup = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reply-bytes") == 0 && i + 1 < argc)
      bytes = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: kvp-bench natsfloor [--queries N] [--warmup N] "
                      "[--reply-bytes N (0..4096)]\n");
      return 2;
    }
  }
  if (queries < 100 || warmup < 0 || bytes < 0 || bytes > FLOOR_REPLY_MAX) {
    fprintf(stderr, "kvp-bench natsfloor: --queries is at least 100, --warmup at least 0, "
                    "--reply-bytes 0..4096\n");
    return 2;
  }
  kvp_natsd_t d;
  if (kvp_natsd_start(&d, NULL) != 0) {
    fprintf(stderr, "bench natsfloor: cannot start nats-server\n");
    return 1;
  }
  uint64_t *l1 = calloc((size_t)queries, sizeof *l1), *l4 = calloc((size_t)queries, sizeof *l4);
  double load[3] = {0};
  int rc = 1;
  if (l1 != NULL && l4 != NULL &&
      kvp_bench_nats_floor(d.port, queries, warmup, (size_t)bytes, l1, l4) == 0) {
    getloadavg(load, 3);
    qsort(l1, (size_t)queries, sizeof *l1, cmp_u64);
    qsort(l4, (size_t)queries, sizeof *l4, cmp_u64);
    printf("# %d requests per side after %d of warm-up, alternating; answers of %ld bytes; load "
           "average %.2f (1 min)\n",
           queries, warmup, bytes, load[0]);
    kvp_bench_report("natsfloor.p50_us_4", (double)l4[queries / 2] / 1e3, "us", "1-responder",
                     (double)l1[queries / 2] / 1e3);
    kvp_bench_report("natsfloor.p99_us_4", (double)l4[queries * 99 / 100] / 1e3, "us",
                     "1-responder", (double)l1[queries * 99 / 100] / 1e3);
    rc = 0;
  }
  free(l1);
  free(l4);
  kvp_natsd_stop(&d);
  return rc;
}
