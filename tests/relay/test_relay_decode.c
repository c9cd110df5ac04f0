/* The engine payload decoder (src/relay/decode.c) and the relay tables
 * (src/relay/map.c): both event encodings, defaults, hash forms, malformed
 * input, extra keys, LRU bounds. Why this file is long: each case builds its
 * msgpack by hand, byte shape by byte shape, which the decoder table asks
 * for; the cases share the packing helpers at the top. */
#include <msgpack.h>
#include <string.h>

#include "harness.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "relay/decode.h"
#include "relay/map.h"

static void pk_str(msgpack_packer *p, const char *s) {
  msgpack_pack_str(p, strlen(s));
  msgpack_pack_str_body(p, s, strlen(s));
}

/* [ts, events, dp_rank] header with n events to follow. */
static void pk_batch(msgpack_packer *p, size_t n) {
  msgpack_pack_array(p, 3);
  msgpack_pack_double(p, 1.5);
  msgpack_pack_array(p, n);
}

static int decode(kvp_relay_decoder_t *d, msgpack_sbuffer *sb, kvp_relay_decoded_t *out) {
  return kvp__relay_decode(d, (const uint8_t *)sb->data, sb->size, out);
}

static void tagged_arrays(void **state) {
  (void)state;
  msgpack_sbuffer sb;
  msgpack_packer p;
  kvp_relay_decoded_t out;
  kvp_relay_decoder_t *d;
  assert_int_equal(kvp__relay_decoder_create(&d), 0);
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
  pk_batch(&p, 3);
  /* BlockStored with every positional field, and one extra element. */
  msgpack_pack_array(&p, 14);
  pk_str(&p, "BlockStored");
  msgpack_pack_array(&p, 2);
  msgpack_pack_uint64(&p, UINT64_C(0xfedcba9876543210));
  msgpack_pack_int64(&p, -2);
  msgpack_pack_uint64(&p, 7); /* parent */
  msgpack_pack_array(&p, 4);
  for (int i = 0; i < 4; i++)
    msgpack_pack_int(&p, 100 + i);
  msgpack_pack_int(&p, 2); /* block_size */
  msgpack_pack_int(&p, 3); /* lora_id */
  pk_str(&p, "CPU");       /* medium */
  pk_str(&p, "adapter");   /* lora_name */
  msgpack_pack_nil(&p);    /* extra_keys */
  msgpack_pack_int(&p, 0); /* group_idx */
  pk_str(&p, "full_attention");
  msgpack_pack_nil(&p);     /* sliding window */
  pk_str(&p, "LOCAL");      /* locality (upstream slot 11): not a salt */
  msgpack_pack_int(&p, 99); /* extra element: ignored */
  /* BlockRemoved with bytes hashes (lower 64 bits, big-endian). */
  msgpack_pack_array(&p, 2);
  pk_str(&p, "BlockRemoved");
  msgpack_pack_array(&p, 1);
  uint8_t b[10] = {0xaa, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8};
  msgpack_pack_bin(&p, sizeof b);
  msgpack_pack_bin_body(&p, b, sizeof b);
  msgpack_pack_array(&p, 1);
  pk_str(&p, "AllBlocksCleared");
  msgpack_pack_int(&p, 4); /* dp_rank */

  assert_int_equal(decode(d, &sb, &out), 0);
  assert_int_equal(out.nevents, 3);
  assert_int_equal(out.errors, 0);
  assert_int_equal(out.dp_rank, 4);
  const kvp_relay_event_t *e = &out.events[0];
  assert_int_equal(e->type, KVP_RELAY_EV_STORED);
  assert_int_equal(e->nhashes, 2);
  assert_true(e->hashes[0] == UINT64_C(0xfedcba9876543210));
  assert_true(e->hashes[1] == UINT64_MAX - 1);
  assert_true(e->has_parent && e->parent == 7);
  assert_int_equal(e->ntokens, 4);
  assert_int_equal(e->token_ids[3], 103);
  assert_int_equal(e->block_size, 2);
  assert_int_equal(e->lora_id, 3);
  assert_int_equal(e->medium.len, 3);
  assert_memory_equal(e->medium.p, "CPU", 3);
  assert_memory_equal(e->lora_name.p, "adapter", 7);
  assert_int_equal(e->cache_salt.len, 0); /* positional events carry no cache_salt */
  assert_false(e->extra_opaque);
  assert_null(e->mm);
  assert_int_equal(out.events[1].type, KVP_RELAY_EV_REMOVED);
  assert_true(out.events[1].hashes[0] == UINT64_C(0x0102030405060708));
  assert_int_equal(out.events[2].type, KVP_RELAY_EV_CLEARED);
  msgpack_sbuffer_destroy(&sb);
  kvp__relay_decoder_destroy(d);
}

