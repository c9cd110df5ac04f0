/* The kvplane CLI as a user runs it (the built binary): the database views
 * with and without a running advisor, JSON output, match by tokens, and
 * the documented exit statuses. The blocks come from simulated workers
 * (src/sim) replaying the start of the bundled trace through a real
 * nats-server into the in-process advisor. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../advisor/advfix.h"
#include "harness.h"
#include "cli/inspect.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/volume_plugin.h"
#include "metrics/build_info.h"
#include "sim/sim.h"
#include "sim/trace.h"

typedef struct cli_s {
  advfix_t f;
  char prog[512], out[400];
  char *text; /* the last run's standard output */
} cli_t;

static int cli_run(cli_t *c, char *const *args) {
  char *argv[32] = {c->prog};
  int n = 1;
  for (; args[n - 1] && n < 31; n++)
    argv[n] = args[n - 1];
  argv[n] = NULL;
  int rc = kvp_test_spawn_wait(argv, NULL, c->out);
  free(c->text);
  c->text = calloc(1, 1 << 16);
  FILE *f = fopen(c->out, "r");
  if (f) {
    size_t got = fread(c->text, 1, (1 << 16) - 1, f);
    (void)got;
    fclose(f);
  }
  return rc;
}

/* Replays 300 requests through 2 workers and waits until the database holds
 * them (the advisor's stats say nothing is pending). */
