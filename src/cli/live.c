/* top's rates and lines, replay's progress, bench's table (live.h), and
 * the top, replay and bench commands over them (cli.h). */
#include "cli/live.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/inspect.h"
#include "common/clock.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

/* ---- top ---- */

/* The number at a dotted path of a stats reply (0 when absent). */
static double stat(const json_t *j, const char *path) {
  char key[64];
  const char *p = path;
  while (j != NULL && *p) {
    size_t n = strcspn(p, ".");
    if (n >= sizeof key)
      return 0;
    memcpy(key, p, n);
    key[n] = '\0';
    j = json_object_get(j, key);
    p += n + (p[n] == '.');
  }
  return json_is_number(j) ? json_number_value(j) : 0;
}

static double moves(const json_t *j) {
  return stat(j, "tiering.demoted") + stat(j, "tiering.evicted") + stat(j, "tiering.promoted");
}

void kvp__cli_rates(const json_t *prev, const json_t *cur, uint64_t dt_ms, kvp__cli_rates_t *r) {
  memset(r, 0, sizeof *r);
  if (prev == NULL || cur == NULL || dt_ms == 0)
    return;
  double s = (double)dt_ms / 1000.0;
  r->have = 1;
  r->events_per_s = (stat(cur, "ingest.block_events") - stat(prev, "ingest.block_events")) / s;
  r->batches_per_s = (stat(cur, "ingest.batches") - stat(prev, "ingest.batches")) / s;
  r->migrations_per_s = (moves(cur) - moves(prev)) / s;
  /* An advisor restarted between the replies: its counters began again. */
  if (r->events_per_s < 0 || r->batches_per_s < 0 || r->migrations_per_s < 0)
    memset(r, 0, sizeof *r);
}

