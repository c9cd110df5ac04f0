/* Publisher tests in core mode against a real nats-server: order and
 * completeness from several threads, merging and coalescing, gap marking
 * and snapshot convergence with a tiny dropping queue, resync requests,
 * close with events queued, close during a disconnect, bad options. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "natsd.h"
#include "pubfix.h"

static int setup(void **state) {
  static kvp_natsd_t d;
  if (kvp_natsd_start(&d, NULL) != 0)
    return -1;
  *state = &d;
  return 0;
}

static int teardown(void **state) {
  kvp_natsd_stop(*state);
  return 0;
}

static void opts_for(kvp_publisher_opts_t *o, const kvp_natsd_t *d, const char *worker) {
  kvp_publisher_opts_init(o);
  snprintf(o->nats.servers, sizeof o->nats.servers, "%s", d->url);
  o->ns = "t";
  o->worker_id = worker;
  o->model = "m";
}

#define NTHREADS 4
#define PER_THREAD 20000

typedef struct prod_s {
  kvp_publisher_t *pub;
  int id;
  int errors;
} prod_t;

static void *producer(void *arg) {
  prod_t *p = arg;
  for (uint64_t i = 0; i < PER_THREAD; i++) {
    uint64_t h = ((uint64_t)(p->id + 1) << 32) | i;
    if (kvp_publisher_stored(p->pub, KVP_TIER_G1, NULL, NULL, &h, 1, 16, 4096, 0) != 0)
      p->errors++;
  }
  return NULL;
}

static void order_and_completeness(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  pthread_t th[NTHREADS];
  prod_t pr[NTHREADS];
  char err[256];

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-order");
  o.queue_capacity = 1024; /* producers meet back-pressure */
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  for (int i = 0; i < NTHREADS; i++) {
    pr[i] = (prod_t){.pub = pub, .id = i};
    pthread_create(&th[i], NULL, producer, &pr[i]);
  }
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(pr[i].errors, 0);
  }
  assert_int_equal(kvp_publisher_flush(pub, 10000), 0);
  pf_sub_wait_events(&s, NTHREADS * PER_THREAD, 10000);
  assert_int_equal(s.decode_errors, 0);
  assert_int_equal(s.events, NTHREADS * PER_THREAD);
  assert_int_equal(s.id_errors, 0);
  assert_int_equal(s.dropped_total, 0);
  /* ids 1..N in arrival order */
  for (size_t i = 0; i < s.ids.n; i++)
    assert_int_equal(s.ids.v[i], i + 1);
  /* per-thread order */
  uint64_t next[NTHREADS] = {0};
  for (size_t i = 0; i < s.stored.n; i++) {
    uint64_t h = s.stored.v[i];
    int t = (int)(h >> 32) - 1;
    assert_true(t >= 0 && t < NTHREADS);
    assert_int_equal(h & 0xffffffffu, next[t]);
    next[t]++;
  }
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  assert_int_equal(f.queued, NTHREADS * PER_THREAD);
  assert_int_equal(f.sent, NTHREADS * PER_THREAD);
  assert_int_equal(f.dropped, 0);
  assert_true(f.batches >= 1 && f.bytes > 0);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
}

static void merge_and_coalesce(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  uint64_t h[6] = {11, 12, 13, 14, 15, 16};

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-merge");
  o.max_delay_ms = 2000; /* one window */
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  /* a chain stored block by block: one Stored event */
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, &h[0], 1, 16, 0, 0), 0);
  for (int i = 1; i < 4; i++)
    assert_int_equal(kvp_publisher_stored(pub, 1, NULL, &h[i - 1], &h[i], 1, 16, 0, 0), 0);
  /* 15 stored and removed in the window: gone from both sides */
  assert_int_equal(kvp_publisher_stored(pub, 2, NULL, NULL, &h[4], 1, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_removed(pub, 2, NULL, &h[4], 1), 0);
  /* 16 removed without a store in the window: stays */
  assert_int_equal(kvp_publisher_removed(pub, 2, NULL, &h[5], 1), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  pf_sub_wait_events(&s, 2, 5000);
  pf_sub_drain(&s, 200, 1000);
  assert_int_equal(s.events, 2); /* Stored(11..14) and Removed(16) */
  assert_int_equal(s.stored.n, 4);
  assert_false(pf_set_has(&s.stored, 15));
  assert_int_equal(s.tier[1].n, 4);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
}

/* The block manager stand-in: a set per tier owned by the test thread. */
typedef struct model_s {
  pf_set_t tier[5];
} model_t;

static int model_snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  model_t *m = ctx;
  *parents = NULL;
  *n = m->tier[tier].n;
  *hashes = malloc((*n + 1) * sizeof **hashes);
  if (*hashes == NULL)
    return KVP_ENOMEM;
  if (*n > 0)
    memcpy(*hashes, m->tier[tier].v, *n * sizeof **hashes);
  return 0;
}