static int setup(void **state) {
  cli_t *c = calloc(1, sizeof *c);
  kvp__sim_opts_t o;
  kvp__sim_t *sim;
  char trace[512], err[512];

  *state = c;
  if (advfix_setup(&c->f, 0) != 0)
    return -1;
  c->f.cfg.history_interval_ms = 1000; /* tier_history for `report` */
  if (advfix_start(&c->f) != 0)
    return -1;
  snprintf(c->prog, sizeof c->prog, "%s/tools/kvplane", getenv("KVP_TEST_BINDIR"));
  snprintf(c->out, sizeof c->out, "%s/cli.out", c->f.dir);
  snprintf(trace, sizeof trace, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  kvp__sim_opts_init(&o);
  o.trace = trace;
  o.servers = c->f.natsd.url;
  o.ns = c->f.cfg.ns;
  o.workers = 2;
  o.limit = 300;
  if (kvp__sim_create(&o, &sim, err, sizeof err) != 0 || kvp__sim_run(sim) != 0)
    return -1;
  kvp__sim_destroy(sim);
  for (int i = 0; i < 500; i++) {
    if (advfix_stat(&c->f, "freshness.pending_ms") == 0 && advfix_stat(&c->f, "store.dirty") == 0 &&
        advfix_stat(&c->f, "ingest.batches") > 0)
      return 0;
    usleep(10000);
  }
  return -1;
}

static int teardown(void **state) {
  cli_t *c = *state;
  advfix_teardown(&c->f);
  free(c->text);
  free(c);
  return 0;
}

static void views_read_the_database(void **state) {
  cli_t *c = *state;
  char *db = c->f.db, *url = c->f.natsd.url;

  /* The advisor answers: status shows the live figures too. */
  assert_int_equal(cli_run(c, (char *[]){"status", "--db", db, "-s", url, "-n", "t", NULL}), 0);
  assert_non_null(strstr(c->text, "G1"));
  assert_non_null(strstr(c->text, "advisor: core mode"));
  assert_non_null(strstr(c->text, "lag:"));
  /* The figures are the stats reply's (the uptime and the flush lag once
   * shared a buffer and printed the same). */
  long long flush_lag = advfix_stat(&c->f, "freshness.flush_lag_ms");
  char dur[32], want[64];
  kvp__cli_duration((uint64_t)flush_lag, dur, sizeof dur);
  snprintf(want, sizeof want, "committed %s after", dur);
  assert_int_equal(cli_run(c, (char *[]){"status", "--db", db, "-s", url, "-n", "t", NULL}), 0);
  assert_non_null(strstr(c->text, want));
  assert_int_equal(cli_run(c, (char *[]){"workers", "--db", db, NULL}), 0);
  assert_non_null(strstr(c->text, "sim-0"));
  assert_non_null(strstr(c->text, "sim-1"));
  assert_non_null(strstr(c->text, " up "));
  assert_int_equal(cli_run(c, (char *[]){"blocks", "--hot", "-N", "3", "--db", db, NULL}), 0);
  /* A header and three rows. */
  int lines = 0;
  for (const char *p = c->text; *p; p++)
    lines += *p == '\n';
  assert_int_equal(lines, 4);
  assert_int_equal(
      cli_run(c, (char *[]){"blocks", "--cold", "--json", "-N", "5", "--db", db, NULL}), 0);
  json_t *j = json_loads(c->text, 0, NULL);
  assert_non_null(j);
  assert_int_equal(json_array_size(j), 5);
  assert_int_equal(strlen(json_string_value(json_object_get(json_array_get(j, 0), "hash"))), 16);
  assert_true(json_is_integer(json_object_get(json_array_get(j, 0), "bytes")));
  json_decref(j);
  assert_int_equal(cli_run(c, (char *[]){"migrations", "--failed", "--db", db, NULL}), 0);
  assert_non_null(strstr(c->text, "(none)"));
  assert_int_equal(
      cli_run(c, (char *[]){"status", "--json", "--db", db, "-s", url, "-n", "t", NULL}), 0);
  j = json_loads(c->text, 0, NULL);
  assert_non_null(j);
  assert_true(json_array_size(json_object_get(j, "tiers")) >= 2);
  assert_true(json_is_object(json_object_get(j, "advisor")));
  json_decref(j);

  /* Never two advisors: without -n the database's namespace is asked; a
   * namespace that is not the database's is refused, naming both. */
  assert_int_equal(cli_run(c, (char *[]){"status", "--db", db, "-s", url, NULL}), 0);
  assert_non_null(strstr(c->text, "advisor: core mode"));
  char sh[1200];
  snprintf(sh, sizeof sh, "%s status --db %s -s %s -n other 2>&1", c->prog, db, url);
  assert_int_equal(kvp_test_spawn_wait((char *[]){"sh", "-c", sh, NULL}, NULL, c->out), 1);
  FILE *ef = fopen(c->out, "r");
  char line[600] = "";
  assert_non_null(ef);
  assert_non_null(fgets(line, sizeof line, ef));
  fclose(ef);
  assert_non_null(strstr(line, "namespace 't'"));
  assert_non_null(strstr(line, "namespace 'other'"));
  assert_int_equal(
      cli_run(c, (char *[]){"top", "--db", db, "-s", url, "-n", "other", "-N", "1", NULL}), 1);
  /* -c gives the namespace and the servers with the database. */
  char conf[600];
  snprintf(conf, sizeof conf, "%s/cli.conf", c->f.dir);
  FILE *cf = fopen(conf, "w");
  assert_non_null(cf);
  fprintf(cf, "[nats]\nservers = %s\n[advisor]\nnamespace = t\n[store]\npath = %s\n", url, db);
  fclose(cf);
  assert_int_equal(cli_run(c, (char *[]){"status", "-c", conf, NULL}), 0);
  assert_non_null(strstr(c->text, "advisor: core mode"));

  /* Without an advisor: status still prints the database, exit 0. */
  assert_int_equal(advfix_stop(&c->f), 0);
  assert_int_equal(cli_run(c, (char *[]){"status", "--db", db, "-s", url, "-n", "t", NULL}), 0);
  assert_non_null(strstr(c->text, "advisor: no answer"));
  assert_non_null(strstr(c->text, "G2"));
  /* ... saying why: nobody on the subject, or the server named. */
  assert_non_null(strstr(c->text, "kvplane.api.t.stats"));
  char gone[64];
  snprintf(gone, sizeof gone, "nats://127.0.0.1:%d", kvp_test_free_port());
  assert_int_equal(cli_run(c, (char *[]){"status", "--db", db, "-s", gone, "-n", "t", NULL}), 0);
  assert_non_null(strstr(c->text, "advisor: no answer over NATS: "));
  assert_non_null(strstr(c->text, gone));
  assert_int_equal(cli_run(c, (char *[]){"top", "--db", db, "-s", gone, "-N", "1", NULL}), 0);
  assert_non_null(strstr(c->text, "advisor: no answer: "));
  assert_non_null(strstr(c->text, gone));
}

static void match_by_tokens(void **state) {
  cli_t *c = *state;
  char path[400];
  uint32_t tokens[2 * 512];
  kvp_trace_t *t;
  kvp_trace_req_t r;
  char err[256], trace[512];

  /* The first two blocks of the trace's first request, as token ids. */
  snprintf(trace, sizeof trace, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_int_equal(kvp_trace_open(trace, &t, err, sizeof err), 0);
  assert_int_equal(kvp_trace_next(t, &r, err, sizeof err), 1);
  assert_true(r.nhash_ids >= 2);
  kvp_trace_block_tokens(r.hash_ids[0], tokens, 512);
  kvp_trace_block_tokens(r.hash_ids[1], tokens + 512, 512);
  kvp_trace_close(t);
  snprintf(path, sizeof path, "%s/tokens.txt", c->f.dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 1024; i++)
    fprintf(f, "%u%s", tokens[i], i % 16 == 15 ? "\n" : ", ");
  fprintf(f, "7 8 9\n"); /* a partial block: not sent */
  fclose(f);
  assert_int_equal(cli_run(c, (char *[]){"match", "-s", c->f.natsd.url, "-n", "t", "--tokens", path,
                                         "--block-size", "512", NULL}),
                   0);
  json_t *j = json_loads(c->text, 0, NULL);
  assert_non_null(j);
  json_t *m = json_object_get(j, "matches");
  /* The trace's first block is its shared system prompt: cached. */
  assert_true(json_array_size(m) >= 1);
  assert_true(json_integer_value(json_object_get(json_array_get(m, 0), "length")) >= 1);
  /* The same answer as for the hashes the library computes for these tokens. */
  uint64_t h[2];
  char hex[2][24];
  assert_int_equal(kvp_hash_sequence(tokens, 1024, 512, kvp_hash_seed(NULL), h, 2), 2);
  snprintf(hex[0], sizeof hex[0], "%016llx", (unsigned long long)h[0]);
  snprintf(hex[1], sizeof hex[1], "%016llx", (unsigned long long)h[1]);
  assert_int_equal(
      cli_run(c, (char *[]){"match", "-s", c->f.natsd.url, "-n", "t", hex[0], hex[1], NULL}), 0);
  json_t *j2 = json_loads(c->text, 0, NULL);
  assert_true(json_equal(j, j2));
  json_decref(j2);
  json_decref(j);
  /* Bad token files are usage errors. */
  f = fopen(path, "w");
  fputs("1 2 x\n", f);
  fclose(f);
  assert_int_equal(
      cli_run(c, (char *[]){"match", "-n", "t", "--tokens", path, "--block-size", "2", NULL}), 1);
}

static void exit_statuses(void **state) {
  cli_t *c = *state;
  char missing[400];
  snprintf(missing, sizeof missing, "%s/none.db", c->f.dir);

  assert_int_equal(cli_run(c, (char *[]){"--help", NULL}), 0);
  assert_non_null(strstr(c->text, "exit status"));
  /* Every option is listed: -N had no long form in the help. */
  assert_non_null(strstr(c->text, "-N, --count COUNT"));
  assert_int_equal(cli_run(c, (char *[]){"blocks", "--help", NULL}), 0);
  assert_non_null(strstr(c->text, "usage: kvplane blocks"));
  assert_int_equal(cli_run(c, (char *[]){NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"frobnicate", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"blocks", "--db", c->f.db, NULL}), 1); /* --hot|--cold */
  assert_int_equal(cli_run(c, (char *[]){"blocks", "--hot", "-N", "x", "--db", c->f.db, NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"workers", "--db", missing, NULL}), 4);
  assert_int_equal(cli_run(c, (char *[]){"workers", "--db", "/etc/hostname", NULL}), 4);
  assert_int_equal(cli_run(c, (char *[]){"match", "zz", NULL}), 1);
  /* The servers' partition mapping (docs/SCALE.md). */
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "4", NULL}), 0);
  assert_non_null(strstr(c->text,
                         "\"kvplane.ev.*.*\": "
                         "\"kvplane.pev.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}\""));
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "0", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"nats-config", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "4x", NULL}), 1);
  /* 2^32 + 8 is not 8 (it printed the block for 8 partitions), nor are
   * signs and spaces counts; the largest count is taken. */
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "4294967304", NULL}), 1);
  assert_null(strstr(c->text, "partition("));
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "+8", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "1025", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"nats-config", "1024", NULL}), 0);
  assert_non_null(strstr(c->text, "{{partition(1024,2)}}"));
  /* kvplane bench without kvp-bench says it is not installed, exit 5. */
  char sh[1200];
  snprintf(sh, sizeof sh, "KVPLANE_BENCH=%s/no-kvp-bench %s bench hash 2>&1", c->f.dir, c->prog);
  assert_int_equal(kvp_test_spawn_wait((char *[]){"sh", "-c", sh, NULL}, NULL, c->out), 5);
  FILE *bf = fopen(c->out, "r");
  char btext[2048] = "";
  assert_non_null(bf);
  size_t bn = fread(btext, 1, sizeof btext - 1, bf);
  (void)bn;
  fclose(bf);
  assert_non_null(strstr(btext, "kvp-bench is not installed"));
  /* Nobody listens on a port just freed: unreachable. */
  char url[64];
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", kvp_test_free_port());
  assert_int_equal(cli_run(c, (char *[]){"stats", "-s", url, "-w", "300", NULL}), 2);
}

