/* The tools against a partitioned deployment: one nats-server with the
 * mapping of `kvplane nats-config 4` (JetStream), kvplane-advisor processes
 * owning partitions, and the real programs run as a user runs them:
 * - `kvplane status` and `kvplane top` gather the stats of every advisor
 *   (as `kvplane stats`), name per partition who answered and which
 *   partitions nobody did;
 * - kvplane-sim and `kvplane replay` with --partitions publish into the
 *   partition streams (made by them when no advisor made them yet); without
 *   it their JetStream publishes are never acked (the unpartitioned stream
 *   they make takes nothing: the server maps the subjects first);
 * - kvplane-sim with --partitions and --volumes keeps each worker's G3
 *   objects under its partition's key namespace <ns>-p<p>, where that
 *   partition's advisor moves, evicts and scrubs them;
 * - kvplane-relay --reverse with --partitions takes the events where the
 *   server maps them; without it nothing arrives.
 * Loopback only; every wait is bounded. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness.h"
#include "kvplane/subjects.h"
#include "natsd.h"

#define NS "tt"

typedef struct fx_s {
  kvp_natsd_t d;
  char dir[256], trace[320], out[65536];
  pid_t adv[2];
} fx_t;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char *bindir(void) {
  return getenv("KVP_TEST_BINDIR");
}

/* Runs a shell command; its output (stdout and stderr) into f->out.
 * Returns its exit status (-1 when it did not exit). */
static int run(fx_t *f, const char *cmd) {
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  size_t n = 0;
  if (p == NULL)
    return -1;
  while (n < sizeof f->out - 1 && fgets(f->out + n, (int)(sizeof f->out - n), p) != NULL)
    n += strlen(f->out + n);
  f->out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static pid_t adv_spawn(fx_t *f, const char *name, const char *owned) {
  char bin[512], servers[128], db[400], o_owned[64], cons[64], log[400];
  snprintf(bin, sizeof bin, "%s/tools/kvplane-advisor", bindir());
  snprintf(servers, sizeof servers, "nats.servers=%s", f->d.url);
  snprintf(db, sizeof db, "store.path=%s/%s.db", f->dir, name);
  snprintf(log, sizeof log, "%s/%s.log", f->dir, name);
  snprintf(o_owned, sizeof o_owned, "partitions.owned=%s", owned);
  snprintf(cons, sizeof cons, "jetstream.consumer=%s", name);
  char *argv[] = {bin,
                  "-o",
                  servers,
                  "-o",
                  db,
                  "-o",
                  o_owned,
                  "-o",
                  cons,
                  "-o",
                  "advisor.namespace=" NS,
                  "-o",
                  "nats.mode=jetstream",
                  "-o",
                  "partitions.count=4",
                  "-o",
                  "workers.heartbeat_timeout=0",
                  "-o",
                  "store.flush_interval=50ms",
                  NULL};
  pid_t pid = kvp_test_spawn_child(argv, log);
  assert_true(pid >= 0);
  return pid;
}

static void adv_kill(pid_t *pid) {
  if (*pid > 0) {
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = 0;
  }
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  char conf[320], map[1024];
  if (f == NULL || kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(conf, sizeof conf, "%s/map.conf", f->dir);
  if (kvp_partition_mapping_conf(map, sizeof map, 4) != 0)
    return -1;
  FILE *c = fopen(conf, "w");
  if (c == NULL)
    return -1;
  fputs(map, c);
  fclose(c);
  kvp_natsd_opts_t o = {.jetstream = 1, .config = conf};
  if (kvp_natsd_start(&f->d, &o) != 0)
    return -1;
  /* The first 40 requests of the repository's trace. */
  snprintf(f->trace, sizeof f->trace, "%s/t.jsonl", f->dir);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "zcat %s/data/conversation_trace.jsonl.gz | head -40 > %s",
           getenv("KVP_TEST_SRCDIR"), f->trace);
  if (system(cmd) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  adv_kill(&f->adv[0]);
  adv_kill(&f->adv[1]);
  kvp_natsd_stop(&f->d);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* The partition streams the server holds (from its store directory). */
static int streams(fx_t *f) {
  char path[512];
  struct stat sb;
  int n = 0;
  for (int p = 0; p < 4; p++) {
    snprintf(path, sizeof path, "%s/js/jetstream/$G/streams/KVPLANE_EVENTS_P%d", f->d.dir, p);
    n += stat(path, &sb) == 0;
  }
  return n;
}

/* Publishes the trace with kvplane-sim (--partitions 4, JetStream) before
 * any advisor runs, then starts advisors owning 0,1 and 2,3 and waits for
 * `kvplane stats` to show both answering with the events applied. */
static void publish_and_start(fx_t *f) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "timeout 60 %s/tools/kvplane-sim -t %s -s %s -n " NS " -w 4 -m jetstream "
           "--partitions 4",
           bindir(), f->trace, f->d.url);
  if (run(f, cmd) != 0)
    fail_msg("kvplane-sim --partitions 4 failed:\n%s", f->out);
  assert_int_equal(streams(f), 4);
  f->adv[0] = adv_spawn(f, "a0", "0,1");
  f->adv[1] = adv_spawn(f, "a1", "2,3");
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane status --db %s/a0.db -s %s -n " NS, bindir(), f->dir,
           f->d.url);
  for (int i = 0; i < 300; i++) {
    if (run(f, cmd) == 0 && strstr(f->out, "partition 0: a0") && strstr(f->out, "partition 3: a1"))
      return;
    sleep_ms(100);
  }
  fail_msg("the advisors do not answer for every partition:\n%s", f->out);
}

