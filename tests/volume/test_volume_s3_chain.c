/* The s3 plugin's credential chain and its timeouts and retries, against
 * the verifying server (tests/harness/s3v.h): credentials, region and
 * endpoint from the environment and from a temporary ~/.aws (HOME set for
 * the case), a session token only with credentials from its own place, a
 * missing CA bundle named at open; a stalled transfer ends at the stall
 * timeout, Retry-After is waited (under the cap), 400 RequestTimeout is
 * retried. Each case is its own process (ctest), so the environment it
 * sets stays in it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3v.h"

static const char *vars[] = {"AWS_ACCESS_KEY_ID",
                             "AWS_SECRET_ACCESS_KEY",
                             "AWS_SESSION_TOKEN",
                             "AWS_PROFILE",
                             "AWS_REGION",
                             "AWS_DEFAULT_REGION",
                             "AWS_ENDPOINT_URL",
                             "AWS_ENDPOINT_URL_S3",
                             "AWS_CA_BUNDLE",
                             "AWS_CONFIG_FILE",
                             "AWS_SHARED_CREDENTIALS_FILE"};

typedef struct fx_s {
  kvp_s3v_t s3;
  char home[256];
} fx_t;

static int setup_region(void **state, const char *region) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
  if (kvp_test_tmpdir(f->home, sizeof f->home) == NULL)
    return -1;
  setenv("HOME", f->home, 1);
  return kvp_s3v_start(&f->s3, region);
}

static int setup(void **state) {
  return setup_region(state, NULL);
}

static int setup_paris(void **state) {
  return setup_region(state, "eu-west-3");
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_s3v_stop(&f->s3);
  kvp_test_rmtree(f->home);
  free(f);
  return 0;
}

static int open_p(kvp_volume_param_t *p, size_t n, kvp_volume_t **v, char *err, size_t errlen) {
  return kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", p, n, v, err, errlen);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/.aws", dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/.aws/%s", dir, name);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
}

/* Only the bucket given: keys, token, region and endpoint from AWS_*. */
static void chain_environment(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[1] = {{"bucket", "kvb"}};

  assert_int_equal(open_p(p, 1, &v, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "no credentials"));
  setenv("AWS_ACCESS_KEY_ID", KVP_S3V_SESSION_ACCESS, 1);
  setenv("AWS_SECRET_ACCESS_KEY", KVP_S3V_SESSION_SECRET, 1);
  setenv("AWS_SESSION_TOKEN", KVP_S3V_SESSION_TOKEN, 1);
  setenv("AWS_REGION", "eu-west-3", 1);
  setenv("AWS_ENDPOINT_URL", f->s3.endpoint, 1);
  assert_int_equal(open_p(p, 1, &v, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* A stale token in the environment is not attached to keys given as
 * parameters (it would be refused: InvalidToken). */
static void chain_env_token_only_with_env_keys(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[4] = {{"bucket", "kvb"},
                             {"endpoint", f->s3.endpoint},
                             {"access_key", KVP_S3V_ACCESS},
                             {"secret_key", KVP_S3V_SECRET}};

  setenv("AWS_ACCESS_KEY_ID", "STALE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "stale", 1);
  setenv("AWS_SESSION_TOKEN", "stale-token", 1);
  assert_int_equal(open_p(p, 4, &v, err, sizeof err), 0);
  kvp_volume_close(v);
  /* Half a pair, or a token alone, as parameters is a configuration error. */
  assert_int_equal(open_p(p, 3, &v, err, sizeof err), KVP_ECONFIG);
  p[3] = (kvp_volume_param_t){"session_token", "x"};
  p[2] = (kvp_volume_param_t){"region", "us-east-1"};
  assert_int_equal(open_p(p, 4, &v, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "session_token"));
}

/* AWS_PROFILE in ~/.aws/credentials (keys and token) and ~/.aws/config
 * (region, endpoint_url); environment keys still come first. */
static void chain_profile_files(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512], text[1024];
  kvp_volume_param_t p[1] = {{"bucket", "kvb"}};

  snprintf(text, sizeof text,
           "[default]\naws_access_key_id = NOTTHIS\naws_secret_access_key = x\n\n"
           "# the team's\n[kvp]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
           "aws_session_token = %s\n",
           KVP_S3V_SESSION_ACCESS, KVP_S3V_SESSION_SECRET, KVP_S3V_SESSION_TOKEN);
  write_file(f->home, "credentials", text);
  snprintf(text, sizeof text,
           "[default]\nregion = us-west-2\n[profile kvp]\nregion = eu-west-3\n"
           "s3 =\n  addressing_style = path\nendpoint_url = %s\n",
           f->s3.endpoint);
  write_file(f->home, "config", text);
  setenv("AWS_PROFILE", "kvp", 1);
  int rc = open_p(p, 1, &v, err, sizeof err);
  if (rc != 0)
    print_error("%s\n", err);
  assert_int_equal(rc, 0);
  kvp_volume_close(v);
  setenv("AWS_PROFILE", "nosuch", 1);
  assert_int_equal(open_p(p, 1, &v, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "nosuch"));
  /* The profile parameter names one too. */
  unsetenv("AWS_PROFILE");
  kvp_volume_param_t q[2] = {{"bucket", "kvb"}, {"profile", "kvp"}};
  assert_int_equal(open_p(q, 2, &v, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* A CA bundle that is not there fails the open and is named. */
static void chain_missing_ca_file_is_named(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[5] = {{"bucket", "kvb"},
                             {"endpoint", f->s3.endpoint},
                             {"access_key", KVP_S3V_ACCESS},
                             {"secret_key", KVP_S3V_SECRET},
                             {"ca_file", "/nonexistent/ca.pem"}};
  assert_int_equal(open_p(p, 5, &v, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "/nonexistent/ca.pem"));
  setenv("AWS_CA_BUNDLE", "/nonexistent/bundle.pem", 1);
  assert_int_equal(open_p(p, 4, &v, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "AWS_CA_BUNDLE"));
  assert_non_null(strstr(err, "/nonexistent/bundle.pem"));
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static kvp_volume_t *open_timed(fx_t *f, const char *stall_ms, const char *backoff_max_ms) {
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[7] = {{"bucket", "kvb"},
                             {"endpoint", f->s3.endpoint},
                             {"access_key", KVP_S3V_ACCESS},
                             {"secret_key", KVP_S3V_SECRET},
                             {"stall_timeout_ms", stall_ms},
                             {"backoff_max_ms", backoff_max_ms},
                             {"retries", "1"}};
  assert_int_equal(open_p(p, 7, &v, err, sizeof err), 0);
  return v;
}

static uint8_t blk[256 << 10], out[256 << 10];

/* A transfer that stops moving ends after the stall timeout (1 s), per
 * attempt, not at a total bound; a slow one that moves is not cut off. */
static void timeout_stall_ends_a_stopped_transfer(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = open_timed(f, "1000", "200");
  kvp_frame_t m = {.hash = 9, .payload_len = sizeof blk}, got;
  char err[512];

  assert_int_equal(kvp_volume_put_block(v, "t", &m, blk, err, sizeof err), 0);
  assert_int_equal(kvp_s3v_control(&f->s3, "stall=6&count=2"), 0);
  uint64_t t0 = now_ms();
  int rc = kvp_volume_get_block(v, "t", 9, &got, out, sizeof out, err, sizeof err);
  uint64_t took = now_ms() - t0;
  print_message("stalled: %s after %llu ms: %s\n", kvp_err_name(rc), (unsigned long long)took, err);
  assert_int_equal(rc, KVP_ETIMEDOUT);
  assert_true(took >= 1500 && took < 5500); /* two attempts of ~1-2 s each */
  /* A stall shorter than the timeout is waited out. */
  kvp_volume_close(v);
  v = open_timed(f, "3000", "200");
  assert_int_equal(kvp_s3v_control(&f->s3, "stall=1&count=1"), 0);
  assert_int_equal(kvp_volume_get_block(v, "t", 9, &got, out, sizeof out, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* 503 SlowDown with Retry-After: 1 is retried after a second, not 50 ms;
 * a Retry-After past backoff_max_ms waits the cap; 400 RequestTimeout is
 * retried. */
static void retry_after_and_request_timeout(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = open_timed(f, "5000", "20000");
  kvp_frame_t m = {.hash = 8, .payload_len = 1000}, got;
  char err[512];

  assert_int_equal(kvp_volume_put_block(v, "r", &m, blk, err, sizeof err), 0);
  assert_int_equal(kvp_s3v_control(&f->s3, "fail=1&status=503&code=SlowDown&retry_after=1"), 0);
  uint64_t t0 = now_ms();
  assert_int_equal(kvp_volume_get_block(v, "r", 8, &got, out, sizeof out, err, sizeof err), 0);
  uint64_t took = now_ms() - t0;
  print_message("Retry-After 1: %llu ms\n", (unsigned long long)took);
  assert_true(took >= 950);
  kvp_volume_close(v);

  v = open_timed(f, "5000", "300");
  assert_int_equal(kvp_s3v_control(&f->s3, "fail=1&status=503&code=SlowDown&retry_after=60"), 0);
  t0 = now_ms();
  assert_int_equal(kvp_volume_get_block(v, "r", 8, &got, out, sizeof out, err, sizeof err), 0);
  took = now_ms() - t0;
  print_message("Retry-After 60 under a 300 ms cap: %llu ms\n", (unsigned long long)took);
  assert_true(took < 3000);

  assert_int_equal(kvp_s3v_control(&f->s3, "fail=1&status=400&code=RequestTimeout"), 0);
  assert_int_equal(kvp_volume_get_block(v, "r", 8, &got, out, sizeof out, err, sizeof err), 0);
  /* Other 400s are not retried. */
  assert_int_equal(kvp_s3v_control(&f->s3, "fail=1&status=400&code=InvalidArgument"), 0);
  assert_int_equal(kvp_volume_get_block(v, "r", 8, &got, out, sizeof out, err, sizeof err),
                   KVP_EIO);
  assert_non_null(strstr(err, "InvalidArgument"));
  kvp_volume_close(v);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(chain_environment, setup_paris, teardown),
    cmocka_unit_test_setup_teardown(chain_env_token_only_with_env_keys, setup, teardown),
    cmocka_unit_test_setup_teardown(chain_profile_files, setup_paris, teardown),
    cmocka_unit_test_setup_teardown(chain_missing_ca_file_is_named, setup, teardown),
    cmocka_unit_test_setup_teardown(timeout_stall_ends_a_stopped_transfer, setup, teardown),
    cmocka_unit_test_setup_teardown(retry_after_and_request_timeout, setup, teardown),
};

KVP_TEST_MAIN("volume_s3_chain", tests)