static void maps_and_defaults(void **state) {
  (void)state;
  msgpack_sbuffer sb;
  msgpack_packer p;
  kvp_relay_decoded_t out;
  kvp_relay_decoder_t *d;
  assert_int_equal(kvp__relay_decoder_create(&d), 0);
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
  /* The outer batch as a map too. */
  msgpack_pack_map(&p, 3);
  pk_str(&p, "ts");
  msgpack_pack_double(&p, 2.0);
  pk_str(&p, "events");
  msgpack_pack_array(&p, 3);
  /* Only type and block_hashes: the rest take defaults; unknown key ignored. */
  msgpack_pack_map(&p, 3);
  pk_str(&p, "block_hashes");
  msgpack_pack_array(&p, 1);
  msgpack_pack_uint64(&p, 42);
  pk_str(&p, "future_field");
  msgpack_pack_map(&p, 0);
  pk_str(&p, "type");
  pk_str(&p, "BlockStored");
  /* Missing block_hashes: an error for this event only. */
  msgpack_pack_map(&p, 1);
  pk_str(&p, "type");
  pk_str(&p, "BlockRemoved");
  /* Hybrid-model fields and extra keys. */
  msgpack_pack_map(&p, 5);
  pk_str(&p, "type");
  pk_str(&p, "BlockStored");
  pk_str(&p, "block_hashes");
  msgpack_pack_array(&p, 1);
  msgpack_pack_uint64(&p, 43);
  pk_str(&p, "group_idx");
  msgpack_pack_int(&p, 1);
  pk_str(&p, "kv_cache_spec_kind");
  pk_str(&p, "sliding_window");
  pk_str(&p, "extra_keys");
  msgpack_pack_array(&p, 1);
  msgpack_pack_array(&p, 1);
  pk_str(&p, "mm-hash");
  pk_str(&p, "data_parallel_rank");
  msgpack_pack_nil(&p);

  assert_int_equal(decode(d, &sb, &out), 0);
  assert_int_equal(out.nevents, 2);
  assert_int_equal(out.errors, 1);
  assert_int_equal(out.dp_rank, -1);
  const kvp_relay_event_t *e = &out.events[0];
  assert_true(e->hashes[0] == 42);
  assert_false(e->has_parent);
  assert_null(e->token_ids);
  assert_int_equal(e->block_size, 0);
  assert_int_equal(e->medium.len, 0);
  e = &out.events[1];
  assert_int_equal(e->group_idx, 1);
  assert_true(e->extra_opaque); /* "mm-hash" is no digest: not hashable */
  assert_memory_equal(e->kind.p, "sliding_window", 14);
  msgpack_sbuffer_destroy(&sb);
  kvp__relay_decoder_destroy(d);
}