static void status_and_top_gather_across_partitions(void **state) {
  fx_t *f = *state;
  char cmd[1024];
  publish_and_start(f);
  /* Both advisors answered: every partition named with its advisor. */
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane status --db %s/a0.db -s %s -n " NS, bindir(), f->dir,
           f->d.url);
  assert_int_equal(run(f, cmd), 0);
  assert_non_null(strstr(f->out, "partitions: 4, 2 advisor(s) answered"));
  assert_non_null(strstr(f->out, "partition 1: a0 at "));
  assert_non_null(strstr(f->out, "partition 2: a1 at "));
  assert_null(strstr(f->out, "MISSING"));
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane status --json --db %s/a0.db -s %s -n " NS, bindir(),
           f->dir, f->d.url);
  assert_int_equal(run(f, cmd), 0);
  assert_non_null(strstr(f->out, "\"gathered\""));
  assert_non_null(strstr(f->out, "\"missing\": []"));
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane top -N 1 --db %s/a0.db -s %s -n " NS, bindir(),
           f->dir, f->d.url);
  assert_int_equal(run(f, cmd), 0);
  assert_non_null(strstr(f->out, "partitions 4 missing 0 advisors 2"));
  /* The advisor of 2 and 3 is gone: they are reported, not hidden. */
  adv_kill(&f->adv[1]);
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane status --db %s/a0.db -s %s -n " NS " -w 500",
           bindir(), f->dir, f->d.url);
  assert_int_equal(run(f, cmd), 0);
  if (!strstr(f->out, "partition 2: MISSING") || !strstr(f->out, "missing: partition 2, 3") ||
      !strstr(f->out, "partition 0: a0 at "))
    fail_msg("status with partitions 2 and 3 down:\n%s", f->out);
  snprintf(cmd, sizeof cmd, "%s/tools/kvplane top -N 1 -w 500 --db %s/a0.db -s %s -n " NS, bindir(),
           f->dir, f->d.url);
  assert_int_equal(run(f, cmd), 0);
  if (!strstr(f->out, "partitions 4 missing 2 advisors 1"))
    fail_msg("top with partitions 2 and 3 down:\n%s", f->out);
}

/* Without --partitions the JetStream publishes of kvplane-sim land in no
 * stream (the server maps kvplane.ev.> away from the unpartitioned stream
 * the sim makes): never acked, it does not finish. */
static void sim_needs_partitions_to_publish(void **state) {
  fx_t *f = *state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "timeout 4 %s/tools/kvplane-sim -t %s -s %s -n " NS " -w 4 -m jetstream -l 5", bindir(),
           f->trace, f->d.url);
  assert_int_not_equal(run(f, cmd), 0);
  assert_int_equal(streams(f), 0);
  snprintf(cmd, sizeof cmd,
           "timeout 60 %s/tools/kvplane replay %s -s %s -n " NS " --workers 4 --mode jetstream "
           "--partitions 4 --limit 20",
           bindir(), f->trace, f->d.url);
  if (run(f, cmd) != 0)
    fail_msg("kvplane replay --partitions 4:\n%s", f->out);
  assert_int_equal(streams(f), 4);
}