static void core_gap_then_snapshot(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  model_t m = {0};
  char err[256];
  int dropped = 0;

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-gap");
  o.queue_capacity = 2;
  o.overflow = KVP_OVERFLOW_DROP;
  o.snapshot = model_snapshot;
  o.snapshot_ctx = &m;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  for (uint64_t i = 1; i <= 20000; i++) {
    int tier = 1 + (int)(i % 2);
    int rc = kvp_publisher_stored(pub, tier, NULL, NULL, &i, 1, 16, 0, 0);
    assert_true(rc == 0 || rc == KVP_EOVERFLOW);
    dropped += rc == KVP_EOVERFLOW;
    pf_set_add(&m.tier[tier], i);
    if (i % 3 == 0) {
      uint64_t r = i - 2;
      int rt = 1 + (int)(r % 2);
      rc = kvp_publisher_removed(pub, rt, NULL, &r, 1);
      assert_true(rc == 0 || rc == KVP_EOVERFLOW);
      dropped += rc == KVP_EOVERFLOW;
      pf_set_del(&m.tier[rt], r);
    }
  }
  assert_true(dropped > 0);
  /* The embedder's loop: poll until the snapshot is queued. */
  uint64_t end = pf_now_ms() + 10000;
  int rc;
  while ((rc = kvp_publisher_poll(pub)) != 1 && pf_now_ms() < end)
    pf_sleep_ms(1);
  assert_int_equal(rc, 1);
  assert_int_equal(kvp_publisher_flush(pub, 10000), 0);
  end = pf_now_ms() + 10000;
  while (s.snapshots_done < 3 && pf_now_ms() < end)
    pf_sub_drain(&s, 100, 500);
  assert_int_equal(s.decode_errors, 0);
  assert_true(s.dropped_total > 0);
  assert_int_equal(s.id_errors, 0);
  assert_true(s.snapshots_done >= 3); /* G1, G2, G3 */
  for (int t = 1; t <= 3; t++)
    assert_true(pf_set_equal(&s.tier[t], &m.tier[t]));
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  assert_int_equal(f.dropped, (uint64_t)dropped);
  assert_true(f.resyncs >= 1);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
  for (int t = 0; t < 5; t++)
    pf_set_free(&m.tier[t]);
}

static void resync_request_answered(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  model_t m = {0};
  char err[256];
  natsConnection *nc = NULL;

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-resync");
  o.snapshot = model_snapshot;
  o.snapshot_ctx = &m;
  o.batch_max_bytes = 4096; /* several chunks */
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  for (uint64_t i = 1; i <= 1000; i++)
    pf_set_add(&m.tier[1], i * 7);
  assert_int_equal(kvp_publisher_poll(pub), 0); /* nothing due */
  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_PublishString(nc, "kvplane.ctl.t.w-resync.resync", "{}"),
                   NATS_OK);
  natsConnection_Flush(nc);
  uint64_t end = pf_now_ms() + 5000;
  int rc;
  while ((rc = kvp_publisher_poll(pub)) == 0 && pf_now_ms() < end)
    pf_sleep_ms(5);
  if (rc != 1)
    fail_msg("poll: %d %s", rc, kvp_err_name(rc));
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  end = pf_now_ms() + 5000;
  while (s.snapshots_done < 3 && pf_now_ms() < end)
    pf_sub_drain(&s, 100, 500);
  assert_int_equal(s.snapshots_done, 3);
  assert_int_equal(s.snapshot_chunks, 6 + 2); /* 1000 hashes in chunks of 199, 2 empty tiers */
  assert_true(pf_set_equal(&s.tier[1], &m.tier[1]));
  natsConnection_Destroy(nc);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
  pf_set_free(&m.tier[1]);
}

static void close_delivers_queued(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-close");
  o.max_delay_ms = 10000; /* only close sends them */
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  for (uint64_t i = 1; i <= 10000; i++)
    assert_int_equal(kvp_publisher_accessed(pub, 1, &i, NULL, 1), 0);
  kvp_publisher_close(pub);
  pf_sub_wait_events(&s, 10000, 5000);
  assert_int_equal(s.events, 10000);
  assert_int_equal(s.id_errors, 0);
  pf_sub_close(&s);
}