static void malformed_rejected(void **state) {
  (void)state;
  kvp_relay_decoded_t out;
  kvp_relay_decoder_t *d;
  assert_int_equal(kvp__relay_decoder_create(&d), 0);
  /* not msgpack at all, truncated, trailing bytes, wrong outer shape */
  static const uint8_t garbage[] = {0xc1, 0x00};
  static const uint8_t trunc[] = {0x93, 0xcb, 0, 0};
  static const uint8_t trailing[] = {0x92, 0x01, 0x90, 0x00};
  static const uint8_t scalar[] = {0x05};
  static const uint8_t no_events[] = {0x92, 0x01, 0x02};
  /* array32 claiming 2^32-1 elements with 3 bytes behind it */
  static const uint8_t absurd[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03};
  static const uint8_t absurd_str[] = {0x92, 0x01, 0xdb, 0x7f, 0xff, 0xff, 0xff, 0x00};
  assert_int_equal(kvp__relay_decode(d, garbage, sizeof garbage, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, trunc, sizeof trunc, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, trailing, sizeof trailing, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, scalar, sizeof scalar, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, no_events, sizeof no_events, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, absurd, sizeof absurd, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, absurd_str, sizeof absurd_str, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, garbage, 0, &out), KVP_EPROTO);
  /* nesting deeper than the bound */
  uint8_t deep[64];
  memset(deep, 0x91, sizeof deep);
  deep[sizeof deep - 1] = 0x90;
  assert_int_equal(kvp__relay_decode(d, deep, sizeof deep, &out), KVP_EPROTO);
  assert_int_equal(kvp__relay_decode(d, deep, (size_t)KVP_RELAY_MAX_PAYLOAD + 1, &out),
                   KVP_ETOOBIG);
  /* bad events inside a good batch: counted, skipped */
  static const uint8_t bad_events[] = {
      0x92, 0x01, 0x94, 0x05, 0x91, 0xa3, 'F', 'o', 'o',  0x92, 0xab, 'B', 'l', 'o',
      'c',  'k',  'S',  't',  'o',  'r',  'e', 'd', 0x01, 0x91, 0xb0, 'A', 'l', 'l',
      'B',  'l',  'o',  'c',  'k',  's',  'C', 'l', 'e',  'a',  'r',  'e', 'd'};
  assert_int_equal(kvp__relay_decode(d, bad_events, sizeof bad_events, &out), 0);
  assert_int_equal(out.nevents, 1);
  assert_int_equal(out.errors, 3);
  kvp__relay_decoder_destroy(d);
}

static void media_table(void **state) {
  (void)state;
  kvp_relay_media_t m;
  char err[128];
  kvp__relay_media_default(&m);
  assert_int_equal(kvp__relay_media_tier(&m, "GPU", 3), 1);
  assert_int_equal(kvp__relay_media_tier(&m, "cpu_pinned", 10), 2);
  assert_int_equal(kvp__relay_media_tier(&m, "NVME", 4), 3);
  assert_int_equal(kvp__relay_media_tier(&m, "EXTERNAL", 8), 4);
  assert_int_equal(kvp__relay_media_tier(&m, NULL, 0), 1);
  assert_int_equal(kvp__relay_media_tier(&m, "TAPE", 4), 0);
  assert_int_equal(kvp__relay_media_parse(&m, "TAPE=G4,cpu=G3", err, sizeof err), 0);
  assert_int_equal(kvp__relay_media_tier(&m, "TAPE", 4), 4);
  assert_int_equal(kvp__relay_media_tier(&m, "CPU", 3), 3);
  assert_int_equal(kvp__relay_media_parse(&m, "X=G5", err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "X=G5"));
  assert_int_equal(kvp__relay_media_parse(&m, "=G1", err, sizeof err), KVP_ECONFIG);
}

/* The kv_cache_spec_kind table: what upstream sends, exactly. */
static void spec_kinds(void **state) {
  (void)state;
  static const char *const indexed[] = {"full_attention", "mla_attention", "sink_full_attention",
                                        "FullAttentionSpec", "MLAAttentionSpec"};
  static const char *const skipped[] = {"sliding_window", "chunked_local_attention", "mamba",
                                        "MambaSpec", "SlidingWindowSpec"};
  for (size_t i = 0; i < sizeof indexed / sizeof indexed[0]; i++)
    assert_int_equal(kvp__relay_kind_class(indexed[i], strlen(indexed[i])), 1);
  for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
    assert_int_equal(kvp__relay_kind_class(skipped[i], strlen(skipped[i])), 0);
  assert_int_equal(kvp__relay_kind_class(NULL, 0), 1); /* absent: full attention */
  assert_int_equal(kvp__relay_kind_class("linear_attention", 16), -1);
  assert_int_equal(kvp__relay_kind_class("MLA_ATTENTION", 13), -1); /* exact names */
}

/* Copies per (engine hash, tier): store G1, store G2, remove G1 leaves the
 * G2 copy mapped; repeated stores are references; remaining counts set. */