void kvp__cli_top_line(FILE *f, uint64_t now_ms, const json_t *cur, const kvp__cli_rates_t *r,
                       const char *why) {
  time_t t = (time_t)(now_ms / 1000);
  struct tm tm;
  char when[32];

  gmtime_r(&t, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (cur == NULL) {
    fprintf(f, "%s advisor: no answer%s%s\n", when, why && why[0] ? ": " : "", why ? why : "");
    return;
  }
  fprintf(f, "%s", when);
  if (r->have)
    fprintf(f, " block-events/s %.0f batches/s %.0f migrations/s %.1f", r->events_per_s,
            r->batches_per_s, r->migrations_per_s);
  else
    fputs(" block-events/s - batches/s - migrations/s -", f);
  fprintf(f,
          " blocks %.0f locations %.0f workers_up %.0f apply_lag_ms %.0f flush_lag_ms %.0f"
          " pending_ms %.0f",
          stat(cur, "blocks"), stat(cur, "locations"), stat(cur, "workers_up"),
          stat(cur, "freshness.apply_lag_ms"), stat(cur, "freshness.flush_lag_ms"),
          stat(cur, "freshness.pending_ms"));
  const json_t *g = json_object_get(cur, "gathered");
  if (g != NULL) /* partitioned advisors: how complete the sums are */
    fprintf(f, " partitions %.0f missing %zu advisors %zu", stat(g, "count"),
            json_array_size(json_object_get(g, "missing")),
            json_array_size(json_object_get(g, "advisors")));
  fputc('\n', f);
  fflush(f);
}

/* ---- replay ---- */

typedef struct replay_s {
  kvp__sim_t *sim;
  int rc;
  atomic_int done;
} replay_t;

static void *replay_main(void *arg) {
  replay_t *r = arg;
  r->rc = kvp__sim_run(r->sim);
  atomic_store(&r->done, 1);
  return NULL;
}

static void bar(FILE *f, size_t done, size_t total, double secs) {
  int width = 40, fill = total ? (int)((double)done * width / (double)total) : width;
  fputc('\r', f);
  fputc('[', f);
  for (int i = 0; i < width; i++)
    fputc(i < fill ? '#' : '.', f);
  fprintf(f, "] %zu/%zu requests  %.1f s ", done, total, secs);
  fflush(f);
}

int kvp__cli_replay(const kvp__sim_opts_t *o, FILE *f, int tty, char *err, size_t errlen) {
  replay_t r = {0};
  pthread_t th;
  int rc;

  if ((rc = kvp__sim_create(o, &r.sim, err, errlen)) != 0)
    return rc;
  size_t total = kvp__sim_requests(r.sim), tenth = 0;
  uint64_t t0 = kvp__now_ns();
  fprintf(f, "replaying %zu requests of %s through %d workers on %s (namespace %s)\n", total,
          o->trace, o->workers, o->servers, o->ns);
  if (pthread_create(&th, NULL, replay_main, &r) != 0) {
    kvp__sim_destroy(r.sim);
    snprintf(err, errlen, "cannot start the replay thread");
    return KVP_ENOMEM;
  }
  while (!atomic_load(&r.done)) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    size_t done = kvp__sim_progress(r.sim);
    double secs = (double)(kvp__now_ns() - t0) / 1e9;
    if (tty) {
      bar(f, done, total, secs);
    } else if (total > 0 && done * 10 / total > tenth && done < total) {
      /* Not 100%: the summary below gives the one final duration. */
      tenth = done * 10 / total;
      fprintf(f, "%zu/%zu requests (%zu%%) after %.1f s\n", done, total, tenth * 10, secs);
      fflush(f);
    }
  }
  pthread_join(th, NULL);
  if (tty) {
    bar(f, kvp__sim_progress(r.sim), total, kvp__sim_seconds(r.sim));
    fputc('\n', f);
  }
  uint64_t lookups = 0, hits = 0, events = 0, corrupt = 0;
  for (int w = 0; w < o->workers; w++) {
    kvp__sim_worker_stats_t ws;
    kvp__sim_worker_stats(r.sim, w, &ws);
    lookups += ws.lookups;
    hits += ws.hits_g1 + ws.hits_g2 + ws.hits_g3 + ws.hits_g4;
    events += ws.events_sent;
    corrupt += ws.corrupt;
  }
  fprintf(f,
          "replayed %zu requests in %.1f s: %" PRIu64 " block lookups, hit rate %.3f, %" PRIu64
          " events published, %" PRIu64 " corrupt reuses\n",
          total, kvp__sim_seconds(r.sim), lookups, lookups ? (double)hits / (double)lookups : 0.0,
          events, corrupt);
  rc = r.rc;
  if (rc == 0 && corrupt > 0) {
    snprintf(err, errlen, "%" PRIu64 " reused blocks had wrong KV bytes", corrupt);
    rc = KVP_EPROTO;
  } else if (rc != 0) {
    snprintf(err, errlen, "a worker failed: %s", kvp_strerror(rc));
  }
  kvp__sim_destroy(r.sim);
  return rc;
}

/* ---- bench ---- */

/* Parses a figure line with a baseline:
 *   NAME VALUE UNIT  baseline LABEL... BVALUE BUNIT  ratio R
 * into its parts (pointers into line, which is cut). Returns 1 when the
 * line has that shape. */
typedef struct fig_s {
  char *name, *value, *unit, *label, *bvalue, *bunit, *ratio;
} fig_t;

static int parse_figure(char *line, fig_t *g) {
  char *b = strstr(line, " baseline "), *r = strstr(line, " ratio ");
  char *tok[64];
  int n = 0;

  if (line[0] == '#' || b == NULL || r == NULL || r < b)
    return 0;
  *b = '\0';
  *r = '\0';
  g->ratio = r + 7;
  g->ratio[strcspn(g->ratio, " \n")] = '\0';
  g->name = strtok(line, " ");
  g->value = strtok(NULL, " ");
  g->unit = strtok(NULL, " ");
  if (g->name == NULL || g->value == NULL || g->unit == NULL)
    return 0;
  for (char *t = strtok(b + 10, " "); t != NULL && n < 64; t = strtok(NULL, " "))
    tok[n++] = t;
  if (n < 3)
    return 0;
  g->bvalue = tok[n - 2];
  g->bunit = tok[n - 1];
  g->label = tok[0];
  for (int i = 1; i < n - 2; i++) /* the label's words back together */
    tok[i][-1] = ' ';
  return 1;
}

/* Runs bench_path arg, printing a row per figure with a baseline. Returns
 * the rows printed, or -1 (err set, ending with kvp-bench's own first
 * complaint when it printed one). */
