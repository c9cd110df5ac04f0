/* Why this file is long: one in-process relay fixture and its frame reader
 * shared by every case of the reverse direction, each a short scenario.
 *
 * kvplane-relay --reverse in-process (src/relay/vllmout.c and vllmenc.c)
 * against a real nats-server, read by a C ZMQ subscriber: the stream's
 * frames (topic, 8-byte big-endian sequence, msgpack batch: vLLM's array
 * of ts, events as tagged maps and dp rank), a replay with the topic frame
 * through the ROUTER socket after messages were missed, a bad replay
 * request, a tier's clear turned into the removal of what the stream
 * announced in it, and the run's start: AllBlocksCleared at a sequence that
 * is its start time in microseconds; and, without sockets, the block_size
 * of each block a snapshot of several block shapes stores. The sanitizer
 * builds run this one (the Python
 * subscriber of tests/python/test_vllm_events.py is skipped there); and a
 * snapshot of 200,000 blocks cut into bounded messages and events.
 * Why this file is long: the socket cases share the in-process relay and
 * its C subscriber, the encoder cases the msgpack readers; each case is
 * one behaviour of the reverse relay. */
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "kvplane/publisher.h"
#include "common/clock.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane/wire.h"
#include "natsd.h"
#include <nats/nats.h>
#include "relay/vllmenc.h"
#include "relay/vllmout.h"

typedef struct rev_s {
  kvp_natsd_t natsd;
  kvp__vout_t *v;
  pthread_t th;
  char pub_url[64], rep_url[64];
  void *zctx, *sub;
  kvp_publisher_t *pub;
  int stopped; /* the relay's thread joined (stop_relay) */
} rev_t;

static void *run(void *arg) {
  kvp__vout_run(arg);
  return NULL;
}

static uint32_t setup_idle_ms;    /* the relay's idle_ms for the next setup; 0: its default */
static size_t setup_buffer_bytes; /* the relay's buffer_bytes for the next setup; 0: default */

