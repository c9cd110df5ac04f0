/* kvp-bench relay: engine KV events (vLLM-shaped ZMQ PUB messages, msgpack
 * tagged arrays) through kvplane-relay onto NATS, received and decoded by a
 * subscriber, in block-events per second (one block hash in a Stored or
 * Removed event is one block-event). Baseline in the same run: a plain ZMQ
 * SUB receive-and-msgpack-decode loop over the same messages.
 *
 *   kvp-bench relay [MESSAGES]   (default 20000 messages of 128 block-events)
 *
 * Each message: 16 BlockStored events of 4 blocks of 16 tokens (token ids
 * present, so the relay computes kvplane hashes and maps them) and 16
 * BlockRemoved events of the same blocks (resolved through the map). */
#include <msgpack.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "bench.h"
#include "harness.h"
#include "relay/relay.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "natsd.h"

#define EV_PER_MSG 16
#define BLK_PER_EV 4
#define TOK_PER_BLK 16
#define BLOCK_EVENTS_PER_MSG (EV_PER_MSG * BLK_PER_EV * 2)

typedef struct msgs_s {
  msgpack_sbuffer *sb;
  size_t n;
} msgs_t;

static void pk_str(msgpack_packer *p, const char *s) {
  msgpack_pack_str(p, strlen(s));
  msgpack_pack_str_body(p, s, strlen(s));
}

static int build(msgs_t *m, size_t n) {
  m->sb = calloc(n, sizeof *m->sb);
  m->n = n;
  if (!m->sb)
    return -1;
  uint64_t h = 1;
  for (size_t i = 0; i < n; i++) {
    msgpack_packer p;
    msgpack_sbuffer_init(&m->sb[i]);
    msgpack_packer_init(&p, &m->sb[i], msgpack_sbuffer_write);
    msgpack_pack_array(&p, 3);
    msgpack_pack_double(&p, 1732500000.0 + (double)i);
    msgpack_pack_array(&p, EV_PER_MSG * 2);
    uint64_t first = h;
    for (int e = 0; e < EV_PER_MSG; e++) {
      msgpack_pack_array(&p, 7);
      pk_str(&p, "BlockStored");
      msgpack_pack_array(&p, BLK_PER_EV);
      for (int b = 0; b < BLK_PER_EV; b++)
        msgpack_pack_uint64(&p, h++);
      msgpack_pack_nil(&p);
      msgpack_pack_array(&p, BLK_PER_EV * TOK_PER_BLK);
      for (int t = 0; t < BLK_PER_EV * TOK_PER_BLK; t++)
        msgpack_pack_uint32(&p, (uint32_t)((h * 31 + (uint64_t)t) % 151936));
      msgpack_pack_int(&p, TOK_PER_BLK);
      msgpack_pack_nil(&p);
      pk_str(&p, "GPU");
    }
    for (int e = 0; e < EV_PER_MSG; e++) {
      msgpack_pack_array(&p, 3);
      pk_str(&p, "BlockRemoved");
      msgpack_pack_array(&p, BLK_PER_EV);
      for (int b = 0; b < BLK_PER_EV; b++)
        msgpack_pack_uint64(&p, first++);
      pk_str(&p, "GPU");
    }
    msgpack_pack_int(&p, 0);
  }
  return 0;
}

typedef struct prod_s {
  const msgs_t *m;
  const char *url;
  void *ctx;
  uint64_t t0;
} prod_t;

static void *produce(void *arg) {
  prod_t *pr = arg;
  void *s = zmq_socket(pr->ctx, ZMQ_PUB);
  int hwm = 0, linger = 2000;
  zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_bind(s, pr->url);
  usleep(500 * 1000); /* the subscriber connects (slow joiner) */
  pr->t0 = kvp_bench_now_ns();
  for (size_t i = 0; i < pr->m->n; i++) {
    uint8_t be[8];
    for (int k = 0; k < 8; k++)
      be[k] = (uint8_t)((uint64_t)i >> (56 - 8 * k));
    zmq_send(s, "kv-events", 9, ZMQ_SNDMORE);
    zmq_send(s, be, 8, ZMQ_SNDMORE);
    zmq_send(s, pr->m->sb[i].data, pr->m->sb[i].size, 0);
  }
  zmq_close(s);
  return NULL;
}

/* Baseline: SUB, receive three frames, msgpack-decode the payload, count
 * the block hashes of every event. Returns block-events/s. */
