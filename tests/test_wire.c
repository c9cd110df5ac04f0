/* Wire codec: round trip, interop with protoc (an independent encoder and
 * decoder), and rejection of truncated, oversized and random input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

static const uint64_t H1[] = {0x1111111111111111ull, 0x2222222222222222ull, 0xfedcba9876543210ull};
static const uint32_t HITS[] = {3, 1, 7};
static const uint32_t TOKS[] = {1, 2, 3, 4};

static kvp_event_t sample_events[5];

static kvp_batch_t sample_batch(void) {
  kvp_event_t *e = sample_events;
  memset(sample_events, 0, sizeof sample_events);
  e[0] = (kvp_event_t){.event_id = 10,
                       .type = KVP_EV_STORED,
                       .tier = KVP_TIER_G1,
                       .has_parent = 1,
                       .parent_hash = 0xabcdef,
                       .hashes = H1,
                       .nhashes = 3,
                       .block_tokens = 16,
                       .block_bytes = 65536,
                       .lora_id = 2,
                       .token_ids = TOKS,
                       .ntoken_ids = 4};
  e[1] = (kvp_event_t){.event_id = 11,
                       .type = KVP_EV_REMOVED,
                       .tier = KVP_TIER_G3,
                       .volume = "nvme0",
                       .hashes = H1,
                       .nhashes = 1};
  e[2] = (kvp_event_t){.event_id = 12,
                       .type = KVP_EV_ACCESSED,
                       .tier = KVP_TIER_G2,
                       .hashes = H1,
                       .nhashes = 3,
                       .hit_counts = HITS};
  e[3] = (kvp_event_t){.event_id = 13, .type = KVP_EV_CLEARED, .tier = KVP_TIER_ALL};
  e[4] = (kvp_event_t){.event_id = 14,
                       .type = KVP_EV_SNAPSHOT,
                       .tier = KVP_TIER_G2,
                       .snapshot_id = 5,
                       .chunk = 1,
                       .last = 1,
                       .hashes = H1,
                       .nhashes = 2,
                       .block_tokens = 16};
  return (kvp_batch_t){.ns = "prod",
                       .worker_id = "w-1",
                       .dp_rank = 3,
                       .epoch = 99,
                       .model = "llama",
                       .first_event_id = 10,
                       .timestamp_ms = 1700000000000ull,
                       .dropped_events = 4,
                       .events = sample_events,
                       .nevents = 5};
}

static void round_trip(void **state) {
  (void)state;
  kvp_batch_t b = sample_batch();
  uint8_t buf[4096];
  size_t len = 0;
  kvp_wire_batch_t *wb;

  assert_true(kvp_wire_encoded_size(&b) <= sizeof buf);
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_true(len <= kvp_wire_encoded_size(&b));
  assert_int_equal(kvp_wire_decode(buf, len, NULL, &wb), 0);
  const kvp_batch_t *d = kvp_wire_batch_view(wb);
  assert_string_equal(d->ns, "prod");
  assert_string_equal(d->worker_id, "w-1");
  assert_string_equal(d->model, "llama");
  assert_int_equal(d->dp_rank, 3);
  assert_int_equal(d->epoch, 99);
  assert_int_equal(d->first_event_id, 10);
  assert_int_equal(d->dropped_events, 4);
  assert_int_equal(d->nevents, 5);
  const kvp_event_t *e = d->events;
  assert_int_equal(e[0].type, KVP_EV_STORED);
  assert_true(e[0].has_parent && e[0].parent_hash == 0xabcdef);
  assert_int_equal(e[0].nhashes, 3);
  assert_memory_equal(e[0].hashes, H1, sizeof H1);
  assert_int_equal(e[0].block_bytes, 65536);
  assert_int_equal(e[0].lora_id, 2);
  assert_int_equal(e[0].ntoken_ids, 4);
  assert_memory_equal(e[0].token_ids, TOKS, sizeof TOKS);
  assert_null(e[0].volume);
  assert_int_equal(e[1].type, KVP_EV_REMOVED);
  assert_string_equal(e[1].volume, "nvme0");
  assert_int_equal(e[2].type, KVP_EV_ACCESSED);
  assert_memory_equal(e[2].hit_counts, HITS, sizeof HITS);
  assert_int_equal(e[3].type, KVP_EV_CLEARED);
  assert_int_equal(e[3].tier, KVP_TIER_ALL);
  assert_int_equal(e[4].type, KVP_EV_SNAPSHOT);
  assert_true(e[4].last && e[4].snapshot_id == 5 && e[4].chunk == 1);
  assert_null(e[4].parent_hashes);
  kvp_wire_batch_free(wb);
}

/* engine_native (kvplane-relay's pass-through hashes) survives the wire and
 * is false unless set. */