static int setup(void **state) {
  rev_t *r = calloc(1, sizeof *r);
  kvp__vout_opts_t o;
  kvp_publisher_opts_t po;
  char err[512];

  assert_int_equal(kvp_natsd_start(&r->natsd, NULL), 0);
  snprintf(r->pub_url, sizeof r->pub_url, "tcp://127.0.0.1:%d", kvp_test_free_port());
  snprintf(r->rep_url, sizeof r->rep_url, "tcp://127.0.0.1:%d", kvp_test_free_port());
  kvp__vout_opts_init(&o);
  if (setup_idle_ms)
    o.idle_ms = setup_idle_ms;
  setup_idle_ms = 0;
  if (setup_buffer_bytes)
    o.buffer_bytes = setup_buffer_bytes;
  setup_buffer_bytes = 0;
  snprintf(o.nats.servers, sizeof o.nats.servers, "%s", r->natsd.url);
  o.ns = "rv";
  o.topic = "kv";
  o.buffer_steps = 4;
  o.streams[0] = (kvp__vout_stream_opts_t){"w0", -1, r->pub_url, r->rep_url};
  o.nstreams = 1;
  if (kvp__vout_open(&o, &r->v, err, sizeof err) != 0)
    fail_msg("kvp__vout_open: %s", err);
  assert_int_equal(pthread_create(&r->th, NULL, run, r->v), 0);
  r->zctx = zmq_ctx_new();
  r->sub = zmq_socket(r->zctx, ZMQ_SUB);
  int linger = 0;
  zmq_setsockopt(r->sub, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(r->sub, ZMQ_SUBSCRIBE, "", 0);
  assert_int_equal(zmq_connect(r->sub, r->pub_url), 0);
  usleep(300000); /* the subscription reaches the PUB */
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", r->natsd.url);
  po.ns = "rv";
  po.worker_id = "w0";
  po.dp_rank = 3;
  assert_int_equal(kvp_publisher_open(&po, &r->pub, err, sizeof err), 0);
  *state = r;
  return 0;
}

static int teardown(void **state) {
  rev_t *r = *state;
  kvp_publisher_close(r->pub);
  if (!r->stopped) {
    kvp__vout_stop(r->v);
    pthread_join(r->th, NULL);
  }
  kvp__vout_close(r->v);
  zmq_close(r->sub);
  zmq_ctx_term(r->zctx);
  kvp_natsd_stop(&r->natsd);
  free(r);
  return 0;
}

/* One batch's events as "<type>:<medium>:<nhashes>" joined by spaces, its
 * dp rank in *dp. */
static void describe(const void *p, size_t len, char *out, size_t cap, int64_t *dp) {
  msgpack_unpacked u;
  size_t off = 0;
  msgpack_unpacked_init(&u);
  assert_int_equal(msgpack_unpack_next(&u, p, len, &off), MSGPACK_UNPACK_SUCCESS);
  /* vLLM's KVEventBatch: an array [ts, events, data_parallel_rank]. */
  assert_int_equal(u.data.type, MSGPACK_OBJECT_ARRAY);
  assert_int_equal(u.data.via.array.size, 3);
  const msgpack_object *b = u.data.via.array.ptr;
  assert_int_equal(b[0].type, MSGPACK_OBJECT_FLOAT64);
  *dp = (int64_t)b[2].via.u64;
  out[0] = '\0';
  const msgpack_object_array *ev = &b[1].via.array;
  for (uint32_t i = 0; i < ev->size; i++) {
    assert_int_equal(ev->ptr[i].type, MSGPACK_OBJECT_MAP);
    const msgpack_object_map *m = &ev->ptr[i].via.map;
    char type[32] = "", medium[16] = "-";
    size_t nh = 0;
    for (uint32_t k = 0; k < m->size; k++) {
      const msgpack_object_str *key = &m->ptr[k].key.via.str;
      const msgpack_object *v = &m->ptr[k].val;
      if (key->size == 4 && memcmp(key->ptr, "type", 4) == 0)
        snprintf(type, sizeof type, "%.*s", (int)v->via.str.size, v->via.str.ptr);
      else if (key->size == 6 && memcmp(key->ptr, "medium", 6) == 0)
        snprintf(medium, sizeof medium, "%.*s", (int)v->via.str.size, v->via.str.ptr);
      else if (key->size == 12 && memcmp(key->ptr, "block_hashes", 12) == 0)
        nh = v->via.array.size;
    }
    size_t n = strlen(out);
    snprintf(out + n, cap - n, "%s%s:%s:%zu", n ? " " : "", type, medium, nh);
  }
  msgpack_unpacked_destroy(&u);
}

/* The next message: its sequence and description, its dp rank in *dp. */
static uint64_t next_dp(rev_t *r, char *desc, size_t cap, int64_t *dp) {
  zmq_msg_t f[3];
  int rcvtimeo = 5000;
  zmq_setsockopt(r->sub, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
  for (int i = 0; i < 3; i++) {
    zmq_msg_init(&f[i]);
    if (zmq_msg_recv(&f[i], r->sub, 0) < 0)
      fail_msg("no message from the relay");
    assert_int_equal(zmq_msg_more(&f[i]), i < 2);
  }
  assert_int_equal(zmq_msg_size(&f[0]), 2);
  assert_memory_equal(zmq_msg_data(&f[0]), "kv", 2);
  assert_int_equal(zmq_msg_size(&f[1]), 8);
  const uint8_t *s = zmq_msg_data(&f[1]);
  uint64_t seq = 0;
  for (int i = 0; i < 8; i++)
    seq = seq << 8 | s[i];
  describe(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), desc, cap, dp);
  for (int i = 0; i < 3; i++)
    zmq_msg_close(&f[i]);
  return seq;
}

/* next_dp of a message of the publisher's rank, 3. */
static uint64_t next(rev_t *r, char *desc, size_t cap) {
  int64_t dp;
  uint64_t seq = next_dp(r, desc, cap, &dp);
  assert_int_equal(dp, 3);
  return seq;
}

static void emit(rev_t *r, int type, int tier, const uint64_t *h, size_t n) {
  if (type == KVP_EV_STORED)
    assert_int_equal(kvp_publisher_stored(r->pub, tier, NULL, NULL, h, n, 16, 0, 0), 0);
  else if (type == KVP_EV_REMOVED)
    assert_int_equal(kvp_publisher_removed(r->pub, tier, NULL, h, n), 0);
  else
    assert_int_equal(kvp_publisher_cleared(r->pub, tier), 0);
  assert_int_equal(kvp_publisher_flush(r->pub, 5000), 0);
}

static void be64(uint8_t out[8], uint64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8)
    out[i] = (uint8_t)v;
}

/* A replay from start through a DEALER: ["", topic, seq, payload] replies
 * until ["", "", -1, ""]. The sequences into seqs and the descriptions
 * into descs (cap of each); returns how many. */
