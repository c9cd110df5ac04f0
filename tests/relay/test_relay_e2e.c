/* Why this file is long: every case runs the same real parts (engine
 * script, relay, nats-server, advisor) through the shared scenario runner
 * and database readers at the top; split, each file would repeat them.
 *
 * kvplane-relay end to end: a vLLM-shaped publisher in Python (Debian's
 * /usr/bin/python3 with python3-zmq and python3-msgpack, tests/relay/
 * engine_pub.py; engines.py for SGLang, TensorRT-LLM through Dynamo and
 * vLLM's extra_keys) feeds an in-process relay, which republishes through the
 * kvplane publisher to a real nats-server, where a real in-process advisor
 * indexes the blocks. The advisor's database must end with exactly the
 * blocks and tiers the publisher's own model computed (with kvplane's
 * sequence hashes computed independently in Python). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "advfix.h"
#include "harness.h"
#include "relay/cli.h"
#include "relay/metrics.h"
#include "relay/relay.h"

/* ThreadSanitizer cannot see libzmq's own synchronisation (lock-free pipes
 * between its I/O thread and the application thread, in the uninstrumented
 * libzmq.so): its recv() into a message buffer that the relay thread reads
 * after the hand-over is reported as a race. Suppressed for libzmq only. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
  return "called_from_lib:libzmq.so\n";
}

typedef struct run_s {
  advfix_t f;
  kvp_relay_t *relay;
  pthread_t relay_th, pub_th;
  char expect[512];
  char *argv[11];
  char ports[2][16];
  char script[512];
  int pub_rc;
} run_t;

static void *relay_main(void *r) {
  kvp_relay_run(r);
  return NULL;
}

static void *pub_main(void *p) {
  run_t *r = p;
  r->pub_rc = kvp_test_spawn_wait(r->argv, NULL, NULL);
  return NULL;
}

static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Reads "tier,hash" lines; returns the count (pairs in out). */
/* Tells the engine script its stream was taken (EXPECT.done): it stops
 * answering replays and exits, instead of at its 10 s. */
static void engine_done(const char *expect) {
  char path[600];
  snprintf(path, sizeof path, "%s.done", expect);
  FILE *f = fopen(path, "w");
  if (f != NULL)
    fclose(f);
}

static size_t read_expect(const char *path, int64_t (*out)[2], size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n = 0;
  if (!f)
    return SIZE_MAX;
  while (n < cap && fscanf(f, "%" SCNd64 ",%" SCNd64, &out[n][0], &out[n][1]) == 2)
    n++;
  fclose(f);
  qsort(out, n, sizeof out[0], cmp_pair);
  return n;
}

static size_t read_db_worker(const char *db, const char *worker, int64_t (*out)[2], size_t cap) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  size_t n = 0;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(h, "SELECT tier, hash FROM block_locations WHERE worker = ?", -1, &s,
                         NULL) != SQLITE_OK ||
      sqlite3_bind_text(s, 1, worker, -1, SQLITE_STATIC) != SQLITE_OK) {
    sqlite3_finalize(s);
    sqlite3_close(h);
    return SIZE_MAX;
  }
  while (n < cap && sqlite3_step(s) == SQLITE_ROW) {
    out[n][0] = sqlite3_column_int64(s, 0);
    out[n][1] = sqlite3_column_int64(s, 1);
    n++;
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  qsort(out, n, sizeof out[0], cmp_pair);
  return n;
}

static size_t read_db(const char *db, int64_t (*out)[2], size_t cap) {
  return read_db_worker(db, "eng0", out, cap);
}

/* The advisor's parent of each block, "hash,parent" lines of path
 * (engine_pub.py and engines.py write them beside the expectation): 1 when
 * every one is what the database holds, else 0 (printed). */
static int parents_equal(const char *db, const char *path, int loud) {
  char file[600];
  int64_t pairs[64][2];
  snprintf(file, sizeof file, "%s.parents", path);
  FILE *f = fopen(file, "r");
  size_t n = 0;
  if (!f)
    return 0;
  while (n < 64 && fscanf(f, "%" SCNd64 ",%" SCNd64, &pairs[n][0], &pairs[n][1]) == 2)
    n++;
  fclose(f);
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int ok =
      sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, "SELECT parent FROM blocks WHERE hash = ?", -1, &s, NULL) == SQLITE_OK;
  for (size_t i = 0; ok && i < n; i++) {
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, pairs[i][0]);
    int64_t got = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL
                      ? sqlite3_column_int64(s, 0)
                      : pairs[i][0];
    if (got != pairs[i][1]) {
      if (loud)
        fprintf(stderr,
                "  block %" PRId64 ": parent %" PRId64 " in the database, want %" PRId64 "\n",
                pairs[i][0], got, pairs[i][1]);
      ok = 0;
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return ok;
}

