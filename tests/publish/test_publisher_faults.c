/* Why this file is long: each fault (a kill, a stop, a slow ack, wrong
 * credentials) needs its own server set-up and its own checks of what
 * arrived; they share the feeders and the staller.
 *
 * Publisher tests that break the server or the credentials: JetStream with
 * nats-server killed and restarted mid-stream (nothing acked lost, nothing
 * duplicated), kill -STOP / -CONT mid-stream in both modes (no crash, no hang
 * past a bound, recovery), a snapshot larger than the queue queued across
 * such stalls, through one tiny JetStream batch in flight at a time or
 * past one slow JetStream ack, and
 * user/password and token authentication. */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "harness.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "natsd.h"
#include "pubfix.h"

static void opts_for(kvp_publisher_opts_t *o, const kvp_natsd_t *d, const char *worker, int js) {
  kvp_publisher_opts_init(o);
  snprintf(o->nats.servers, sizeof o->nats.servers, "%s", d->url);
  o->ns = "f";
  o->worker_id = worker;
  o->mode = js ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  o->ack_wait_ms = 1000;
}

typedef struct feed_s {
  kvp_publisher_t *pub;
  uint64_t n;  /* events to emit */
  int pace_us; /* pause every 100 events */
  uint64_t max_call_ms;
  int errors;
  _Atomic uint64_t done;
} feed_t;

static void *feeder(void *arg) {
  feed_t *f = arg;
  for (uint64_t i = 1; i <= f->n; i++) {
    uint64_t t0 = pf_now_ms();
    int rc = kvp_publisher_stored(f->pub, KVP_TIER_G1, NULL, NULL, &i, 1, 16, 0, 0);
    uint64_t dt = pf_now_ms() - t0;
    if (dt > f->max_call_ms)
      f->max_call_ms = dt;
    if (rc != 0 && rc != KVP_EOVERFLOW)
      f->errors++;
    if (f->pace_us > 0 && i % 100 == 0)
      pf_sleep_ms(f->pace_us / 1000 ? f->pace_us / 1000 : 1);
    atomic_store(&f->done, i);
  }
  return NULL;
}

static void jetstream_acks_everything(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];

  opts_for(&o, d, "w-js", 1);
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  for (uint64_t i = 1; i <= 50000; i++)
    assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, &i, 1, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 10000), 0);
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  assert_int_equal(f.acked, 50000);
  kvp_publisher_close(pub);
  assert_int_equal(pf_sub_open(&s, d->url, "f", 1, NULL, NULL), 0);
  pf_sub_wait_events(&s, 50000, 10000);
  pf_sub_drain(&s, 300, 2000);
  assert_int_equal(s.events, 50000);
  assert_int_equal(s.id_errors, 0);
  pf_sub_close(&s);
}

/* Every stored hash 1..n exactly once, event ids 1..n exactly once, in
 * stream order. */
static void check_exactly_once(const pf_sub_t *s, uint64_t n) {
  assert_int_equal(s->decode_errors, 0);
  assert_int_equal(s->ids.n, n);
  for (size_t i = 0; i < s->ids.n; i++)
    if (s->ids.v[i] != i + 1)
      fail_msg("stream position %zu holds event id %llu", i, (unsigned long long)s->ids.v[i]);
  assert_int_equal(s->stored.n, n);
  for (size_t i = 0; i < s->stored.n; i++)
    assert_int_equal(s->stored.v[i], i + 1);
}

