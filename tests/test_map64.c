/* common/map64: the shared 64-bit-key hash map. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/map64.h"
#include "harness.h"
#include "kvplane/status.h"

/* The ENOMEM case asks for a table no allocator gives; under
 * AddressSanitizer that must return NULL rather than abort. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t rnd(void) { /* splitmix64: reproducible across runs */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Every key sits in its home or after it with no empty slot between, and
 * the count matches the occupied slots. */
static void check_invariants(const kvp__map64_t *m) {
  size_t used = 0;
  for (size_t j = 0; j < m->cap; j++) {
    if (m->slot[j].key == 0)
      continue;
    used++;
    for (size_t s = kvp__map64_home(m, m->slot[j].key); s != j; s = (s + 1) & (m->cap - 1))
      assert_int_not_equal(m->slot[s].key, 0);
  }
  assert_int_equal(used, m->n);
}

static void put_get_del_and_replace(void **state) {
  (void)state;
  kvp__map64_t m;
  uint64_t v = 0;
  assert_int_equal(kvp__map64_init(&m, 0), 0);
  assert_int_equal(kvp__map64_get(&m, 42, &v), KVP_ENOENT);
  assert_int_equal(kvp__map64_del(&m, 42, NULL), KVP_ENOENT);
  assert_int_equal(kvp__map64_put(&m, 42, 7), 0);
  assert_int_equal(kvp__map64_get(&m, 42, &v), 0);
  assert_int_equal(v, 7);
  assert_int_equal(kvp__map64_put(&m, 42, 8), 0);
  assert_int_equal(kvp__map64_count(&m), 1);
  assert_int_equal(*kvp__map64_find(&m, 42), 8);
  *kvp__map64_find(&m, 42) = 9;
  assert_int_equal(kvp__map64_del(&m, 42, &v), 0);
  assert_int_equal(v, 9);
  assert_int_equal(kvp__map64_count(&m), 0);
  assert_null(kvp__map64_find(&m, 42));
  assert_int_equal(kvp__map64_bytes(&m), 16 * sizeof(kvp__map64_slot_t));
  kvp__map64_free(&m);
  assert_int_equal(kvp__map64_bytes(&m), 0);
  kvp__map64_free(&m); /* twice: a freed map is an empty one */
}

