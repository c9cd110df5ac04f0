/* Trace reader: the bundled trace reads whole; malformed trace lines name
 * the line. kvplane-sim replays the start of the trace through its block
 * managers and publishers against a real nats-server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "natsd.h"
#include "kvplane/status.h"
#include "kvplane/publisher.h"
#include "sim/sim.h"
#include "sim/trace.h"

static void trace_reads_bundled_file(void **state) {
  (void)state;
  char path[512], err[256];
  kvp_trace_t *t;
  kvp_trace_req_t req;
  size_t count = 0, refs = 0;
  int rc;

  snprintf(path, sizeof path, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_int_equal(kvp_trace_open(path, &t, err, sizeof err), 0);
  while ((rc = kvp_trace_next(t, &req, err, sizeof err)) == 1) {
    count++;
    refs += req.nhash_ids;
  }
  assert_int_equal(rc, 0);
  /* The figures of data/README.md. */
  assert_int_equal(count, 12031);
  assert_int_equal(refs, 288500);
  kvp_trace_close(t);
}

static void trace_errors_name_the_line(void **state) {
  (void)state;
  char path[256], err[256];
  kvp_trace_t *t;
  kvp_trace_req_t req;

  snprintf(path, sizeof path, "%s/kvp-trace-%d.jsonl", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  FILE *f = fopen(path, "w");
  fputs("{\"timestamp\": 1, \"hash_ids\": [1, 2]}\n\n{\"timestamp\": 2, \"hash_ids\": [1, \"x\"]}\n"
        "not json\n{\"hash_ids\": []}\n",
        f);
  fclose(f);
  assert_int_equal(kvp_trace_open(path, &t, err, sizeof err), 0);
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), 1);
  assert_int_equal(req.nhash_ids, 2);
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 3: hash_ids[1]"));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 4: bad JSON"));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 5: \"timestamp\""));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), 0);
  kvp_trace_close(t);
  remove(path);
  assert_int_equal(kvp_trace_open("/nonexistent/trace.jsonl", &t, err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0, c;
  if (f == NULL)
    return -1;
  while ((c = fgetc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

static void sim_replays_against_nats(void **state) {
  (void)state;
  const char *bindir = getenv("KVP_TEST_BINDIR");
  char prog[512], trace[512], dir[256], expect[300], out[300];
  kvp_natsd_t d;

  if (bindir == NULL)
    skip();
  snprintf(prog, sizeof prog, "%s/tools/kvplane-sim", bindir);
  snprintf(trace, sizeof trace, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(expect, sizeof expect, "%s/expect.csv", dir);
  snprintf(out, sizeof out, "%s/out.txt", dir);
  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  /* Small pools so that the 400 requests evict, offload and onboard. */
  char *argv[] = {prog, "-t",  trace,         "-s",  d.url,         "-n",  "simtest", "-w",   "2",
                  "-l", "400", "--g1-blocks", "300", "--g2-blocks", "600", "-e",      expect, NULL};
  int rc = kvp_test_spawn_wait(argv, NULL, out);
  kvp_natsd_stop(&d);
  assert_int_equal(rc, 0);
  int lines = count_lines(expect);
  assert_true(lines > 300 && lines <= 2 * (300 + 600));
  FILE *f = fopen(out, "r");
  char line[1024];
  int clean = 0, onboards = 0, workers = 0;
  assert_non_null(f);
  while (fgets(line, sizeof line, f)) {
    clean += strstr(line, " 0 reused blocks with wrong bytes") != NULL;
    const char *o = strstr(line, " offloads, ");
    if (o != NULL) {
      workers++;
      onboards += atoi(o + strlen(" offloads, "));
    }
  }
  fclose(f);
  assert_int_equal(clean, 1);
  assert_int_equal(workers, 2);
  assert_true(onboards > 0); /* prefix hits found only in G2 were onboarded */
  kvp_test_rmtree(dir);
}

/* kvplane-sim ARGS (after --trace of the bundled trace, against a server
 * that is not there): exits 1 with stderr holding want, before any NATS. */
static void sim_fails(const char *args, const char *want) {
  char cmd[1024], out[4096];
  snprintf(cmd, sizeof cmd,
           "'%s/tools/kvplane-sim' -t '%s/../data/conversation_trace.jsonl.gz' -l 1 "
           "-s nats://127.0.0.1:1 %s 2>&1",
           getenv("KVP_TEST_BINDIR"), kvp_test_srcdir(), args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || strstr(out, want) == NULL)
    fail_msg("kvplane-sim %s: status %d, output '%s' lacks '%s'", args,
             WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, want);
}

/* Bad values are refused by name, exit 1: "-1" and an overflow were taken
 * as 2^64 - 1 by --g3-capacity, inf and 1e400 as a speedup, an empty --ns
 * was published as "default", an invalid one failed after the trace was
 * read with exit status 2, and an empty --server meant 127.0.0.1:4222. */
static void sim_option_errors(void **state) {
  (void)state;
  if (getenv("KVP_TEST_BINDIR") == NULL)
    skip();
  sim_fails("--g3-capacity -1", "--g3-capacity: '-1' is not an integer");
  sim_fails("--g3-capacity 99999999999999999999", "--g3-capacity: '99999999999999999999'");
  sim_fails("--workers ' 3'", "--workers: ' 3'");
  sim_fails("--speedup inf", "--speedup: 'inf' is not a number");
  sim_fails("--speedup 1e400", "--speedup: '1e400'");
  sim_fails("--ns ''", "--ns: '' is not");
  sim_fails("--ns a.b", "--ns: 'a.b' is not");
  sim_fails("--server ''", "--server: empty");
}

/* The simulated workers run in-process (src/sim): JetStream mode, the
 * distinct events counted once, the expect file holding every registered
 * block; bad options and a missing trace are named errors. */
static void sim_runs_in_process(void **state) {
  (void)state;
  kvp__sim_opts_t o;
  kvp__sim_t *sim;
  kvp_natsd_t d;
  kvp_natsd_opts_t no = {.jetstream = 1};
  char trace[512], dir[256], expect[300], err[512];

  snprintf(trace, sizeof trace, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(expect, sizeof expect, "%s/expect.csv", dir);

  kvp__sim_opts_init(&o);
  o.workers = 0;
  assert_int_equal(kvp__sim_create(&o, &sim, err, sizeof err), KVP_EINVAL);
  o.workers = 2;
  o.trace = "/nonexistent/trace.jsonl";
  assert_int_equal(kvp__sim_create(&o, &sim, err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));

  assert_int_equal(kvp_natsd_start(&d, &no), 0);
  o.trace = trace;
  o.servers = d.url;
  o.ns = "simjs";
  o.mode = KVP_PUB_JETSTREAM;
  o.limit = 200;
  o.g1_blocks = 300;
  o.g2_blocks = 600;
  assert_int_equal(kvp__sim_create(&o, &sim, err, sizeof err), 0);
  assert_int_equal(kvp__sim_requests(sim), 200);
  assert_int_equal(kvp__sim_run(sim), 0);
  uint64_t cached = 0;
  for (int i = 0; i < 2; i++) {
    kvp__sim_worker_stats_t ws;
    kvp__sim_worker_stats(sim, i, &ws);
    assert_int_equal(ws.rc, 0);
    assert_int_equal(ws.requests, 100);
    assert_int_equal(ws.corrupt, 0);
    assert_true(ws.events_sent > 0);
    assert_true(ws.blocks_sent >= ws.events_sent);
    assert_int_equal(ws.events_resent, 0); /* nothing failed: nothing resent */
    assert_int_equal(ws.events_dropped, 0);
    cached += ws.g1_cached + ws.g2_cached;
  }
  assert_int_equal(kvp__sim_write_expect(sim, expect, err, sizeof err), 0);
  assert_int_equal(count_lines(expect), (int)cached);
  assert_int_equal(kvp__sim_write_expect(sim, "/nonexistent/dir/x.csv", err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent/dir/x.csv"));
  kvp__sim_destroy(sim);

  /* With G3 and G4 volumes: blocks reused at least once reach G3 when G2
   * evicts them, and the expect file lists them as tier 3. */
  char vols[300], plugins[512];
  snprintf(vols, sizeof vols, "%s/volumes", dir);
  snprintf(plugins, sizeof plugins, "%s/plugins", getenv("KVP_TEST_BINDIR"));
  o.volume_dir = vols;
  o.plugin_dir = plugins;
  o.ns = "simvol";
  o.limit = 4000;
  o.g1_blocks = 200;
  o.g2_blocks = 200;
  assert_int_equal(kvp__sim_create(&o, &sim, err, sizeof err), 0);
  assert_int_equal(kvp__sim_run(sim), 0);
  uint64_t g3 = 0, to_g3 = 0;
  cached = 0;
  for (int i = 0; i < 2; i++) {
    kvp__sim_worker_stats_t ws;
    kvp__sim_worker_stats(sim, i, &ws);
    assert_int_equal(ws.rc, 0);
    assert_int_equal(ws.corrupt, 0);
    assert_int_equal(ws.offloads_g3_lost, 0);
    g3 += ws.g3_cached;
    to_g3 += ws.offloads_g3;
    cached += ws.g1_cached + ws.g2_cached + ws.g3_cached;
  }
  assert_true(g3 > 0);
  assert_true(g3 <= to_g3); /* a block read back and evicted again is put again */
  assert_int_equal(kvp__sim_write_expect(sim, expect, err, sizeof err), 0);
  assert_int_equal(count_lines(expect), (int)cached);
  kvp__sim_destroy(sim);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(trace_reads_bundled_file), cmocka_unit_test(trace_errors_name_the_line),
    cmocka_unit_test(sim_replays_against_nats), cmocka_unit_test(sim_runs_in_process),
    cmocka_unit_test(sim_option_errors),
};

KVP_TEST_MAIN("sim", tests)