static void jetstream_kill_restart(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  pthread_t th;
  const uint64_t n = 200000;

  opts_for(&o, d, "w-jskill", 1);
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  feed_t f = {.pub = pub, .n = n, .pace_us = 1000};
  pthread_create(&th, NULL, feeder, &f);
  while (atomic_load(&f.done) < n / 4)
    pf_sleep_ms(5);
  /* Frozen first and killed frozen (kvp_natsd_kill would wake it first):
   * the batches published in its last 50 ms are in flight, unacked, when
   * it dies, and must be resent. Killed at once, it often died with every
   * batch acked (retries 0). */
  kvp_natsd_signal(d, SIGSTOP);
  pf_sleep_ms(50);
  kvp_natsd_signal(d, SIGKILL);
  kvp_natsd_kill(d); /* reaps it */
  pf_sleep_ms(500);
  assert_int_equal(kvp_natsd_restart(d), 0);
  pthread_join(th, NULL);
  assert_int_equal(f.errors, 0);
  int rc = kvp_publisher_flush(pub, 30000);
  kvp_publisher_stats_t fig;
  kvp_publisher_stats(pub, &fig);
  print_message("acked %llu sent %llu resent %llu retries %llu reconnects %llu\n",
                (unsigned long long)fig.acked, (unsigned long long)fig.sent,
                (unsigned long long)fig.resent, (unsigned long long)fig.retries,
                (unsigned long long)fig.reconnects);
  assert_int_equal(rc, 0);
  assert_int_equal(fig.acked, n);
  /* Distinct events are counted once however often they were resent. */
  assert_int_equal(fig.sent, n);
  assert_true(fig.retries > 0);
  assert_true(fig.reconnects >= 1);
  kvp_publisher_close(pub);
  assert_int_equal(pf_sub_open(&s, d->url, "f", 1, NULL, NULL), 0);
  pf_sub_wait_events(&s, n, 20000);
  pf_sub_drain(&s, 500, 3000);
  check_exactly_once(&s, n);
  pf_sub_close(&s);
}

/* Feeds n stored events of `per` hashes each (hashes 1..n*per in order). */
typedef struct feed_wide_s {
  kvp_publisher_t *pub;
  uint64_t n, per;
  int errors;
  _Atomic uint64_t done;
} feed_wide_t;

static void *feeder_wide(void *arg) {
  feed_wide_t *f = arg;
  uint64_t h[256];
  for (uint64_t i = 0; i < f->n; i++) {
    for (uint64_t k = 0; k < f->per; k++)
      h[k] = i * f->per + k + 1;
    if (kvp_publisher_stored(f->pub, KVP_TIER_G1, NULL, NULL, h, f->per, 16, 0, 0) != 0)
      f->errors++;
    if (i % 20 == 0)
      pf_sleep_ms(1);
    atomic_store(&f->done, i + 1);
  }
  return NULL;
}

/* JetStream with one batch in flight and batches smaller than an event
 * (250 hashes, about 100 a batch): every event is split across windows,
 * the loop stopping inside one at each batch awaiting its ack; the server
 * frozen then killed mid-stream and restarted. Every hash arrives exactly
 * once, in order, the event ids contiguous. */
static void jetstream_split_events_across_a_restart(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  pthread_t th;
  const uint64_t n = 2000, per = 250;

  opts_for(&o, d, "w-jssplit", 1);
  o.js_max_inflight = 1;
  o.batch_max_bytes = 1024;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  feed_wide_t f = {.pub = pub, .n = n, .per = per};
  pthread_create(&th, NULL, feeder_wide, &f);
  while (atomic_load(&f.done) < n / 4)
    pf_sleep_ms(5);
  kvp_natsd_signal(d, SIGSTOP);
  pf_sleep_ms(50);
  kvp_natsd_signal(d, SIGKILL);
  kvp_natsd_kill(d);
  pf_sleep_ms(500);
  assert_int_equal(kvp_natsd_restart(d), 0);
  pthread_join(th, NULL);
  assert_int_equal(f.errors, 0);
  int rc = kvp_publisher_flush(pub, 60000);
  kvp_publisher_stats_t fig;
  kvp_publisher_stats(pub, &fig);
  print_message("flush %d: batches %llu acked %llu sent %llu retries %llu reconnects %llu\n", rc,
                (unsigned long long)fig.batches, (unsigned long long)fig.acked,
                (unsigned long long)fig.sent, (unsigned long long)fig.retries,
                (unsigned long long)fig.reconnects);
  assert_int_equal(rc, 0);
  assert_true(fig.reconnects >= 1);
  kvp_publisher_close(pub);
  assert_int_equal(pf_sub_open(&s, d->url, "f", 1, NULL, NULL), 0);
  pf_sub_wait_events(&s, fig.acked, 30000);
  pf_sub_drain(&s, 500, 5000);
  assert_int_equal(s.decode_errors, 0);
  assert_int_equal(s.id_errors, 0);
  for (size_t i = 0; i < s.ids.n; i++)
    if (s.ids.v[i] != i + 1)
      fail_msg("stream position %zu holds event id %llu", i, (unsigned long long)s.ids.v[i]);
  assert_int_equal(s.stored.n, n * per);
  for (size_t i = 0; i < s.stored.n; i++)
    if (s.stored.v[i] != i + 1)
      fail_msg("stored position %zu holds hash %llu", i, (unsigned long long)s.stored.v[i]);
  pf_sub_close(&s);
}

