/* Tiering leases (src/advisor/lease.c) against a real nats-server with
 * JetStream: a bucket made by another advisor with a shorter TTL than this
 * one's [tiering] lease_ms is used with its TTL: the lease is taken,
 * renewed within that TTL and never lost while nothing goes wrong, and
 * the calls are bound again with a wait that fits it (lease.c); the
 * holder's text fits its buffers. */
#include <nats/nats.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "advisor/lease.h"
#include "harness.h"
#include "kvplane/status.h"
#include "natsd.h"

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static kvp__adv_lease_t *open_lease(natsConnection *nc, int64_t lease_ms, const char *me) {
  kvp_advisor_config_t cfg;
  kvp__adv_lease_t *l = NULL;
  char err[512];
  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.ns, sizeof cfg.ns, "t");
  cfg.tier_lease_ms = lease_ms;
  cfg.replicas = 1;
  if (kvp__adv_lease_open(&cfg, nc, 0, me, &l, err, sizeof err) != 0)
    fail_msg("lease open: %s", err);
  return l;
}

static void a_shorter_bucket_ttl_is_used_and_kept(void **state) {
  (void)state;
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {.jetstream = 1};
  natsConnection *nc = NULL;
  assert_int_equal(kvp_natsd_start(&d, &no), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);

  /* The first advisor makes the bucket with 600 ms and goes. */
  kvp__adv_lease_t *a = open_lease(nc, 600, "a");
  assert_int_equal(kvp__adv_lease_ttl(a), 600);
  kvp__adv_lease_close(a);

  /* The second, configured with 3 s, uses the bucket's 600 ms. */
  kvp__adv_lease_t *b = open_lease(nc, 3000, "b");
  assert_int_equal(kvp__adv_lease_ttl(b), 600);
  kvp__adv_lease_want(b, 0, 1);
  uint64_t end = mono_ms() + 5000;
  while (!kvp__adv_lease_held(b, 0) && mono_ms() < end)
    usleep(10000);
  assert_true(kvp__adv_lease_held(b, 0));
  /* Held throughout 3 s, five TTLs: each renewal within its TTL/3. */
  uint64_t t0 = mono_ms();
  int lost = 0;
  while (mono_ms() - t0 < 3000) {
    lost += !kvp__adv_lease_held(b, 0);
    usleep(10000);
  }
  assert_int_equal(lost, 0);
  assert_int_equal(kvp__adv_lease_count(b), 1);
  kvp__adv_lease_close(b);

  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
}

/* The holder's text fits KVP__ADV_LEASE_HOLDER_MAX at the longest name,
 * host and pid, ", partitioned" included (at 160 bytes it was cut, and an
 * unpartitioned advisor took a partitioned holder for its standby). */
static void the_longest_holder_text_fits(void **state) {
  (void)state;
  char value[512], out[KVP__ADV_LEASE_HOLDER_MAX];
  char name[65], host[65];
  memset(name, 'a', 64);
  name[64] = '\0';
  memset(host, 'h', 64);
  host[64] = '\0';
  int n = snprintf(value, sizeof value,
                   "{\"advisor\": \"%s\", \"host\": \"%s\", \"pid\": 9223372036854775807, "
                   "\"started_ms\": 1, \"lease_ms\": 1000, \"partitions\": 4}",
                   name, host);
  assert_int_equal(kvp__adv_lease_holder(value, (size_t)n, out, sizeof out), 0);
  size_t len = strlen(out);
  assert_true(len + 1 < sizeof out);
  assert_string_equal(out + len - strlen(", partitioned"), ", partitioned");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_shorter_bucket_ttl_is_used_and_kept),
    cmocka_unit_test(the_longest_holder_text_fits),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("advisor_lease", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