/* The longest chain of the "hash,parent" lines of path, asked of the
 * advisor as a prefix match: 1 when some (worker, tier) matches all of it. */
static int chain_matches(advfix_t *f, const char *path) {
  char file[600];
  int64_t pairs[64][2], chain[65];
  size_t n = 0, len = 0;
  snprintf(file, sizeof file, "%s.parents", path);
  FILE *fp = fopen(file, "r");
  if (!fp)
    return 0;
  while (n < 64 && fscanf(fp, "%" SCNd64 ",%" SCNd64, &pairs[n][0], &pairs[n][1]) == 2)
    n++;
  fclose(fp);
  for (size_t i = 0; i < n && len == 0; i++) { /* a root: a parent that is no child */
    int child = 0;
    for (size_t j = 0; j < n; j++)
      child |= pairs[j][0] == pairs[i][1];
    if (!child)
      chain[len++] = pairs[i][1];
  }
  for (int more = len > 0; more && len < 65;) {
    more = 0;
    for (size_t j = 0; j < n && !more; j++)
      if (pairs[j][1] == chain[len - 1])
        chain[len++] = pairs[j][0], more = 1;
  }
  uint8_t bin[4 + 65 * 8];
  memcpy(bin, "KVPM", 4);
  for (size_t i = 0; i < len; i++)
    for (int k = 0; k < 8; k++)
      bin[4 + i * 8 + (size_t)k] = (uint8_t)((uint64_t)chain[i] >> (8 * k));
  char *rep = advfix_request(f, "match", bin, (int)(4 + len * 8));
  long long best = 0;
  for (const char *p = rep; p && (p = strstr(p, "\"length\":")) != NULL; p++)
    if (atoll(p + 9) > best)
      best = atoll(p + 9);
  if (len < 2 || best != (long long)len)
    fprintf(stderr, "  prefix match of a chain of %zu blocks: %lld (%s)\n", len, best,
            rep ? rep : "no reply");
  free(rep);
  return len >= 2 && best == (long long)len;
}