static void stop_cont(kvp_natsd_t *d, int js) {
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  pthread_t th;
  const uint64_t n = 100000;

  assert_int_equal(pf_sub_open(&s, d->url, "f", 0, NULL, NULL), 0);
  opts_for(&o, d, js ? "w-stop-js" : "w-stop", js);
  o.overflow = KVP_OVERFLOW_DROP;
  o.close_timeout_ms = 2000;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  feed_t f = {.pub = pub, .n = n, .pace_us = 1000};
  pthread_create(&th, NULL, feeder, &f);
  while (atomic_load(&f.done) < n / 10)
    pf_sleep_ms(5);
  kvp_natsd_signal(d, SIGSTOP);
  pf_sleep_ms(3000);
  kvp_natsd_signal(d, SIGCONT);
  pthread_join(th, NULL);
  assert_int_equal(f.errors, 0);
  assert_true(f.max_call_ms < 100); /* ms: drop mode never blocks a caller */
  /* recovers: new events get through and flush completes within a bound */
  uint64_t t0 = pf_now_ms();
  int rc = kvp_publisher_flush(pub, 20000);
  print_message("flush after SIGCONT: %d in %llu ms\n", rc, (unsigned long long)(pf_now_ms() - t0));
  assert_int_equal(rc, 0);
  size_t before = s.stored.n;
  pf_sub_drain(&s, 300, 15000);
  before = s.stored.n;
  for (uint64_t i = n + 1; i <= n + 100; i++)
    assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, &i, 1, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 10000), 0);
  uint64_t end = pf_now_ms() + 10000;
  while (!pf_set_has(&s.stored, n + 100) && pf_now_ms() < end)
    pf_sub_drain(&s, 100, 500);
  assert_true(pf_set_has(&s.stored, n + 100));
  assert_true(s.stored.n > before);
  if (js) {
    /* Batches sent into the frozen server were resent after it woke: each
     * event counts once in sent, the resends apart, and after a flush every
     * distinct event was acked. */
    kvp_publisher_stats_t fig;
    kvp_publisher_stats(pub, &fig);
    print_message("sent %llu resent %llu acked %llu dropped %llu\n", (unsigned long long)fig.sent,
                  (unsigned long long)fig.resent, (unsigned long long)fig.acked,
                  (unsigned long long)fig.dropped);
    assert_true(fig.resent > 0);
    assert_int_equal(fig.sent, fig.acked);
  }
  t0 = pf_now_ms();
  kvp_publisher_close(pub);
  assert_true(pf_now_ms() - t0 < 4000);
  pf_sub_close(&s);
}

static void stop_cont_core(void **state) {
  stop_cont(*state, 0);
}
static void stop_cont_jetstream(void **state) {
  stop_cont(*state, 1);
}

/* A snapshot of SNAP_N blocks of G4 in two runs (volumes a and b, 16 and
 * 32 tokens): 54 MB of chunks, more than the queue and the loopback
 * socket buffers hold, so its chunks wait for room while the server is
 * stopped. */
