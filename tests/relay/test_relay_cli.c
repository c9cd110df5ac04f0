/* kvplane-relay's command line. In-process (src/relay/cli.h): options by
 * their long name, the endpoints' expansion over --dp-ranks (ports + k,
 * worker ids -dp<k>) and every error the two report. Through the binary:
 * --help exits 0, every documented config error exits 1, an unreachable
 * NATS exits 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "kvplane/status.h"
#include "relay/cli.h"

static char err[512];

/* Applies "name", "value" pairs up to a NULL name; returns the first
 * failure's code, or 0. */
static int set_all(kvp__relay_cli_t *c, const char *const *kv) {
  for (size_t i = 0; kv[i]; i += 2) {
    int rc = kvp__relay_cli_set(c, kv[i], kv[i + 1], err, sizeof err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* The last option of kv fails with KVP_ECONFIG and an err holding want. */
static void set_fails(const char *const *kv, const char *want) {
  kvp__relay_cli_t c;
  kvp__relay_cli_init(&c);
  err[0] = 0;
  assert_int_equal(set_all(&c, kv), KVP_ECONFIG);
  if (!strstr(err, want))
    fail_msg("err '%s' lacks '%s'", err, want);
  kvp__relay_cli_cleanup(&c);
}

/* Every option given lands in the relay's options or the daemon's. */
static void options_reach_relay_opts(void **state) {
  (void)state;
  kvp__relay_cli_t c;
  kvp__relay_cli_init(&c);
  assert_int_equal(c.dp_ranks, 1);
  assert_null(c.metrics);
  const char *const kv[] = {"endpoint",
                            "tcp://10.0.0.5:5557",
                            "worker",
                            "w0",
                            "replay",
                            "tcp://10.0.0.5:5558",
                            "topic",
                            "kv",
                            "server",
                            "nats://n1:4222",
                            "nats",
                            "token=s3cret",
                            "ns",
                            "prod",
                            "mode",
                            "jetstream",
                            "media",
                            "TAPE=G4",
                            "block-size",
                            "16",
                            "map-cap",
                            "4096",
                            "hwm",
                            "500",
                            "replay-timeout-ms",
                            "250",
                            "join-window",
                            "20000",
                            "stats-interval",
                            "30",
                            "metrics",
                            "127.0.0.1:0",
                            "state-dir",
                            "/var/lib/kvplane-relay",
                            "partitions",
                            "4",
                            NULL};
  assert_int_equal(set_all(&c, kv), 0);
  assert_int_equal(kvp__relay_cli_finish(&c, err, sizeof err), 0);
  assert_int_equal(c.o.nendpoints, 1);
  assert_string_equal(c.o.endpoints[0].endpoint, "tcp://10.0.0.5:5557");
  assert_string_equal(c.o.endpoints[0].replay, "tcp://10.0.0.5:5558");
  assert_string_equal(c.o.endpoints[0].worker_id, "w0");
  assert_int_equal(c.o.endpoints[0].dp_rank, 0);
  assert_string_equal(c.o.topic, "kv");
  assert_string_equal(c.o.pub.nats.servers, "nats://n1:4222");
  assert_string_equal(c.o.pub.nats.token, "s3cret");
  assert_string_equal(c.o.pub.ns, "prod");
  assert_int_equal(c.o.pub.mode, KVP_PUB_JETSTREAM);
  assert_int_equal(c.o.pub.stream_create, 1);
  assert_string_equal(c.o.media, "TAPE=G4");
  assert_int_equal(c.o.block_size, 16);
  assert_int_equal(c.o.map_cap, 4096);
  assert_int_equal(c.o.rcvhwm, 500);
  assert_int_equal(c.o.replay_timeout_ms, 250);
  assert_int_equal(c.o.join_window, 20000);
  assert_int_equal(c.stats_interval, 30);
  assert_string_equal(c.metrics, "127.0.0.1:0");
  assert_string_equal(c.o.state_dir, "/var/lib/kvplane-relay");
  assert_int_equal(c.o.pub.partitions, 4);
  kvp__relay_cli_cleanup(&c);
}

/* With one rank the endpoints are the strings given; nothing is made. */
static void one_rank_keeps_the_given_strings(void **state) {
  (void)state;
  kvp__relay_cli_t c;
  const char *ep = "tcp://a:1", *w = "wa";
  kvp__relay_cli_init(&c);
  const char *const kv[] = {"endpoint",  ep,       "worker", w,   "endpoint",
                            "tcp://b:2", "worker", "wb",     NULL};
  assert_int_equal(set_all(&c, kv), 0);
  assert_int_equal(kvp__relay_cli_finish(&c, err, sizeof err), 0);
  assert_int_equal(c.o.nendpoints, 2);
  assert_ptr_equal(c.o.endpoints[0].endpoint, ep);
  assert_ptr_equal(c.o.endpoints[0].worker_id, w);
  assert_null(c.o.endpoints[0].replay);
  assert_string_equal(c.o.endpoints[1].worker_id, "wb");
  assert_int_equal(c.o.endpoints[1].dp_rank, 0);
  assert_int_equal(c.nowned, 0);
  kvp__relay_cli_cleanup(&c);
}

/* --dp-ranks N: rank k of each endpoint at port + k (endpoint and replay),
 * worker <id>-dp<k>, in the order given. Finishing twice gives the same. */
static void dp_ranks_expand_ports_and_workers(void **state) {
  (void)state;
  kvp__relay_cli_t c;
  kvp__relay_cli_init(&c);
  const char *const kv[] = {"endpoint", "tcp://10.0.0.5:5557",
                            "replay",   "tcp://10.0.0.5:5600",
                            "worker",   "w",
                            "endpoint", "ipc:///run/e:7",
                            "worker",   "v",
                            "dp-ranks", "3",
                            NULL};
  assert_int_equal(set_all(&c, kv), 0);
  for (int pass = 0; pass < 2; pass++) {
    assert_int_equal(kvp__relay_cli_finish(&c, err, sizeof err), 0);
    assert_int_equal(c.o.nendpoints, 6);
    static const char *const want[6][3] = {
        {"tcp://10.0.0.5:5557", "tcp://10.0.0.5:5600", "w-dp0"},
        {"tcp://10.0.0.5:5558", "tcp://10.0.0.5:5601", "w-dp1"},
        {"tcp://10.0.0.5:5559", "tcp://10.0.0.5:5602", "w-dp2"},
        {"ipc:///run/e:7", NULL, "v-dp0"},
        {"ipc:///run/e:8", NULL, "v-dp1"},
        {"ipc:///run/e:9", NULL, "v-dp2"},
    };
    for (size_t i = 0; i < 6; i++) {
      const kvp_relay_endpoint_t *e = &c.o.endpoints[i];
      assert_string_equal(e->endpoint, want[i][0]);
      if (want[i][1])
        assert_string_equal(e->replay, want[i][1]);
      else
        assert_null(e->replay);
      assert_string_equal(e->worker_id, want[i][2]);
      assert_int_equal(e->dp_rank, i % 3);
    }
  }
  kvp__relay_cli_cleanup(&c);
  kvp__relay_cli_cleanup(&c);
}

static void option_errors(void **state) {
  (void)state;
  set_fails((const char *const[]){"replay", "tcp://a:2", NULL}, "--replay must follow");
  set_fails((const char *const[]){"partitions", "0", NULL}, "--partitions");
  set_fails((const char *const[]){"partitions", "1025", NULL}, "--partitions");
  set_fails((const char *const[]){"worker", "w", NULL}, "--worker must follow");
  set_fails((const char *const[]){"endpoint", "tcp://a:1", "worker", "w", "worker", "x", NULL},
            "--worker must follow its --endpoint (one each)");
  set_fails((const char *const[]){"dp-ranks", "0", NULL}, "--dp-ranks: '0' is not an integer");
  set_fails((const char *const[]){"dp-ranks", "65", NULL}, "[1, 64]");
  set_fails((const char *const[]){"hwm", "12x", NULL}, "--hwm: '12x'");
  set_fails((const char *const[]){"block-size", "", NULL}, "--block-size");
  set_fails((const char *const[]){"replay-timeout-ms", "600001", NULL}, "--replay-timeout-ms");
  set_fails((const char *const[]){"join-window", "0", NULL}, "--join-window");
  set_fails((const char *const[]){"mode", "fast", NULL}, "--mode: 'fast' is not core or jetstream");
  set_fails((const char *const[]){"nats", "nope", NULL}, "--nats: 'nope' is not NAME=VALUE");
  set_fails((const char *const[]){"nats", "nope=1", NULL}, "nope");
  set_fails((const char *const[]){"metrics", "zzz", NULL}, "--metrics");
  set_fails((const char *const[]){"metrics-timeout", "0", NULL},
            "--metrics-timeout: '0' is not a duration above 0");
  set_fails((const char *const[]){"metrics-timeout", "soon", NULL}, "--metrics-timeout");
  set_fails((const char *const[]){"metrics-per-client", "-1", NULL}, "--metrics-per-client");
  set_fails((const char *const[]){"bogus", "1", NULL}, "--bogus: unknown option");
  /* libzmq reads a port past 65535 modulo 65536 (70000: 4464) without an
   * error: the relay would subscribe to another engine's port. */
  set_fails((const char *const[]){"endpoint", "tcp://a:70000", NULL},
            "--endpoint tcp://a:70000: port '70000' is not a number in 1..65535");
  set_fails((const char *const[]){"endpoint", "tcp://a:0", NULL}, "port '0'");
  set_fails((const char *const[]){"endpoint", "tcp://a", NULL}, "--endpoint tcp://a: port ''");
  set_fails((const char *const[]){"endpoint", "tcp://a:1", "replay", "tcp://a:99999", NULL},
            "--replay tcp://a:99999: port '99999'");
  set_fails((const char *const[]){"endpoint", "tcp://a:1", "replay", "", NULL},
            "--replay of tcp://a:1: empty");
  /* An empty namespace was published as "default". */
  set_fails((const char *const[]){"ns", "", NULL}, "--ns: '' is not");
  set_fails((const char *const[]){"ns", "a.b", NULL}, "--ns: 'a.b' is not");
  /* at most KVP_RELAY_MAX_ENDPOINTS endpoints */
  const char *kv[2 * (KVP_RELAY_MAX_ENDPOINTS + 1) + 1];
  for (size_t i = 0; i <= KVP_RELAY_MAX_ENDPOINTS; i++) {
    kv[2 * i] = "endpoint";
    kv[2 * i + 1] = "tcp://a:1";
  }
  kv[2 * (KVP_RELAY_MAX_ENDPOINTS + 1)] = NULL;
  set_fails(kv, "--endpoint: at most 64");
}

/* kv applies, and finishing fails with KVP_ECONFIG and an err holding want. */
static void finish_fails(const char *const *kv, const char *want) {
  kvp__relay_cli_t c;
  kvp__relay_cli_init(&c);
  err[0] = 0;
  assert_int_equal(set_all(&c, kv), 0);
  assert_int_equal(kvp__relay_cli_finish(&c, err, sizeof err), KVP_ECONFIG);
  if (!strstr(err, want))
    fail_msg("err '%s' lacks '%s'", err, want);
  kvp__relay_cli_cleanup(&c);
}

static void finish_errors(void **state) {
  (void)state;
  finish_fails((const char *const[]){NULL}, "--endpoint is required");
  finish_fails((const char *const[]){"endpoint", "tcp://a:1", NULL},
               "--worker of tcp://a:1: missing");
  finish_fails((const char *const[]){"endpoint", "tcp://a:1", "worker", "bad.id", NULL},
               "--worker of tcp://a:1: not 1..64 characters");
  finish_fails(
      (const char *const[]){"endpoint", "ipc:///tmp/a", "worker", "w", "dp-ranks", "2", NULL},
      "--dp-ranks: ipc:///tmp/a has no port to add the rank to");
  finish_fails(
      (const char *const[]){"endpoint", "tcp://a:65535", "worker", "w", "dp-ranks", "2", NULL},
      "tcp://a:65535 has no port"); /* rank 1 would be port 65536 */
  char w64[65];
  memset(w64, 'w', 64);
  w64[64] = 0;
  finish_fails((const char *const[]){"endpoint", "tcp://a:1", "worker", w64, "dp-ranks", "2", NULL},
               "too long with -dp0");
  finish_fails((const char *const[]){"endpoint", "tcp://a:1", "worker", "w", "endpoint",
                                     "tcp://b:1", "worker", "v", "dp-ranks", "33", NULL},
               "--dp-ranks: 2 endpoints x 33 ranks is above 64");
  /* The old README example: rank 1's endpoint is rank 0's replay port. */
  finish_fails((const char *const[]){"endpoint", "tcp://h:5557", "replay", "tcp://h:5558", "worker",
                                     "big", "dp-ranks", "4", NULL},
               "tcp://h:5558 is both the replay of big-dp0 and the endpoint of big-dp1");
  finish_fails((const char *const[]){"endpoint", "tcp://h:1", "worker", "w", "endpoint",
                                     "tcp://h:1", "worker", "v", NULL},
               "tcp://h:1 is both the endpoint of w and the endpoint of v");
  finish_fails((const char *const[]){"endpoint", "tcp://a:1", "worker", "w", "nats",
                                     "creds=/nonexistent/relay.creds", NULL},
               "--nats ");
  /* Two endpoints publishing as one worker: each with its own epoch and
   * event ids on one subject. */
  finish_fails((const char *const[]){"endpoint", "tcp://h:1", "worker", "w", "endpoint",
                                     "tcp://h:2", "worker", "w", NULL},
               "--worker w is the worker of both tcp://h:1 and tcp://h:2");
  finish_fails((const char *const[]){"endpoint", "tcp://h:1", "worker", "w", "endpoint",
                                     "tcp://h:5", "worker", "w", "dp-ranks", "2", NULL},
               "--worker w-dp0 is the worker of both tcp://h:1 and tcp://h:5");
}

static int run(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
               const char *a6) {
  char bin[512];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-relay", getenv("KVP_TEST_BINDIR"));
  char *argv[] = {bin,        (char *)a1, (char *)a2, (char *)a3,
                  (char *)a4, (char *)a5, (char *)a6, NULL};
  return kvp_test_spawn_wait(argv, NULL, NULL);
}

static void help_and_config_errors(void **state) {
  (void)state;
  assert_int_equal(run("--help", NULL, NULL, NULL, NULL, NULL), 0);
  assert_int_equal(run(NULL, NULL, NULL, NULL, NULL, NULL), 1);                   /* no endpoint */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", NULL, NULL, NULL, NULL), 1); /* no worker */
  assert_int_equal(run("-w", "x", NULL, NULL, NULL, NULL), 1); /* worker before endpoint */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "bad.id", NULL, NULL), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--media", "X=G9"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--dp-ranks", "0"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1", "-w", "w", "--dp-ranks", "2"), 1); /* no port */
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--mode", "fast"), 1);
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "--nats", "nope=1"), 1);
}