static void key_zero_and_max_are_keys_like_any(void **state) {
  (void)state;
  kvp__map64_t m;
  uint64_t v = 1;
  assert_int_equal(kvp__map64_init(&m, 0), 0);
  assert_int_equal(kvp__map64_get(&m, 0, &v), KVP_ENOENT);
  assert_int_equal(kvp__map64_put(&m, 0, 0), 0); /* value 0 too */
  assert_int_equal(kvp__map64_put(&m, UINT64_MAX, UINT64_MAX), 0);
  assert_int_equal(kvp__map64_count(&m), 2);
  assert_int_equal(kvp__map64_get(&m, 0, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(kvp__map64_get(&m, UINT64_MAX, &v), 0);
  assert_int_equal(v, UINT64_MAX);
  size_t it = 0, seen = 0;
  uint64_t k;
  while (kvp__map64_next(&m, &it, &k, &v))
    seen += k == 0 ? 1 : k == UINT64_MAX ? 2 : 100;
  assert_int_equal(seen, 3);
  assert_int_equal(kvp__map64_del(&m, 0, &v), 0);
  assert_int_equal(v, 0);
  assert_int_equal(kvp__map64_del(&m, 0, NULL), KVP_ENOENT);
  assert_int_equal(kvp__map64_count(&m), 1);
  kvp__map64_clear(&m);
  assert_int_equal(kvp__map64_count(&m), 0);
  assert_int_equal(kvp__map64_get(&m, UINT64_MAX, NULL), KVP_ENOENT);
  kvp__map64_free(&m);
}

static void grows_across_many_inserts_and_keeps_its_floor(void **state) {
  (void)state;
  kvp__map64_t m;
  const uint64_t n = 100000;
  assert_int_equal(kvp__map64_init(&m, 1000), 0);
  assert_int_equal(kvp__map64_put(&m, 1, 1), 0);
  assert_int_equal(m.cap, 2048);    /* 1000 keys at most half full */
  for (uint64_t i = 1; i <= n; i++) /* sequential keys: the worst case of a weak hash */
    assert_int_equal(kvp__map64_put(&m, i << 20, i), 0);
  assert_int_equal(kvp__map64_count(&m), n + 1);
  assert_true(m.cap >= 2 * n && m.cap <= 4 * n);
  check_invariants(&m);
  for (uint64_t i = 1; i <= n; i++) {
    uint64_t v;
    assert_int_equal(kvp__map64_get(&m, i << 20, &v), 0);
    assert_int_equal(v, i);
  }
  kvp__map64_clear(&m);
  assert_true(m.cap >= 2 * n); /* clear keeps the capacity */
  kvp__map64_free(&m);
  assert_int_equal(kvp__map64_put(&m, 5, 5), 0);
  assert_int_equal(m.cap, 2048); /* free goes back to the floor */
  kvp__map64_free(&m);
}

/* Keys whose home is one of the last two slots of a 16-slot table, so
 * their cluster wraps around to slot 0. */
static size_t wrapping_keys(uint64_t *out, size_t want) {
  kvp__map64_t probe;
  size_t n = 0;
  kvp__map64_init(&probe, 0);
  probe.cap = 16;
  probe.shift = 60;
  while (n < want) {
    uint64_t k = rnd();
    if (k != 0 && kvp__map64_home(&probe, k) >= 14)
      out[n++] = k;
  }
  return n;
}

static void deletion_in_a_wrapping_cluster_keeps_every_key(void **state) {
  (void)state;
  uint64_t k[7];
  wrapping_keys(k, 7); /* 7 keys in 16 slots: no growth */
  for (size_t gone = 0; gone < 7; gone++) {
    kvp__map64_t m;
    kvp__map64_init(&m, 0);
    for (size_t i = 0; i < 7; i++)
      assert_int_equal(kvp__map64_put(&m, k[i], i), 0);
    assert_int_equal(m.cap, 16);
    assert_true(m.slot[0].key != 0); /* the cluster did wrap */
    assert_int_equal(kvp__map64_del(&m, k[gone], NULL), 0);
    check_invariants(&m);
    for (size_t i = 0; i < 7; i++) {
      uint64_t v;
      assert_int_equal(kvp__map64_get(&m, k[i], &v), i == gone ? KVP_ENOENT : 0);
      if (i != gone)
        assert_int_equal(v, i);
    }
    kvp__map64_free(&m);
  }
}

/* Random puts and deletes over a small key space against a plain array,
 * in a table kept small so clusters are long and wrap. */
static void random_ops_match_a_reference_model(void **state) {
  (void)state;
  enum { NKEYS = 200, OPS = 200000 };
  uint64_t keys[NKEYS], ref[NKEYS];
  uint8_t in[NKEYS] = {0};
  kvp__map64_t m;
  size_t count = 0;

  wrapping_keys(keys, NKEYS / 2);
  for (size_t i = NKEYS / 2; i < NKEYS; i++)
    keys[i] = rnd() & 0xff; /* small keys, 0 among them most likely */
  keys[NKEYS - 1] = 0;
  keys[NKEYS - 2] = UINT64_MAX;
  for (size_t i = 0; i < NKEYS; i++) /* distinct keys only */
    for (size_t j = 0; j < i; j++)
      if (keys[j] == keys[i]) {
        keys[i] = rnd() | 1;
        j = (size_t)-1;
      }
  kvp__map64_init(&m, 0);
  for (size_t op = 0; op < OPS; op++) {
    size_t i = rnd() % NKEYS;
    uint64_t v;
    if (rnd() % 100 < 50) {
      v = rnd();
      assert_int_equal(kvp__map64_put(&m, keys[i], v), 0);
      count += !in[i];
      in[i] = 1;
      ref[i] = v;
    } else {
      assert_int_equal(kvp__map64_del(&m, keys[i], &v), in[i] ? 0 : KVP_ENOENT);
      if (in[i])
        assert_int_equal(v, ref[i]);
      count -= in[i];
      in[i] = 0;
    }
    assert_int_equal(kvp__map64_count(&m), count);
    if (op % 1000 == 0) {
      check_invariants(&m);
      for (size_t j = 0; j < NKEYS; j++) {
        assert_int_equal(kvp__map64_get(&m, keys[j], &v), in[j] ? 0 : KVP_ENOENT);
        if (in[j])
          assert_int_equal(v, ref[j]);
      }
    }
  }
  kvp__map64_free(&m);
}

static void iteration_sees_every_key_once(void **state) {
  (void)state;
  enum { N = 5000 };
  kvp__map64_t m;
  uint8_t *seen = calloc(N, 1);
  assert_non_null(seen);
  kvp__map64_init(&m, 0);
  for (uint64_t i = 0; i < N; i++) /* key 0 included */
    assert_int_equal(kvp__map64_put(&m, i * 0x100000001ull, i), 0);
  for (uint64_t i = 0; i < N; i += 3)
    assert_int_equal(kvp__map64_del(&m, i * 0x100000001ull, NULL), 0);
  size_t it = 0, n = 0;
  uint64_t k, v;
  while (kvp__map64_next(&m, &it, &k, &v)) {
    assert_int_equal(k, v * 0x100000001ull);
    assert_true(v % 3 != 0);
    assert_int_equal(seen[v], 0);
    seen[v] = 1;
    n++;
  }
  assert_int_equal(n, kvp__map64_count(&m));
  assert_int_equal(n, N - (N + 2) / 3);
  assert_int_equal(kvp__map64_next(&m, &it, &k, &v), 0); /* stays at the end */
  kvp__map64_free(&m);
  it = 0;
  assert_int_equal(kvp__map64_next(&m, &it, NULL, NULL), 0); /* empty map */
  free(seen);
}

static void out_of_memory_leaves_the_map_unchanged(void **state) {
  (void)state;
  kvp__map64_t m;
  uint64_t v;
  assert_int_equal(kvp__map64_init(&m, SIZE_MAX / 4), KVP_ETOOBIG);
  /* A floor of 2^46 slots (1 PiB): the first table cannot be had. */
  assert_int_equal(kvp__map64_init(&m, (size_t)1 << 45), 0);
  assert_int_equal(kvp__map64_put(&m, 9, 9), KVP_ENOMEM);
  assert_int_equal(kvp__map64_count(&m), 0);
  assert_int_equal(kvp__map64_get(&m, 9, &v), KVP_ENOENT);
  assert_int_equal(kvp__map64_put(&m, 0, 3), 0); /* key 0 needs no table */
  assert_int_equal(kvp__map64_get(&m, 0, &v), 0);
  assert_int_equal(v, 3);
  kvp__map64_free(&m);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(put_get_del_and_replace),
    cmocka_unit_test(key_zero_and_max_are_keys_like_any),
    cmocka_unit_test(grows_across_many_inserts_and_keeps_its_floor),
    cmocka_unit_test(deletion_in_a_wrapping_cluster_keeps_every_key),
    cmocka_unit_test(random_ops_match_a_reference_model),
    cmocka_unit_test(iteration_sees_every_key_once),
    cmocka_unit_test(out_of_memory_leaves_the_map_unchanged),
};

KVP_TEST_MAIN("map64", tests)