#define SNAP_N 3000000u
static int big_runs(void *ctx, int tier, uint64_t **h, uint64_t **p, kvp_snapshot_run_t **r,
                    size_t *nr) {
  (void)ctx;
  (void)tier;
  *h = malloc(SNAP_N * sizeof **h);
  *p = malloc(SNAP_N * sizeof **p);
  *r = calloc(2, sizeof **r);
  assert_non_null(*h);
  assert_non_null(*p);
  assert_non_null(*r);
  for (size_t i = 0; i < SNAP_N; i++)
    (*h)[i] = (*p)[i] = i + 1;
  (*r)[0] = (kvp_snapshot_run_t){.volume = "a", .block_tokens = 16, .n = SNAP_N / 2};
  (*r)[1] = (kvp_snapshot_run_t){.volume = "b", .block_tokens = 32, .n = SNAP_N - SNAP_N / 2};
  *nr = 2;
  return 0;
}

typedef struct staller_s {
  pid_t pid;
  int stops, stop_ms, run_ms;
} staller_t;

static void *staller(void *arg) {
  staller_t *s = arg;
  for (int i = 0; i < s->stops; i++) {
    kill(s->pid, SIGSTOP);
    pf_sleep_ms(s->stop_ms);
    kill(s->pid, SIGCONT);
    pf_sleep_ms(s->run_ms);
  }
  return NULL;
}

/* A snapshot whose chunks wait for queue room several times, each time
 * less than 200 ms (nats-server stopped 120 ms, 3 times, while it is
 * queued), gets through whole: the publisher's thread sends between the
 * stalls. 200 ms was the bound of the whole snapshot: one larger than what
 * the thread sends in 200 ms never got through (KVP_EOVERFLOW at every
 * poll, each queueing its first chunks again), as a tiering advisor's
 * G4 set of millions of blocks does. */
static void snapshot_waits_while_the_queue_drains(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  pthread_t th;
  staller_t st = {.pid = d->pid, .stops = 3, .stop_ms = 120, .run_ms = 30};

  opts_for(&o, d, "w-snap", 0);
  o.snapshot_runs = big_runs;
  o.snapshot_tiers = 1u << KVP_TIER_G4;
  assert_int_equal(pf_sub_open(&s, d->url, "f", 0, NULL, NULL), 0);
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  pf_sleep_ms(200);
  kvp_publisher_request_resync(pub);
  assert_int_equal(pthread_create(&th, NULL, staller, &st), 0);
  pf_sleep_ms(5);
  uint64_t t0 = pf_now_ms();
  int rc = kvp_publisher_poll(pub);
  uint64_t took = pf_now_ms() - t0;
  pthread_join(th, NULL);
  print_message("poll: %s in %llu ms\n", rc < 0 ? kvp_err_name(rc) : "queued",
                (unsigned long long)took);
  assert_int_equal(rc, 1);
  assert_true(took > 200); /* it did wait past the old bound */
  assert_int_equal(kvp_publisher_flush(pub, 30000), 0);
  pf_sub_drain(&s, 500, 30000);
  assert_int_equal(s.decode_errors, 0);
  assert_int_equal(s.snapshots_done, 1);
  assert_int_equal(s.tier[KVP_TIER_G4].n, SNAP_N);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
}

/* One run of JS_SNAP_N blocks of G4, with parents. */
#define JS_SNAP_N 300000u
static int js_runs(void *ctx, int tier, uint64_t **h, uint64_t **p, kvp_snapshot_run_t **r,
                   size_t *nr) {
  (void)ctx;
  (void)tier;
  *h = malloc(JS_SNAP_N * sizeof **h);
  *p = malloc(JS_SNAP_N * sizeof **p);
  *r = calloc(1, sizeof **r);
  assert_non_null(*h);
  assert_non_null(*p);
  assert_non_null(*r);
  for (size_t i = 0; i < JS_SNAP_N; i++)
    (*h)[i] = (*p)[i] = i + 1;
  (*r)[0] = (kvp_snapshot_run_t){.volume = "g4", .block_tokens = 16, .n = JS_SNAP_N};
  *nr = 1;
  return 0;
}

/* A JetStream publisher of JS_SNAP_N G4 blocks in the smallest batches
 * (1024 bytes) with one batch awaiting its ack, a subscriber beside it, and
 * a resync due: the next poll queues the snapshot. */
