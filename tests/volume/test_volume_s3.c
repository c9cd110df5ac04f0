/* What is the s3 volume plugin's own, against the verifying S3 server on
 * loopback (tests/harness/s3v.h: botocore recomputes every signature as S3
 * canonicalises the request). The frame's checks over S3, wrong credentials
 * and a missing bucket at open, the server killed mid-run (retries, then a
 * clean error within a bound, then recovery). Signing of every key class,
 * pages, addressing, regions and tokens: test_volume_s3_sigv4.c; the
 * credential chain and timeouts: test_volume_s3_chain.c. The contract every
 * plugin keeps (bytes, misses, quota, usage rebuilt at open, threads) is the
 * conformance suite's: conformance.c, run against the same server. */
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3v.h"

typedef struct fx_s {
  kvp_s3v_t s3;
  kvp_volume_t *v;
} fx_t;

static int open_s3(const kvp_s3v_t *s3, const char *access, const char *secret, const char *bucket,
                   const char *capacity, kvp_volume_t **v, char *err, size_t errlen) {
  kvp_volume_param_t p[8] = {{"endpoint", s3->endpoint}, {"bucket", bucket ? bucket : s3->bucket},
                             {"access_key", access},     {"secret_key", secret},
                             {"prefix", "kv/"},          {"timeout_ms", "3000"},
                             {"retries", "3"},           {"capacity", capacity ? capacity : "0"}};
  return kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", p, 8, v, err, errlen);
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char err[512];
  *state = f;
  if (kvp_s3v_start(&f->s3, NULL) != 0)
    return -1;
  if (open_s3(&f->s3, KVP_S3V_ACCESS, KVP_S3V_SECRET, NULL, NULL, &f->v, err, sizeof err) != 0) {
    print_error("%s\n", err);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_volume_close(f->v);
  kvp_s3v_stop(&f->s3);
  free(f);
  return 0;
}

static void fill(uint8_t *b, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = (uint8_t)x;
  }
}

static kvp_frame_t meta_of(uint64_t hash, size_t len) {
  return (kvp_frame_t){.hash = hash, .parent = 7, .has_parent = 1, .payload_len = len};
}

/* Raw objects put through the plugin: another block's frame under a key,
 * a flipped payload bit, a truncated object. The frame check catches each,
 * whatever the store says. */
static void s3_wrong_or_damaged_objects_are_corrupt(void **state) {
  fx_t *f = *state;
  const kvp_volume_ops_t *ops = kvp_volume_ops(f->v);
  void *h = kvp_volume_handle(f->v);
  uint8_t payload[1000], header[KVP_FRAME_HEADER], out[1000];
  kvp_frame_t m = meta_of(0xa, sizeof payload), got;
  char err[512];

  fill(payload, sizeof payload, 1);
  kvp_frame_encode(&m, payload, header);
  struct iovec iov[2] = {{header, sizeof header}, {payload, sizeof payload}};
  assert_int_equal(ops->put(h, "ns", 0xb, iov, 2, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "ns", 0xb, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "another block"));
  payload[10] ^= 1;
  assert_int_equal(ops->put(h, "ns", 0xa, iov, 2, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "ns", 0xa, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "checksum"));
  payload[10] ^= 1;
  iov[1].iov_len = 500;
  assert_int_equal(ops->put(h, "ns", 0xa, iov, 2, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "ns", 0xa, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "length"));
}

