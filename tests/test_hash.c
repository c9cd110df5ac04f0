/* Hashes match an independent implementation (Debian's python3-xxhash, run by
 * tests/tools/hash_vectors.py) for several sequences, with and without LoRA. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "harness.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

/* Same generator as hash_vectors.py. */
static void gen_tokens(int tc, uint32_t *out, size_t n) {
  uint32_t x = (uint32_t)tc * 2654435761u + 12345u;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    out[i] = x % 151936u;
  }
}

static void matches_python_xxhash(void **state) {
  (void)state;
  char script[512], out[512], line[8192];
  int ncases = 0;

  snprintf(script, sizeof script, "%s/tools/hash_vectors.py", kvp_test_srcdir());
  snprintf(out, sizeof out, "%s/hash_vectors.%d.txt", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  char *argv[] = {"/usr/bin/python3", script, NULL};
  assert_int_equal(kvp_test_spawn_wait(argv, NULL, out), 0);

  FILE *f = fopen(out, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f)) {
    int tc, block, n, off = 0;
    char lora[64];
    assert_int_equal(sscanf(line, "%d %63s %d %d%n", &tc, lora, &block, &n, &off), 4);
    uint32_t *toks = calloc((size_t)n + 1, sizeof *toks);
    uint64_t got[256];
    gen_tokens(tc, toks, (size_t)n);
    uint64_t seed = kvp_hash_seed(strcmp(lora, "-") == 0 ? NULL : lora);
    size_t nb = kvp_hash_sequence(toks, (size_t)n, (size_t)block, seed, got, 256);
    assert_int_equal(nb, (size_t)n / (size_t)block);
    char *p = line + off;
    for (size_t i = 0; i < nb; i++) {
      uint64_t want;
      int used;
      assert_int_equal(sscanf(p, " %" SCNx64 "%n", &want, &used), 1);
      p += used;
      if (want != got[i])
        fail_msg("case %d block %zu: want %016" PRIx64 " got %016" PRIx64, tc, i, want, got[i]);
    }
    free(toks);
    ncases++;
  }
  fclose(f);
  remove(out);
  assert_int_equal(ncases, 7);
}

static void seed_rules(void **state) {
  (void)state;
  assert_true(kvp_hash_seed(NULL) == 1337);
  assert_true(kvp_hash_seed("") == 1337);
  assert_true(kvp_hash_seed("a") == 1337 + XXH3_64bits_withSeed("a", 1, 0));
}

static void chain_is_order_sensitive(void **state) {
  (void)state;
  uint32_t a[16], b[16];
  for (int i = 0; i < 16; i++) {
    a[i] = (uint32_t)i;
    b[i] = (uint32_t)(100 + i);
  }
  uint64_t la = kvp_hash_block(a, 16, KVP_HASH_SEED), lb = kvp_hash_block(b, 16, KVP_HASH_SEED);
  assert_true(kvp_hash_chain(la, lb, KVP_HASH_SEED) != kvp_hash_chain(lb, la, KVP_HASH_SEED));
  /* A prefix shared by two sequences gives the same leading hashes. */
  uint32_t s1[48], s2[48];
  for (int i = 0; i < 48; i++)
    s1[i] = s2[i] = (uint32_t)(i * 7);
  s2[40] = 9999;
  uint64_t h1[3], h2[3];
  kvp_hash_sequence(s1, 48, 16, KVP_HASH_SEED, h1, 3);
  kvp_hash_sequence(s2, 48, 16, KVP_HASH_SEED, h2, 3);
  assert_true(h1[0] == h2[0] && h1[1] == h2[1] && h1[2] != h2[2]);
}

static void sequence_caps_and_zero_block(void **state) {
  (void)state;
  uint32_t t[64] = {0};
  uint64_t out[2];
  assert_int_equal(kvp_hash_sequence(t, 64, 16, KVP_HASH_SEED, out, 2), 4);
  assert_int_equal(kvp_hash_sequence(t, 64, 0, KVP_HASH_SEED, out, 2), 0);
  assert_true(kvp_hash_to_i64(kvp_hash_from_i64(-5)) == -5);
  assert_true(kvp_hash_to_i64(UINT64_MAX) == -1);
}

static void parse_reads_every_documented_form(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t want;
  } ok[] = {
      {"0x1f", 0x1f},
      {"0XFFFFFFFFFFFFFFFF", UINT64_MAX},
      {"00ab12cd34ef5678", 0x00ab12cd34ef5678ull},
      {"1234567890123456", 0x1234567890123456ull}, /* 16 digits: hex */
      {"+1234567890123456", 1234567890123456ull},  /* + forces decimal */
      {"1234", 1234},
      {"-1", UINT64_MAX},
      {"-9223372036854775808", 0x8000000000000000ull},
      {"18446744073709551615", UINT64_MAX},
      {"0", 0},
  };
  static const char *const bad[] = {"",   "0x",    "0x12345678901234567", "12ab", "-",
                                    "+",  "1.5",   "18446744073709551616", "-9223372036854775809",
                                    "0xg", " 12", "abcdefabcdefabcdx"};
  uint64_t v;
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    v = 0;
    if (kvp_hash_parse(ok[i].text, &v) != 0 || v != ok[i].want)
      fail_msg("'%s' read as %llx", ok[i].text, (unsigned long long)v);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (kvp_hash_parse(bad[i], &v) != KVP_EINVAL)
      fail_msg("'%s' accepted", bad[i]);
  assert_int_equal(kvp_hash_parse(NULL, &v), KVP_EINVAL);
  /* What sqlite3 shows is what the index holds. */
  assert_int_equal(kvp_hash_parse("-8446744073709551616", &v), 0);
  assert_int_equal(kvp_hash_to_i64(v), -8446744073709551616ll);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(parse_reads_every_documented_form),
    cmocka_unit_test(matches_python_xxhash),
    cmocka_unit_test(seed_rules),
    cmocka_unit_test(chain_is_order_sensitive),
    cmocka_unit_test(sequence_caps_and_zero_block),
};

KVP_TEST_MAIN("hash", tests)
