/* kvp-bench publish: end to end through a real nats-server on loopback:
 * publisher -> server -> a subscriber thread that decodes every batch.
 *
 * Workloads, in core and JetStream mode:
 *   single  one Stored event per block, unrelated blocks (no merging);
 *   chain   one Stored event per block, blocks of 32-block chains emitted in
 *           order, the shape of the block manager's registrations (merged
 *           into one Stored event per chain run);
 *   trace   the bundled Mooncake trace replayed through a real block manager
 *           (G1 = 1/8 and G2 = 1/4 of the trace's distinct blocks, offload on
 *           eviction) whose sink is the publisher: every Stored, Removed and
 *           Accessed block it emits, in both tiers. Sequence hashes are
 *           computed before the clock starts (kvp-bench blockmgr measures
 *           hashing); a block-event is one block hash in an emitted event.
 * Baseline in the same run: plain nats.c publishing one ~100-byte message per
 * event to a subscriber that receives every message.
 * Printed: block-events/s (producer start to the subscriber's last block),
 * batches/s, wire bytes per block-event, p50/p99 of the enqueue call, and
 * the enqueue latency with 4 producer threads sharing one publisher. */
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kvplane/blockmgr.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "natsd.h"
#include "sim/trace.h"

typedef struct sub_s {
  natsConnection *nc;
  natsSubscription *sub;
  _Atomic uint64_t want_blocks; /* stop when this many arrived (decode mode) */
  uint64_t last_ns;             /* arrival of the latest message */
  uint64_t want_msgs;           /* stop when this many arrived (baseline) */
  int decode;
  uint64_t blocks, msgs, errors;
  uint64_t end_ns;
  uint64_t deadline_ns;
  pthread_t th;
} sub_t;

static void *sub_main(void *arg) {
  sub_t *s = arg;
  while (kvp_bench_now_ns() < s->deadline_ns) {
    natsMsg *m = NULL;
    if (natsSubscription_NextMsg(&m, s->sub, 100) != NATS_OK) {
      /* The target may be set after the last message arrived. */
      if (s->decode && s->blocks > 0 && s->blocks >= s->want_blocks) {
        s->end_ns = s->last_ns;
        break;
      }
      continue;
    }
    s->last_ns = kvp_bench_now_ns();
    s->msgs++;
    if (s->decode) {
      kvp_wire_batch_t *wb = NULL;
      if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m),
                          NULL, &wb) == 0) {
        const kvp_batch_t *b = kvp_wire_batch_view(wb);
        for (size_t i = 0; i < b->nevents; i++)
          s->blocks += b->events[i].nhashes;
        kvp_wire_batch_free(wb);
      } else {
        s->errors++;
      }
    }
    natsMsg_Destroy(m);
    if ((s->decode && s->blocks >= s->want_blocks) || (!s->decode && s->msgs >= s->want_msgs)) {
      s->end_ns = kvp_bench_now_ns();
      break;
    }
  }
  return NULL;
}

static int sub_start(sub_t *s, const char *url, const char *subj, int decode) {
  s->decode = decode;
  s->deadline_ns = kvp_bench_now_ns() + 20000000000ull;
  if (natsConnection_ConnectTo(&s->nc, url) != NATS_OK ||
      natsConnection_SubscribeSync(&s->sub, s->nc, subj) != NATS_OK)
    return -1;
  natsSubscription_SetPendingLimits(s->sub, -1, -1);
  natsConnection_Flush(s->nc);
  return pthread_create(&s->th, NULL, sub_main, s) == 0 ? 0 : -1;
}

static void sub_stop(sub_t *s) {
  pthread_join(s->th, NULL);
  natsSubscription_Destroy(s->sub);
  natsConnection_Destroy(s->nc);
}