static void s3_refuses_bad_credentials_and_missing_bucket(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512];

  assert_int_equal(open_s3(&f->s3, "NOBODY", "x", NULL, NULL, &v, err, sizeof err), KVP_EAUTH);
  assert_non_null(strstr(err, "403"));
  assert_non_null(strstr(err, "InvalidAccessKeyId"));
  assert_non_null(strstr(err, "volume g4-s3"));
  assert_int_equal(
      open_s3(&f->s3, KVP_S3V_ACCESS, KVP_S3V_SECRET, "nosuch", NULL, &v, err, sizeof err),
      KVP_ENOENT);
  assert_non_null(strstr(err, "nosuch"));
  kvp_volume_param_t none[2] = {{"endpoint", f->s3.endpoint}, {"bucket", "kvb"}};
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_PROFILE");
  setenv("HOME", "/nonexistent", 1);
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", none, 2, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "credentials"));
  /* The standard environment variables are credentials too. */
  setenv("AWS_ACCESS_KEY_ID", KVP_S3V_ACCESS, 1);
  setenv("AWS_SECRET_ACCESS_KEY", KVP_S3V_SECRET, 1);
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", none, 2, &v, err, sizeof err), 0);
  kvp_volume_close(v);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void s3_server_stopped_mid_run_gives_a_clean_error(void **state) {
  fx_t *f = *state;
  uint8_t in[4096], out[4096];
  char err[512];
  kvp_frame_t m = meta_of(0x99, sizeof in), got;

  fill(in, sizeof in, 9);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m, in, err, sizeof err), 0);
  kvp_s3v_kill(&f->s3);
  uint64_t t0 = now_ms();
  int rc = kvp_volume_get_block(f->v, "k", 0x99, &got, out, sizeof out, err, sizeof err);
  uint64_t took = now_ms() - t0;
  print_message("server gone: %s after %llu ms: %s\n", kvp_err_name(rc), (unsigned long long)took,
                err);
  assert_int_equal(rc, KVP_ECONN);
  assert_non_null(strstr(err, "attempts"));
  assert_true(took < 10000); /* 3 retries with backoff, no hang */
  assert_int_equal(kvp_s3v_restart(&f->s3), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "k", 0x99, &got, out, sizeof out, err, sizeof err),
                   0);
  assert_memory_equal(in, out, sizeof in);
}

/* Every signature is recomputed with botocore: the plugin's requests pass,
 * and a wrong secret is refused at open with KVP_EAUTH naming the bucket. */
static void s3_signatures_verified_by_botocore(void **state) {
  (void)state;
  kvp_s3v_t chk;
  kvp_volume_t *v = NULL;
  uint8_t in[3000], out[3000];
  char err[512];
  kvp_frame_t m = meta_of(0x5, sizeof in), got;

  assert_int_equal(kvp_s3v_start(&chk, NULL), 0);
  assert_int_equal(open_s3(&chk, KVP_S3V_ACCESS, "not-the-secret", NULL, NULL, &v, err, sizeof err),
                   KVP_EAUTH);
  print_message("wrong secret: %s\n", err);
  assert_non_null(strstr(err, "SignatureDoesNotMatch"));
  assert_non_null(strstr(err, "bucket kvb"));
  assert_int_equal(open_s3(&chk, KVP_S3V_ACCESS, KVP_S3V_SECRET, NULL, NULL, &v, err, sizeof err),
                   0);
  fill(in, sizeof in, 77);
  assert_int_equal(kvp_volume_put_block(v, "sig", &m, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(v, "sig", 0x5, &got, out, sizeof out, err, sizeof err), 0);
  assert_memory_equal(in, out, sizeof in);
  assert_int_equal(kvp_volume_exists(v, "sig", 0x5), 1);
  assert_int_equal(kvp_volume_delete(v, "sig", 0x5, err, sizeof err), 0);
  kvp_volume_close(v);
  kvp_s3v_stop(&chk);
}

/* The s3 volume's identity: open writes the marker kv/.kvplane-volume
 * (with the namespace kvp_volume_open_ns passes) and a volume of another
 * namespace is refused naming both; with the marker gone (a bucket
 * emptied, a prefix pointed elsewhere), once identity_ttl_ms has passed,
 * puts, deletes, stat and listings are KVP_EOFFLINE and nothing is
 * written; with the marker back, the volume is itself again. */
static void s3_marker_is_the_volume_identity(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  uint8_t in[2000];
  char err[512], hex[128] = "", marker[512], away[520];
  kvp_volume_stat_t st;
  const char *key = "kv/.kvplane-volume";

  for (size_t i = 0; key[i]; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)key[i]);
  snprintf(marker, sizeof marker, "%s/data/%s", f->s3.dir, hex);
  assert_int_equal(access(marker, F_OK), 0); /* written by setup's open */
  kvp_volume_close(f->v);
  f->v = NULL;
  unlink(marker);
  kvp_volume_param_t p[6] = {
      {"endpoint", f->s3.endpoint},   {"bucket", f->s3.bucket}, {"access_key", KVP_S3V_ACCESS},
      {"secret_key", KVP_S3V_SECRET}, {"prefix", "kv/"},        {"identity_ttl_ms", "100"}};
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", "ns-a", p, 6, &f->v, err, sizeof err),
      0);
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", "ns-b", p, 6, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "'ns-a'"));
  assert_non_null(strstr(err, "'ns-b'"));
  fill(in, sizeof in, 3);
  kvp_frame_t m = meta_of(0x31, sizeof in), m2 = meta_of(0x32, sizeof in);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m, in, err, sizeof err), 0);
  /* Gone. */
  snprintf(away, sizeof away, "%s.away", marker);
  assert_int_equal(rename(marker, away), 0);
  usleep(150000);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m2, in, err, sizeof err), KVP_EOFFLINE);
  print_message("marker gone: %s\n", err);
  assert_non_null(strstr(err, "offline"));
  assert_non_null(strstr(err, "kv/.kvplane-volume"));
  assert_int_equal(kvp_volume_exists(f->v, "k", 0x32), 0); /* nothing written */
  assert_int_equal(kvp_volume_delete(f->v, "k", 0x31, err, sizeof err), KVP_EOFFLINE);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), KVP_EOFFLINE);
  /* Back. */
  assert_int_equal(rename(away, marker), 0);
  usleep(150000);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m2, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_exists(f->v, "k", 0x31), 1);
}