/* kvplane-relay --reverse ARGS with stderr: exits 1 with a line holding
 * want. NATS is never reached: each case fails at its option. */
static void reverse_fails(const char *args, const char *want) {
  char cmd[1024], out[4096];
  snprintf(cmd, sizeof cmd, "'%s/tools/kvplane-relay' --reverse -s nats://127.0.0.1:1 %s 2>&1",
           getenv("KVP_TEST_BINDIR"), args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || strstr(out, want) == NULL)
    fail_msg("kvplane-relay --reverse %s: status %d, output '%s' lacks '%s'", args,
             WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, want);
}

/* The reverse direction's bad values, each named: --buffer 0, --dp-ranks 0
 * and --partitions 0 exited 1 without a word; --hwm 0 (libzmq: no limit,
 * an unbounded queue) and a bind port past 65535 (libzmq binds it modulo
 * 65536: 99999 is 34463) were taken. */
static void reverse_option_errors(void **state) {
  (void)state;
  reverse_fails("-e tcp://127.0.0.1:5557 -w w --buffer 0", "--buffer: '0' is not a number in 1..");
  reverse_fails("-e tcp://127.0.0.1:5557 -w w --dp-ranks 0",
                "--dp-ranks: '0' is not a number in 1..64");
  reverse_fails("-e tcp://127.0.0.1:5557 -w w --partitions 0", "--partitions: '0' is not");
  reverse_fails("-e tcp://127.0.0.1:5557 -w w --hwm 0", "--hwm: '0' is not a number in 1..");
  reverse_fails("-e tcp://127.0.0.1:99999 -w w",
                "--endpoint tcp://127.0.0.1:99999: port '99999' is not a number in 1..65535");
  reverse_fails("-e tcp://127.0.0.1:5557 -r tcp://127.0.0.1:0 -w w", "--replay tcp://127.0.0.1:0");
  reverse_fails("-e tcp://127.0.0.1:5557 -w w --idle-ms -1", "--idle-ms: '-1' is not a number");
}

static void unreachable_nats_exits_2(void **state) {
  (void)state;
  char url[64];
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", kvp_test_free_port());
  assert_int_equal(run("-e", "tcp://127.0.0.1:5557", "-w", "w", "-s", url), 2);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(options_reach_relay_opts),
    cmocka_unit_test(one_rank_keeps_the_given_strings),
    cmocka_unit_test(dp_ranks_expand_ports_and_workers),
    cmocka_unit_test(option_errors),
    cmocka_unit_test(finish_errors),
    cmocka_unit_test(help_and_config_errors),
    cmocka_unit_test(reverse_option_errors),
    cmocka_unit_test(unreachable_nats_exits_2),
};

KVP_TEST_MAIN("relay_cli", tests)