static void map_copies_per_tier(void **state) {
  (void)state;
  kvp_relay_map_t *m;
  uint64_t v = 0;
  assert_int_equal(kvp__relay_map_create(16, &m), 0);
  kvp__relay_map_put(m, 42, 1000, 1, 0);
  kvp__relay_map_put(m, 42, 1000, 2, 0);
  assert_int_equal(kvp__relay_map_drop(m, 42, 1, -1, &v), 0);
  assert_true(v == 1000);
  assert_int_equal(kvp__relay_map_get(m, 42, &v), 1);
  kvp__relay_map_put(m, 42, 1000, 2, 0); /* announced again: two references */
  assert_int_equal(kvp__relay_map_drop(m, 42, 2, -1, &v), 1);
  assert_int_equal(kvp__relay_map_get(m, 42, &v), 1);
  assert_int_equal(kvp__relay_map_drop(m, 42, 2, 0, &v), 0); /* remaining_copy_counts 0 */
  assert_int_equal(kvp__relay_map_get(m, 42, &v), 0);
  assert_int_equal(kvp__relay_map_drop(m, 42, 2, -1, &v), -1);
  kvp__relay_map_put(m, 7, 7, 3, 1);
  assert_int_equal(kvp__relay_map_get(m, 7, &v), 2); /* native identity */
  kvp__relay_map_destroy(m);
}

static void map_lru_bounded(void **state) {
  (void)state;
  kvp_relay_map_t *m = (kvp_relay_map_t *)&m;
  assert_int_equal(kvp__relay_map_create(0, &m), KVP_EINVAL);
  assert_null(m);
  assert_int_equal(kvp__relay_map_create(100, &m), 0);
  uint64_t v;
  assert_non_null(m);
  for (uint64_t i = 0; i < 100; i++)
    assert_int_equal(kvp__relay_map_put(m, i * 7919, i, 1, 0), 0);
  assert_int_equal(kvp__relay_map_get(m, 0, &v), 1);            /* 0 becomes most recent */
  assert_int_equal(kvp__relay_map_put(m, 1000001, 5, 1, 0), 1); /* evicts key 7919 (oldest) */
  assert_int_equal(kvp__relay_map_get(m, 7919, &v), 0);
  assert_int_equal(kvp__relay_map_get(m, 0, &v), 1);
  assert_int_equal(kvp__relay_map_size(m), 100);
  assert_int_equal(kvp__relay_map_take(m, 2 * 7919, &v), 1);
  assert_true(v == 2);
  assert_int_equal(kvp__relay_map_take(m, 2 * 7919, &v), 0);
  /* heavy churn keeps every live key reachable */
  for (uint64_t i = 0; i < 100000; i++)
    kvp__relay_map_put(m, i * 2654435761u, i, 1, 0);
  for (uint64_t i = 100000 - 100; i < 100000; i++) {
    assert_int_equal(kvp__relay_map_get(m, i * 2654435761u, &v), 1);
    assert_true(v == i);
  }
  assert_int_equal(kvp__relay_map_size(m), 100);
  kvp__relay_map_clear(m);
  assert_int_equal(kvp__relay_map_size(m), 0);
  assert_int_equal(kvp__relay_map_get(m, 99999 * 2654435761u, &v), 0);
  kvp__relay_map_destroy(m);
}

/* A map far larger than its first table: the table doubles as entries come
 * (from 1,024 slots), every key stays reachable across the regrowths and
 * removals, and at the cap the least recent goes. */
