/* The s3 plugin's readers of outside text that need no server
 * (plugins/s3/s3_profile.c, s3_list.c and creds.c, compiled into this test):
 * the AWS shared files, the plain-http check, a listing page's keys and the
 * default endpoint's addressing; and the warning itself, through the
 * plugin: plain http:// to a host that is not loopback warns once per
 * process, loopback never. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3.h"
#include "s3_list.h"
#include "s3_profile.h"
#include "s3v.h"

static void read_text(const char *text, const char *profile, int config, s3_prof_t *p) {
  FILE *f = fmemopen((void *)text, strlen(text), "r");
  assert_non_null(f);
  kvp__s3_ini_read(f, profile, config, p);
  fclose(f);
}

/* The credentials file names [name], the config file [profile name] (but
 * [default]); the first value wins; comments, nested blocks and lines too
 * long to read whole are passed over. */
static void s3_ini_reads_the_profiles_own_section(void **state) {
  (void)state;
  static const char creds[] = "# comment\n"
                              "[default]\n"
                              "aws_access_key_id = DEFAULTKEY\n"
                              "aws_secret_access_key = d/s+=\n"
                              "[prod]\r\n"
                              "aws_access_key_id=PRODKEY\r\n"
                              "aws_access_key_id=SECONDKEY\r\n"
                              "; comment\n"
                              "aws_secret_access_key =  prod secret  \n"
                              "aws_session_token = tok==\n";
  static const char config[] = "[prod]\n"
                               "region = not-this-one\n"
                               "[profile prod]\n"
                               "s3 =\n"
                               "  endpoint_url = http://nested.example\n"
                               "region = eu-west-3\n"
                               "endpoint_url = https://s3.example:9000\n"
                               "ca_bundle = /etc/ssl/prod.pem\n"
                               "[default]\n"
                               "region = us-west-2\n";
  s3_prof_t p = {0};
  read_text(creds, "prod", 0, &p);
  read_text(config, "prod", 1, &p);
  assert_true(p.found);
  assert_string_equal(p.access, "PRODKEY");
  assert_string_equal(p.secret, "prod secret");
  assert_string_equal(p.token, "tok==");
  assert_string_equal(p.region, "eu-west-3");
  assert_string_equal(p.endpoint, "https://s3.example:9000");
  assert_string_equal(p.ca_bundle, "/etc/ssl/prod.pem");

  memset(&p, 0, sizeof p);
  read_text(config, "default", 1, &p);
  assert_true(p.found);
  assert_string_equal(p.region, "us-west-2");
  assert_string_equal(p.access, "");

  memset(&p, 0, sizeof p);
  read_text(creds, "staging", 0, &p);
  assert_false(p.found);
  assert_string_equal(p.access, "");

  /* A line longer than the reader's 8 KiB: its tail must not read as a
   * key of its own. */
  size_t n = 20000;
  char *big = malloc(n + 200);
  assert_non_null(big);
  int k = snprintf(big, n, "[default]\naws_session_token = ");
  memset(big + k, 'x', n - (size_t)k);
  memcpy(big + n - 40, "aws_access_key_id=INJECTED", 26);
  snprintf(big + n, 200, "\nregion = ap-south-1\n");
  memset(&p, 0, sizeof p);
  read_text(big, "default", 0, &p);
  assert_string_equal(p.access, "");
  assert_string_equal(p.token, "");
  assert_string_equal(p.region, "ap-south-1");
  free(big);
}

static void s3_plain_http_remote_decides_by_host(void **state) {
  (void)state;
  static const char *loopback[] = {
      "http://127.0.0.1:9000",    "http://127.1.2.3",           "http://localhost:80/x",
      "http://LOCALHOST",         "http://kvb.localhost:9000",  "http://localhost.:1",
      "http://[::1]:9000/bucket", "http://user:pw@127.0.0.1:1", "https://s3.example.com",
      "https://10.0.0.1",         "HTTPS://s3.example.com",
  };
  static const char *remote[] = {
      "http://10.0.0.5:7480",       "http://s3.example.com",     "http://127.example.com",
      "http://127.0.0.1.nip.io:80", "http://localhost.evil.com", "http://[::2]:9000",
      "http://127.0.0.1@evil.com",  "HTTP://minio:9000",         "http://0.0.0.0:9000",
  };
  for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
    if (kvp__s3_plain_http_remote(loopback[i]) != 0)
      print_error("%s: warned\n", loopback[i]);
    assert_int_equal(kvp__s3_plain_http_remote(loopback[i]), 0);
  }
  for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
    if (kvp__s3_plain_http_remote(remote[i]) != 1)
      print_error("%s: not warned\n", remote[i]);
    assert_int_equal(kvp__s3_plain_http_remote(remote[i]), 1);
  }
}

/* stderr into a file while fn runs; returns how many lines of it carry the
 * warning. */