/* The script of a scenario: engines.py for the other engines' shapes. */
static const char *script_of(const char *name) {
  const char *other[] = {"sglang", "trtllm", "mm", "chain"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    if (strcmp(name, other[i]) == 0)
      return "engines.py";
  return "engine_pub.py";
}

/* The advisor of a run started, and two free ports for the engine's PUB
 * and replay sockets (also in r->ports). */
static void advisor_and_ports(run_t *r, int *pp, int *rp) {
  assert_int_equal(advfix_setup(&r->f, 0), 0);
  assert_int_equal(advfix_start(&r->f), 0);
  *pp = kvp_test_free_port();
  while ((*rp = kvp_test_free_port()) == *pp)
    ;
  snprintf(r->ports[0], sizeof r->ports[0], "%d", *pp);
  snprintf(r->ports[1], sizeof r->ports[1], "%d", *rp);
}

/* Runs one scenario; *st gets the relay's figures. With resync, the relay's
 * publisher is asked for a resync once the blocks are in, and the advisor
 * must then hold the same blocks with the same parents. */
static void scenario_r(const char *name, const char *enc, const char *layout, int resync,
                       kvp_relay_stats_t *st) {
  run_t *r = calloc(1, sizeof *r);
  char err[256], script[512];
  int64_t want[64][2], got[64][2];
  size_t nw = SIZE_MAX, ng = SIZE_MAX;
  assert_non_null(r);
  int pp, rp;
  advisor_and_ports(r, &pp, &rp);
  char ep[64], rep[64];
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", pp);
  snprintf(rep, sizeof rep, "tcp://127.0.0.1:%d", rp);

  kvp_relay_opts_t o;
  kvp_relay_opts_init(&o);
  snprintf(o.pub.nats.servers, sizeof o.pub.nats.servers, "%s", r->f.natsd.url);
  o.pub.ns = "t";
  o.endpoints[0] = (kvp_relay_endpoint_t){.endpoint = ep, .replay = rep, .worker_id = "eng0"};
  o.nendpoints = 1;
  o.topic = "kv-events";
  assert_int_equal(kvp_relay_open(&o, &r->relay, err, sizeof err), 0);
  assert_int_equal(pthread_create(&r->relay_th, NULL, relay_main, r->relay), 0);

  snprintf(script, sizeof script, "%s/relay/%s", kvp_test_srcdir(), script_of(name));
  snprintf(r->expect, sizeof r->expect, "%s/expect.csv", r->f.dir);
  char *argv[] = {"/usr/bin/python3", script,         r->ports[0], r->ports[1], (char *)name,
                  (char *)enc,        (char *)layout, r->expect,   NULL};
  memcpy(r->argv, argv, sizeof argv);
  assert_int_equal(pthread_create(&r->pub_th, NULL, pub_main, r), 0);
  /* The expectation file appears once the publisher has sent everything. */
  for (int i = 0; i < 300 && access(r->expect, R_OK) != 0; i++)
    usleep(50 * 1000);
  nw = read_expect(r->expect, want, 64);
  assert_true(nw != SIZE_MAX);
  for (int i = 0; i < 200; i++) {
    ng = read_db(r->f.db, got, 64);
    if (ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0)
      break;
    usleep(50 * 1000);
  }
  int parents_ok = 1, match_ok = 1;
  if (resync) {
    /* As the advisor asks: the relay answers with the blocks it published
     * and their parents, and the index stays exact, prefix tree included. */
    long long before = advfix_stat(&r->f, "ingest.snapshots");
    kvp_publisher_request_resync(kvp__relay_endpoint_publisher(r->relay, 0));
    for (int i = 0; i < 200 && advfix_stat(&r->f, "ingest.snapshots") <= before; i++)
      usleep(50 * 1000);
    for (int i = 0; i < 200; i++) {
      ng = read_db(r->f.db, got, 64);
      parents_ok = parents_equal(r->f.db, r->expect, 0);
      if (ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0 && parents_ok)
        break;
      usleep(50 * 1000);
    }
    if (!parents_ok)
      parents_equal(r->f.db, r->expect, 1);
    if (strcmp(name, "chain") == 0)
      match_ok = chain_matches(&r->f, r->expect);
  }
  engine_done(r->expect);
  pthread_join(r->pub_th, NULL);
  kvp_relay_stop(r->relay);
  pthread_join(r->relay_th, NULL);
  kvp_relay_stats(r->relay, 0, st);
  kvp_relay_stats_print(r->relay, stderr);
  kvp_relay_close(r->relay);
  advfix_stop(&r->f);
  /* Again after everything stopped: what the relay published after the
   * first equal read counts too. */
  ng = read_db(r->f.db, got, 64);
  advfix_teardown(&r->f);
  if (!(ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0)) {
    fprintf(stderr, "%s/%s/%s: want %zu blocks, DB has %zu\n", name, enc, layout, nw, ng);
    for (size_t i = 0; i < nw; i++)
      fprintf(stderr, "  want G%" PRId64 " %" PRId64 "\n", want[i][0], want[i][1]);
    for (size_t i = 0; ng != SIZE_MAX && i < ng; i++)
      fprintf(stderr, "  got  G%" PRId64 " %" PRId64 "\n", got[i][0], got[i][1]);
    free(r);
    fail();
  }
  assert_true(parents_ok);
  assert_true(match_ok);
  assert_int_equal(r->pub_rc, 0);
  free(r);
}

static void scenario(const char *name, const char *enc, const char *layout, kvp_relay_stats_t *st) {
  scenario_r(name, enc, layout, 0, st);
}

static void basic_both_encodings(void **state) {
  (void)state;
  const char *encs[] = {"array", "map"};
  for (int i = 0; i < 2; i++) {
    kvp_relay_stats_t st;
    scenario("basic", encs[i], "topic", &st);
    assert_int_equal(st.skip_kind, 2);         /* the sliding-window group, mamba */
    assert_int_equal(st.skip_kind_unknown, 1); /* brand_new_kind */
    assert_int_equal(st.decode_errors, 2);     /* garbage payload, 2-frame message */
    assert_int_equal(st.event_errors, 1);      /* the unknown event type */
    assert_int_equal(st.blocks_native, 1);     /* extra_keys */
    assert_int_equal(st.blocks_kvp, 9);        /* with MLA (lora_id), sink (locality) */
    assert_int_equal(st.gaps, 0);
    assert_int_equal(st.clears, 0);
  }
}

static void gap_replayed_each_layout(void **state) {
  (void)state;
  const char *layouts[] = {"topic", "empty", "bare"};
  for (int i = 0; i < 3; i++) {
    kvp_relay_stats_t st;
    scenario("gap", i == 1 ? "map" : "array", layouts[i], &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.replays, 1);
    assert_int_equal(st.replay_msgs, 1);
    assert_int_equal(st.clears, 0);
  }
}

static void replay_unavailable_clears(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario("noreplay", "array", "topic", &st);
  assert_int_equal(st.gaps, 1);
  assert_int_equal(st.clears, 1);
  assert_int_equal(st.out_cleared, 1);
}

/* The restarted engine's sequence 0 reached only its replay buffer: the
 * relay clears, replays 0 and then applies 1. */
static void publisher_restart_clears(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario("restart", "map", "topic", &st);
  assert_int_equal(st.restarts, 1);
  assert_int_equal(st.clears, 1);
  assert_int_equal(st.replays, 1);
  assert_int_equal(st.replay_msgs, 1);
}

/* A relay whose first message is sequence 3 replays 0..2 first: no block
 * is missing and the later child chains to its parent (kvplane hashes). */
static void joined_late_replays_before(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario("late", "array", "empty", &st);
  assert_int_equal(st.replays, 1);
  assert_int_equal(st.replay_msgs, 3);
  assert_int_equal(st.blocks_native, 0);
  assert_int_equal(st.clears, 0);
  assert_int_equal(st.lost, 0);
}

/* A message's sequence moves the state only once its payload decoded:
 * garbage with sequence 0 or +1000 neither clears nor replays, and an
 * undecodable message in sequence is one lost sequence, not a gap. */
static void undecodable_sequences_ignored(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario("badseq", "array", "topic", &st);
  assert_int_equal(st.decode_errors, 3);
  assert_int_equal(st.lost, 1);
  assert_int_equal(st.restarts, 0);
  assert_int_equal(st.gaps, 0);
  assert_int_equal(st.replays, 0);
  assert_int_equal(st.clears, 0);
  assert_int_equal(st.last_seq, 4);
}

/* Copies per medium: store GPU, placeholder store CPU (no tokens), remove
 * GPU leaves the CPU copy under the kvplane identity; repeated stores are
 * references; remaining_copy_counts decides; every engine's media names. */
static void copies_per_medium(void **state) {
  (void)state;
  const char *encs[] = {"array", "map"};
  for (int i = 0; i < 2; i++) {
    kvp_relay_stats_t st;
    scenario_r("copies", encs[i], "topic", 1, &st);
    assert_int_equal(st.resyncs, 1); /* answered with G1..G3 from the map */
    assert_int_equal(st.skip_medium, 1);
    assert_int_equal(st.skip_unmapped, 0);
    assert_int_equal(st.clears, 0);
  }
}

/* SGLang's shapes (engines.py sglang): positional events without medium,
 * the batch without a rank, lora_id as the adapter, a gap replayed in the
 * layout SGLang answers with; and the same fields by name. */
static void sglang_shapes(void **state) {
  (void)state;
  const char *encs[] = {"array", "map"};
  for (int i = 0; i < 2; i++) {
    kvp_relay_stats_t st;
    scenario("sglang", encs[i], "empty", &st);
    assert_int_equal(st.gaps, 1);
    assert_int_equal(st.replay_msgs, 1);
    assert_int_equal(st.clears, 0);
    assert_int_equal(st.blocks_native, 0);
    assert_int_equal(st.blocks_kvp, 5);
    assert_int_equal(st.event_errors, 0);
  }
}

/* TensorRT-LLM through Dynamo's publisher (engines.py trtllm): one map
 * event per message in an array batch, signed hashes, block_mm_infos; a
 * sequence from a timestamp whose first three messages (AllBlocksCleared
 * among them) reach the relay only through the replay buffer, which must
 * not be asked for 0..n-1 nor count them lost; idle batches, one repeating
 * its sequence, are neither a restart nor a gap. */
static void trtllm_shapes(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario("trtllm", "map", "empty", &st);
  assert_int_equal(st.replays, 1);
  assert_int_equal(st.replay_msgs, 3);
  assert_int_equal(st.lost, 0);
  assert_int_equal(st.gaps, 0);
  assert_int_equal(st.restarts, 0);
  assert_int_equal(st.clears, 0);
  assert_int_equal(st.in_cleared, 1);
  assert_int_equal(st.heartbeats, 3);
  assert_int_equal(st.blocks_native, 0);
  assert_int_equal(st.event_errors, 0);
}

/* vLLM's extra_keys (engines.py mm): multimodal digests and [id, offset]
 * items are hashed by Dynamo's rule, the LoRA name is the seed; a cache
 * salt and prompt-embedding bytes keep the engine's hashes. */
static void extra_keys_derived(void **state) {
  (void)state;
  const char *encs[] = {"array", "map"};
  for (int i = 0; i < 2; i++) {
    kvp_relay_stats_t st;
    scenario("mm", encs[i], "topic", &st);
    assert_int_equal(st.blocks_kvp, 5);
    assert_int_equal(st.blocks_native, 2);
    assert_int_equal(st.event_errors, 0);
  }
}

/* The answer to the advisor's resync carries parents: after it the
 * advisor holds the same blocks with the same parents, and a prefix match
 * of the chain finds all of it. */
static void resync_keeps_prefixes(void **state) {
  (void)state;
  kvp_relay_stats_t st;
  scenario_r("chain", "map", "topic", 1, &st);
  assert_int_equal(st.resyncs, 1);
  assert_int_equal(st.clears, 0);
}

/* Starts tools/kvplane-relay for engine ports pp/rp with a state directory,
 * its standard output (the figures) into out, or inherited when NULL. */
static pid_t relay_spawn_out(const char *nats, int pp, int rp, const char *state_dir,
                             const char *out) {
  char bin[512], ep[64], rep[64];
  pid_t pid = -1;
  snprintf(bin, sizeof bin, "%s/tools/kvplane-relay", getenv("KVP_TEST_BINDIR"));
  snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", pp);
  snprintf(rep, sizeof rep, "tcp://127.0.0.1:%d", rp);
  char *argv[] = {bin,  "-e",   ep,          "-r",          rep,
                  "-w", "eng0", "-s",        (char *)nats,  "-n",
                  "t",  "-t",   "kv-events", "--state-dir", (char *)state_dir,
                  NULL};
  pid_t parent = getpid();
  pid = fork();
  if (pid == 0) {
    /* No relay outlives its test (ctest kills a test that times out, not
     * what the test started). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    int fd = out != NULL ? open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
    if (fd >= 0)
      dup2(fd, 1);
    execv(bin, argv);
    _exit(127);
  }
  return pid;
}

static pid_t relay_spawn(const char *nats, int pp, int rp, const char *state_dir) {
  return relay_spawn_out(nats, pp, rp, state_dir, NULL);
}

/* The figure name of the relay's JSON line in path (the last one), or -1. */
static long long figure(const char *path, const char *name) {
  char line[4096], key[64], last[4096] = "";
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (line[0] == '{')
      snprintf(last, sizeof last, "%s", line);
  fclose(f);
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *p = strstr(last, key);
  return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* The relay process is killed with sig mid-stream and started again: it
 * resumes its epoch and sequence from the state file, rebuilds its map from
 * the engine's buffer, and the advisor ends exact. */
static void relay_restart(int sig) {
  run_t *r = calloc(1, sizeof *r);
  char script[512], state_dir[512];
  int64_t want[256][2], got[256][2];
  size_t nw = SIZE_MAX, ng = SIZE_MAX;
  assert_non_null(r);
  int pp, rp;
  advisor_and_ports(r, &pp, &rp);
  snprintf(state_dir, sizeof state_dir, "%s", r->f.dir);
  pid_t relay = relay_spawn(r->f.natsd.url, pp, rp, state_dir);
  assert_true(relay > 0);

  snprintf(script, sizeof script, "%s/relay/engine_pub.py", kvp_test_srcdir());
  snprintf(r->expect, sizeof r->expect, "%s/expect.csv", r->f.dir);
  /* The engine's buffer keeps 25 messages: more than the relay misses while
   * it restarts, fewer than the stream before it. */
  char *argv[] = {"/usr/bin/python3", script, r->ports[0], r->ports[1], "long", "map", "topic",
                  r->expect,          "25",   NULL};
  memcpy(r->argv, argv, sizeof argv);
  /* Under ThreadSanitizer the relay takes longer to restart than the 25
   * messages of the buffer last at the normal pace: the engine slows down,
   * and the kill comes at the same point of its stream. */
  int pace = getenv("KVP_TEST_SANITIZED") != NULL ? 4 : 1;
  char pace_s[8];
  snprintf(pace_s, sizeof pace_s, "%d", pace);
  setenv("KVP_TEST_PACE", pace_s, 1);
  assert_int_equal(pthread_create(&r->pub_th, NULL, pub_main, r), 0);
  /* the publisher's slow-joiner second, then about a third of the stream */
  usleep((useconds_t)(1000 + 1500 * pace) * 1000);
  kill(relay, sig);
  waitpid(relay, NULL, 0);
  usleep(400 * 1000);
  relay = relay_spawn(r->f.natsd.url, pp, rp, state_dir);
  assert_true(relay > 0);
  for (int i = 0; i < 300 * pace && access(r->expect, R_OK) != 0; i++)
    usleep(50 * 1000);
  nw = read_expect(r->expect, want, 256);
  assert_true(nw != SIZE_MAX);
  for (int i = 0; i < 200; i++) {
    ng = read_db(r->f.db, got, 256);
    if (ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0)
      break;
    usleep(50 * 1000);
  }
  engine_done(r->expect);
  pthread_join(r->pub_th, NULL);
  kill(relay, SIGTERM);
  waitpid(relay, NULL, 0);
  advfix_stop(&r->f);
  advfix_teardown(&r->f);
  if (!(ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0)) {
    fprintf(stderr, "relay restart (signal %d): want %zu blocks, DB has %zu\n", sig, nw, ng);
    for (size_t i = 0, j = 0; ng != SIZE_MAX && (i < nw || j < ng);) {
      int c = i == nw ? 1 : j == ng ? -1 : cmp_pair(want[i], got[j]);
      if (c < 0)
        fprintf(stderr, "  missing G%" PRId64 " %" PRId64 "\n", want[i][0], want[i][1]), i++;
      else if (c > 0)
        fprintf(stderr, "  extra   G%" PRId64 " %" PRId64 "\n", got[j][0], got[j][1]), j++;
      else
        i++, j++;
    }
    free(r);
    fail();
  }
  assert_int_equal(r->pub_rc, 0);
  free(r);
}

static int copy_file(const char *from, const char *to) {
  char buf[1 << 16];
  size_t n;
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  int rc = in && out ? 0 : -1;
  while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
    rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
  if (in)
    fclose(in);
  if (out && fclose(out) != 0)
    rc = -1;
  return rc;
}

/* The advisor, the relay process on two free ports and, on a thread, the
 * engine script's "long" stream (a map, a topic; its buffer of buffer
 * messages when not NULL), paced slower under the sanitizers (*pace).
 * Returns the relay's pid; its ports are r->ports. */
static pid_t start_relay_and_engine(run_t *r, const char *buffer, int *pace) {
  char pace_s[8];
  int pp, rp;
  advisor_and_ports(r, &pp, &rp);
  pid_t relay = relay_spawn(r->f.natsd.url, pp, rp, r->f.dir);
  assert_true(relay > 0);
  snprintf(r->script, sizeof r->script, "%s/relay/engine_pub.py", kvp_test_srcdir());
  snprintf(r->expect, sizeof r->expect, "%s/expect.csv", r->f.dir);
  char *argv[] = {
      "/usr/bin/python3", r->script,      r->ports[0], r->ports[1], "long", "map", "topic",
      r->expect,          (char *)buffer, NULL};
  memcpy(r->argv, argv, sizeof argv);
  *pace = getenv("KVP_TEST_SANITIZED") != NULL ? 4 : 1;
  snprintf(pace_s, sizeof pace_s, "%d", *pace);
  setenv("KVP_TEST_PACE", pace_s, 1);
  assert_int_equal(pthread_create(&r->pub_th, NULL, pub_main, r), 0);
  return relay;
}

/* A relay restarted while its engine is idle, with a map file older than
 * its state file (a large map is written less often than the state,
 * kvp__relay_save; here an older copy is put back): the advisor's resync
 * (the restarted publisher's ids jump) must not be answered from that map
 * before the engine's buffer brought it up to date, or the advisor goes back
 * to the map's older set, and the replay, silent for what was published
 * already, never tells it what came after. The advisor keeps exactly the
 * engine's blocks. */
static void relay_resumed_idle_keeps_what_was_published(void **state) {
  (void)state;
  run_t *r = calloc(1, sizeof *r);
  char map[600], old[600];
  int64_t want[256][2], got[256][2];
  size_t nw = SIZE_MAX, ng = SIZE_MAX;
  int pace;
  assert_non_null(r);
  pid_t relay = start_relay_and_engine(r, NULL, &pace);
  int pp = atoi(r->ports[0]), rp = atoi(r->ports[1]);
  snprintf(map, sizeof map, "%s/eng0.map", r->f.dir);
  snprintf(old, sizeof old, "%s/eng0.map.old", r->f.dir);
  /* The map as of a part of the stream; the kill once the stream is over
   * (the engine writes what it holds 3 s after its last message, then only
   * answers replays until engine_done). */
  usleep((useconds_t)(1000 + 800 * pace) * 1000);
  assert_int_equal(copy_file(map, old), 0);
  for (int i = 0; i < 300 * pace && access(r->expect, R_OK) != 0; i++)
    usleep(50 * 1000);
  kill(relay, SIGKILL);
  waitpid(relay, NULL, 0);
  assert_int_equal(rename(old, map), 0);
  relay = relay_spawn(r->f.natsd.url, pp, rp, r->f.dir);
  assert_true(relay > 0);
  /* A heartbeat of the restarted publisher, the advisor's resync request
   * and its answer, well within this. */
  usleep(3500 * 1000);
  nw = read_expect(r->expect, want, 256);
  assert_true(nw != SIZE_MAX);
  ng = read_db(r->f.db, got, 256);
  engine_done(r->expect);
  pthread_join(r->pub_th, NULL);
  kill(relay, SIGTERM);
  waitpid(relay, NULL, 0);
  advfix_stop(&r->f);
  advfix_teardown(&r->f);
  if (!(ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0))
    fprintf(stderr, "relay resumed idle with an older map: want %zu blocks, DB has %zu\n", nw, ng);
  assert_int_equal(ng, nw);
  assert_memory_equal(got, want, nw * sizeof want[0]);
  assert_int_equal(r->pub_rc, 0);
  free(r);
}

/* The map file gone (deleted, or unreadable and ignored) and the engine's
 * buffer (25 messages) no longer reaching back to 0: the map the replay
 * rebuilds lacks what was published before the buffer, whose later
 * removals could not be told to the advisor. The relay says so, counts the
 * sequences lost and clears the worker once, then publishes the buffer
 * again: the advisor keeps no block the engine no longer holds. */
static void relay_map_lost_is_cleared_once(void **state) {
  (void)state;
  run_t *r = calloc(1, sizeof *r);
  char map[600], out[600];
  int64_t want[256][2], got[256][2], engine[256][2];
  int pace;
  assert_non_null(r);
  pid_t relay = start_relay_and_engine(r, "25", &pace);
  int pp = atoi(r->ports[0]), rp = atoi(r->ports[1]);
  snprintf(map, sizeof map, "%s/eng0.map", r->f.dir);
  snprintf(out, sizeof out, "%s/relay.out", r->f.dir);
  usleep((useconds_t)(1000 + 1500 * pace) * 1000);
  kill(relay, SIGKILL);
  waitpid(relay, NULL, 0);
  assert_int_equal(unlink(map), 0);
  usleep(400 * 1000);
  relay = relay_spawn_out(r->f.natsd.url, pp, rp, r->f.dir, out);
  assert_true(relay > 0);
  for (int i = 0; i < 300 * pace && access(r->expect, R_OK) != 0; i++)
    usleep(50 * 1000);
  size_t nw = read_expect(r->expect, want, 256);
  assert_true(nw != SIZE_MAX);
  char engine_path[640];
  snprintf(engine_path, sizeof engine_path, "%s.engine", r->expect);
  size_t ne = read_expect(engine_path, engine, 256);
  assert_true(ne != SIZE_MAX);
  usleep(1000 * 1000);
  size_t ng = read_db(r->f.db, got, 256);
  engine_done(r->expect);
  pthread_join(r->pub_th, NULL);
  kill(relay, SIGTERM);
  waitpid(relay, NULL, 0);
  long long clears = figure(out, "clears"), lost = figure(out, "lost");
  advfix_stop(&r->f);
  advfix_teardown(&r->f);
  assert_true(ng != SIZE_MAX);
  /* Every block in the database is one the engine holds: by its kvplane
   * hash, or by its engine hash when its parent was published before the
   * buffer began (the relay cannot chain it and publishes it as the engine
   * names it). */
  for (size_t j = 0; j < ng; j++)
    if (bsearch(got[j], want, nw, sizeof want[0], cmp_pair) == NULL &&
        bsearch(got[j], engine, ne, sizeof engine[0], cmp_pair) == NULL) {
      fprintf(stderr, "stale G%" PRId64 " %" PRId64 "\n", got[j][0], got[j][1]);
      fail();
    }
  if (clears != 1 || lost <= 0)
    fprintf(stderr, "map lost: clears %lld, lost %lld\n", clears, lost);
  assert_int_equal(clears, 1);
  assert_true(lost > 0);
  assert_int_equal(r->pub_rc, 0);
  free(r);
}

static void relay_killed_resumes_exact(void **state) {
  (void)state;
  relay_restart(SIGKILL);
}

static void relay_terminated_resumes_exact(void **state) {
  (void)state;
  relay_restart(SIGTERM);
}

typedef struct rank_s {
  char *argv[10];
  char ports[2][16], expect[512];
  int rc;
  pthread_t th;
} rank_t;

static void *rank_main(void *p) {
  rank_t *k = p;
  k->rc = kvp_test_spawn_wait(k->argv, NULL, NULL);
  return NULL;
}

/* 1 when 127.0.0.1:port can be bound now (as ZMQ binds: SO_REUSEADDR). */
static int port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1, ok;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (fd < 0)
    return 0;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* The README's --dp-ranks example, on loopback with its ports: two ranks
 * of one engine at 5557+k (replay 5657+k), workers big-dp0 and big-dp1.
 * The ports are fixed (they are the README's): when one is taken on this
 * machine the case is skipped (exit 77, which ctest reports as skipped),
 * naming the port, rather than failing on someone else's socket. */
static void dp_ranks_readme_example(void **state) {
  (void)state;
  const int ports[] = {5557, 5558, 5657, 5658};
  for (size_t i = 0; i < sizeof ports / sizeof ports[0]; i++)
    if (!port_free(ports[i])) {
      fprintf(stderr, "dp_ranks_readme_example: skipped: port %d on 127.0.0.1 is in use\n",
              ports[i]);
      exit(77);
    }
  advfix_t *f = calloc(1, sizeof *f);
  rank_t *rk = calloc(2, sizeof *rk);
  kvp__relay_cli_t *c = calloc(1, sizeof *c);
  kvp_relay_t *relay = NULL;
  pthread_t relay_th;
  char err[256], script[512];
  assert_non_null(f);
  assert_non_null(rk);
  assert_non_null(c);
  assert_int_equal(advfix_setup(f, 0), 0);
  assert_int_equal(advfix_start(f), 0);
  kvp__relay_cli_init(c);
  const char *kv[] = {"server",   f->natsd.url,
                      "ns",       "t",
                      "topic",    "kv-events",
                      "endpoint", "tcp://127.0.0.1:5557",
                      "replay",   "tcp://127.0.0.1:5657",
                      "worker",   "big",
                      "dp-ranks", "2",
                      NULL};
  for (size_t i = 0; kv[i]; i += 2)
    assert_int_equal(kvp__relay_cli_set(c, kv[i], kv[i + 1], err, sizeof err), 0);
  assert_int_equal(kvp__relay_cli_finish(c, err, sizeof err), 0);
  assert_int_equal(kvp_relay_open(&c->o, &relay, err, sizeof err), 0);
  assert_int_equal(pthread_create(&relay_th, NULL, relay_main, relay), 0);
  snprintf(script, sizeof script, "%s/relay/engine_pub.py", kvp_test_srcdir());
  for (int k = 0; k < 2; k++) {
    snprintf(rk[k].ports[0], sizeof rk[k].ports[0], "%d", 5557 + k);
    snprintf(rk[k].ports[1], sizeof rk[k].ports[1], "%d", 5657 + k);
    snprintf(rk[k].expect, sizeof rk[k].expect, "%s/expect%d.csv", f->dir, k);
    char *argv[] = {
        "/usr/bin/python3", script, rk[k].ports[0], rk[k].ports[1], "gap", "array", "topic",
        rk[k].expect,       NULL};
    memcpy(rk[k].argv, argv, sizeof argv);
    assert_int_equal(pthread_create(&rk[k].th, NULL, rank_main, &rk[k]), 0);
  }
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    int64_t want[64][2], got[64][2];
    size_t nw, ng = SIZE_MAX;
    char worker[16];
    snprintf(worker, sizeof worker, "big-dp%d", k);
    for (int i = 0; i < 300 && access(rk[k].expect, R_OK) != 0; i++)
      usleep(50 * 1000);
    nw = read_expect(rk[k].expect, want, 64);
    for (int i = 0; nw != SIZE_MAX && i < 200; i++) {
      ng = read_db_worker(f->db, worker, got, 64);
      if (ng == nw && memcmp(got, want, nw * sizeof want[0]) == 0)
        break;
      usleep(50 * 1000);
    }
    if (nw == SIZE_MAX || ng != nw || memcmp(got, want, nw * sizeof want[0]) != 0) {
      fprintf(stderr, "%s: want %zu blocks, DB has %zu\n", worker, nw, ng);
      ok = 0;
    }
  }
  for (int k = 0; k < 2; k++) {
    engine_done(rk[k].expect);
    pthread_join(rk[k].th, NULL);
  }
  kvp_relay_stop(relay);
  pthread_join(relay_th, NULL);
  kvp_relay_stats_print(relay, stderr);
  kvp_relay_close(relay);
  kvp__relay_cli_cleanup(c);
  advfix_stop(f);
  advfix_teardown(f);
  int rc0 = rk[0].rc, rc1 = rk[1].rc;
  free(f);
  free(rk);
  free(c);
  assert_true(ok);
  assert_int_equal(rc0, 0);
  assert_int_equal(rc1, 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(basic_both_encodings),
    cmocka_unit_test(gap_replayed_each_layout),
    cmocka_unit_test(replay_unavailable_clears),
    cmocka_unit_test(publisher_restart_clears),
    cmocka_unit_test(undecodable_sequences_ignored),
    cmocka_unit_test(copies_per_medium),
    cmocka_unit_test(joined_late_replays_before),
    cmocka_unit_test(relay_killed_resumes_exact),
    cmocka_unit_test(relay_resumed_idle_keeps_what_was_published),
    cmocka_unit_test(relay_map_lost_is_cleared_once),
    cmocka_unit_test(relay_terminated_resumes_exact),
    cmocka_unit_test(dp_ranks_readme_example),
    cmocka_unit_test(sglang_shapes),
    cmocka_unit_test(trtllm_shapes),
    cmocka_unit_test(extra_keys_derived),
    cmocka_unit_test(resync_keeps_prefixes),
};

KVP_TEST_MAIN("relay_e2e", tests)