static void map_grows_with_what_it_holds(void **state) {
  (void)state;
  const uint64_t cap = 50000;
  kvp_relay_map_t *m;
  assert_int_equal(kvp__relay_map_create(cap, &m), 0);
  uint64_t v;
  assert_non_null(m);
  for (uint64_t i = 1; i <= cap; i++)
    assert_int_equal(kvp__relay_map_put(m, i * 0x9e3779b97f4a7c15ull, i, 1, 0), 0);
  for (uint64_t i = 1; i <= cap; i += 2)
    assert_int_equal(kvp__relay_map_take(m, i * 0x9e3779b97f4a7c15ull, &v), 1);
  for (uint64_t i = 2; i <= cap; i += 2) {
    assert_int_equal(kvp__relay_map_get(m, i * 0x9e3779b97f4a7c15ull, &v), 1);
    assert_true(v == i);
  }
  assert_int_equal(kvp__relay_map_size(m), cap / 2);
  /* Fill to the cap again with new keys, then one more: the least recent
   * (key 2, touched first in the loop above) goes. */
  for (uint64_t i = 1; i <= cap / 2; i++)
    assert_int_equal(kvp__relay_map_put(m, (cap + i) * 0x9e3779b97f4a7c15ull, i, 1, 0), 0);
  assert_int_equal(kvp__relay_map_size(m), cap);
  assert_int_equal(kvp__relay_map_put(m, 7, 7, 1, 0), 1);
  assert_int_equal(kvp__relay_map_get(m, 2 * 0x9e3779b97f4a7c15ull, &v), 0);
  assert_int_equal(kvp__relay_map_get(m, 4 * 0x9e3779b97f4a7c15ull, &v), 1);
  assert_int_equal(kvp__relay_map_get(m, 7, &v), 1);
  kvp__relay_map_destroy(m);
}

/* Tagged-array batches are read from the bytes (scan.c); whatever they hold,
 * valid or not, the result is the object tree's (decode.c). */
static void scan_matches_tree(void **state) {
  (void)state;
  kvp_relay_decoder_t *d, *td;
  kvp_relay_decoded_t a, b;
  assert_int_equal(kvp__relay_decoder_create(&d), 0);
  assert_int_equal(kvp__relay_decoder_create(&td), 0);
  for (int shape = 0; shape < 16; shape++) {
    msgpack_sbuffer sb;
    msgpack_packer p;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&p, shape == 3 ? 2 : 3);
    if (shape == 1)
      msgpack_pack_float(&p, 2.5f);
    else if (shape == 2)
      msgpack_pack_int64(&p, -7);
    else
      msgpack_pack_uint64(&p, 1732500000123ull + (unsigned)shape);
    msgpack_pack_array(&p, 8);
    /* Stored: every positional slot, hashes as ints, negatives and bytes,
     * token ids of every width, lora_id, extra keys, kind, window, locality */
    msgpack_pack_array(&p, 14);
    pk_str(&p, "BlockStored");
    msgpack_pack_array(&p, 3);
    msgpack_pack_uint64(&p, UINT64_MAX - (unsigned)shape);
    msgpack_pack_int64(&p, -5);
    msgpack_pack_bin(&p, 10);
    msgpack_pack_bin_body(&p, "0123456789", 10);
    if (shape == 4)
      msgpack_pack_str(&p, 0); /* an empty byte hash: malformed */
    else
      msgpack_pack_int8(&p, 9);
    msgpack_pack_array(&p, 6);
    msgpack_pack_uint8(&p, 7);
    msgpack_pack_uint16(&p, 300);
    msgpack_pack_uint32(&p, 151935);
    msgpack_pack_int32(&p, 70000);
    msgpack_pack_uint64(&p, shape == 5 ? 1ull << 33 : 12); /* 2^33: above uint32 */
    msgpack_pack_int8(&p, shape == 6 ? -1 : 3);
    msgpack_pack_int(&p, 2);
    msgpack_pack_int(&p, shape == 7 ? -3 : 4);
    pk_str(&p, shape == 8 ? "CPU" : "GPU");
    if (shape == 9)
      msgpack_pack_true(&p); /* lora_name of the wrong type */
    else
      pk_str(&p, "adapter");
    msgpack_pack_array(&p, 2);
    msgpack_pack_nil(&p);
    if (shape == 10) {
      msgpack_pack_array(&p, 1);
      pk_str(&p, "mm");
    } else if (shape >= 12) { /* extra keys kvplane hashes: digest, [id, offset], LoRA */
      msgpack_pack_array(&p, shape == 15 ? 3 : 2);
      if (shape == 12 || shape == 15)
        pk_str(&p, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
      if (shape == 13 || shape == 15) {
        msgpack_pack_array(&p, 2);
        pk_str(&p, "opaque-image");
        msgpack_pack_int(&p, shape == 13 ? -2 : 3);
      }
      if (shape == 14 || shape == 15)
        pk_str(&p, "adapter");
      if (shape != 15)
        msgpack_pack_nil(&p);
    } else {
      msgpack_pack_nil(&p);
    }
    msgpack_pack_int(&p, 0);
    pk_str(&p, "mla_attention");
    msgpack_pack_nil(&p);
    pk_str(&p, "LOCAL");
    msgpack_pack_int(&p, 99); /* beyond the positional slots: ignored */
    /* Removed with locality, then with remaining_copy_counts */
    msgpack_pack_array(&p, 5);
    pk_str(&p, "BlockRemoved");
    msgpack_pack_array(&p, 1);
    msgpack_pack_uint64(&p, 42);
    pk_str(&p, "CPU_PINNED");
    msgpack_pack_nil(&p);
    pk_str(&p, "LOCAL");
    msgpack_pack_array(&p, 5);
    pk_str(&p, "BlockRemoved");
    msgpack_pack_array(&p, 2);
    msgpack_pack_uint64(&p, 42);
    msgpack_pack_uint64(&p, 43);
    msgpack_pack_str(&p, 3);
    msgpack_pack_str_body(&p, "GPU", 3);
    msgpack_pack_int(&p, 1);
    msgpack_pack_array(&p, shape == 11 ? 1 : 2);
    msgpack_pack_int(&p, 1);
    if (shape != 11)
      msgpack_pack_int(&p, 0);
    /* Cleared, a scalar, an unknown tag, an empty array, a short Stored */
    msgpack_pack_array(&p, 1);
    pk_str(&p, "AllBlocksCleared");
    msgpack_pack_int(&p, 5);
    msgpack_pack_array(&p, 1);
    pk_str(&p, "Foo");
    msgpack_pack_array(&p, 0);
    msgpack_pack_array(&p, 2);
    pk_str(&p, "BlockStored");
    msgpack_pack_array(&p, 0);
    if (shape != 3)
      msgpack_pack_int(&p, shape == 0 ? -1 : shape);
    int rc = decode(d, &sb, &a);
    assert_int_equal(kvp__relay_decode_tree(td, (const uint8_t *)sb.data, sb.size, &b), rc);
    assert_int_equal(rc, 0);
    assert_true(kvp__relay_decoded_same(&a, &b));
    assert_int_equal(a.nevents + a.errors, 8);
    /* every prefix is rejected alike */
    for (size_t cut = 0; cut < sb.size; cut += 7)
      assert_int_equal(kvp__relay_decode(d, (const uint8_t *)sb.data, cut, &a),
                       kvp__relay_decode_tree(td, (const uint8_t *)sb.data, cut, &b));
    msgpack_sbuffer_destroy(&sb);
  }
  kvp__relay_decoder_destroy(d);
  kvp__relay_decoder_destroy(td);
}