/* Every program answers --version with exit 0 and one line: its name, the
 * version, the revision, the build type and the plugin ABI; and the stats
 * reply carries the version. */
static void every_program_answers_version(void **state) {
  cli_t *c = *state;
  static const char *const progs[] = {"kvplane", "kvplane-advisor", "kvplane-relay", "kvplane-sim"};
  char path[600], want[256];

  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    snprintf(path, sizeof path, "%s/tools/%s", getenv("KVP_TEST_BINDIR"), progs[i]);
    assert_int_equal(kvp_test_spawn_wait((char *[]){path, "--version", NULL}, NULL, c->out), 0);
    FILE *f = fopen(c->out, "r");
    char line[512] = "";
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    snprintf(want, sizeof want, "%s %s (revision %s, build %s, volume plugin ABI %d)\n", progs[i],
             kvp__build_version(), kvp__build_revision(), kvp__build_type(),
             KVP_VOLUME_ABI_VERSION);
    assert_string_equal(line, want);
  }
  assert_int_equal(cli_run(c, (char *[]){"stats", "-s", c->f.natsd.url, "-n", "t", NULL}), 0);
  json_t *doc = json_loads(c->text, 0, NULL);
  assert_non_null(doc);
  assert_string_equal(json_string_value(json_object_get(doc, "version")), kvp__build_version());
  json_decref(doc);
}