/* kvplane-sim --partitions 4 --volumes: each worker's G3 objects are under
 * <ns>-p<its partition> (docs/SCALE.md, "Tiering across partitions"), and
 * under no other namespace; without --partitions, under <ns>. */
static void sim_keeps_objects_under_the_partition_namespace(void **state) {
  fx_t *f = *state;
  char cmd[2048], path[700], trace[400];
  struct stat st;
  /* Two prefix families of 12 blocks taking turns, each request with 4
   * blocks of its own: with G1 16 and G2 8 a family's blocks, hit on its
   * second turn, leave G2 while the other family runs, and go to G3. */
  snprintf(trace, sizeof trace, "%s/families.jsonl", f->dir);
  FILE *t = fopen(trace, "w");
  assert_non_null(t);
  for (int r = 0; r < 48; r++) {
    fprintf(t, "{\"timestamp\": %d, \"input_length\": 8192, \"output_length\": 1, \"hash_ids\": [",
            r * 10);
    for (int b = 0; b < 12; b++)
      fprintf(t, "%d, ", (r / 4) % 2 * 100 + b); /* r % 4: the worker */
    for (int b = 0; b < 4; b++)
      fprintf(t, "%d%s", 1000 + r * 4 + b, b < 3 ? ", " : "]}\n");
  }
  fclose(t);
  for (int parted = 0; parted < 2; parted++) {
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s/tools/kvplane-sim -t %s -s %s -n " NS " -w 4 --g1-blocks 16 "
             "--g2-blocks 8 --no-decode --volumes %s/vol%d --plugin-dir %s/plugins%s",
             bindir(), trace, f->d.url, f->dir, parted, bindir(), parted ? " --partitions 4" : "");
    if (run(f, cmd) != 0)
      fail_msg("kvplane-sim:\n%s", f->out);
    int found = 0;
    for (int w = 0; w < 4; w++) {
      char id[16], vns[KVP_PARTITION_NS_MAX + 1];
      snprintf(id, sizeof id, "sim-%d", w);
      uint32_t mine = kvp_partition_of(id, 4);
      for (uint32_t p = 0; p <= 4; p++) { /* p == 4: the plain <ns> */
        if (p < 4)
          assert_int_equal(kvp_partition_volume_ns(vns, sizeof vns, NS, p), 0);
        else
          snprintf(vns, sizeof vns, "%s", NS);
        snprintf(path, sizeof path, "%s/vol%d/g3/%s/%s", f->dir, parted, id, vns);
        int there = stat(path, &st) == 0;
        int want = parted ? p == mine : p == 4;
        if (there && !want)
          fail_msg("%s: objects under %s (partition of %s is %u)", path, vns, id, mine);
        found += there;
      }
    }
    if (found == 0)
      fail_msg("no worker offloaded to G3 (the test's capacities are too large?):\n%s", f->out);
  }
}

/* kvplane-relay --reverse: the events of worker sim-0 reach it with
 * --partitions, and not without. */