static long run_suite(const char *bench_path, const char *arg, FILE *f, char *err, size_t errlen) {
  char cmd[1200], line[1024], said[256] = "";
  long rows = 0;
  FILE *p;

  /* Single quotes: the path and suite name are passed as they are. */
  if (strchr(bench_path, '\'') != NULL || strchr(arg, '\'') != NULL) {
    snprintf(err, errlen, "unsupported character in '%s %s'", bench_path, arg);
    return -1;
  }
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", bench_path, arg);
  if ((p = popen(cmd, "r")) == NULL) {
    snprintf(err, errlen, "cannot run %s: %s", bench_path, strerror(errno));
    return -1;
  }
  while (fgets(line, sizeof line, p) != NULL) {
    fig_t g;
    if (!parse_figure(line, &g)) {
      /* Its first line that names kvp-bench: its own error message. */
      if (said[0] == '\0' && strncmp(line, "kvp-bench", 9) == 0) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(said, sizeof said, "%.200s", line);
      }
      continue;
    }
    fprintf(f, "%-44s %14s %-9s %14s %-9s %7s  %s\n", g.name, g.value, g.unit, g.bvalue, g.bunit,
            g.ratio, g.label);
    fflush(f);
    rows++;
  }
  int st = pclose(p);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, errlen, "%s %s failed (%s %d)%s%s", bench_path, arg,
             st != -1 && WIFEXITED(st) ? "exit status" : "status",
             st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : st, said[0] ? ": " : "", said);
    return -1;
  }
  return rows;
}

int kvp__cli_bench(const char *bench_path, char *const *suites, int nsuites, FILE *f, char *err,
                   size_t errlen) {
  long rows = 0;

  fprintf(f, "%-44s %14s %-9s %14s %-9s %7s  %s\n", "figure", "value", "unit", "baseline", "unit",
          "ratio", "baseline is");
  if (nsuites == 0) {
    long n = run_suite(bench_path, "all", f, err, errlen);
    if (n < 0)
      return KVP_EIO;
    rows = n;
  }
  for (int i = 0; i < nsuites; i++) {
    long n = run_suite(bench_path, suites[i], f, err, errlen);
    if (n < 0)
      return KVP_EIO;
    rows += n;
  }
  if (rows == 0) {
    snprintf(err, errlen, "%s printed no figure with a baseline", bench_path);
    return KVP_ENOENT;
  }
  return 0;
}