/* The first bytes of file path into buf (NUL-terminated); how many. */
static size_t head_of(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "rb");
  size_t n = 0;
  if (f) {
    n = fread(buf, 1, len - 1, f);
    fclose(f);
  }
  buf[n] = '\0';
  return n;
}

/* report draws tier_history (sampled every second here, and once more at
 * stop) and the migrations with gnuplot; its exit statuses. */
static void report_draws_the_history(void **state) {
  cli_t *c = *state;
  char *db = c->f.db, png[400], svg[400], head[600];

  assert_int_equal(advfix_stop(&c->f), 0); /* the last sample is committed */
  snprintf(png, sizeof png, "%s/report.png", c->f.dir);
  snprintf(svg, sizeof svg, "%s/report.svg", c->f.dir);
  assert_int_equal(cli_run(c, (char *[]){"report", "--db", db, "--png", png, NULL}), 0);
  assert_non_null(strstr(c->text, png)); /* it says where */
  assert_int_equal(head_of(png, head, sizeof head) >= 8, 1);
  assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
  assert_int_equal(cli_run(c, (char *[]){"report", "--db", db, "--svg", svg, NULL}), 0);
  head_of(svg, head, sizeof head);
  assert_non_null(strstr(head, "<svg"));
  /* Nothing sampled in the last millisecond: nothing to report. */
  assert_int_equal(
      cli_run(c, (char *[]){"report", "--db", db, "--png", png, "--since", "1ms", NULL}), 4);
  assert_int_equal(cli_run(c, (char *[]){"report", "--db", db, NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"report", "--db", db, "--png", png, "--svg", svg, NULL}),
                   1);
  assert_int_equal(
      cli_run(c, (char *[]){"report", "--db", db, "--png", png, "--since", "soon", NULL}), 1);
  /* gnuplot not found: a program it runs failed. */
  char *path = strdup(getenv("PATH"));
  setenv("PATH", "/nonexistent", 1);
  int rc = cli_run(c, (char *[]){"report", "--db", db, "--png", png, NULL});
  setenv("PATH", path, 1);
  free(path);
  assert_int_equal(rc, 5);
}

