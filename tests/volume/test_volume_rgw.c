/* The s3 plugin against a real S3 server that verifies every signature:
 * Ceph's radosgw on a one-node cluster on loopback (tests/harness/rgw.h,
 * tests/tools/rgw_cluster.sh; one cluster per ctest run, each case under
 * a prefix of its own). The cases of test_volume_s3_sigv4 that a real
 * server can answer: a listing of more than one page, keys of every
 * character class that needs URI encoding, both addressing styles, a
 * region other than us-east-1, an STS session token, a wrong secret, and
 * 16 MiB blocks. Skipped (77) without radosgw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "rgw.h"

typedef struct opts_s {
  const char *endpoint, *prefix, *addressing, *region, *access, *secret, *token;
} opts_t;

static int open_vol(const kvp_rgw_t *g, const opts_t *o, kvp_volume_t **v, char *err,
                    size_t errlen) {
  kvp_volume_param_t p[10] = {{"endpoint", o->endpoint ? o->endpoint : g->endpoint},
                              {"bucket", g->bucket},
                              {"access_key", o->access ? o->access : g->access},
                              {"secret_key", o->secret ? o->secret : g->secret},
                              {"prefix", o->prefix},
                              {"retries", "2"},
                              {"addressing", o->addressing ? o->addressing : "path"},
                              {"region", o->region ? o->region : g->region}};
  size_t n = 8;
  if (o->token)
    p[n++] = (kvp_volume_param_t){"session_token", o->token};
  return kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-rgw", p, n, v, err, errlen);
}

static void attach(kvp_rgw_t *g) {
  assert_int_equal(kvp_rgw_attach(g), 0);
}

/* put, exists, get, stat, delete: every request kind the plugin makes, on a
 * volume v. */
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
 * with radosgw's continuation token. */
static void rgw_lists_2500_objects_over_pages(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];
  uint8_t b[16] = {1, 2, 3};
  struct iovec iov = {b, sizeof b};

  attach(&g);
  kvp_rgw_prefix("many", prefix, sizeof prefix);
  opts_t o = {.prefix = prefix};
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), 0);
  const kvp_volume_ops_t *ops = kvp_volume_ops(v);
  void *h = kvp_volume_handle(v);
  for (uint64_t i = 0; i < 2500; i++) {
    int rc = ops->put(h, i % 2 ? "odd" : "even", 0x1000 + i, &iov, 1, err, sizeof err);
    if (rc != 0)
      print_error("put %llu: %s\n", (unsigned long long)i, err);
    assert_int_equal(rc, 0);
  }
  kvp_volume_close(v);
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), 0);
  kvp_volume_stat_t st;
  assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 2500);
  assert_int_equal(st.used, 2500 * sizeof b);
  count_t c = {0};
  ops = kvp_volume_ops(v);
  h = kvp_volume_handle(v);
  assert_int_equal(ops->iterate(h, count_key, &c, err, sizeof err), 0);
  assert_int_equal(c.n, 2500);
  for (uint64_t i = 0; i < 2500; i++)
    assert_int_equal(ops->del(h, i % 2 ? "odd" : "even", 0x1000 + i, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* Prefixes with every character class S3 encodes: + = & ; , ( ) ! * '
 * a space, % and non-ASCII; and < > " that listings XML-escape. */
static void rgw_keys_of_every_character_class(void **state) {
  (void)state;
  static const char *classes[] = {"plus+/",
                                  "eq=amp&/",
                                  "semi;comma,/",
                                  "paren()/",
                                  "bang!star*/",
                                  "quote'/",
                                  "sp ace/",
                                  "pct%25%/",
                                  "utf8-\xc3\xa9\xe4\xb8\xad/",
                                  "xml<>\"&amp;/",
                                  "all +=&;,()!*' %\xc3\xb8/"};
  kvp_rgw_t g;
  char err[512], base[64], prefix[256];

  attach(&g);
  kvp_rgw_prefix("classes", base, sizeof base);
  for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
    kvp_volume_t *v = NULL;
    kvp_volume_stat_t st;
    snprintf(prefix, sizeof prefix, "%s%s", base, classes[i]);
    opts_t o = {.prefix = prefix};
    int rc = open_vol(&g, &o, &v, err, sizeof err);
    if (rc != 0)
      print_error("prefix '%s': %s\n", prefix, err);
    assert_int_equal(rc, 0);
    round_trip(v, "ns", 0xabc + i);
    /* One object left for the listing at the next open to find. */
    uint8_t b[32] = {0};
    struct iovec iov = {b, sizeof b};
    assert_int_equal(
        kvp_volume_ops(v)->put(kvp_volume_handle(v), "ns", 7, &iov, 1, err, sizeof err), 0);
    kvp_volume_close(v);
    assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), 0);
    assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
    if (st.blocks != 1)
      print_error("prefix '%s': %llu objects listed\n", prefix, (unsigned long long)st.blocks);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(kvp_volume_delete(v, "ns", 7, err, sizeof err), 0);
    kvp_volume_close(v);
  }
}