/* A 404 whose code is NoSuchBucket (the bucket deleted under a running
 * volume) is the volume being away, KVP_EOFFLINE, not a missing key: the
 * engine drops the location of a get that says KVP_ENOENT. Within
 * identity_ttl_ms the marker is not looked at, so the code decides. A
 * NoSuchKey stays KVP_ENOENT. */
static void s3_no_such_bucket_is_offline_not_a_miss(void **state) {
  fx_t *f = *state;
  uint8_t in[100], out[100];
  char err[512];
  kvp_frame_t m = meta_of(0x41, sizeof in), got;
  fill(in, sizeof in, 4);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m, in, err, sizeof err), 0);
  assert_int_equal(kvp_s3v_control(&f->s3, "fail=1&status=404&code=NoSuchBucket"), 0);
  int rc = kvp_volume_get_block(f->v, "k", 0x41, &got, out, sizeof out, err, sizeof err);
  print_message("get, bucket gone: %s\n", err);
  assert_int_equal(rc, KVP_EOFFLINE);
  assert_non_null(strstr(err, "NoSuchBucket"));
  /* The next call reads the marker again (found: in place). A put looks
   * first (HEAD: no body, so no code; a 404 is "new"), then the PUT itself
   * says NoSuchBucket. */
  kvp_volume_stat_t st;
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(kvp_s3v_control(&f->s3, "fail=2&status=404&code=NoSuchBucket"), 0);
  assert_int_equal(kvp_volume_put_block(f->v, "k", &m, in, err, sizeof err), KVP_EOFFLINE);
  /* Back: the marker is in place, the object too. */
  assert_int_equal(kvp_volume_get_block(f->v, "k", 0x41, &got, out, sizeof out, err, sizeof err),
                   0);
  assert_int_equal(kvp_volume_get_block(f->v, "k", 0x42, &got, out, sizeof out, err, sizeof err),
                   KVP_ENOENT);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(s3_no_such_bucket_is_offline_not_a_miss, setup, teardown),
    cmocka_unit_test_setup_teardown(s3_wrong_or_damaged_objects_are_corrupt, setup, teardown),
    cmocka_unit_test_setup_teardown(s3_refuses_bad_credentials_and_missing_bucket, setup, teardown),
    cmocka_unit_test_setup_teardown(s3_server_stopped_mid_run_gives_a_clean_error, setup, teardown),
    cmocka_unit_test(s3_signatures_verified_by_botocore),
    cmocka_unit_test_setup_teardown(s3_marker_is_the_volume_identity, setup, teardown),
};

KVP_TEST_MAIN("volume_s3", tests)