static int warnings_during(void (*fn)(void *), void *ctx) {
  char path[] = "/tmp/kvp-s3-warn-XXXXXX";
  int fd = mkstemp(path), saved = dup(2), lines = 0;
  assert_true(fd >= 0);
  fflush(stderr);
  dup2(fd, 2);
  fn(ctx);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE *f = fopen(path, "r");
  char line[1024];
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "plain http://") != NULL) {
      lines++;
      fputs(line, stderr);
    }
  }
  if (f != NULL)
    fclose(f);
  close(fd);
  unlink(path);
  return lines;
}

static int open_at(const char *endpoint, kvp_volume_t **v, char *err, size_t errlen) {
  kvp_volume_param_t p[] = {
      {"endpoint", endpoint},         {"bucket", "kvb"}, {"access_key", KVP_S3V_ACCESS},
      {"secret_key", KVP_S3V_SECRET}, {"retries", "0"},  {"connect_timeout_ms", "2000"}};
  return kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "s3", "g4-s3", p, sizeof p / sizeof p[0], v, err,
                         errlen);
}

static void open_loopbacks(void *ctx) {
  const kvp_s3v_t *s3 = ctx;
  char ep[128], err[512];
  kvp_volume_t *v = NULL;
  assert_int_equal(open_at(s3->endpoint, &v, err, sizeof err), 0);
  kvp_volume_close(v);
  snprintf(ep, sizeof ep, "http://localhost:%d", s3->port);
  assert_int_equal(open_at(ep, &v, err, sizeof err), 0);
  kvp_volume_close(v);
}

/* An endpoint whose port is not 1..65535, or without a host, is refused at
 * open naming it (KVP_ECONFIG, before any request): libcurl refused it at
 * the first request ("URL using bad/illegal format"), which the advisor
 * took for a store that does not answer, and --print-config let pass. */
static void s3_endpoint_port_and_host_are_checked(void **state) {
  (void)state;
  static const char *const bad[] = {"http://127.0.0.1:99999", "http://127.0.0.1:0", "https://h:",
                                    "http://h:12x",           "http://:9000",       "http://",
                                    "http://[::1]x",          "http://[]:80"};
  char err[512];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvp_volume_t *v = NULL;
    err[0] = '\0';
    int rc = open_at(bad[i], &v, err, sizeof err);
    if (rc != KVP_ECONFIG || strstr(err, bad[i]) == NULL)
      fail_msg("endpoint %s: rc %d, '%s'", bad[i], rc, err);
    assert_null(v);
  }
}

/* Loopback endpoints (here the verifying server on 127.0.0.1 and
 * localhost): no warning. */
static void s3_plain_http_to_loopback_does_not_warn(void **state) {
  (void)state;
  kvp_s3v_t s3;
  assert_int_equal(kvp_s3v_start(&s3, NULL), 0);
  assert_int_equal(warnings_during(open_loopbacks, &s3), 0);
  kvp_s3v_stop(&s3);
}

/* An IPv4 address of this machine that is not loopback, or NULL. */
static const char *own_address(char *buf, size_t len) {
  struct ifaddrs *ifs = NULL;
  const char *found = NULL;
  if (getifaddrs(&ifs) != 0)
    return NULL;
  for (struct ifaddrs *i = ifs; i != NULL && found == NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
      continue;
    const struct sockaddr_in *a = (const struct sockaddr_in *)i->ifa_addr;
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
      continue;
    found = inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)len);
  }
  freeifaddrs(ifs);
  return found;
}

typedef struct remote_s {
  char ep[2][128];
  int rc[2];
} remote_t;

static void open_remotes(void *ctx) {
  remote_t *r = ctx;
  char err[512];
  for (int i = 0; i < 2; i++) {
    kvp_volume_t *v = NULL;
    r->rc[i] = open_at(r->ep[i], &v, err, sizeof err);
    kvp_volume_close(v);
  }
}

/* Plain http:// to this machine's own non-loopback address (a port nothing
 * listens on: the open fails, connection refused, after the endpoint was
 * read): one warning naming it, however many volumes are opened. */
static void s3_plain_http_to_a_remote_host_warns_once(void **state) {
  (void)state;
  char addr[64];
  remote_t r;
  if (own_address(addr, sizeof addr) == NULL) {
    print_message("no non-loopback IPv4 address on this machine: only the decision is tested "
                  "(s3_plain_http_remote_decides_by_host)\n");
    skip();
  }
  int port = kvp_test_free_port();
  snprintf(r.ep[0], sizeof r.ep[0], "http://%s:%d", addr, port);
  snprintf(r.ep[1], sizeof r.ep[1], "http://%s:%d/again", addr, port);
  assert_int_equal(warnings_during(open_remotes, &r), 1);
  assert_int_not_equal(r.rc[0], 0);
  assert_int_not_equal(r.rc[1], 0);
}

