/* kvplane-relay's command line: --help exits 0, every documented config
 * error exits 1, an unreachable NATS exits 2. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static int run(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
               const char *a6) {
  char bin[512];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-relay", getenv("KVP_TEST_BINDIR"));
  char *argv[] = {bin, (char *)a1, (char *)a2, (char *)a3, (char *)a4, (char *)a5, (char *)a6,
                  NULL};
  return kvp_test_spawn_wait(argv, NULL, NULL);
}

static void help_and_config_errors(void **state) {
  (void)state;
  assert_int_equal(run("--help", NULL, NULL, NULL, NULL, NULL), 0);
  assert_int_equal(run(NULL, NULL, NULL, NULL, NULL, NULL), 1);               /* no endpoint */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", NULL, NULL, NULL, NULL), 1); /* no worker */
  assert_int_equal(run("-w", "x", NULL, NULL, NULL, NULL), 1); /* worker before endpoint */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "bad.id", NULL, NULL), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--media", "X=G9"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--dp-ranks", "0"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1", "-w", "w", "--dp-ranks", "2"), 1); /* no port */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--mode", "fast"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--nats", "nope=1"), 1);
}

static void unreachable_nats_exits_2(void **state) {
  (void)state;
  char url[64];
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", kvp_test_free_port());
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "-s", url), 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(help_and_config_errors),
    cmocka_unit_test(unreachable_nats_exits_2),
};

KVP_TEST_MAIN("relay_cli", tests)