static void open_tiny_js(kvp_natsd_t *d, const char *worker, pf_sub_t *s, kvp_publisher_t **pub) {
  kvp_publisher_opts_t o;
  char err[256];
  opts_for(&o, d, worker, 1);
  o.js_max_inflight = 1;
  o.batch_max_bytes = 1024;
  o.snapshot_runs = js_runs;
  o.snapshot_tiers = 1u << KVP_TIER_G4;
  assert_int_equal(pf_sub_open(s, d->url, "f", 0, NULL, NULL), 0);
  assert_int_equal(kvp_publisher_open(&o, pub, err, sizeof err), 0);
  kvp_publisher_request_resync(*pub);
}

/* The snapshot of open_tiny_js arrived whole and once; both closed. */
static void whole_tiny_js(pf_sub_t *s, kvp_publisher_t *pub) {
  pf_sub_drain(s, 500, 15000);
  assert_int_equal(s->decode_errors, 0);
  assert_int_equal(s->snapshots_done, 1);
  assert_int_equal(s->tier[KVP_TIER_G4].n, JS_SNAP_N);
  kvp_publisher_close(pub);
  pf_sub_close(s);
}

/* JetStream with the smallest batches (1024 bytes: 28 blocks a chunk,
 * 10,715 chunks, more than the queue's word arena holds) and one batch
 * awaiting its ack: a snapshot of 300,000 blocks is queued whole and
 * arrives whole, at more than 1500 batches a second. The loop published a
 * range of up to 4096 queued items past js_max_inflight, held up by
 * nats.c's stall on pending acks, and released none of their room before
 * the range's end: a chunk waited more than 200 ms (KVP_EOVERFLOW at every
 * poll). */
static void jetstream_snapshot_one_tiny_batch_in_flight(void **state) {
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;

  open_tiny_js(*state, "w-jstiny", &s, &pub);
  uint64_t t0 = pf_now_ms();
  int rc = kvp_publisher_poll(pub);
  uint64_t took = pf_now_ms() - t0;
  print_message("poll: %s in %llu ms\n", rc < 0 ? kvp_err_name(rc) : "queued",
                (unsigned long long)took);
  assert_int_equal(rc, 1);
  assert_int_equal(kvp_publisher_flush(pub, 15000), 0);
  uint64_t all = pf_now_ms() - t0;
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  print_message("acked %llu batches in %llu ms (%.0f/s), %llu retries\n",
                (unsigned long long)f.batches, (unsigned long long)all,
                f.batches * 1000.0 / (all ? all : 1), (unsigned long long)f.retries);
  /* One batch per ack round trip, each sent at once: nats.c's flusher,
   * which waits 1 ms before it writes, held it under 1000 a second. */
  assert_true(f.batches * 1000 > 1500 * all);
  whole_tiny_js(&s, pub);
}

/* JetStream, one batch in flight, and an ack that takes 600 ms (the server
 * stopped that long while the snapshot is queued: a slow stream leader):
 * the chunk that finds the queue full waits for the ack, up to ack_wait_ms
 * (1000 here), and the snapshot gets through whole in one poll. A chunk
 * waited 200 ms there, whatever the mode: KVP_EOVERFLOW, and the next poll
 * began again from the first chunk, into the same slow acks. */
static void jetstream_snapshot_waits_for_a_slow_ack(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  pthread_t th;
  staller_t st = {.pid = d->pid, .stops = 1, .stop_ms = 600, .run_ms = 0};

  open_tiny_js(d, "w-jsslow", &s, &pub);
  assert_int_equal(pthread_create(&th, NULL, staller, &st), 0);
  uint64_t t0 = pf_now_ms();
  int rc = kvp_publisher_poll(pub);
  uint64_t took = pf_now_ms() - t0;
  pthread_join(th, NULL);
  print_message("poll: %s in %llu ms\n", rc < 0 ? kvp_err_name(rc) : "queued",
                (unsigned long long)took);
  assert_int_equal(rc, 1);
  assert_true(took > 600); /* it waited through the stop */
  assert_int_equal(kvp_publisher_flush(pub, 15000), 0);
  whole_tiny_js(&s, pub);
}

