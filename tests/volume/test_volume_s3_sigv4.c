/* The s3 plugin's requests as S3 canonicalises them, against the verifying
 * server (tests/harness/s3v.h: botocore recomputes every signature from the
 * request as received, path decoded and re-encoded, query sorted, and
 * answers 403 SignatureDoesNotMatch when it differs): a listing of more
 * than one page, keys of every character class that needs URI encoding,
 * virtual-hosted addressing, a region other than us-east-1, a session
 * token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3v.h"

static int open_vol(const kvp_s3v_t *s3, const char *endpoint, const char *prefix,
                    const char *addressing, const char *region, const char *access,
                    const char *secret, const char *token, kvp_volume_t **v, char *err,
                    size_t errlen) {
  kvp_volume_param_t p[10] = {{"endpoint", endpoint ? endpoint : s3->endpoint},
                              {"bucket", s3->bucket},
                              {"access_key", access ? access : KVP_S3V_ACCESS},
                              {"secret_key", secret ? secret : KVP_S3V_SECRET},
                              {"prefix", prefix ? prefix : "kv/"},
                              {"retries", "2"},
                              {"addressing", addressing ? addressing : "path"},
                              {"region", region ? region : "us-east-1"}};
  size_t n = 8;
  if (token)
    p[n++] = (kvp_volume_param_t){"session_token", token};
  return kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", p, n, v, err, errlen);
}

/* put, exists, get, a listing that finds it (open), delete: every request
 * kind the plugin makes, on a volume v opened with prefix. */
static void round_trip(kvp_volume_t *v, const char *ns, uint64_t hash) {
  uint8_t in[5000], out[5000];
  char err[512];
  kvp_frame_t m = {.hash = hash, .payload_len = sizeof in}, got;
  kvp_volume_stat_t st;
  for (size_t i = 0; i < sizeof in; i++)
    in[i] = (uint8_t)(i * 7 + hash);
  assert_int_equal(kvp_volume_put_block(v, ns, &m, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_exists(v, ns, hash), 1);
  assert_int_equal(kvp_volume_get_block(v, ns, hash, &got, out, sizeof out, err, sizeof err), 0);
  assert_memory_equal(in, out, sizeof in);
  assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
  assert_int_equal(kvp_volume_delete(v, ns, hash, err, sizeof err), 0);
  assert_int_equal(kvp_volume_exists(v, ns, hash), 0);
}

typedef struct count_s {
  uint64_t n, bytes;
} count_t;

static int count_key(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  count_t *c = ctx;
  (void)ns;
  (void)hash;
  c->n++;
  c->bytes += bytes;
  return 0;
}

/* 2,500 objects: three ListObjectsV2 pages, the second and third asked for
 * with a continuation token (signed sorted, as S3 checks). */
static void s3_lists_2500_objects_over_pages(void **state) {
  (void)state;
  kvp_s3v_t s3;
  kvp_volume_t *v = NULL;
  char err[512];
  uint8_t b[16] = {1, 2, 3};
  struct iovec iov = {b, sizeof b};

  assert_int_equal(kvp_s3v_start(&s3, NULL), 0);
  assert_int_equal(open_vol(&s3, NULL, "many/", NULL, NULL, NULL, NULL, NULL, &v, err, sizeof err),
                   0);
  const kvp_volume_ops_t *ops = kvp_volume_ops(v);
  void *h = kvp_volume_handle(v);
  for (uint64_t i = 0; i < 2500; i++)
    assert_int_equal(ops->put(h, i % 2 ? "odd" : "even", 0x1000 + i, &iov, 1, err, sizeof err), 0);
  kvp_volume_close(v);
  assert_int_equal(open_vol(&s3, NULL, "many/", NULL, NULL, NULL, NULL, NULL, &v, err, sizeof err),
                   0);
  kvp_volume_stat_t st;
  assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 2500);
  assert_int_equal(st.used, 2500 * sizeof b);
  count_t c = {0};
  assert_int_equal(kvp_volume_ops(v)->iterate(kvp_volume_handle(v), count_key, &c, err, sizeof err),
                   0);
  assert_int_equal(c.n, 2500);
  kvp_volume_close(v);
  kvp_s3v_stop(&s3);
}

/* Prefixes with every character class S3 encodes: + = & ; , ( ) ! * '
 * a space, % and non-ASCII; and < > " that listings XML-escape. */