/* The extra-keys table (README, relay section): what each item of a
 * block's extra_keys (and Dynamo's block_mm_infos) becomes, both readers. */
static void extra_keys_table(void **state) {
  (void)state;
  static const char dig[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  kvp_relay_decoder_t *d, *td;
  kvp_relay_decoded_t a, b;
  uint64_t opaque_id;
  assert_int_equal(kvp__relay_decoder_create(&d), 0);
  assert_int_equal(kvp__relay_decoder_create(&td), 0);
  assert_int_equal(kvp_hash_mm_identifier("opaque", 6, &opaque_id), 0);
  /* item: 0 digest, 1 [id, offset], 2 the LoRA name, 3 a cache salt, 4
   * bytes (prompt embeddings), 5 an int, 6 [id] without offset */
  for (int item = 0; item < 7; item++) {
    msgpack_sbuffer sb;
    msgpack_packer p;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
    pk_batch(&p, 1);
    msgpack_pack_array(&p, 9);
    pk_str(&p, "BlockStored");
    msgpack_pack_array(&p, 2);
    msgpack_pack_uint64(&p, 1);
    msgpack_pack_uint64(&p, 2);
    msgpack_pack_nil(&p);
    msgpack_pack_array(&p, 0);
    msgpack_pack_int(&p, 2);
    msgpack_pack_nil(&p);
    msgpack_pack_nil(&p);
    pk_str(&p, "lora-a");
    msgpack_pack_array(&p, 2); /* block 0: the item and a digest; block 1: none */
    msgpack_pack_array(&p, 2);
    switch (item) {
    case 0:
      pk_str(&p, dig);
      break;
    case 1:
      msgpack_pack_array(&p, 2);
      pk_str(&p, "opaque");
      msgpack_pack_int(&p, 4);
      break;
    case 2:
      pk_str(&p, "lora-a");
      break;
    case 3:
      pk_str(&p, "tenant-7");
      break;
    case 4:
      msgpack_pack_bin(&p, 2);
      msgpack_pack_bin_body(&p, "\x01\x02", 2);
      break;
    case 5:
      msgpack_pack_int(&p, 5);
      break;
    default:
      msgpack_pack_array(&p, 1);
      pk_str(&p, "opaque");
      break;
    }
    pk_str(&p, dig);
    msgpack_pack_nil(&p); /* block 1 */
    msgpack_pack_nil(&p); /* dp_rank */
    assert_int_equal(decode(d, &sb, &a), 0);
    assert_int_equal(kvp__relay_decode_tree(td, (const uint8_t *)sb.data, sb.size, &b), 0);
    assert_true(kvp__relay_decoded_same(&a, &b));
    const kvp_relay_event_t *e = &a.events[0];
    uint64_t want = UINT64_C(0x0123456789abcdef);
    if (item >= 3) {
      assert_true(e->extra_opaque);
      assert_null(e->mm);
    } else {
      assert_false(e->extra_opaque);
      assert_non_null(e->mm);
      size_t k = 0, n0 = (size_t)e->mm[k++];
      assert_int_equal(n0, item == 2 ? 1 : 2);
      if (item == 0)
        assert_true(e->mm[k] == want && e->mm[k + 1] == want);
      if (item == 1)
        assert_true(e->mm[k] == opaque_id && e->mm[k + 1] == want);
      if (item == 2)
        assert_true(e->mm[k] == want);
      k += n0;
      assert_int_equal(e->mm[k], 0); /* block 1 */
    }
    msgpack_sbuffer_destroy(&sb);
  }
  /* Dynamo's TensorRT-LLM events: block_mm_infos by key. */
  msgpack_sbuffer sb;
  msgpack_packer p;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&p, &sb, msgpack_sbuffer_write);
  pk_batch(&p, 1);
  msgpack_pack_map(&p, 3);
  pk_str(&p, "type");
  pk_str(&p, "BlockStored");
  pk_str(&p, "block_hashes");
  msgpack_pack_array(&p, 2);
  msgpack_pack_int64(&p, -3);
  msgpack_pack_int64(&p, 4);
  pk_str(&p, "block_mm_infos");
  msgpack_pack_array(&p, 2);
  msgpack_pack_nil(&p);
  msgpack_pack_map(&p, 1);
  pk_str(&p, "mm_objects");
  msgpack_pack_array(&p, 2);
  for (int i = 0; i < 2; i++) {
    msgpack_pack_map(&p, 2);
    pk_str(&p, "mm_hash");
    msgpack_pack_uint64(&p, UINT64_MAX - (uint64_t)i);
    pk_str(&p, "offsets");
    msgpack_pack_array(&p, 0);
  }
  msgpack_pack_nil(&p);
  assert_int_equal(decode(d, &sb, &a), 0);
  const kvp_relay_event_t *e = &a.events[0];
  assert_false(e->extra_opaque);
  assert_non_null(e->mm);
  assert_int_equal(e->mm[0], 0);
  assert_int_equal(e->mm[1], 2);
  assert_true(e->mm[2] == UINT64_MAX && e->mm[3] == UINT64_MAX - 1);
  msgpack_sbuffer_destroy(&sb);
  kvp__relay_decoder_destroy(d);
  kvp__relay_decoder_destroy(td);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(extra_keys_table),
    cmocka_unit_test(tagged_arrays),
    cmocka_unit_test(maps_and_defaults),
    cmocka_unit_test(malformed_rejected),
    cmocka_unit_test(media_table),
    cmocka_unit_test(spec_kinds),
    cmocka_unit_test(map_lru_bounded),
    cmocka_unit_test(map_copies_per_tier),
    cmocka_unit_test(map_grows_with_what_it_holds),
    cmocka_unit_test(scan_matches_tree),
};

KVP_TEST_MAIN("relay_decode", tests)