/* Virtual-hosted: kvb.localhost:<port> (libcurl resolves *.localhost to
 * loopback itself); radosgw takes the bucket from Host (rgw_dns_name
 * localhost). Path-style is what every other case uses. */
static void rgw_virtual_hosted_addressing(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];

  attach(&g);
  kvp_rgw_prefix("v h+", prefix, sizeof prefix);
  opts_t o = {.endpoint = g.host_endpoint, .prefix = prefix, .addressing = "virtual"};
  int rc = open_vol(&g, &o, &v, err, sizeof err);
  if (rc != 0)
    print_error("virtual-hosted: %s\n", err);
  assert_int_equal(rc, 0);
  round_trip(v, "virt", 0x77);
  kvp_volume_close(v);
}

/* A region other than us-east-1 in the signing scope. radosgw's zonegroup
 * is "default" and it recomputes the signature with the scope's region, so
 * it checks that the plugin signs consistently with the region it names;
 * refusing a wrong region (S3's AuthorizationHeaderMalformed) is
 * test_volume_s3_sigv4's case against the verifying server. */
static void rgw_region_other_than_us_east_1(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];

  attach(&g);
  kvp_rgw_prefix("paris", prefix, sizeof prefix);
  opts_t o = {.prefix = prefix, .region = "eu-west-3"};
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), 0);
  round_trip(v, "paris", 0x33);
  kvp_volume_close(v);
}

/* An STS AssumeRole credential: works with its token; without the token
 * radosgw does not know the key. */
static void rgw_session_token(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];

  attach(&g);
  kvp_rgw_prefix("sts", prefix, sizeof prefix);
  opts_t o = {.prefix = prefix,
              .access = g.session_access,
              .secret = g.session_secret,
              .token = g.session_token};
  int rc = open_vol(&g, &o, &v, err, sizeof err);
  if (rc != 0)
    print_error("session: %s\n", err);
  assert_int_equal(rc, 0);
  round_trip(v, "sts", 0x44);
  kvp_volume_close(v);
  o.token = NULL;
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), KVP_EAUTH);
  print_message("session key without its token: %s\n", err);
  assert_non_null(strstr(err, "403"));
  assert_non_null(strstr(err, "bucket kvb"));
}

/* A wrong secret: radosgw's 403 at open, KVP_EAUTH naming the bucket.
 * (With STS on, radosgw answers AccessDenied where S3 says
 * SignatureDoesNotMatch: after the key's own check fails it tries the STS
 * engine, whose refusal is the one reported.) */
static void rgw_wrong_secret_is_eauth_naming_the_bucket(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];

  attach(&g);
  kvp_rgw_prefix("auth", prefix, sizeof prefix);
  opts_t o = {.prefix = prefix, .secret = "not-the-secret"};
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), KVP_EAUTH);
  print_message("wrong secret: %s\n", err);
  assert_non_null(strstr(err, "HTTP 403"));
  assert_non_null(strstr(err, "bucket kvb"));
  o.secret = NULL;
  o.access = "NOBODY";
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), KVP_EAUTH);
  print_message("unknown key: %s\n", err);
  assert_non_null(strstr(err, "HTTP 403"));
  assert_non_null(strstr(err, "bucket kvb"));
}

/* 16 MiB blocks (radosgw stripes them over 4 MiB RADOS objects) come back
 * byte for byte. */
static void rgw_big_blocks_round_trip(void **state) {
  (void)state;
  kvp_rgw_t g;
  kvp_volume_t *v = NULL;
  char err[512], prefix[128];
  size_t n = 16u << 20;
  uint8_t *in = malloc(n), *out = malloc(n);

  assert_non_null(in);
  assert_non_null(out);
  attach(&g);
  kvp_rgw_prefix("big", prefix, sizeof prefix);
  opts_t o = {.prefix = prefix};
  assert_int_equal(open_vol(&g, &o, &v, err, sizeof err), 0);
  for (size_t i = 0; i < n; i++)
    in[i] = (uint8_t)(i * 131 + (i >> 13));
  kvp_frame_t m = {.hash = 0xb16, .payload_len = n}, got;
  assert_int_equal(kvp_volume_put_block(v, "big", &m, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(v, "big", 0xb16, &got, out, n, err, sizeof err), 0);
  assert_int_equal(got.payload_len, n);
  assert_memory_equal(in, out, n);
  assert_int_equal(kvp_volume_delete(v, "big", 0xb16, err, sizeof err), 0);
  kvp_volume_close(v);
  free(in);
  free(out);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(rgw_lists_2500_objects_over_pages),
    cmocka_unit_test(rgw_keys_of_every_character_class),
    cmocka_unit_test(rgw_virtual_hosted_addressing),
    cmocka_unit_test(rgw_region_other_than_us_east_1),
    cmocka_unit_test(rgw_session_token),
    cmocka_unit_test(rgw_wrong_secret_is_eauth_naming_the_bucket),
    cmocka_unit_test(rgw_big_blocks_round_trip),
};

KVP_TEST_MAIN("volume_rgw", tests)