static void reverse_relay_takes_partitioned_events(void **state) {
  fx_t *f = *state;
  char cmd[1024], outp[2][400], port[2][16];
  pid_t rel[2];
  for (int i = 0; i < 2; i++) {
    snprintf(port[i], sizeof port[i], "%d", kvp_test_free_port());
    snprintf(outp[i], sizeof outp[i], "%s/reverse%d.out", f->dir, i);
    char ep[64], bin[512];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%s", port[i]);
    snprintf(bin, sizeof bin, "%s/tools/kvplane-relay", bindir());
    char *argv[] = {bin,  "--reverse", "-e", ep, "-w",          "sim-0",
                    "-s", f->d.url,    "-n", NS, "--no-resync", i == 0 ? "--partitions" : NULL,
                    "4",  NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      int fd = open(outp[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(bin, argv);
      _exit(127);
    }
    rel[i] = pid;
  }
  sleep_ms(1000); /* both subscribed */
  snprintf(cmd, sizeof cmd,
           "timeout 60 %s/tools/kvplane-sim -t %s -s %s -n " NS " -w 4 --partitions 4", bindir(),
           f->trace, f->d.url);
  if (run(f, cmd) != 0)
    fail_msg("kvplane-sim (core):\n%s", f->out);
  sleep_ms(500);
  long events[2] = {-1, -1};
  for (int i = 0; i < 2; i++) {
    kill(rel[i], SIGTERM);
    waitpid(rel[i], NULL, 0);
    FILE *in = fopen(outp[i], "r");
    char line[1024];
    while (in && fgets(line, sizeof line, in))
      if (strstr(line, "\"worker\":\"sim-0\"") && strstr(line, "\"events\":"))
        events[i] = atol(strstr(line, "\"events\":") + 9);
    if (in)
      fclose(in);
  }
  if (events[0] <= 0 || events[1] != 0) {
    for (int i = 0; i < 2; i++) { /* what the relays said */
      FILE *in = fopen(outp[i], "r");
      char line[1024];
      fprintf(stderr, "--- %s\n", outp[i]);
      while (in && fgets(line, sizeof line, in))
        fputs(line, stderr);
      if (in)
        fclose(in);
    }
    fail_msg("reverse relay events: %ld with --partitions (want > 0), %ld without (want 0)",
             events[0], events[1]);
  }
}

/* The merge behind status and top, on replies made here: a standby's
 * figures are not added twice, an error reply is listed, the partitions
 * table names everyone who answered; one unpartitioned reply is returned
 * as it is. */
static void stats_merge_counts_a_standby_once(void **state) {
  (void)state;
  const char *text =
      "{\"partitions\": 4, \"missing\": [], \"replies\": ["
      "{\"advisor\": \"a0\", \"mode\": \"jetstream\", \"blocks\": 10, \"uptime_ms\": 900,"
      " \"ingest\": {\"block_events\": 100}, \"freshness\": {\"apply_lag_ms\": 3},"
      " \"partitions\": {\"count\": 4, \"owned\": [0, 1], \"positions\": [5, 6]}},"
      "{\"advisor\": \"a0b\", \"blocks\": 11, \"uptime_ms\": 500,"
      " \"ingest\": {\"block_events\": 101}, \"freshness\": {\"apply_lag_ms\": 9},"
      " \"partitions\": {\"count\": 4, \"owned\": [0, 1], \"positions\": [5, 7]}},"
      "{\"advisor\": \"a1\", \"blocks\": 20, \"uptime_ms\": 800,"
      " \"ingest\": {\"block_events\": 200}, \"freshness\": {\"apply_lag_ms\": 4},"
      " \"partitions\": {\"count\": 4, \"owned\": [2, 3], \"positions\": [1, 2]}},"
      "{\"error\": \"not ready: catching up with the stream\", \"advisor\": \"a2\"}]}";
  json_t *g = json_loads(text, 0, NULL), *m;
  assert_non_null(g);
  assert_non_null(m = kvp__cli_stats_merge(g));
  /* a0 first (partition 0: a0 and a0b at 5, the first kept), with 0 and 1;
   * then a1 for 2 and 3: a0b is not added. */
  assert_int_equal(json_integer_value(json_object_get(m, "blocks")), 30);
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(m, "ingest"), "block_events")), 300);
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(m, "freshness"), "apply_lag_ms")), 4);
  assert_int_equal(json_integer_value(json_object_get(m, "uptime_ms")), 800);
  assert_string_equal(json_string_value(json_object_get(m, "mode")), "jetstream");
  json_t *gt = json_object_get(m, "gathered");
  assert_int_equal(json_array_size(json_object_get(gt, "summed")), 2);
  assert_int_equal(json_array_size(json_object_get(gt, "advisors")), 4);
  json_t *p1 = json_array_get(json_object_get(gt, "partitions"), 1);
  assert_int_equal(json_array_size(json_object_get(p1, "answered")), 2);
  json_t *a2 = json_array_get(json_object_get(gt, "advisors"), 3);
  assert_non_null(json_object_get(a2, "error"));
  json_decref(m);
  json_decref(g);
  /* One unpartitioned advisor: as it is. */
  g = json_loads("{\"partitions\": 0, \"missing\": [], \"replies\": [{\"blocks\": 7}]}", 0, NULL);
  m = kvp__cli_stats_merge(g);
  assert_ptr_equal(m, json_array_get(json_object_get(g, "replies"), 0));
  json_decref(m);
  json_decref(g);
  g = json_loads("{\"partitions\": 0, \"missing\": [0], \"replies\": []}", 0, NULL);
  assert_null(kvp__cli_stats_merge(g));
  json_decref(g);
}

/* Uneven sets over 8 partitions: a0 owns 0-4, a1 5,6, a2 7 and s, a
 * standby of 0 and 7, answered first and fresher for 0. Summing s for
 * partition 0 and then a0 for 1 counted partition 0's workers twice (seen
 * with kvplane status over four kvplane-advisor processes: 8728 locations
 * where the workers held 8129); the cover is a0, a1 and a2. */