/* ---- the commands: options checked, exit statuses (cli.h) ---- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

int kvp__cli_cmd_top(const kvp__cli_args_t *a) {
  char path[600], err[512];
  sqlite3 *db = NULL;
  json_t *prev = NULL;
  uint64_t prev_ms = 0;
  int tty = isatty(STDOUT_FILENO), rc;

  if (a->nrest > 0) {
    fprintf(stderr, "kvplane top: unexpected argument '%s'\n", a->rest[0]);
    return KVP__CLI_EXIT_USAGE;
  }
  if ((rc = kvp__cli_db_path(a, path, sizeof path)) != 0)
    return rc;
  if (kvp__cli_db_open(path, &db, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane top: %s\n", err);
    return KVP__CLI_EXIT_NODB;
  }
  kvp__cli_args_t live;
  char ns[128];
  if ((rc = kvp__cli_live_args(a, db, &live, ns, sizeof ns)) != 0) {
    sqlite3_close(db);
    return rc;
  }
  signal(SIGINT, on_interrupt);
  signal(SIGTERM, on_interrupt);
  for (long i = 0; !interrupted && (!a->count_set || i < a->count); i++) {
    json_t *cur = NULL;
    kvp__cli_rates_t r;
    if (i > 0)
      for (int64_t slept = 0; slept < a->interval_ms && !interrupted; slept += 100)
        usleep(100000);
    if (interrupted)
      break;
    uint64_t now = kvp__unix_ms();
    char why[512] = "";
    kvp__cli_stats_all_why(&live, a->timeout_set ? a->timeout : 1000, 1, &cur, why, sizeof why);
    if ((rc = kvp__cli_live_check(&live, cur)) != 0) {
      json_decref(cur);
      break;
    }
    kvp__cli_rates(prev, cur, now - prev_ms, &r);
    if (tty) {
      kvp__cli_out_t o = {.f = stdout, .json = 0, .now_ms = now, .no_answer = why};
      fputs("\033[H\033[2J", stdout);
      printf("kvplane top: %s, every %.1f s (Ctrl-C quits)\n", path,
             (double)a->interval_ms / 1000.0);
      if (r.have)
        printf("rates:   %.0f block-events/s, %.0f batches/s, %.1f migrations/s\n\n",
               r.events_per_s, r.batches_per_s, r.migrations_per_s);
      else
        printf("rates:   (after the second answer of the advisor)\n\n");
      if (kvp__cli_status(db, cur, &o, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane top: %s: %s\n", path, err);
        json_decref(cur);
        rc = KVP__CLI_EXIT_NODB;
        break;
      }
      fflush(stdout);
    } else {
      kvp__cli_top_line(stdout, now, cur, &r, why);
    }
    json_decref(prev);
    prev = cur;
    prev_ms = now;
  }
  json_decref(prev);
  sqlite3_close(db);
  return rc;
}

int kvp__cli_cmd_replay(const kvp__cli_args_t *a) {
  kvp__sim_opts_t o;
  char err[512];

  if (a->nrest != 1) {
    fprintf(stderr, "kvplane replay: give one TRACE file\n");
    return KVP__CLI_EXIT_USAGE;
  }
  kvp__sim_opts_init(&o);
  o.trace = a->rest[0];
  o.servers = a->nats.servers[0] ? a->nats.servers : o.servers;
  o.ns = a->ns;
  o.workers = (int)a->workers;
  o.mode = strcmp(a->mode, "jetstream") == 0 ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  o.limit = (size_t)a->limit;
  o.partitions = (uint32_t)a->partitions;
  int rc = kvp__cli_replay(&o, stdout, isatty(STDOUT_FILENO), err, sizeof err);
  if (rc == 0)
    return KVP__CLI_EXIT_OK;
  fprintf(stderr, "kvplane replay: %s\n", err);
  return rc == KVP_EINVAL || rc == KVP_EIO || rc == KVP_ENOENT ? KVP__CLI_EXIT_USAGE
                                                               : KVP__CLI_EXIT_UNREACHABLE;
}

/* kvp-bench: $KVPLANE_BENCH, next to this program, ../bench (a build tree),
 * else PATH. */
static void bench_path(char *out, size_t len) {
  char self[512];
  const char *env = getenv("KVPLANE_BENCH");
  ssize_t n;

  if (env && *env) {
    snprintf(out, len, "%s", env);
    return;
  }
  if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
    self[n] = '\0';
    const char *dir = dirname(self);
    snprintf(out, len, "%s/kvp-bench", dir);
    if (access(out, X_OK) == 0)
      return;
    snprintf(out, len, "%s/../bench/kvp-bench", dir);
    if (access(out, X_OK) == 0)
      return;
  }
  snprintf(out, len, "kvp-bench");
}

/* 1 when prog (no '/') is an executable in a directory of $PATH. */
static int on_path(const char *prog) {
  char buf[1024];
  for (const char *p = getenv("PATH"); p != NULL && *p;) {
    const char *c = strchr(p, ':');
    int n = c ? (int)(c - p) : (int)strlen(p);
    snprintf(buf, sizeof buf, "%.*s/%s", n, p, prog);
    if (access(buf, X_OK) == 0)
      return 1;
    p = c ? c + 1 : NULL;
  }
  return 0;
}

int kvp__cli_cmd_bench(const kvp__cli_args_t *a) {
  char path[600], err[700];
  bench_path(path, sizeof path);
  int rc = kvp__cli_bench(path, a->rest, a->nrest, stdout, err, sizeof err);
  if (rc == 0)
    return KVP__CLI_EXIT_OK;
  fprintf(stderr, "kvplane bench: %s\n", err);
  if (strchr(path, '/') != NULL ? access(path, X_OK) != 0 : !on_path(path))
    fprintf(stderr,
            "kvplane bench: kvp-bench is not installed: it is built with the benchmarks "
            "(cmake -DKVP_BENCH=ON; build/bench/kvp-bench) and found through $KVPLANE_BENCH, "
            "beside this program, ../bench of a build tree or PATH\n");
  return KVP__CLI_EXIT_TOOL;
}