static size_t replay(rev_t *r, uint64_t start, uint64_t *seqs, char (*descs)[64], size_t cap) {
  void *dealer = zmq_socket(r->zctx, ZMQ_DEALER);
  int linger = 0, rcvtimeo = 5000;
  size_t k = 0;
  uint8_t st[8];
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
  assert_int_equal(zmq_connect(dealer, r->rep_url), 0);
  be64(st, start);
  assert_int_equal(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
  assert_int_equal(zmq_send(dealer, st, 8, 0), 8);
  for (;;) {
    uint8_t delim[8], topic[8], seq[8], payload[4096];
    int64_t dp;
    assert_int_equal(zmq_recv(dealer, delim, sizeof delim, 0), 0);
    int tn = zmq_recv(dealer, topic, sizeof topic, 0);
    assert_int_equal(zmq_recv(dealer, seq, sizeof seq, 0), 8);
    int n = zmq_recv(dealer, payload, sizeof payload, 0);
    assert_true(n >= 0);
    uint64_t q = 0;
    for (int i = 0; i < 8; i++)
      q = q << 8 | seq[i];
    if (q == UINT64_MAX) {
      assert_int_equal(tn, 0);
      assert_int_equal(n, 0);
      break;
    }
    assert_int_equal(tn, 2);
    assert_memory_equal(topic, "kv", 2);
    assert_true(k < cap);
    seqs[k] = q;
    describe(payload, (size_t)n, descs[k], sizeof descs[k], &dp);
    k++;
  }
  zmq_close(dealer);
  return k;
}

static void stream_and_replay(void **state) {
  rev_t *r = *state;
  const uint64_t h[4] = {1, 2, 3, UINT64_MAX};
  uint64_t seqs[8];
  char d[256], ds[8][64];
  struct timespec now;

  /* The run starts with AllBlocksCleared at a sequence that is its start
   * time in microseconds (sent before this subscriber joined: replayed). */
  clock_gettime(CLOCK_REALTIME, &now);
  assert_int_equal(replay(r, 0, seqs, ds, 8), 1);
  assert_string_equal(ds[0], "AllBlocksCleared:-:0");
  uint64_t base = seqs[0], us = (uint64_t)now.tv_sec * 1000000u;
  assert_true(base <= us + 1000000u && base + 60000000u >= us);

  /* The stream is of every rank: rank 3, first seen, is cleared before its
   * first event (an earlier run may have announced its blocks). */
  emit(r, KVP_EV_STORED, 1, h, 4);
  assert_int_equal(next(r, d, sizeof d), base + 1);
  assert_string_equal(d, "AllBlocksCleared:-:0");
  assert_int_equal(next(r, d, sizeof d), base + 2);
  assert_string_equal(d, "BlockStored:GPU:4");
  emit(r, KVP_EV_STORED, 2, h, 2);
  assert_int_equal(next(r, d, sizeof d), base + 3);
  assert_string_equal(d, "BlockStored:CPU:2");
  emit(r, KVP_EV_REMOVED, 1, h + 3, 1);
  assert_int_equal(next(r, d, sizeof d), base + 4);
  assert_string_equal(d, "BlockRemoved:GPU:1");
  /* A tier's clear: the removal of what the stream announced there. */
  emit(r, KVP_EV_CLEARED, 1, NULL, 0);
  assert_int_equal(next(r, d, sizeof d), base + 5);
  assert_string_equal(d, "BlockRemoved:GPU:3");
  emit(r, KVP_EV_CLEARED, 0, NULL, 0);
  assert_int_equal(next(r, d, sizeof d), base + 6);
  assert_string_equal(d, "AllBlocksCleared:-:0");

  /* Replay from base + 4 with a buffer of 4 (base + 3 .. base + 6 kept):
   * base + 4, + 5, + 6, then the end. */
  assert_int_equal(replay(r, base + 4, seqs, ds, 8), 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(seqs[i], base + 4 + (uint64_t)i);
  assert_string_equal(ds[0], "BlockRemoved:GPU:1");
  /* A request of the wrong shape gets no answer; the next good one does. */
  void *dealer = zmq_socket(r->zctx, ZMQ_DEALER);
  int linger = 0, rcvtimeo = 5000;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
  assert_int_equal(zmq_connect(dealer, r->rep_url), 0);
  assert_int_equal(zmq_send(dealer, "xyz", 3, 0), 3);
  assert_int_equal(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
  uint8_t late[8];
  be64(late, base + 256);
  assert_int_equal(zmq_send(dealer, late, 8, 0), 8);
  uint8_t b[16];
  assert_int_equal(zmq_recv(dealer, b, sizeof b, 0), 0);
  assert_int_equal(zmq_recv(dealer, b, sizeof b, 0), 0);
  assert_int_equal(zmq_recv(dealer, b, sizeof b, 0), 8);
  assert_memory_equal(b, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
  assert_int_equal(zmq_recv(dealer, b, sizeof b, 0), 0);
  zmq_close(dealer);
}

/* The block_size of every BlockStored of a payload (vLLM's layout: a
 * tagged map per event), by its one hash, in want order. */
static void block_sizes(const uint8_t *p, size_t len, const uint64_t *hashes, uint32_t *sizes,
                        size_t n) {
  msgpack_unpacked u;
  size_t off = 0, found = 0;
  msgpack_unpacked_init(&u);
  assert_int_equal(msgpack_unpack_next(&u, (const char *)p, len, &off), MSGPACK_UNPACK_SUCCESS);
  const msgpack_object_array *ev = &u.data.via.array.ptr[1].via.array;
  for (uint32_t i = 0; i < ev->size; i++) {
    const msgpack_object_map *m = &ev->ptr[i].via.map;
    uint64_t h = 0;
    uint32_t bs = 0;
    int is_stored = 0;
    for (uint32_t k = 0; k < m->size; k++) {
      const msgpack_object_str *key = &m->ptr[k].key.via.str;
      const msgpack_object *v = &m->ptr[k].val;
      if (key->size == 4 && memcmp(key->ptr, "type", 4) == 0)
        is_stored = v->via.str.size == 11 && memcmp(v->via.str.ptr, "BlockStored", 11) == 0;
      else if (key->size == 10 && memcmp(key->ptr, "block_size", 10) == 0)
        bs = (uint32_t)v->via.u64;
      else if (key->size == 12 && memcmp(key->ptr, "block_hashes", 12) == 0) {
        assert_int_equal(v->via.array.size, 1);
        h = v->via.array.ptr[0].via.u64;
      }
    }
    if (!is_stored)
      continue;
    for (size_t j = 0; j < n; j++)
      if (hashes[j] == h) {
        sizes[j] = bs;
        found++;
      }
  }
  assert_int_equal(found, n);
  msgpack_unpacked_destroy(&u);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The payloads kvp__vout_encode hands over, kept in order. */
typedef struct payloads_s {
  uint8_t *p[256];
  size_t len[256], n;
} payloads_t;

static void collect(void *ctx, uint8_t *p, size_t len) {
  payloads_t *pl = ctx;
  assert_true(pl->n < 256);
  pl->p[pl->n] = p;
  pl->len[pl->n++] = len;
}

static void payloads_free(payloads_t *pl) {
  for (size_t i = 0; i < pl->n; i++)
    free(pl->p[i]);
  pl->n = 0;
}

/* A snapshot whose runs have different block shapes (the tiering
 * advisor's worker: one run per volume and shape): every block stored
 * with its own chunk's block_tokens, not the last chunk's. */
static void snapshot_of_shapes_keeps_each_blocks_size(void **state) {
  (void)state;
  kvp__vout_state_t st;
  kvp__vout_media_t media;
  const uint64_t a[2] = {11, 12}, b[1] = {21}, c[2] = {31, 12};
  kvp_event_t ev[3] = {
      {.type = KVP_EV_SNAPSHOT,
       .tier = 4,
       .volume = "g4",
       .snapshot_id = 1,
       .chunk = 0,
       .hashes = a,
       .nhashes = 2,
       .block_tokens = 16},
      {.type = KVP_EV_SNAPSHOT,
       .tier = 4,
       .volume = "g4b",
       .snapshot_id = 1,
       .chunk = 1,
       .hashes = b,
       .nhashes = 1,
       .block_tokens = 32},
      /* 12 again, in a chunk of the first shape: its last chunk's, 16. */
      {.type = KVP_EV_SNAPSHOT,
       .tier = 4,
       .volume = "g4",
       .snapshot_id = 1,
       .chunk = 2,
       .last = 1,
       .hashes = c,
       .nhashes = 2,
       .block_tokens = 16},
  };
  kvp_batch_t bt = {.worker_id = "_advisor", .events = ev, .nevents = 3, .first_event_id = 1};
  payloads_t pl = {0};
  size_t n = 0;
  const uint64_t want_h[4] = {11, 12, 21, 31};
  const uint32_t want_bs[4] = {16, 16, 32, 16};
  uint32_t got[4] = {0};

  kvp__vout_media_init(&media);
  kvp__vout_state_init(&st);
  assert_int_equal(kvp__vout_encode(&st, &bt, KVP__VOUT_VLLM, &media, collect, &pl, &n), 0);
  assert_int_equal(n, 4);
  assert_int_equal(pl.n, 1);
  block_sizes(pl.p[0], pl.len[0], want_h, got, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(got[i], want_bs[i]);
  payloads_free(&pl);
  /* The next snapshot starts over: its first chunk's shape is the common
   * one, 21 now of it. */
  ev[1].block_tokens = 64;
  ev[0].snapshot_id = ev[1].snapshot_id = ev[2].snapshot_id = 2;
  ev[0].block_tokens = ev[2].block_tokens = 64;
  kvp_event_t clr = {.type = KVP_EV_CLEARED, .tier = 4};
  kvp_batch_t cb = {.worker_id = "_advisor", .events = &clr, .nevents = 1};
  assert_int_equal(kvp__vout_encode(&st, &cb, KVP__VOUT_VLLM, &media, collect, &pl, &n), 0);
  payloads_free(&pl);
  assert_int_equal(kvp__vout_encode(&st, &bt, KVP__VOUT_VLLM, &media, collect, &pl, &n), 0);
  assert_int_equal(n, 4);
  assert_int_equal(pl.n, 1);
  block_sizes(pl.p[0], pl.len[0], want_h, got, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(got[i], 64);
  payloads_free(&pl);
  kvp__vout_state_free(&st);
}

/* The hashes of the events of one type in a payload (vLLM's layout),
 * appended to out (*n of cap); the largest event's count in *most. */
static void hashes_of(const uint8_t *p, size_t len, const char *type, uint64_t *out, size_t *n,
                      size_t cap, size_t *most) {
  msgpack_unpacked u;
  size_t off = 0, tl = strlen(type);
  msgpack_unpacked_init(&u);
  assert_int_equal(msgpack_unpack_next(&u, (const char *)p, len, &off), MSGPACK_UNPACK_SUCCESS);
  const msgpack_object_array *ev = &u.data.via.array.ptr[1].via.array;
  for (uint32_t i = 0; i < ev->size; i++) {
    const msgpack_object_map *m = &ev->ptr[i].via.map;
    const msgpack_object *hs = NULL;
    int match = 0;
    for (uint32_t k = 0; k < m->size; k++) {
      const msgpack_object_str *key = &m->ptr[k].key.via.str;
      const msgpack_object *v = &m->ptr[k].val;
      if (key->size == 4 && memcmp(key->ptr, "type", 4) == 0)
        match = v->via.str.size == tl && memcmp(v->via.str.ptr, type, tl) == 0;
      else if (key->size == 12 && memcmp(key->ptr, "block_hashes", 12) == 0)
        hs = v;
    }
    if (!match || hs == NULL)
      continue;
    if (hs->via.array.size > *most)
      *most = hs->via.array.size;
    for (uint32_t k = 0; k < hs->via.array.size && *n < cap; k++)
      out[(*n)++] = hs->via.array.ptr[k].via.u64;
  }
  msgpack_unpacked_destroy(&u);
}

/* A snapshot of 200,000 blocks (the tiering advisor's G4 at scale) goes
 * out as messages of about KVP__VOUT_MSG_BYTES, each a whole batch, every
 * block stored once; an empty snapshot then removes them all in events of
 * KVP__VOUT_EVENT_HASHES at most. Before, one message of ~20 MB, and one
 * BlockRemoved of 200,000 hashes. */
static void a_large_snapshot_goes_out_in_bounded_messages(void **state) {
  (void)state;
  enum { N = 200000 };
  kvp__vout_state_t st;
  kvp__vout_media_t media;
  static uint64_t h[N], got[N];
  payloads_t pl = {0};
  size_t n = 0, ng = 0, most = 0;
  for (size_t i = 0; i < N; i++)
    h[i] = 0x4000000000000000ull + i;
  kvp_event_t ev = {.type = KVP_EV_SNAPSHOT,
                    .tier = 4,
                    .volume = "g4",
                    .snapshot_id = 1,
                    .last = 1,
                    .hashes = h,
                    .nhashes = N,
                    .block_tokens = 16};
  kvp_batch_t bt = {.worker_id = "_advisor", .events = &ev, .nevents = 1, .first_event_id = 1};
  kvp__vout_media_init(&media);
  kvp__vout_state_init(&st);
  assert_int_equal(kvp__vout_encode(&st, &bt, KVP__VOUT_VLLM, &media, collect, &pl, &n), 0);
  assert_int_equal(n, N);
  assert_true(pl.n > 1);
  for (size_t i = 0; i < pl.n; i++) {
    assert_true(pl.len[i] <= KVP__VOUT_MSG_BYTES + 4096);
    hashes_of(pl.p[i], pl.len[i], "BlockStored", got, &ng, N, &most);
  }
  print_message("%d blocks stored in %zu messages of %zu bytes at most\n", N, pl.n, pl.len[0]);
  assert_int_equal(ng, N);
  qsort(got, ng, sizeof got[0], cmp_u64);
  assert_memory_equal(got, h, sizeof h);
  payloads_free(&pl);
  /* Nothing held now: every block removed, in bounded events. */
  ev.snapshot_id = 2;
  ev.nhashes = 0;
  ng = 0;
  assert_int_equal(kvp__vout_encode(&st, &bt, KVP__VOUT_VLLM, &media, collect, &pl, &n), 0);
  for (size_t i = 0; i < pl.n; i++) {
    assert_true(pl.len[i] <= KVP__VOUT_MSG_BYTES + 16 * KVP__VOUT_EVENT_HASHES);
    hashes_of(pl.p[i], pl.len[i], "BlockRemoved", got, &ng, N, &most);
  }
  assert_int_equal(ng, N);
  assert_true(most <= KVP__VOUT_EVENT_HASHES);
  assert_int_equal(n, (N + KVP__VOUT_EVENT_HASHES - 1) / KVP__VOUT_EVENT_HASHES);
  qsort(got, ng, sizeof got[0], cmp_u64);
  assert_memory_equal(got, h, sizeof h);
  payloads_free(&pl);
  kvp__vout_state_free(&st);
}

/* A resync request nobody heard (core NATS: the worker's publisher was
 * reconnecting) is asked again at the worker's batches after 5 s. Worker
 * w0's batches come raw here (no publisher, so nothing listens on its
 * resync subject at first): the first is at event 5 of a new epoch (the
 * relay asks, "unknown", lost), then heartbeats; the test then listens and
 * hears the relay ask again ("retry"). */
static void an_unanswered_resync_is_asked_again(void **state) {
  rev_t *r = *state;
  natsConnection *nc = NULL;
  natsSubscription *ctl = NULL;
  natsMsg *m = NULL;
  char subj[KVP_SUBJECT_MAX], rsubj[KVP_SUBJECT_MAX];
  uint8_t buf[512];
  size_t len;
  kvp_publisher_stats_t ps;
  kvp_publisher_stats(r->pub, &ps);
  assert_int_equal(kvp_subject_events(subj, sizeof subj, "rv", "w0"), 0);
  assert_int_equal(kvp_subject_resync(rsubj, sizeof rsubj, "rv", "w0"), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, r->natsd.url), NATS_OK);
  kvp_publisher_close(r->pub); /* its resync subscription goes with it */
  r->pub = NULL;
  uint64_t epoch = kvp__unix_ms() * 1000000u + 1;
  int asked_again = 0;
  for (int i = 0; i < 18 && !asked_again; i++) { /* 9 s at most */
    kvp_batch_t b = {.worker_id = "w0", .dp_rank = 3, .epoch = epoch, .first_event_id = 5};
    assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
    assert_int_equal(natsConnection_Publish(nc, subj, buf, (int)len), NATS_OK);
    natsConnection_Flush(nc);
    if (i == 1) /* the first request went unheard: listen from now on */
      assert_int_equal(natsConnection_SubscribeSync(&ctl, nc, rsubj), NATS_OK);
    if (ctl != NULL && natsSubscription_NextMsg(&m, ctl, 500) == NATS_OK) {
      asked_again = strstr(natsMsg_GetData(m), "\"reason\":\"retry\"") != NULL;
      natsMsg_Destroy(m);
    } else if (ctl == NULL) {
      nats_Sleep(500);
    }
  }
  natsSubscription_Destroy(ctl);
  natsConnection_Destroy(nc);
  assert_true(asked_again);
}

/* Publishes one raw batch of worker w0, of one event (no publisher: the
 * test plays the worker's ranks). */
static void raw_batch(natsConnection *nc, uint32_t dp, uint64_t epoch, uint64_t id,
                      const kvp_event_t *ev) {
  char subj[KVP_SUBJECT_MAX];
  uint8_t buf[4096];
  size_t len;
  kvp_batch_t b = {.worker_id = "w0",
                   .dp_rank = dp,
                   .epoch = epoch,
                   .first_event_id = id,
                   .events = ev,
                   .nevents = 1};
  assert_int_equal(kvp_subject_events(subj, sizeof subj, "rv", "w0"), 0);
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_int_equal(natsConnection_Publish(nc, subj, buf, (int)len), NATS_OK);
}

static void raw_store(natsConnection *nc, uint32_t dp, uint64_t epoch, uint64_t id, uint64_t h) {
  kvp_event_t e = {
      .type = KVP_EV_STORED, .tier = 1, .hashes = &h, .nhashes = 1, .block_tokens = 16};
  raw_batch(nc, dp, epoch, id, &e);
}

/* Stops the relay and returns its stats line (malloc'd): its figures,
 * read once its thread is done. */
static char *stop_and_stats(rev_t *r) {
  char *text = NULL;
  size_t len = 0;
  kvp__vout_stop(r->v);
  pthread_join(r->th, NULL);
  r->stopped = 1;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  kvp__vout_stats_print(r->v, f);
  fclose(f);
  return text;
}

/* A stream of every rank follows a worker of more ranks than a few (the
 * default stream of --worker without :DP; vLLM runs data parallel 32 and
 * more): 20 ranks here. Each is cleared once, when first seen; their next
 * batches are announced as they are, no rank taking another's place (a
 * rank that did was seen anew at its next batch: cleared again, the
 * stream's other ranks reset and asked for a resync, the two ranks doing it
 * to each other at every batch). */
static void many_ranks_are_each_cleared_once(void **state) {
  rev_t *r = *state;
  natsConnection *nc = NULL;
  char d[256];
  int64_t dp;
  enum { RANKS = 20 };
  kvp_publisher_close(r->pub); /* the test plays the worker */
  r->pub = NULL;
  assert_int_equal(natsConnection_ConnectTo(&nc, r->natsd.url), NATS_OK);
  uint64_t epoch = kvp__unix_ms() * 1000000u + 1;
  for (uint32_t k = 0; k < RANKS; k++)
    raw_store(nc, k, epoch, 1, 100 + k);
  natsConnection_Flush(nc);
  for (uint32_t k = 0; k < RANKS; k++) {
    if (k > 0) { /* rank 0 was cleared at the run's start */
      next_dp(r, d, sizeof d, &dp);
      assert_int_equal(dp, k);
      assert_string_equal(d, "AllBlocksCleared:-:0");
    }
    next_dp(r, d, sizeof d, &dp);
    assert_int_equal(dp, k);
    assert_string_equal(d, "BlockStored:GPU:1");
  }
  for (int round = 0; round < 2; round++) {
    for (uint32_t k = 0; k < RANKS; k++)
      raw_store(nc, k, epoch, 2 + (uint64_t)round, 200 + k);
    natsConnection_Flush(nc);
    for (uint32_t k = 0; k < RANKS; k++) {
      next_dp(r, d, sizeof d, &dp);
      assert_int_equal(dp, k);
      assert_string_equal(d, "BlockStored:GPU:1");
    }
  }
  natsConnection_Destroy(nc);
  /* One resync request per rank (its first sight): the request is the
   * worker's, so it also brings back the ranks a later rank's clear made
   * the relay forget, without one request per rank for each new rank (190
   * here). */
  char *text = stop_and_stats(r);
  assert_non_null(strstr(text, "\"resyncs\":20,"));
  free(text);
}

/* A rank's resync answer in flight when another rank is first seen: its
 * snapshot, staged from before that rank's clear, still announces every
 * block it has at its last chunk (a router reading the clear as the
 * worker's, Dynamo's, dropped them all). Rank 0's snapshot of G1 comes in
 * two chunks, {A} and {B}; rank 1 first appears between them. */
static void a_snapshot_in_flight_outlives_another_ranks_clear(void **state) {
  rev_t *r = *state;
  natsConnection *nc = NULL;
  char d[256];
  int64_t dp;
  const uint64_t a = 0xa, b = 0xb;
  kvp_publisher_close(r->pub); /* the test plays the worker */
  r->pub = NULL;
  assert_int_equal(natsConnection_ConnectTo(&nc, r->natsd.url), NATS_OK);
  uint64_t epoch = kvp__unix_ms() * 1000000u + 1;
  kvp_event_t c0 = {.type = KVP_EV_SNAPSHOT,
                    .tier = 1,
                    .hashes = &a,
                    .nhashes = 1,
                    .block_tokens = 16,
                    .snapshot_id = 1,
                    .chunk = 0};
  kvp_event_t c1 = c0;
  c1.hashes = &b;
  c1.chunk = 1;
  c1.last = 1;
  raw_batch(nc, 0, epoch, 1, &c0);
  raw_store(nc, 1, epoch, 1, 0xc);
  raw_batch(nc, 0, epoch, 2, &c1);
  natsConnection_Flush(nc);
  next_dp(r, d, sizeof d, &dp);
  assert_int_equal(dp, 1);
  assert_string_equal(d, "AllBlocksCleared:-:0");
  next_dp(r, d, sizeof d, &dp);
  assert_int_equal(dp, 1);
  assert_string_equal(d, "BlockStored:GPU:1");
  next_dp(r, d, sizeof d, &dp);
  assert_int_equal(dp, 0);
  assert_string_equal(d, "BlockStored:GPU:1 BlockStored:GPU:1");
  natsConnection_Destroy(nc);
}

/* A batch the relay could not encode whole (out of memory; the encoder's
 * fault injection fails its payload): what the encoder marked announced
 * may not have gone out, so the relay clears the worker on the stream,
 * asks it for a resync ("out of memory") and announces its next batch as
 * usual. Before, the batch was lost with a log line: a router missed its
 * block for good, and the relay, which had marked it announced, would not
 * have announced it from a later snapshot either. */
static void a_batch_not_encoded_clears_and_resyncs(void **state) {
  rev_t *r = *state;
  natsConnection *nc = NULL;
  natsSubscription *ctl = NULL;
  natsMsg *m = NULL;
  char d[256], rsubj[KVP_SUBJECT_MAX];
  int64_t dp;
  kvp_publisher_close(r->pub); /* the test plays the worker */
  r->pub = NULL;
  assert_int_equal(kvp_subject_resync(rsubj, sizeof rsubj, "rv", "w0"), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, r->natsd.url), NATS_OK);
  assert_int_equal(natsConnection_SubscribeSync(&ctl, nc, rsubj), NATS_OK);
  natsConnection_Flush(nc);
  uint64_t epoch = kvp__unix_ms() * 1000000u + 1;
  raw_store(nc, 0, epoch, 1, 100);
  natsConnection_Flush(nc);
  next_dp(r, d, sizeof d, &dp);
  assert_string_equal(d, "BlockStored:GPU:1");
  assert_int_equal(natsSubscription_NextMsg(&m, ctl, 5000), NATS_OK); /* its first sight */
  assert_non_null(strstr(natsMsg_GetData(m), "\"reason\":\"joined\""));
  natsMsg_Destroy(m);

  kvp__vout_test_fail_payloads(1);
  raw_store(nc, 0, epoch, 2, 101);
  natsConnection_Flush(nc);
  next_dp(r, d, sizeof d, &dp);
  assert_int_equal(dp, 0);
  assert_string_equal(d, "AllBlocksCleared:-:0");
  assert_int_equal(natsSubscription_NextMsg(&m, ctl, 5000), NATS_OK);
  print_message("resync request: %s\n", natsMsg_GetData(m));
  assert_non_null(strstr(natsMsg_GetData(m), "\"reason\":\"out of memory\""));
  natsMsg_Destroy(m);

  raw_store(nc, 0, epoch, 3, 102);
  natsConnection_Flush(nc);
  next_dp(r, d, sizeof d, &dp);
  assert_string_equal(d, "BlockStored:GPU:1");
  natsSubscription_Destroy(ctl);
  natsConnection_Destroy(nc);
  char *text = stop_and_stats(r);
  assert_non_null(strstr(text, "\"encode_errors\":1}"));
  assert_non_null(strstr(text, "\"resyncs\":2,"));
  free(text);
}

static int setup_idle(void **state) {
  setup_idle_ms = 300;
  return setup(state);
}

/* A stream with nothing to say sends an empty batch every idle_ms (300 ms
 * here): its next sequence, so that a router that missed messages (the
 * run's start clear, after a restart of the relay) learns of it on an idle
 * stream too; a stored event in between puts the next one off. */
static void an_idle_stream_sends_empty_batches(void **state) {
  rev_t *r = *state;
  uint64_t seqs[16];
  char ds[16][64], d[256];
  usleep(1000 * 1000);
  /* The start clear, then one about every 300 ms: the newest 4 (the
   * buffer), two empty ones at least. */
  size_t n = replay(r, 0, seqs, ds, 16), empty = 0;
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    if (i > 0 || strcmp(ds[0], "AllBlocksCleared:-:0") != 0) {
      assert_string_equal(ds[i], "");
      empty++;
    }
    assert_int_equal(seqs[i], seqs[0] + i);
  }
  assert_true(empty >= 3);
  const uint64_t h[1] = {7};
  emit(r, KVP_EV_STORED, 1, h, 1);
  uint64_t q;
  int64_t dp;
  do /* the empty batches the subscriber got meanwhile (rank 0), then rank 3's first */
    q = next_dp(r, d, sizeof d, &dp);
  while (d[0] == '\0');
  assert_int_equal(dp, 3);
  assert_string_equal(d, "AllBlocksCleared:-:0");
  q = next_dp(r, d, sizeof d, &dp);
  assert_int_equal(dp, 3);
  assert_string_equal(d, "BlockStored:GPU:1");
  assert_true(q > seqs[n - 1]);
}

static int setup_small_buffer(void **state) {
  setup_buffer_bytes = 1500;
  return setup(state);
}

/* The replay buffer is bounded in bytes too (1500 here, 4 messages): three
 * stores of 64 blocks (about 650 bytes each) leave the newest two; one of
 * 200 blocks, larger than the bound, is kept alone (the newest message
 * always is). A replay from the start gets what is kept, its first
 * sequence telling what went. */
static void the_replay_buffer_is_bounded_in_bytes(void **state) {
  rev_t *r = *state;
  uint64_t h[200], seqs[8], first;
  char ds[8][64], d[256];
  int64_t dp;
  for (size_t i = 0; i < 200; i++)
    h[i] = 0x9e3779b97f4a7c15ull * (i + 1);       /* 9 bytes each in msgpack */
  assert_int_equal(replay(r, 0, seqs, ds, 8), 1); /* the start clear */
  uint64_t base = seqs[0];
  emit(r, KVP_EV_STORED, 1, h, 64);
  emit(r, KVP_EV_STORED, 1, h + 64, 64);
  emit(r, KVP_EV_STORED, 1, h + 128, 64);
  do
    first = next_dp(r, d, sizeof d, &dp);
  while (strcmp(d, "BlockStored:GPU:64") != 0);
  /* base: start clear, base + 1 rank 3's clear, base + 2 .. + 4 the stores. */
  assert_int_equal(first, base + 2);
  assert_int_equal(next(r, d, sizeof d), base + 3);
  assert_int_equal(next(r, d, sizeof d), base + 4);
  assert_int_equal(replay(r, 0, seqs, ds, 8), 2);
  assert_int_equal(seqs[0], base + 3);
  assert_int_equal(seqs[1], base + 4);
  assert_string_equal(ds[0], "BlockStored:GPU:64");
  assert_string_equal(ds[1], "BlockStored:GPU:64");
  assert_int_equal(kvp_publisher_stored(r->pub, 2, NULL, NULL, h, 200, 16, 0, 0), 0);
  assert_int_equal(kvp_publisher_flush(r->pub, 5000), 0);
  assert_int_equal(next(r, d, sizeof d), base + 5);
  assert_string_equal(d, "BlockStored:CPU:200");
  assert_int_equal(replay(r, base + 3, seqs, ds, 8), 1);
  assert_int_equal(seqs[0], base + 5);
  assert_string_equal(ds[0], "BlockStored:CPU:200");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(the_replay_buffer_is_bounded_in_bytes, setup_small_buffer,
                                    teardown),
    cmocka_unit_test_setup_teardown(an_idle_stream_sends_empty_batches, setup_idle, teardown),
    cmocka_unit_test_setup_teardown(an_unanswered_resync_is_asked_again, setup, teardown),
    cmocka_unit_test_setup_teardown(many_ranks_are_each_cleared_once, setup, teardown),
    cmocka_unit_test_setup_teardown(a_batch_not_encoded_clears_and_resyncs, setup, teardown),
    cmocka_unit_test_setup_teardown(a_snapshot_in_flight_outlives_another_ranks_clear, setup,
                                    teardown),
    cmocka_unit_test(snapshot_of_shapes_keeps_each_blocks_size),
    cmocka_unit_test(a_large_snapshot_goes_out_in_bounded_messages),
    cmocka_unit_test_setup_teardown(stream_and_replay, setup, teardown),
};

KVP_TEST_MAIN("relay_reverse", tests)