static void stats_merge_avoids_overlapping_standbys(void **state) {
  (void)state;
  const char *text = "{\"partitions\": 8, \"missing\": [], \"replies\": ["
                     "{\"advisor\": \"s\", \"locations\": 300,"
                     " \"partitions\": {\"count\": 8, \"owned\": [0, 7], \"positions\": [9, 4]}},"
                     "{\"advisor\": \"a0\", \"locations\": 1000,"
                     " \"partitions\": {\"count\": 8, \"owned\": [0, 1, 2, 3, 4], \"positions\": "
                     "[8, 4, 3, 2, 4]}},"
                     "{\"advisor\": \"a1\", \"locations\": 200,"
                     " \"partitions\": {\"count\": 8, \"owned\": [5, 6], \"positions\": [3, 4]}},"
                     "{\"advisor\": \"a2\", \"locations\": 100,"
                     " \"partitions\": {\"count\": 8, \"owned\": [7], \"positions\": [4]}}]}";
  json_t *g = json_loads(text, 0, NULL), *m;
  assert_non_null(g);
  assert_non_null(m = kvp__cli_stats_merge(g));
  assert_int_equal(json_integer_value(json_object_get(m, "locations")), 1300);
  json_t *summed = json_object_get(json_object_get(m, "gathered"), "summed");
  assert_int_equal(json_array_size(summed), 3);
  assert_string_equal(json_string_value(json_array_get(summed, 0)), "a0");
  json_decref(m);
  json_decref(g);
  /* Sets that cannot be split evenly (a: 0,1; b: 1,2; c: 2,0): a, then c
   * for partition 2 (b overlaps a, c too but it is the freshest left):
   * every partition is in the sum, one of them twice. */
  g = json_loads("{\"partitions\": 3, \"missing\": [], \"replies\": ["
                 "{\"advisor\": \"a\", \"locations\": 1,"
                 " \"partitions\": {\"count\": 3, \"owned\": [0, 1], \"positions\": [5, 5]}},"
                 "{\"advisor\": \"b\", \"locations\": 10,"
                 " \"partitions\": {\"count\": 3, \"owned\": [1, 2], \"positions\": [5, 5]}},"
                 "{\"advisor\": \"c\", \"locations\": 100,"
                 " \"partitions\": {\"count\": 3, \"owned\": [2, 0], \"positions\": [6, 5]}}]}",
                 0, NULL);
  assert_non_null(m = kvp__cli_stats_merge(g));
  assert_int_equal(json_integer_value(json_object_get(m, "locations")), 101);
  json_decref(m);
  json_decref(g);
  /* An unpartitioned advisor beside them (count 0, "owned": [0]) is not a
   * partition 0 advisor: listed, not summed, nor named as 0's. */
  g = json_loads("{\"partitions\": 2, \"missing\": [0], \"replies\": ["
                 "{\"advisor\": \"u\", \"locations\": 1000,"
                 " \"partitions\": {\"count\": 0, \"owned\": [0], \"positions\": [99]}},"
                 "{\"advisor\": \"a\", \"locations\": 1,"
                 " \"partitions\": {\"count\": 2, \"owned\": [1], \"positions\": [5]}}]}",
                 0, NULL);
  assert_non_null(m = kvp__cli_stats_merge(g));
  assert_int_equal(json_integer_value(json_object_get(m, "locations")), 1);
  json_t *gu = json_object_get(m, "gathered");
  assert_int_equal(json_array_size(json_object_get(gu, "advisors")), 2);
  json_t *p0 = json_array_get(json_object_get(gu, "partitions"), 0);
  assert_int_equal(json_array_size(json_object_get(p0, "answered")), 0);
  json_decref(m);
  json_decref(g);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(stats_merge_counts_a_standby_once),
      cmocka_unit_test(stats_merge_avoids_overlapping_standbys),
      cmocka_unit_test_setup_teardown(status_and_top_gather_across_partitions, setup, teardown),
      cmocka_unit_test_setup_teardown(sim_needs_partitions_to_publish, setup, teardown),
      cmocka_unit_test_setup_teardown(sim_keeps_objects_under_the_partition_namespace, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(reverse_relay_takes_partitioned_events, setup, teardown),
  };
  return kvp_test_run("scale_tools", tests, sizeof tests / sizeof tests[0], argc, argv);
}
