/* kvp-bench routerapi: the routers' indexer API (issue 27, item 6) against
 * the NATS match reply it stands beside, over 256k blocks in 4096 chains of
 * 64 over 8 workers (each chain in G1 of one worker, its first 16 blocks in
 * G2 of the next), random 64-block queries, alternating:
 *   answer       /query_by_hash's body (64 u64 numbers) decoded and
 *                answered (kvp__rapi_parse + kvp__rapi_answer), against
 *                the NATS match request's (kvp__adv_api_match: decode,
 *                match, JSON reply) of the same hashes;
 *   tokens       /query's body (1024 token ids) decoded, hashed and
 *                answered, against the same NATS baseline;
 *   http         a POST /query_by_hash over a kept-alive loopback
 *                connection to the real server (routerhttp.c, its loop on
 *                a thread), against the in-process answer of the same body. */
#define _GNU_SOURCE /* strcasestr */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "advisor/api.h"
#include "advisor/routerapi.h"
#include "advisor/routerhttp.h"
#include "bench.h"
#include "harness.h"
#include "kvplane/hash.h"

#define CHAIN 64
#define BS 16
#define NQ 20000

static uint64_t rstate = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void) {
  rstate ^= rstate << 13;
  rstate ^= rstate >> 7;
  rstate ^= rstate << 17;
  return rstate;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct loop_s {
  uv_loop_t loop;
  uv_async_t quit;
  kvp__rapi_http_t *http;
} loop_t;

static void on_quit(uv_async_t *a) {
  loop_t *l = a->data;
  kvp__rapi_http_stop(l->http);
  uv_close((uv_handle_t *)&l->quit, NULL);
}

static void *run_loop(void *arg) {
  loop_t *l = arg;
  uv_run(&l->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* One request on a kept-alive connection; the reply's body length, or -1. */
static long roundtrip(int fd, const char *body, char *buf, size_t cap) {
  static char req[8192];
  size_t blen = strlen(body), len = 0;
  int n = snprintf(req, sizeof req,
                   "POST /query_by_hash HTTP/1.1\r\nHost: b\r\nContent-Length: %zu\r\n\r\n%s", blen,
                   body);
  /* One write: headers and body in one segment, as HTTP clients send a
   * small request (two writes meet Nagle and the delayed ACK: 40 ms). */
  if (n < 0 || (size_t)n >= sizeof req || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
    return -1;
  for (;;) {
    ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
    if (r <= 0)
      return -1;
    len += (size_t)r;
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "content-length:");
    if (end && cl) {
      long want = strtol(cl + 15, NULL, 10);
      if ((long)(len - (size_t)(end + 4 - buf)) >= want)
        return want;
    }
  }
}

static char *hash_body(const uint64_t *h) {
  char *b = malloc(64 * 24 + 64), *p = b;
  p += sprintf(p, "{\"block_size\":%d,\"seq_hashes\":[", BS);
  for (int i = 0; i < CHAIN; i++)
    p += sprintf(p, "%s%llu", i ? "," : "", (unsigned long long)h[i]);
  sprintf(p, "]}");
  return b;
}

static char *nats_body(const uint64_t *h) {
  char *b = malloc(64 * 20 + 32), *p = b;
  p += sprintf(p, "{\"hashes\":[");
  for (int i = 0; i < CHAIN; i++)
    p += sprintf(p, "%s\"%016llx\"", i ? "," : "", (unsigned long long)h[i]);
  sprintf(p, "]}");
  return b;
}

KVP_BENCH_SUITE(routerapi,
                "routers' indexer API (HTTP) vs the NATS match reply, 64-block queries") {
  (void)argc;
  (void)argv;
  const size_t nchains = 4096, nblocks = nchains * CHAIN;
  uint32_t *tokens = malloc(nchains * CHAIN * BS * sizeof *tokens);
  uint64_t *chains = malloc(nblocks * sizeof *chains);
  uint64_t *a = malloc(NQ * sizeof *a), *an = malloc(NQ * sizeof *an), *t = malloc(NQ * sizeof *t),
           *hq = malloc(NQ * sizeof *hq), *hb = malloc(NQ * sizeof *hb);
  char **hbody = malloc(nchains * sizeof *hbody), **nbody = malloc(nchains * sizeof *nbody);
  char **tbody = malloc(nchains * sizeof *tbody);
  kvp__index_t *ix = NULL;
  uint16_t w[8];
  char err[256];

  /* Chains from token ids, so /query hashes to the same blocks. */
  for (size_t i = 0; i < nchains * CHAIN * BS; i++)
    tokens[i] = (uint32_t)(rnd() % 50000);
  for (size_t c = 0; c < nchains; c++)
    kvp_hash_sequence(&tokens[c * CHAIN * BS], CHAIN * BS, BS, KVP_HASH_SEED, &chains[c * CHAIN],
                      CHAIN);
  kvp__index_create(nblocks, 3600, &ix);
  kvp__index_track_dirty(ix, 0);
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%d", i);
    kvp__index_worker(ix, name, (uint32_t)i % 2, &w[i]);
  }
  for (size_t c = 0; c < nchains; c++)
    for (size_t i = 0; i < CHAIN; i++) {
      uint64_t h = chains[c * CHAIN + i], par = i ? chains[c * CHAIN + i - 1] : 0;
      kvp__index_store(ix, h, i > 0, par, w[c % 8], 1, 0, BS, 1 << 20, 1);
      if (i < 16)
        kvp__index_store(ix, h, i > 0, par, w[(c + 1) % 8], 2, 0, BS, 1 << 20, 1);
    }
  for (size_t c = 0; c < nchains; c++) {
    hbody[c] = hash_body(&chains[c * CHAIN]);
    nbody[c] = nats_body(&chains[c * CHAIN]);
    char *b = malloc(CHAIN * BS * 7 + 64), *p = b;
    p += sprintf(p, "{\"block_size\":%d,\"token_ids\":[", BS);
    for (int i = 0; i < CHAIN * BS; i++)
      p += sprintf(p, "%s%u", i ? "," : "", tokens[c * CHAIN * BS + (size_t)i]);
    sprintf(p, "]}");
    tbody[c] = b;
  }

  /* In process: the HTTP API's work and the NATS reply's, alternating. */
  for (size_t q = 0; q < NQ; q++) {
    size_t c = rnd() % nchains;
    kvp__rapi_req_t req;
    char *json = NULL;
    uint64_t t0 = kvp_bench_now_ns();
    kvp__rapi_parse(1, hbody[c], strlen(hbody[c]), 0, &req, err, sizeof err);
    kvp__rapi_answer(ix, "default", &req, &json);
    a[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink(strlen(json));
    kvp__rapi_req_free(&req);
    free(json);
    c = rnd() % nchains;
    t0 = kvp_bench_now_ns();
    kvp__adv_api_match(ix, nbody[c], strlen(nbody[c]), &json);
    an[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink(strlen(json));
    free(json);
    c = rnd() % nchains;
    t0 = kvp_bench_now_ns();
    kvp__rapi_parse(0, tbody[c], strlen(tbody[c]), 0, &req, err, sizeof err);
    kvp__rapi_answer(ix, "default", &req, &json);
    t[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink(strlen(json) + req.n);
    kvp__rapi_req_free(&req);
    free(json);
  }

  /* Over HTTP: the real server, its loop on a thread, one kept-alive
   * connection; the in-process answer of the same body alternates with it
   * (on this thread while the loop idles: the loop answers only requests). */
  loop_t l;
  pthread_t th;
  uv_loop_init(&l.loop);
  kvp__rapi_http_limits_t hl = {.request_timeout_ms = 10000, .per_client = 64};
  static kvp__http_counts_t hc;
  if (kvp__rapi_http_start(&l.loop, ix, "default", 0, "bench", "127.0.0.1:0", &hl, &hc, &l.http,
                           err, sizeof err) != 0) {
    fprintf(stderr, "routerapi: %s\n", err);
    return 1;
  }
  uv_async_init(&l.loop, &l.quit, on_quit);
  l.quit.data = &l;
  int port = kvp__rapi_http_port(l.http);
  pthread_create(&th, NULL, run_loop, &l);
  int fd = kvp_test_connect(port);
  static char buf[1 << 16];
  size_t nh = 0;
  for (size_t q = 0; q < NQ / 4 && fd >= 0; q++, nh++) {
    size_t c = rnd() % nchains;
    uint64_t t0 = kvp_bench_now_ns();
    long got = roundtrip(fd, hbody[c], buf, sizeof buf);
    hq[q] = kvp_bench_now_ns() - t0;
    if (got <= 0) {
      fprintf(stderr, "routerapi: a request over HTTP failed\n");
      break;
    }
  }
  if (fd >= 0)
    close(fd);
  uv_async_send(&l.quit);
  pthread_join(th, NULL);
  uv_loop_close(&l.loop);
  for (size_t q = 0; q < nh; q++) {
    size_t c = rnd() % nchains;
    kvp__rapi_req_t req;
    char *json = NULL;
    uint64_t t0 = kvp_bench_now_ns();
    kvp__rapi_parse(1, hbody[c], strlen(hbody[c]), 0, &req, err, sizeof err);
    kvp__rapi_answer(ix, "default", &req, &json);
    hb[q] = kvp_bench_now_ns() - t0;
    kvp__rapi_req_free(&req);
    free(json);
  }

  qsort(a, NQ, sizeof *a, cmp_u64);
  qsort(an, NQ, sizeof *an, cmp_u64);
  qsort(t, NQ, sizeof *t, cmp_u64);
  qsort(hq, nh, sizeof *hq, cmp_u64);
  qsort(hb, nh, sizeof *hb, cmp_u64);
  printf("# %zu blocks over 8 workers; %d queries of 64 blocks each way, %zu over HTTP\n", nblocks,
         NQ, nh);
  kvp_bench_report("routerapi.answer_p50_us", (double)a[NQ / 2] / 1e3, "us", "nats-match-reply",
                   (double)an[NQ / 2] / 1e3);
  kvp_bench_report("routerapi.answer_p99_us", (double)a[NQ * 99 / 100] / 1e3, "us",
                   "nats-match-reply", (double)an[NQ * 99 / 100] / 1e3);
  kvp_bench_report("routerapi.tokens_p50_us", (double)t[NQ / 2] / 1e3, "us", "nats-match-reply",
                   (double)an[NQ / 2] / 1e3);
  if (nh > 0) {
    kvp_bench_report("routerapi.http_p50_us", (double)hq[nh / 2] / 1e3, "us", "in-process-answer",
                     (double)hb[nh / 2] / 1e3);
    kvp_bench_report("routerapi.http_p99_us", (double)hq[nh * 99 / 100] / 1e3, "us",
                     "in-process-answer", (double)hb[nh * 99 / 100] / 1e3);
  }
  for (size_t c = 0; c < nchains; c++) {
    free(hbody[c]);
    free(nbody[c]);
    free(tbody[c]);
  }
  free(hbody);
  free(nbody);
  free(tbody);
  kvp__index_destroy(ix);
  free(tokens);
  free(chains);
  free(a);
  free(an);
  free(t);
  free(hq);
  free(hb);
  return 0;
}