static void s3_keys_of_every_character_class(void **state) {
  (void)state;
  static const char *prefixes[] = {"plus+/",
                                   "eq=amp&/",
                                   "semi;comma,/",
                                   "paren()/",
                                   "bang!star*/",
                                   "quote'/",
                                   "sp ace/",
                                   "pct%25%/",
                                   "utf8-\xc3\xa9\xe4\xb8\xad/",
                                   "xml<>\"&amp;/",
                                   "all +=&;,()!*' %\xc3\xb8/",
                                   "dot/./seg/",
                                   "up/../x/",
                                   "dbl//slash/"};
  kvp_s3v_t s3;
  char err[512];

  assert_int_equal(kvp_s3v_start(&s3, NULL), 0);
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    kvp_volume_t *v = NULL;
    kvp_volume_stat_t st;
    int rc = open_vol(&s3, NULL, prefixes[i], NULL, NULL, NULL, NULL, NULL, &v, err, sizeof err);
    if (rc != 0)
      print_error("prefix '%s': %s\n", prefixes[i], err);
    assert_int_equal(rc, 0);
    round_trip(v, "ns", 0xabc + i);
    /* One object left for the listing at the next open to find. */
    uint8_t b[32] = {0};
    struct iovec iov = {b, sizeof b};
    assert_int_equal(
        kvp_volume_ops(v)->put(kvp_volume_handle(v), "ns", 7, &iov, 1, err, sizeof err), 0);
    kvp_volume_close(v);
    rc = open_vol(&s3, NULL, prefixes[i], NULL, NULL, NULL, NULL, NULL, &v, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
    if (st.blocks != 1)
      print_error("prefix '%s': %llu objects listed\n", prefixes[i], (unsigned long long)st.blocks);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(kvp_volume_delete(v, "ns", 7, err, sizeof err), 0);
    kvp_volume_close(v);
  }
  kvp_s3v_stop(&s3);
}

/* Virtual-hosted: kvb.localhost:<port> (libcurl resolves *.localhost to
 * loopback itself); the server takes the bucket from Host. */
static void s3_virtual_hosted_addressing(void **state) {
  (void)state;
  kvp_s3v_t s3;
  kvp_volume_t *v = NULL;
  char err[512];

  assert_int_equal(kvp_s3v_start(&s3, NULL), 0);
  assert_int_equal(open_vol(&s3, s3.host_endpoint, "v h+/", "virtual", NULL, NULL, NULL, NULL, &v,
                            err, sizeof err),
                   0);
  round_trip(v, "virt", 0x77);
  kvp_volume_close(v);
  kvp_s3v_stop(&s3);
}

/* eu-west-3 signs with its own scope; us-east-1 against it is refused. */
static void s3_region_other_than_us_east_1(void **state) {
  (void)state;
  kvp_s3v_t s3;
  kvp_volume_t *v = NULL;
  char err[512];

  assert_int_equal(kvp_s3v_start(&s3, "eu-west-3"), 0);
  assert_int_equal(
      open_vol(&s3, NULL, NULL, NULL, "eu-west-3", NULL, NULL, NULL, &v, err, sizeof err), 0);
  round_trip(v, "paris", 0x33);
  kvp_volume_close(v);
  assert_int_not_equal(
      open_vol(&s3, NULL, NULL, NULL, "us-east-1", NULL, NULL, NULL, &v, err, sizeof err), 0);
  assert_non_null(strstr(err, "AuthorizationHeaderMalformed"));
  kvp_s3v_stop(&s3);
}

/* A session key works with its token, and is refused without it. */
static void s3_session_token(void **state) {
  (void)state;
  kvp_s3v_t s3;
  kvp_volume_t *v = NULL;
  char err[512];

  assert_int_equal(kvp_s3v_start(&s3, NULL), 0);
  assert_int_equal(open_vol(&s3, NULL, NULL, NULL, NULL, KVP_S3V_SESSION_ACCESS,
                            KVP_S3V_SESSION_SECRET, KVP_S3V_SESSION_TOKEN, &v, err, sizeof err),
                   0);
  round_trip(v, "sts", 0x44);
  kvp_volume_close(v);
  assert_int_equal(open_vol(&s3, NULL, NULL, NULL, NULL, KVP_S3V_SESSION_ACCESS,
                            KVP_S3V_SESSION_SECRET, NULL, &v, err, sizeof err),
                   KVP_EAUTH);
  assert_non_null(strstr(err, "InvalidToken"));
  assert_non_null(strstr(err, "bucket kvb"));
  kvp_s3v_stop(&s3);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(s3_lists_2500_objects_over_pages),
    cmocka_unit_test(s3_keys_of_every_character_class),
    cmocka_unit_test(s3_virtual_hosted_addressing),
    cmocka_unit_test(s3_region_other_than_us_east_1),
    cmocka_unit_test(s3_session_token),
};

KVP_TEST_MAIN("volume_s3_sigv4", tests)