static void close_during_disconnect(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  char err[256];

  opts_for(&o, d, "w-disc");
  o.close_timeout_ms = 1000;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  kvp_natsd_kill(d);
  for (uint64_t i = 1; i <= 1000; i++)
    assert_int_equal(kvp_publisher_cleared(pub, (int)(i % 5)), 0);
  uint64_t t0 = pf_now_ms();
  kvp_publisher_close(pub);
  uint64_t dt = pf_now_ms() - t0;
  print_message("close took %llu ms\n", (unsigned long long)dt);
  assert_true(dt < 3000);
  kvp_publisher_close(NULL);
}

static void expect_bad(const kvp_publisher_opts_t *o, const char *option) {
  kvp_publisher_t *pub = (kvp_publisher_t *)1;
  char err[256];
  int rc = kvp_publisher_open(o, &pub, err, sizeof err);
  if (rc != KVP_ECONFIG && rc != KVP_EINVAL)
    fail_msg("option %s: rc %s (%s)", option, kvp_err_name(rc), err);
  assert_null(pub);
  if (strncmp(err, option, strlen(option)) != 0)
    fail_msg("option %s: message '%s' does not name it", option, err);
}

static void bad_options_named(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
#define BAD(field, value, name)                                                                    \
  do {                                                                                             \
    opts_for(&o, d, "w-bad");                                                                      \
    o.field = value;                                                                               \
    expect_bad(&o, name);                                                                          \
  } while (0)
#define BAD_NATS(field, value, name)                                                               \
  do {                                                                                             \
    opts_for(&o, d, "w-bad");                                                                      \
    snprintf(o.nats.field, sizeof o.nats.field, "%s", value);                                      \
    expect_bad(&o, name);                                                                          \
  } while (0)
  BAD(worker_id, NULL, "worker_id");
  BAD(worker_id, "a.b", "worker_id");
  BAD(ns, "x y", "ns");
  BAD(mode, 7, "mode");
  BAD(overflow, 3, "overflow");
  BAD_NATS(user, "u", "nats.password");
  BAD_NATS(password, "p", "nats.user");
  BAD_NATS(tls_cert, "/nonexistent.pem", "nats.tls_key");
  BAD(queue_capacity, (size_t)1 << 30, "queue_capacity");
  BAD(batch_max_events, 1000000, "batch_max_events");
  BAD(batch_max_blocks, 1u << 24, "batch_max_blocks");
  BAD(batch_max_bytes, 10, "batch_max_bytes");
  BAD(max_delay_ms, 600000, "max_delay_ms");
  BAD(snapshot_tiers, 1u << 9, "snapshot_tiers");
  BAD_NATS(servers, "localhost", "nats.servers");
  BAD_NATS(tls_ca, "/nonexistent/ca.pem", "nats.tls_ca");
  BAD_NATS(creds, "/nonexistent/x.creds", "nats.creds");
  /* over the server's max payload (1 MiB by default): found at connect */
  BAD(batch_max_bytes, 4u << 20, "batch_max_bytes");
  opts_for(&o, d, "w-bad");
  snprintf(o.nats.token, sizeof o.nats.token, "t");
  snprintf(o.nats.user, sizeof o.nats.user, "u");
  snprintf(o.nats.password, sizeof o.nats.password, "p");
  expect_bad(&o, "nats.token");
  opts_for(&o, d, "w-bad");
  o.mode = KVP_PUB_JETSTREAM;
  o.stream = "a.b";
  expect_bad(&o, "stream");
  kvp_publisher_t *pub = (kvp_publisher_t *)1;
  assert_int_equal(kvp_publisher_open(NULL, &pub, NULL, 0), KVP_EINVAL);
#undef BAD
#undef BAD_NATS
}