static void engine_native_round_trip(void **state) {
  (void)state;
  uint64_t h[2] = {11, 12};
  kvp_event_t ev[2] = {
      {.event_id = 1, .type = KVP_EV_STORED, .tier = 1, .hashes = h, .nhashes = 2,
       .engine_native = 1},
      {.event_id = 2, .type = KVP_EV_STORED, .tier = 1, .hashes = h, .nhashes = 1},
  };
  kvp_batch_t b = {.worker_id = "w", .epoch = 1, .first_event_id = 1, .events = ev, .nevents = 2};
  uint8_t buf[256];
  size_t len;
  kvp_wire_batch_t *wb;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_int_equal(kvp_wire_decode(buf, len, NULL, &wb), 0);
  assert_int_equal(kvp_wire_batch_view(wb)->events[0].engine_native, 1);
  assert_int_equal(kvp_wire_batch_view(wb)->events[1].engine_native, 0);
  kvp_wire_batch_free(wb);
}

static void heartbeat_is_empty_batch(void **state) {
  (void)state;
  kvp_batch_t b = {.worker_id = "w", .epoch = 1, .first_event_id = 7};
  uint8_t buf[256];
  size_t len;
  kvp_wire_batch_t *wb;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_int_equal(kvp_wire_decode(buf, len, NULL, &wb), 0);
  assert_int_equal(kvp_wire_batch_view(wb)->nevents, 0);
  assert_int_equal(kvp_wire_batch_view(wb)->first_event_id, 7);
  kvp_wire_batch_free(wb);
}

static void encode_rejects_bad_batches(void **state) {
  (void)state;
  uint8_t buf[256];
  size_t len;
  kvp_event_t e = {.type = KVP_EV_STORED, .tier = 7, .hashes = H1, .nhashes = 1};
  kvp_batch_t b = {.worker_id = "w", .events = &e, .nevents = 1};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), KVP_EINVAL);
  e.tier = KVP_TIER_G1;
  e.nhashes = 0;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), KVP_EINVAL);
  e.nhashes = 1;
  b.worker_id = "bad id";
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), KVP_EINVAL);
  b.worker_id = "w";
  assert_int_equal(kvp_wire_encode(&b, buf, 4, &len), KVP_ETOOBIG);
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
}

static const char *tmp(void) {
  return getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
}

static char *proto_args(char *buf, size_t n) {
  snprintf(buf, n, "-I%s/../src/wire", kvp_test_srcdir());
  return buf;
}