/* A partitioned publisher whose partition count the servers do not map
 * (here the servers map nothing): no stream takes the subject its batches
 * go out on, every ack fails with no responders, and the resend's warning
 * names that and the count to check. It said only "resending unacked
 * JetStream batches from event id 1", again and again. */
static void a_partition_count_the_servers_do_not_map_is_named(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  char err[256], log[300], text[8192] = "";
  uint64_t h = 1;
  const char *tmp = getenv("TMPDIR");
  snprintf(log, sizeof log, "%s/kvp-pubfaults-%d.log", tmp ? tmp : "/tmp", (int)getpid());
  unlink(log);
  assert_int_equal(kvp__log_set_file(log), 0);
  opts_for(&o, d, "w-part", 1);
  o.partitions = 4; /* its stream: KVPLANE_EVENTS_P<p>, taking kvplane.pev.*.<p>.> */
  o.close_timeout_ms = 200;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, KVP_TIER_G1, NULL, NULL, &h, 1, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 1500), KVP_ETIMEDOUT); /* never acked */
  for (int i = 0; i < 50 && strstr(text, "partitions (4 here)") == NULL; i++) {
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f)
      fclose(f);
    pf_sleep_ms(100);
  }
  kvp_publisher_close(pub);
  kvp__log_set_file(NULL);
  unlink(log);
  print_message("%s", text);
  assert_non_null(strstr(text, "resending unacked JetStream batches from event id 1 (an ack "
                               "failed: no JetStream stream takes kvplane.ev.f.w-part"));
  assert_non_null(strstr(text, "check partitions (4 here) against the servers' mapping"));
}

static void auth(kvp_natsd_t *d, const char *user, const char *pass, const char *token) {
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  char err[256];
  uint64_t h = 1;

  opts_for(&o, d, "w-auth", 0);
  o.nats.connect_timeout_ms = 2000;
  int rc = kvp_publisher_open(&o, &pub, err, sizeof err);
  print_message("without credentials: %s: %s\n", kvp_err_name(rc), err);
  assert_int_equal(rc, KVP_EAUTH);
  assert_null(pub);
  snprintf(o.nats.user, sizeof o.nats.user, "%s", user ? "wrong" : "");
  snprintf(o.nats.password, sizeof o.nats.password, "%s", pass ? "wrong" : "");
  snprintf(o.nats.token, sizeof o.nats.token, "%s", token ? "wrong" : "");
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), KVP_EAUTH);
  snprintf(o.nats.user, sizeof o.nats.user, "%s", user ? user : "");
  snprintf(o.nats.password, sizeof o.nats.password, "%s", pass ? pass : "");
  snprintf(o.nats.token, sizeof o.nats.token, "%s", token ? token : "");
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, &h, 1, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  assert_int_equal(f.sent, 1);
  kvp_publisher_close(pub);
}

static void auth_user_password(void **state) {
  auth(*state, pf_user, pf_pass, NULL);
}
static void auth_token(void **state) {
  auth(*state, NULL, NULL, pf_token);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(jetstream_acks_everything, pf_setup_js, pf_teardown),
    cmocka_unit_test_setup_teardown(jetstream_kill_restart, pf_setup_js, pf_teardown),
    cmocka_unit_test_setup_teardown(stop_cont_core, pf_setup_core, pf_teardown),
    cmocka_unit_test_setup_teardown(snapshot_waits_while_the_queue_drains, pf_setup_core,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(stop_cont_jetstream, pf_setup_js, pf_teardown),
    cmocka_unit_test_setup_teardown(jetstream_snapshot_one_tiny_batch_in_flight, pf_setup_js,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(jetstream_split_events_across_a_restart, pf_setup_js,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(jetstream_snapshot_waits_for_a_slow_ack, pf_setup_js,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(a_partition_count_the_servers_do_not_map_is_named, pf_setup_js,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(auth_user_password, pf_setup_user, pf_teardown),
    cmocka_unit_test_setup_teardown(auth_token, pf_setup_token, pf_teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("publish_faults", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