static int list_seen(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  char *out = ctx;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s/%016llx:%llu;", ns, (unsigned long long)hash,
           (unsigned long long)bytes);
  return 0;
}

/* A listing page (plugins/s3/s3_list.c, compiled in): only keys the plugin
 * writes, <prefix><ns>/<16 lowercase hex>, are its; an uppercase, signed,
 * "0x" or space-led name of 16 characters is another program's object (a
 * get of its hash would name another key), and is passed over. */
static void s3_list_page_takes_only_the_plugins_keys(void **state) {
  (void)state;
  static const char xml[] =
      "<ListBucketResult><IsTruncated>false</IsTruncated>"
      "<Contents><Key>kv/ns/00000000000000ab</Key><Size>3</Size></Contents>"
      "<Contents><Key>kv/ns/00000000000000AB</Key><Size>4</Size></Contents>"
      "<Contents><Key>kv/ns/0x000000000000ab</Key><Size>5</Size></Contents>"
      "<Contents><Key>kv/ns/-000000000000001</Key><Size>6</Size></Contents>"
      "<Contents><Key>kv/ns/+00000000000000a</Key><Size>7</Size></Contents>"
      "<Contents><Key>kv/ns/ 00000000000000a</Key><Size>8</Size></Contents>"
      "<Contents><Key>kv/n&amp;s/00000000000000ab</Key><Size>9</Size></Contents>"
      "<Contents><Key>kv/ns/ffffffffffffffff</Key><Size>10</Size></Contents>"
      "</ListBucketResult>";
  char out[512] = "", token[64];
  int truncated = -1;
  assert_int_equal(kvp__s3_list_page(xml, "kv/", list_seen, out, token, sizeof token, &truncated),
                   0);
  assert_string_equal(out, "ns/00000000000000ab:3;ns/ffffffffffffffff:10;");
  assert_int_equal(truncated, 0);
  assert_string_equal(token, "");
}

/* The default endpoint (AWS itself, no endpoint anywhere in the chain) is
 * virtual-hosted for a bucket that is one DNS label, and path-style for one
 * with dots (AWS's wildcard certificate covers one label: the TLS check
 * would refuse bucket.with.dots.s3.<region>.amazonaws.com), capitals or
 * '_', as the AWS SDKs choose; a given addressing stays (creds.c compiled
 * in). */
static void s3_default_endpoint_addressing_follows_the_bucket_name(void **state) {
  (void)state;
  static const struct {
    const char *bucket;
    int virtual_host;
  } cases[] = {{"kv-blocks", 1}, {"kv.blocks", 0}, {"Legacy_Bucket", 0},
               {"-dash", 0},     {"ab", 0},        {"abc", 1}};
  const char *vars[] = {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",   "AWS_PROFILE",
                        "AWS_REGION",          "AWS_DEFAULT_REGION", "AWS_CA_BUNDLE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/kvp-credentials", 1);
  setenv("AWS_CONFIG_FILE", "/nonexistent/kvp-config", 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    s3_t s;
    char err[256];
    memset(&s, 0, sizeof s);
    snprintf(s.bucket, sizeof s.bucket, "%s", cases[i].bucket);
    snprintf(s.region, sizeof s.region, "eu-west-3");
    snprintf(s.access, sizeof s.access, "AK");
    snprintf(s.secret, sizeof s.secret, "SK");
    s3_given_t given = {.access = 1, .secret = 1};
    assert_int_equal(kvp__s3_resolve(&s, &given, err, sizeof err), 0);
    assert_string_equal(s.endpoint, "https://s3.eu-west-3.amazonaws.com");
    if (s.virtual_host != cases[i].virtual_host)
      print_error("bucket %s: virtual_host %d\n", cases[i].bucket, s.virtual_host);
    assert_int_equal(s.virtual_host, cases[i].virtual_host);
    /* addressing=virtual given: kept */
    memset(s.endpoint, 0, sizeof s.endpoint);
    memset(s.profile, 0, sizeof s.profile); /* the first call named "default" */
    s.virtual_host = 1;
    given.addressing = 1;
    assert_int_equal(kvp__s3_resolve(&s, &given, err, sizeof err), 0);
    assert_int_equal(s.virtual_host, 1);
  }
  unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  unsetenv("AWS_CONFIG_FILE");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(s3_default_endpoint_addressing_follows_the_bucket_name),
    cmocka_unit_test(s3_endpoint_port_and_host_are_checked),
    cmocka_unit_test(s3_list_page_takes_only_the_plugins_keys),
    cmocka_unit_test(s3_ini_reads_the_profiles_own_section),
    cmocka_unit_test(s3_plain_http_remote_decides_by_host),
    cmocka_unit_test(s3_plain_http_to_loopback_does_not_warn),
    cmocka_unit_test(s3_plain_http_to_a_remote_host_warns_once),
};

KVP_TEST_MAIN("volume_s3_profile", tests)