static char *proto_file(char *buf, size_t n) {
  snprintf(buf, n, "%s/../src/wire/kvplane.proto", kvp_test_srcdir());
  return buf;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = malloc(1 << 16);
  assert_non_null(f);
  *len = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

/* protoc --encode (Debian's protobuf-compiler) builds a batch from text format;
 * our decoder must read it as the same structs. */
static void decodes_protoc_encoding(void **state) {
  (void)state;
  char txt[256], bin[256], inc[512], proto[512];
  snprintf(txt, sizeof txt, "%s/kvp-wire-%d.txt", tmp(), (int)getpid());
  snprintf(bin, sizeof bin, "%s/kvp-wire-%d.bin", tmp(), (int)getpid());
  FILE *f = fopen(txt, "w");
  assert_non_null(f);
  fputs("worker_id: \"engine-7\" dp_rank: 1 epoch: 42 model: \"m\" first_event_id: 100\n"
        "events { event_id: 100 stored { tier: TIER_G2 has_parent: true parent_hash: "
        "18446744073709551615\n"
        "  block_hashes: [1, 2, 3] block_tokens: 512 block_bytes: 1048576 } }\n"
        "events { event_id: 101 removed { tier: TIER_G4 volume: \"s3-cold\" block_hashes: 9 } }\n"
        "events { event_id: 105 cleared { tier: TIER_ALL } }\n",
        f);
  fclose(f);
  char *argv[] = {"protoc", "--encode=kvplane.v1.EventBatch", proto_args(inc, sizeof inc),
                  proto_file(proto, sizeof proto), NULL};
  assert_int_equal(kvp_test_spawn_wait(argv, txt, bin), 0);

  size_t len;
  uint8_t *buf = slurp(bin, &len);
  kvp_wire_batch_t *wb;
  assert_int_equal(kvp_wire_decode(buf, len, NULL, &wb), 0);
  const kvp_batch_t *b = kvp_wire_batch_view(wb);
  assert_string_equal(b->worker_id, "engine-7");
  assert_int_equal(b->epoch, 42);
  assert_int_equal(b->nevents, 3);
  assert_int_equal(b->events[0].tier, KVP_TIER_G2);
  assert_true(b->events[0].parent_hash == UINT64_MAX);
  assert_int_equal(b->events[0].nhashes, 3);
  assert_true(b->events[0].hashes[2] == 3);
  assert_int_equal(b->events[0].block_tokens, 512);
  assert_string_equal(b->events[1].volume, "s3-cold");
  assert_int_equal(b->events[2].type, KVP_EV_CLEARED);
  assert_int_equal(b->events[2].event_id, 105);
  kvp_wire_batch_free(wb);
  free(buf);
  remove(txt);
  remove(bin);
}

/* protoc --decode reads what our encoder writes. */
static void protoc_decodes_our_encoding(void **state) {
  (void)state;
  char txt[256], bin[256], inc[512], proto[512], out[16384];
  kvp_batch_t b = sample_batch();
  uint8_t buf[4096];
  size_t len;
  snprintf(bin, sizeof bin, "%s/kvp-wire-%d.bin", tmp(), (int)getpid());
  snprintf(txt, sizeof txt, "%s/kvp-wire-%d.txt", tmp(), (int)getpid());
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  FILE *f = fopen(bin, "wb");
  fwrite(buf, 1, len, f);
  fclose(f);
  char *argv[] = {"protoc", "--decode=kvplane.v1.EventBatch", proto_args(inc, sizeof inc),
                  proto_file(proto, sizeof proto), NULL};
  assert_int_equal(kvp_test_spawn_wait(argv, bin, txt), 0);
  f = fopen(txt, "r");
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  fclose(f);
  assert_non_null(strstr(out, "worker_id: \"w-1\""));
  assert_non_null(strstr(out, "tier: TIER_G3"));
  assert_non_null(strstr(out, "volume: \"nvme0\""));
  assert_non_null(strstr(out, "block_hashes: 18364758544493064720")); /* 0xfedcba9876543210 */
  assert_non_null(strstr(out, "hit_counts: 7"));
  assert_non_null(strstr(out, "dropped_events: 4"));
  remove(bin);
  remove(txt);
}

static void rejects_truncated(void **state) {
  (void)state;
  kvp_batch_t b = sample_batch();
  uint8_t buf[4096];
  size_t len;
  kvp_wire_batch_t *wb;
  int rejected = 0;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  for (size_t cut = 1; cut < len; cut++) {
    int rc = kvp_wire_decode(buf, cut, NULL, &wb);
    if (rc != 0) {
      assert_null(wb);
      rejected++;
    } else {
      kvp_wire_batch_free(wb);
    }
  }
  /* Cuts inside a field are malformed; cuts at field boundaries may parse. */
  assert_true(rejected > (int)len / 2);
  assert_int_equal(kvp_wire_decode(buf, len - 1, NULL, &wb), KVP_EPROTO);
}

static void rejects_over_limits(void **state) {
  (void)state;
  kvp_batch_t b = sample_batch();
  uint8_t buf[4096];
  size_t len;
  kvp_wire_batch_t *wb;
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  kvp_wire_limits_t l = {.max_bytes = len - 1};
  assert_int_equal(kvp_wire_decode(buf, len, &l, &wb), KVP_ETOOBIG);
  l = (kvp_wire_limits_t){.max_events = 4};
  assert_int_equal(kvp_wire_decode(buf, len, &l, &wb), KVP_ETOOBIG);
  l = (kvp_wire_limits_t){.max_blocks = 5};
  assert_int_equal(kvp_wire_decode(buf, len, &l, &wb), KVP_ETOOBIG);
  assert_null(wb);
}

static void rejects_contract_violations(void **state) {
  (void)state;
  uint8_t buf[256];
  size_t len;
  kvp_wire_batch_t *wb;
  /* Unknown tier 9 in a stored event: hand-encoded (our encoder refuses it).
   * EventBatch{worker_id:"w", events:{event_id:1, stored:{tier:9, block_hashes:[1]}}} */
  static const uint8_t bad_tier[] = {0x0a, 0x01, 'w',  0x3a, 0x10, 0x08, 0x01,
                                     0x12, 0x0c, 0x08, 0x09, 0x2a, 0x08, 1,
                                     0,    0,    0,    0,    0,    0,    0};
  assert_int_equal(kvp_wire_decode(bad_tier, sizeof bad_tier, NULL, &wb), KVP_ETIER);
  /* Event with no payload. */
  static const uint8_t no_payload[] = {0x0a, 0x01, 'w', 0x3a, 0x02, 0x08, 0x01};
  assert_int_equal(kvp_wire_decode(no_payload, sizeof no_payload, NULL, &wb), KVP_EINVAL);
  /* Missing worker id. */
  static const uint8_t no_worker[] = {0x10, 0x01};
  assert_int_equal(kvp_wire_decode(no_worker, sizeof no_worker, NULL, &wb), KVP_EINVAL);
  /* Non-monotonic ids. */
  kvp_event_t e[2] = {{.event_id = 5, .type = KVP_EV_CLEARED, .tier = 1},
                      {.event_id = 5, .type = KVP_EV_CLEARED, .tier = 2}};
  kvp_batch_t b = {.worker_id = "w", .events = e, .nevents = 2};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);
  assert_int_equal(kvp_wire_decode(buf, len, NULL, &wb), KVP_EINVAL);
  assert_null(wb);
}