static double baseline(const msgs_t *m, int port) {
  char url[64];
  void *ctx = zmq_ctx_new();
  void *s = zmq_socket(ctx, ZMQ_SUB);
  int hwm = 0, tmo = 5000;
  uint64_t blocks = 0, want = (uint64_t)m->n * BLOCK_EVENTS_PER_MSG;
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
  zmq_connect(s, url);
  prod_t pr = {.m = m, .url = url, .ctx = ctx};
  pthread_t th;
  pthread_create(&th, NULL, produce, &pr);
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  while (blocks < want) {
    zmq_msg_t f[3];
    int ok = 1;
    for (int k = 0; k < 3; k++) {
      zmq_msg_init(&f[k]);
      if (zmq_msg_recv(&f[k], s, 0) < 0)
        ok = 0;
    }
    if (ok) {
      size_t off = 0;
      if (msgpack_unpack_next(&up, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), &off) ==
              MSGPACK_UNPACK_SUCCESS &&
          up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size >= 2) {
        msgpack_object *evs = &up.data.via.array.ptr[1];
        for (uint32_t e = 0; e < evs->via.array.size; e++) {
          msgpack_object *ev = &evs->via.array.ptr[e];
          if (ev->type == MSGPACK_OBJECT_ARRAY && ev->via.array.size > 1)
            blocks += ev->via.array.ptr[1].via.array.size;
        }
      }
    }
    for (int k = 0; k < 3; k++)
      zmq_msg_close(&f[k]);
    if (!ok)
      break;
  }
  uint64_t t1 = kvp_bench_now_ns();
  pthread_join(th, NULL);
  msgpack_unpacked_destroy(&up);
  zmq_close(s);
  zmq_ctx_term(ctx);
  if (blocks < want)
    fprintf(stderr, "relay: baseline received %llu of %llu block-events\n",
            (unsigned long long)blocks, (unsigned long long)want);
  return (double)blocks * 1e9 / (double)(t1 - pr.t0);
}

/* Through the relay: returns block-events/s seen decoded on NATS. */
static double through_relay(const msgs_t *m, int port, const char *nats_url) {
  char url[64], subj[KVP_SUBJECT_MAX], err[256];
  uint64_t blocks = 0, want = (uint64_t)m->n * BLOCK_EVENTS_PER_MSG, t1 = 0;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  kvp_relay_t *r = NULL;
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  kvp_subject_events(subj, sizeof subj, "bench", "eng0");
  if (natsConnection_ConnectTo(&nc, nats_url) != NATS_OK ||
      natsConnection_SubscribeSync(&sub, nc, subj) != NATS_OK)
    return 0;
  natsSubscription_SetPendingLimits(sub, -1, -1);
  natsConnection_Flush(nc);
  kvp_relay_opts_t o;
  kvp_relay_opts_init(&o);
  snprintf(o.pub.nats.servers, sizeof o.pub.nats.servers, "%s", nats_url);
  o.pub.ns = "bench";
  o.pub.coalesce = 0; /* every block-event reaches the wire */
  o.pub.heartbeat_ms = 60000;
  o.rcvhwm = 1 << 30;
  o.endpoints[0] = (kvp_relay_endpoint_t){.endpoint = url, .worker_id = "eng0"};
  o.nendpoints = 1;
  if (kvp_relay_open(&o, &r, err, sizeof err) != 0) {
    fprintf(stderr, "relay: %s\n", err);
    return 0;
  }
  pthread_t rt, pt;
  pthread_create(&rt, NULL, (void *(*)(void *))(void *)kvp_relay_run, r);
  void *ctx = zmq_ctx_new();
  prod_t pr = {.m = m, .url = url, .ctx = ctx};
  pthread_create(&pt, NULL, produce, &pr);
  while (blocks < want) {
    natsMsg *msg = NULL;
    if (natsSubscription_NextMsg(&msg, sub, 5000) != NATS_OK)
      break;
    kvp_wire_batch_t *wb = NULL;
    if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg),
                        NULL, &wb) == 0) {
      const kvp_batch_t *b = kvp_wire_batch_view(wb);
      for (size_t i = 0; i < b->nevents; i++)
        blocks += b->events[i].nhashes;
      kvp_wire_batch_free(wb);
    }
    natsMsg_Destroy(msg);
  }
  t1 = kvp_bench_now_ns();
  pthread_join(pt, NULL);
  kvp_relay_stop(r);
  pthread_join(rt, NULL);
  kvp_relay_stats_t st;
  kvp_relay_stats(r, 0, &st);
  if (blocks < want || st.gaps || st.clears)
    fprintf(stderr, "relay: received %llu of %llu block-events (gaps %llu, clears %llu)\n",
            (unsigned long long)blocks, (unsigned long long)want, (unsigned long long)st.gaps,
            (unsigned long long)st.clears);
  kvp_relay_close(r);
  zmq_ctx_term(ctx);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  return (double)blocks * 1e9 / (double)(t1 - pr.t0);
}

KVP_BENCH_SUITE(relay,
                "engine ZMQ/msgpack events through kvplane-relay onto NATS vs ZMQ+msgpack decode") {
  size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 20000;
  msgs_t m;
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {0};
  if (n == 0 || build(&m, n) != 0)
    return 1;
  if (kvp_natsd_start(&d, &no) != 0) {
    fprintf(stderr, "relay: cannot start nats-server\n");
    return 1;
  }
  double base = baseline(&m, kvp_test_free_port());
  double rel = through_relay(&m, kvp_test_free_port(), d.url);
  kvp_bench_report("relay.zmq_msgpack_decode.blk_ev_per_s", base, "blk-ev/s", NULL, 0);
  kvp_bench_report("relay.to_nats_decoded.blk_ev_per_s", rel, "blk-ev/s", "zmq+msgpack decode",
                   base);
  kvp_natsd_stop(&d);
  for (size_t i = 0; i < n; i++)
    msgpack_sbuffer_destroy(&m.sb[i]);
  free(m.sb);
  nats_Close();
  return 0;
}