static int cmpu32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Baseline: one ~100-byte message per event. Returns events/s. */
static double baseline(const char *url, uint64_t n) {
  sub_t s = {.want_msgs = n};
  natsConnection *nc = NULL;
  char msg[100];
  memset(msg, 'x', sizeof msg);
  if (sub_start(&s, url, "kvplane.base.>", 0) != 0)
    return 0;
  natsConnection_ConnectTo(&nc, url);
  uint64_t t0 = kvp_bench_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    memcpy(msg, &i, sizeof i);
    natsConnection_Publish(nc, "kvplane.base.w0", msg, sizeof msg);
  }
  natsConnection_Flush(nc);
  sub_stop(&s);
  double rate = s.end_ns ? (double)s.msgs * 1e9 / (double)(s.end_ns - t0) : 0;
  printf("# baseline: %llu of %llu messages received\n", (unsigned long long)s.msgs,
         (unsigned long long)n);
  natsConnection_Destroy(nc);
  return rate;
}

static double run(const char *url, int js, int chain, uint64_t n, double base) {
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  char err[256], name[96], worker[32];
  const char *mode = js ? "jetstream" : "core", *wl = chain ? "chain" : "single";
  uint32_t *lat = malloc(n * sizeof *lat);
  sub_t s = {.want_blocks = n};
  double rate = 0;

  snprintf(worker, sizeof worker, "w-%s-%s", mode, wl);
  kvp_publisher_opts_init(&o);
  snprintf(o.nats.servers, sizeof o.nats.servers, "%s", url);
  o.ns = "bench";
  o.worker_id = worker;
  o.mode = js ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  o.queue_capacity = 1u << 18;
  if (getenv("KVP_BENCH_NOCOALESCE"))
    o.coalesce = 0;
  char subj[KVP_SUBJECT_MAX];
  kvp_subject_events_ns(subj, sizeof subj, o.ns);
  if (lat == NULL || sub_start(&s, url, subj, 1) != 0)
    goto out;
  int rc = kvp_publisher_open(&o, &pub, err, sizeof err);
  if (rc != 0) {
    printf("# open: %s\n", err);
    goto out_sub;
  }
  uint64_t base_hash = (uint64_t)(js * 2 + chain + 1) << 40;
  uint64_t t0 = kvp_bench_now_ns(), prev = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t h = base_hash + i;
    int first = !chain || i % 32 == 0;
    uint64_t a = kvp_bench_now_ns();
    kvp_publisher_stored(pub, KVP_TIER_G1, NULL, first ? NULL : &prev, &h, 1, 16, 2u << 20, 0);
    uint64_t b = kvp_bench_now_ns();
    lat[i] = (uint32_t)(b - a);
    prev = h;
  }
  kvp_publisher_flush(pub, 20000);
  uint64_t t_flushed = kvp_bench_now_ns();
  sub_stop(&s);
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  kvp_publisher_close(pub);
  pub = NULL;
  if (s.end_ns == 0) {
    printf("# %s %s: subscriber saw %llu of %llu blocks\n", mode, wl, (unsigned long long)s.blocks,
           (unsigned long long)n);
    goto out;
  }
  double secs = (double)(s.end_ns - t0) / 1e9;
  rate = (double)n / secs;
  qsort(lat, n, sizeof *lat, cmpu32);
  snprintf(name, sizeof name, "publish.%s.%s.block_events_per_s", mode, wl);
  kvp_bench_report(name, rate, "ev/s", "nats-msg-per-event", base);
  snprintf(name, sizeof name, "publish.%s.%s.publisher_side_events_per_s", mode, wl);
  kvp_bench_report(name, (double)n * 1e9 / (double)(t_flushed - t0), "ev/s", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.%s.batches_per_s", mode, wl);
  kvp_bench_report(name, (double)f.batches / secs, "batches/s", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.%s.wire_bytes_per_block_event", mode, wl);
  kvp_bench_report(name, (double)f.bytes / (double)n, "B", "nats-msg-per-event", 100);
  snprintf(name, sizeof name, "publish.%s.%s.enqueue_p50", mode, wl);
  kvp_bench_report(name, (double)lat[n / 2] / 1000.0, "us", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.%s.enqueue_p99", mode, wl);
  kvp_bench_report(name, (double)lat[n * 99 / 100] / 1000.0, "us", NULL, 0);
  printf("# %s %s: %llu events in %llu batches, %llu dropped, %llu acked, decode errors %llu\n",
         mode, wl, (unsigned long long)f.queued, (unsigned long long)f.batches,
         (unsigned long long)f.dropped, (unsigned long long)f.acked, (unsigned long long)s.errors);
  goto out;
out_sub:
  sub_stop(&s);
out:
  kvp_publisher_close(pub);
  free(lat);
  return rate;
}

typedef struct mt_s {
  kvp_publisher_t *pub;
  uint64_t base, n;
  uint32_t *lat;
} mt_t;

static void *mt_main(void *arg) {
  mt_t *m = arg;
  for (uint64_t i = 0; i < m->n; i++) {
    uint64_t h = m->base + i;
    uint64_t a = kvp_bench_now_ns();
    kvp_publisher_stored(m->pub, KVP_TIER_G1, NULL, NULL, &h, 1, 16, 2u << 20, 0);
    m->lat[i] = (uint32_t)(kvp_bench_now_ns() - a);
  }
  return NULL;
}

/* Enqueue latency with 4 producer threads on one publisher (queue mutex
 * contention), core mode, single-block events. */
static void run_threads(const char *url, uint64_t per) {
  enum { T = 4 };
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  pthread_t th[T];
  mt_t m[T];
  char err[256];
  uint32_t *lat = malloc(T * per * sizeof *lat);
  sub_t s = {.want_blocks = T * per};

  kvp_publisher_opts_init(&o);
  snprintf(o.nats.servers, sizeof o.nats.servers, "%s", url);
  o.ns = "bench";
  o.worker_id = "w-threads";
  o.queue_capacity = 1u << 18;
  char subj[KVP_SUBJECT_MAX];
  kvp_subject_events(subj, sizeof subj, o.ns, o.worker_id);
  if (lat == NULL || sub_start(&s, url, subj, 1) != 0 ||
      kvp_publisher_open(&o, &pub, err, sizeof err) != 0) {
    free(lat);
    return;
  }
  uint64_t t0 = kvp_bench_now_ns();
  for (int i = 0; i < T; i++) {
    m[i] = (mt_t){.pub = pub, .base = ((uint64_t)(9 + i) << 40), .n = per, .lat = lat + i * per};
    pthread_create(&th[i], NULL, mt_main, &m[i]);
  }
  for (int i = 0; i < T; i++)
    pthread_join(th[i], NULL);
  kvp_publisher_flush(pub, 20000);
  sub_stop(&s);
  kvp_publisher_close(pub);
  if (s.end_ns != 0)
    kvp_bench_report("publish.core.single.4threads.block_events_per_s",
                     (double)(T * per) * 1e9 / (double)(s.end_ns - t0), "ev/s", NULL, 0);
  qsort(lat, T * per, sizeof *lat, cmpu32);
  kvp_bench_report("publish.core.single.4threads.enqueue_p50", (double)lat[T * per / 2] / 1000.0,
                   "us", NULL, 0);
  kvp_bench_report("publish.core.single.4threads.enqueue_p99",
                   (double)lat[T * per * 99 / 100] / 1000.0, "us", NULL, 0);
  free(lat);
}

/* ---- trace workload ---- */

typedef struct trace_wl_s {
  uint64_t *hashes; /* every request's sequence hashes, back to back */
  size_t *off, *len, nreq, nhashes, distinct;
} trace_wl_t;

static int cmpu64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int trace_load(trace_wl_t *t) {
  kvp_trace_t *tr;
  kvp_trace_req_t r;
  char err[256];
  uint32_t toks[512];
  size_t cap = 0, rcap = 0;
  int rc;

  memset(t, 0, sizeof *t);
  if (kvp_trace_open(kvp_bench_trace_path(), &tr, err, sizeof err) != 0) {
    fprintf(stderr, "publish: %s\n", err);
    return -1;
  }
  while ((rc = kvp_trace_next(tr, &r, err, sizeof err)) == 1) {
    if (t->nreq == rcap) {
      rcap = rcap ? rcap * 2 : 16384;
      t->off = realloc(t->off, rcap * sizeof *t->off);
      t->len = realloc(t->len, rcap * sizeof *t->len);
    }
    if (t->nhashes + r.nhash_ids > cap) {
      cap = (t->nhashes + r.nhash_ids) * 2;
      t->hashes = realloc(t->hashes, cap * sizeof *t->hashes);
    }
    uint64_t prev = 0;
    for (size_t i = 0; i < r.nhash_ids; i++) {
      kvp_trace_block_tokens(r.hash_ids[i], toks, 512);
      uint64_t local = kvp_hash_block(toks, 512, KVP_HASH_SEED);
      prev = i == 0 ? local : kvp_hash_chain(prev, local, KVP_HASH_SEED);
      t->hashes[t->nhashes + i] = prev;
    }
    t->off[t->nreq] = t->nhashes;
    t->len[t->nreq++] = r.nhash_ids;
    t->nhashes += r.nhash_ids;
  }
  kvp_trace_close(tr);
  if (rc != 0)
    return -1;
  uint64_t *sorted = malloc(t->nhashes * sizeof *sorted);
  memcpy(sorted, t->hashes, t->nhashes * sizeof *sorted);
  qsort(sorted, t->nhashes, sizeof *sorted, cmpu64);
  for (size_t i = 0; i < t->nhashes; i++)
    t->distinct += i == 0 || sorted[i] != sorted[i - 1];
  free(sorted);
  return 0;
}

typedef struct timed_sink_s {
  kvp_event_sink_t inner;
  uint32_t *lat;
  size_t nlat, cap;
  uint64_t block_events;
} timed_sink_t;

static int timed_emit(void *ctx, const kvp_event_t *ev) {
  timed_sink_t *t = ctx;
  uint64_t a = kvp_bench_now_ns();
  int rc = t->inner.emit(t->inner.ctx, ev);
  uint64_t b = kvp_bench_now_ns();
  if (t->nlat < t->cap)
    t->lat[t->nlat++] = (uint32_t)(b - a);
  t->block_events += ev->nhashes;
  return rc;
}

static void run_trace(const char *url, int js, const trace_wl_t *t, double base) {
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub = NULL;
  kvp_blockmgr_t *bm = NULL;
  kvp_blockmgr_opts_t bo;
  char err[256], name[96];
  const char *mode = js ? "jetstream" : "core";
  timed_sink_t ts = {.cap = 1u << 22};
  sub_t s = {.want_blocks = UINT64_MAX};

  kvp_blockmgr_opts_init(&bo);
  bo.layout = (kvp_layout_t){.num_layers = 1, .page_size = 512, .inner_dim = 1, .elem_size = 2};
  bo.g1_blocks = (uint32_t)(t->distinct / 8);
  bo.g2_blocks = (uint32_t)(t->distinct / 4);
  kvp_publisher_opts_init(&o);
  snprintf(o.nats.servers, sizeof o.nats.servers, "%s", url);
  o.ns = "bench";
  o.worker_id = js ? "w-trace-js" : "w-trace-core";
  o.mode = js ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  o.queue_capacity = 1u << 18;
  o.snapshot = kvp_blockmgr_snapshot_fn;
  if ((ts.lat = malloc(ts.cap * sizeof *ts.lat)) == NULL || kvp_blockmgr_create(&bo, &bm) != 0)
    goto out;
  o.snapshot_ctx = bm;
  char subj[KVP_SUBJECT_MAX];
  kvp_subject_events(subj, sizeof subj, o.ns, o.worker_id);
  if (sub_start(&s, url, subj, 1) != 0)
    goto out;
  if (kvp_publisher_open(&o, &pub, err, sizeof err) != 0) {
    printf("# open: %s\n", err);
    sub_stop(&s);
    goto out;
  }
  ts.inner = kvp_publisher_sink(pub);
  kvp_blockmgr_set_sink(bm, (kvp_event_sink_t){timed_emit, &ts});
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t r = 0; r < t->nreq; r++) {
    kvp_seq_t *q;
    if (kvp_seq_create_hashed(bm, t->hashes + t->off[r], t->len[r], NULL, 0, &q) != 0)
      break;
    kvp_seq_allocate(q); /* ENOSPC (a request larger than G1) still frees */
    kvp_seq_free(q);
  }
  uint64_t t_bm = kvp_bench_now_ns();
  kvp_publisher_poll(pub);
  kvp_publisher_flush(pub, 30000);
  kvp_publisher_stats_t f;
  kvp_publisher_stats(pub, &f);
  s.want_blocks = f.blocks;
  sub_stop(&s);
  if (s.end_ns == 0) {
    printf("# %s trace: subscriber saw %llu of %llu blocks\n", mode, (unsigned long long)s.blocks,
           (unsigned long long)f.blocks);
    goto out;
  }
  double secs = (double)(s.end_ns - t0) / 1e9;
  qsort(ts.lat, ts.nlat, sizeof *ts.lat, cmpu32);
  kvp_blockmgr_stats_t st;
  kvp_blockmgr_stats(bm, &st);
  snprintf(name, sizeof name, "publish.%s.trace.block_events_per_s", mode);
  kvp_bench_report(name, (double)ts.block_events / secs, "ev/s", "nats-msg-per-event", base);
  snprintf(name, sizeof name, "publish.%s.trace.blockmgr_side_events_per_s", mode);
  kvp_bench_report(name, (double)ts.block_events * 1e9 / (double)(t_bm - t0), "ev/s", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.trace.batches_per_s", mode);
  kvp_bench_report(name, (double)f.batches / secs, "batches/s", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.trace.wire_bytes_per_block_event", mode);
  kvp_bench_report(name, (double)f.bytes / (double)ts.block_events, "B", "nats-msg-per-event", 100);
  snprintf(name, sizeof name, "publish.%s.trace.enqueue_p50", mode);
  kvp_bench_report(name, (double)ts.lat[ts.nlat / 2] / 1000.0, "us", NULL, 0);
  snprintf(name, sizeof name, "publish.%s.trace.enqueue_p99", mode);
  kvp_bench_report(name, (double)ts.lat[ts.nlat * 99 / 100] / 1000.0, "us", NULL, 0);
  printf("# %s trace: %zu requests, %zu distinct blocks, G1 %u G2 %u; %llu events with %llu "
         "block-events emitted, %llu blocks on the wire after coalescing, %llu batches, "
         "%llu dropped, %llu acked; hit rate %.3f, %llu onboards, %llu offloads\n",
         mode, t->nreq, t->distinct, bo.g1_blocks, bo.g2_blocks, (unsigned long long)st.events,
         (unsigned long long)ts.block_events, (unsigned long long)f.blocks,
         (unsigned long long)f.batches, (unsigned long long)f.dropped, (unsigned long long)f.acked,
         st.hit_rate, (unsigned long long)st.onboards, (unsigned long long)st.offloads);
out:
  kvp_publisher_close(pub);
  kvp_blockmgr_destroy(bm);
  free(ts.lat);
}

KVP_BENCH_SUITE(publish, "publisher end to end through nats-server vs one NATS message per event") {
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {.jetstream = 1};
  uint64_t n = 2000000;
  (void)argc;
  (void)argv;
  if (kvp_natsd_start(&d, &no) != 0) {
    fprintf(stderr, "publish: cannot start nats-server\n");
    return 1;
  }
  double base = baseline(d.url, 1000000);
  kvp_bench_report("publish.baseline.events_per_s", base, "ev/s", NULL, 0);
  trace_wl_t t;
  if (trace_load(&t) == 0) {
    run_trace(d.url, 0, &t, base);
    run_trace(d.url, 1, &t, base);
  }
  free(t.hashes);
  free(t.off);
  free(t.len);
  run(d.url, 0, 0, n, base);
  run(d.url, 0, 1, n, base);
  run(d.url, 1, 0, n, base);
  run(d.url, 1, 1, n, base);
  run_threads(d.url, 250000);
  kvp_natsd_stop(&d);
  nats_Close();
  return 0;
}