static void rejects_random_bytes(void **state) {
  (void)state;
  uint8_t buf[512];
  uint32_t x = 2463534242u;
  int accepted = 0;
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = (size_t)(x % sizeof buf);
    for (size_t i = 0; i < len; i++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      buf[i] = (uint8_t)x;
    }
    kvp_wire_batch_t *wb = NULL;
    int rc = kvp_wire_decode(buf, len, NULL, &wb);
    if (rc == 0) {
      accepted++;
      kvp_wire_batch_free(wb);
    } else {
      assert_true(rc == KVP_EPROTO || rc == KVP_EINVAL || rc == KVP_ETIER || rc == KVP_ETOOBIG);
      assert_null(wb);
    }
  }
  assert_true(accepted < 200);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(round_trip),
    cmocka_unit_test(engine_native_round_trip),
    cmocka_unit_test(heartbeat_is_empty_batch),
    cmocka_unit_test(encode_rejects_bad_batches),
    cmocka_unit_test(decodes_protoc_encoding),
    cmocka_unit_test(protoc_decodes_our_encoding),
    cmocka_unit_test(rejects_truncated),
    cmocka_unit_test(rejects_over_limits),
    cmocka_unit_test(rejects_contract_violations),
    cmocka_unit_test(rejects_random_bytes),
};

KVP_TEST_MAIN("wire", tests)