static void heartbeat_when_idle(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pf_sub_t s;
  char err[256];
  uint64_t h = 5;

  assert_int_equal(pf_sub_open(&s, d->url, "t", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-hb");
  o.heartbeat_ms = 200;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  assert_int_equal(kvp_publisher_stored(pub, 1, NULL, NULL, &h, 1, 16, 0, 0), 0);
  pf_sub_drain(&s, 1000, 1000);
  assert_true(s.heartbeats >= 2);
  assert_int_equal(s.events, 1);
  assert_int_equal(s.id_errors, 0);
  kvp_publisher_close(pub);
  pf_sub_close(&s);
}

static void sink_carries_every_field(void **state) {
  kvp_natsd_t *d = *state;
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  natsMsg *m = NULL;
  kvp_wire_batch_t *wb = NULL;
  char err[256];
  uint64_t h[2] = {0xa1, 0xa2}, parent = 0xa0;
  uint32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8}, hits[2] = {3, 9};

  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "kvplane.ev.t.w-sink"), NATS_OK);
  natsConnection_Flush(nc);
  opts_for(&o, d, "w-sink");
  o.dp_rank = 3;
  o.max_delay_ms = 2000;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  kvp_event_sink_t sink = kvp_publisher_sink(pub);
  kvp_event_t st = {.type = KVP_EV_STORED,
                    .tier = KVP_TIER_G3,
                    .volume = "nvme0",
                    .has_parent = 1,
                    .parent_hash = parent,
                    .hashes = h,
                    .nhashes = 2,
                    .block_tokens = 4,
                    .block_bytes = 65536,
                    .lora_id = 7,
                    .token_ids = toks,
                    .ntoken_ids = 8};
  kvp_event_t ac = {
      .type = KVP_EV_ACCESSED, .tier = KVP_TIER_G3, .hashes = h, .nhashes = 2, .hit_counts = hits};
  kvp_event_t cl = {.type = KVP_EV_CLEARED, .tier = KVP_TIER_ALL};
  kvp_event_t snap = {.type = KVP_EV_SNAPSHOT, .tier = 1, .hashes = h, .nhashes = 2};
  kvp_event_t bad = {.type = KVP_EV_STORED, .tier = 9, .hashes = h, .nhashes = 2};
  assert_int_equal(sink.emit(sink.ctx, &st), 0);
  assert_int_equal(sink.emit(sink.ctx, &ac), 0);
  assert_int_equal(sink.emit(sink.ctx, &cl), 0);
  assert_int_equal(sink.emit(sink.ctx, &snap), KVP_EINVAL); /* snapshots come from poll */
  assert_int_equal(sink.emit(sink.ctx, &bad), KVP_EINVAL);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
  assert_int_equal(kvp_wire_decode((const uint8_t *)natsMsg_GetData(m),
                                   (size_t)natsMsg_GetDataLength(m), NULL, &wb),
                   0);
  const kvp_batch_t *b = kvp_wire_batch_view(wb);
  assert_string_equal(b->worker_id, "w-sink");
  assert_string_equal(b->ns, "t");
  assert_string_equal(b->model, "m");
  assert_int_equal(b->dp_rank, 3);
  assert_int_equal(b->epoch, kvp_publisher_epoch(pub));
  assert_int_equal(b->first_event_id, 1);
  assert_int_equal(b->nevents, 3);
  const kvp_event_t *e = &b->events[0];
  assert_int_equal(e->type, KVP_EV_STORED);
  assert_string_equal(e->volume, "nvme0");
  assert_true(e->has_parent);
  assert_int_equal(e->parent_hash, parent);
  assert_int_equal(e->nhashes, 2);
  assert_memory_equal(e->hashes, h, sizeof h);
  assert_int_equal(e->block_tokens, 4);
  assert_int_equal(e->block_bytes, 65536);
  assert_int_equal(e->lora_id, 7);
  assert_int_equal(e->ntoken_ids, 8);
  assert_memory_equal(e->token_ids, toks, sizeof toks);
  e = &b->events[1];
  assert_int_equal(e->type, KVP_EV_ACCESSED);
  assert_non_null(e->hit_counts);
  assert_memory_equal(e->hit_counts, hits, sizeof hits);
  e = &b->events[2];
  assert_int_equal(e->type, KVP_EV_CLEARED);
  assert_int_equal(e->tier, KVP_TIER_ALL);
  kvp_wire_batch_free(wb);
  natsMsg_Destroy(m);
  kvp_publisher_close(pub);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(order_and_completeness, setup, teardown),
    cmocka_unit_test_setup_teardown(merge_and_coalesce, setup, teardown),
    cmocka_unit_test_setup_teardown(core_gap_then_snapshot, setup, teardown),
    cmocka_unit_test_setup_teardown(resync_request_answered, setup, teardown),
    cmocka_unit_test_setup_teardown(close_delivers_queued, setup, teardown),
    cmocka_unit_test_setup_teardown(close_during_disconnect, setup, teardown),
    cmocka_unit_test_setup_teardown(bad_options_named, setup, teardown),
    cmocka_unit_test_setup_teardown(heartbeat_when_idle, setup, teardown),
    cmocka_unit_test_setup_teardown(sink_carries_every_field, setup, teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("publish_core", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