/* top without a terminal prints a line per refresh, with rates from the
 * second on; replay runs simulated workers into the advisor; bench prints
 * the table of a suite. */
static void top_replay_and_bench(void **state) {
  cli_t *c = *state;
  char *db = c->f.db, *url = c->f.natsd.url, trace[512];
  long long before = advfix_stat(&c->f, "ingest.block_events");

  snprintf(trace, sizeof trace, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_int_equal(cli_run(c, (char *[]){"replay", trace, "-s", url, "-n", "t", "--workers", "1",
                                         "--limit", "20", NULL}),
                   0);
  assert_non_null(strstr(c->text, "replayed 20 requests"));
  assert_null(strstr(c->text, "(100%)")); /* one final duration: the summary's */
  assert_non_null(strstr(c->text, "0 corrupt reuses"));
  for (int i = 0; i < 500 && advfix_stat(&c->f, "ingest.block_events") == before; i++)
    usleep(10000);
  assert_true(advfix_stat(&c->f, "ingest.block_events") > before);

  assert_int_equal(cli_run(c, (char *[]){"top", "--db", db, "-s", url, "-n", "t", "-N", "2",
                                         "--interval", "200ms", NULL}),
                   0);
  char *second = strchr(c->text, '\n');
  assert_non_null(second);
  /* The figures are named as on a terminal (block-events/s). */
  assert_non_null(strstr(c->text, "block-events/s -"));   /* no rate from one answer */
  assert_non_null(strstr(second + 1, "block-events/s ")); /* a figure from two */
  assert_null(strstr(second + 1, "events/s -"));
  assert_non_null(strstr(second + 1, "blocks "));

  assert_int_equal(cli_run(c, (char *[]){"replay", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"replay", trace, "--mode", "fast", NULL}), 1);
  /* An empty namespace was replayed into "default" (exit 0), an invalid one
   * failed after the trace was read with exit 2: both are bad arguments. */
  assert_int_equal(cli_run(c, (char *[]){"replay", trace, "-n", "", "--limit", "1", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"replay", trace, "-n", "a.b", "--limit", "1", NULL}), 1);
  assert_int_equal(cli_run(c, (char *[]){"top", "--interval", "1ms", "--db", db, NULL}), 1);

  /* kvp-bench is built with the benchmarks (KVP_BENCH, on in scripts/). */
  char bench[600];
  snprintf(bench, sizeof bench, "%s/bench/kvp-bench", getenv("KVP_TEST_BINDIR"));
  if (access(bench, X_OK) == 0) {
    assert_int_equal(cli_run(c, (char *[]){"bench", "hash", NULL}), 0);
    assert_non_null(strstr(c->text, "hash.seq.512tok.blocks_per_s"));
    assert_non_null(strstr(c->text, "xxh3-one-pass"));
    assert_int_equal(cli_run(c, (char *[]){"bench", "nosuch", NULL}), 5);
    /* kvp-bench's own word comes through, on stderr. */
    char cmd[1200], said[4096] = "";
    snprintf(cmd, sizeof cmd, "'%s' bench nosuch 2>&1 >/dev/null", c->prog);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(said, 1, sizeof said - 1, p);
    said[got] = '\0';
    assert_int_equal(WEXITSTATUS(pclose(p)), 5);
    assert_non_null(strstr(said, "kvp-bench: unknown suite 'nosuch'"));
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(views_read_the_database, setup, teardown),
    cmocka_unit_test_setup_teardown(match_by_tokens, setup, teardown),
    cmocka_unit_test_setup_teardown(exit_statuses, setup, teardown),
    cmocka_unit_test_setup_teardown(every_program_answers_version, setup, teardown),
    cmocka_unit_test_setup_teardown(report_draws_the_history, setup, teardown),
    cmocka_unit_test_setup_teardown(top_replay_and_bench, setup, teardown),
};

KVP_TEST_MAIN("cli", tests)
