/* kvplane: the operator's command line (option parsing and dispatch; the
 * commands are library code in src/cli/). Subcommands ask a running advisor
 * over NATS request/reply (match, stats, and status's live figures) or read
 * its SQLite database read-only (status, workers, blocks, migrations); the
 * views are library code (src/cli/inspect.c).
 *
 * About 710 lines, over the ~500 the tree aims for: eleven commands' help
 * texts (the --help each prints), one option parser for all of them, and
 * per command the argument checks and the mapping to documented exit
 * statuses; the work each command does is in src/cli/. */
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <jansson.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/inspect.h"
#include "cli/live.h"
#include "cli/report.h"
#include "config/config.h"
#include "common/clock.h"
#include "advisor/advisor.h"
#include "kvplane/client.h"
#include "kvplane/hash.h"
#include "kvplane/nats.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

/* Exit statuses, as --help documents them. */
enum {
  EXIT_OK = 0,
  EXIT_USAGE = 1,
  EXIT_UNREACHABLE = 2,
  EXIT_ADVISOR_ERROR = 3,
  EXIT_NODB = 4,
  EXIT_TOOL = 5
};

static const struct cmd_help_s {
  const char *name, *synopsis, *text;
} cmds[] = {
    {"status", "kvplane status [--db PATH | -c CONFIG] [NATS options] [--json]",
     "Tier usage per tier and volume (blocks, bytes, capacity, fill) and workers up\n"
     "and down, from the database; then the advisor's live figures (ingest, index\n"
     "and database lag) when it answers over NATS within --timeout. Exit 0 even\n"
     "when the advisor does not answer (the database's figures are printed).\n"},
    {"workers", "kvplane workers [--db PATH | -c CONFIG] [--json]",
     "Every worker and dp rank: status (up, down, unknown), epoch, last event id,\n"
     "when it was last heard, and its blocks per tier.\n"},
    {"blocks", "kvplane blocks --hot|--cold [-N COUNT] [--db PATH | -c CONFIG] [--json]",
     "The COUNT (default 20) hottest blocks, by decayed hit frequency, or the\n"
     "coldest, by last access, with the tiers that hold them.\n"},
    {"migrations", "kvplane migrations [--failed] [-N COUNT] [--db PATH | -c CONFIG] [--json]",
     "The COUNT (default 20) most recently updated migrations (or only the failed\n"
     "ones, with their error): hash, from and to tier:volume, bytes, state.\n"},
    {"top", "kvplane top [--db PATH | -c CONFIG] [NATS options] [--interval DURATION] [-N COUNT]",
     "The status view refreshed every --interval (default 2s) with the advisor's\n"
     "rates (block-events/s, batches/s, migrations/s) on a terminal; when standard\n"
     "output is not a terminal, one line per interval instead (Unix time, rates,\n"
     "blocks, locations, workers up, lags), for logs and pipes. Stops after COUNT\n"
     "refreshes, or on Ctrl-C.\n"},
    {"replay",
     "kvplane replay TRACE [-s URL] [-n NS] [--workers N] [--mode core|jetstream] [--limit N]",
     "Replays a Mooncake-format trace (JSONL, plain or gzip; data/ has one)\n"
     "through simulated workers (block manager + publisher each, as kvplane-sim)\n"
     "publishing to NATS, with a progress bar on a terminal. --workers (default\n"
     "4), --mode (default core), --limit (first N requests; default all). Exit 2\n"
     "when publishing failed or a reused block's bytes were wrong.\n"},
    {"bench", "kvplane bench [SUITE...]",
     "Runs the benchmark suites (kvp-bench; default: all of them, several\n"
     "minutes) and prints one table: each figure with its in-run baseline and\n"
     "the ratio. kvp-bench is looked up in $KVPLANE_BENCH, next to this program,\n"
     "in ../bench of a build tree, then in PATH. `kvp-bench --list` names the\n"
     "suites.\n"},
    {"report", "kvplane report --png FILE | --svg FILE [--since DURATION] [--db PATH | -c CONFIG]",
     "Draws the tier state over time into FILE with gnuplot (gnuplot-nox): the\n"
     "blocks held per tier, the fill of each volume with a capacity (both from\n"
     "the tier_history samples the advisor takes every store.history_interval),\n"
     "and the migrations finished per interval by pair of tiers. --since keeps\n"
     "the last DURATION (e.g. 30m, 6h, 2d). Exit 4 when the database has no\n"
     "sample in that time, 5 when gnuplot is missing or fails.\n"},
    {"match", "kvplane match [NATS options] HASH... | --tokens FILE --block-size N [--lora NAME]",
     "Sends sequence hashes to the advisor and prints, per worker and tier, how\n"
     "many leading hashes are cached consecutively. A HASH is 0x-prefixed hex\n"
     "(0x1f), exactly 16 hex digits as logs print them (00ab12cd34ef5678), or a\n"
     "decimal as sqlite3 shows them: signed (-8446744073709551616) or unsigned\n"
     "(+1234 forces decimal for 16 digits); put -- before negative ones:\n"
     "  kvplane match -- -6917529027641081856\n"
     "With --tokens, FILE holds token ids (decimal, separated by spaces, commas\n"
     "or newlines; - for standard input), hashed in blocks of N tokens as the\n"
     "workers do (DESIGN.md, Hashing; --lora salts the seed); a trailing partial\n"
     "block is not sent.\n"},
    {"stats", "kvplane stats [NATS options]",
     "Prints the advisor's stats reply (JSON; docs/stats.md documents each field).\n"},
};

static void usage(FILE *f) {
  fputs("usage: kvplane <command> [options]    kvplane <command> --help\n\ncommands:\n", f);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    fprintf(f, "  %s\n", cmds[i].synopsis);
  fputs("\n"
        "database options (status, top, workers, blocks, migrations, report):\n"
        "      --db PATH        the advisor's database (default /var/lib/kvplane/advisor.db)\n"
        "  -c, --config FILE    take the database path from this advisor configuration\n"
        "      --json           print JSON (sizes in bytes, times in Unix ms) instead of tables\n"
        "\n"
        "NATS options (status, top, match, stats; replay takes -s and -n):\n"
        "  -s, --server URL     NATS server (default nats://127.0.0.1:4222)\n"
        "  -n, --ns NS          namespace (default: default)\n"
        "  -u, --user USER      with --password\n"
        "  -p, --password PASS\n"
        "  -t, --token TOKEN\n"
        "      --creds FILE     user credentials file\n"
        "      --tls-ca FILE    CA certificates; enables TLS\n"
        "      --tls-cert FILE  client certificate chain, with --tls-key\n"
        "      --tls-key FILE   client private key\n"
        "  -w, --timeout MS     reply timeout (default 5000; status: 1000)\n"
        "  -h, --help\n"
        "\n"
        "exit status: 0 success; 1 usage or a bad option; 2 the advisor did not answer\n"
        "(match, stats) or the connection failed; 3 the advisor answered with an error;\n"
        "4 the database is missing, is not a kvplane database, or has nothing to report;\n"
        "5 a program it runs failed (report: gnuplot; bench: kvp-bench).\n",
        f);
}

static const struct cmd_help_s *find_cmd(const char *name) {
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (strcmp(cmds[i].name, name) == 0)
      return &cmds[i];
  return NULL;
}

typedef struct args_s {
  const char *cmd;
  const char *ns, *db, *config, *tokens, *lora, *png, *svg;
  int64_t since_ms, interval_ms;
  const char *mode;
  long workers, limit;
  int count_set;
  kvp_nats_opts_t nats;
  long timeout;
  int timeout_set, json, hot, cold, failed, help;
  long count, block_size;
  char **rest; /* operands after the command */
  int nrest;
} args_t;

static int parse_long(const char *opt, const char *s, long min, long max, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "kvplane: %s: '%s' is not an integer in %ld..%ld\n", opt, s, min, max);
    return -1;
  }
  *out = v;
  return 0;
}

/* Returns 0, or an exit status. */
static int parse_args(int argc, char **argv, args_t *a) {
  static const struct option longopts[] = {{"server", required_argument, NULL, 's'},
                                           {"ns", required_argument, NULL, 'n'},
                                           {"user", required_argument, NULL, 'u'},
                                           {"password", required_argument, NULL, 'p'},
                                           {"token", required_argument, NULL, 't'},
                                           {"creds", required_argument, NULL, 'C'},
                                           {"tls-ca", required_argument, NULL, 'A'},
                                           {"tls-cert", required_argument, NULL, 'T'},
                                           {"tls-key", required_argument, NULL, 'K'},
                                           {"timeout", required_argument, NULL, 'w'},
                                           {"db", required_argument, NULL, 'D'},
                                           {"config", required_argument, NULL, 'c'},
                                           {"json", no_argument, NULL, 'J'},
                                           {"hot", no_argument, NULL, 'H'},
                                           {"cold", no_argument, NULL, 'L'},
                                           {"failed", no_argument, NULL, 'F'},
                                           {"count", required_argument, NULL, 'N'},
                                           {"tokens", required_argument, NULL, 'k'},
                                           {"block-size", required_argument, NULL, 'b'},
                                           {"lora", required_argument, NULL, 'l'},
                                           {"png", required_argument, NULL, 'P'},
                                           {"svg", required_argument, NULL, 'V'},
                                           {"since", required_argument, NULL, 'S'},
                                           {"interval", required_argument, NULL, 'I'},
                                           {"workers", required_argument, NULL, 'W'},
                                           {"mode", required_argument, NULL, 'M'},
                                           {"limit", required_argument, NULL, 'X'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  static const struct {
    int opt;
    const char *name;
  } nats_flags[] = {{'s', "servers"}, {'u', "user"},   {'p', "password"}, {'t', "token"},
                    {'C', "creds"},   {'A', "tls_ca"}, {'T', "tls_cert"}, {'K', "tls_key"}};
  char err[512];
  int opt;

  memset(a, 0, sizeof *a);
  a->ns = "default";
  a->timeout = 5000;
  a->count = 20;
  a->interval_ms = 2000;
  a->workers = 4;
  a->mode = "core";
  kvp_nats_opts_init(&a->nats);
  while ((opt = getopt_long(argc, argv, "s:n:u:p:t:w:c:N:h", longopts, NULL)) != -1) {
    int taken = 0;
    for (size_t i = 0; i < sizeof nats_flags / sizeof nats_flags[0]; i++) {
      if (nats_flags[i].opt != opt)
        continue;
      if (kvp_nats_opts_set(&a->nats, nats_flags[i].name, optarg, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane: %s\n", err);
        return EXIT_USAGE;
      }
      taken = 1;
    }
    if (taken)
      continue;
    switch (opt) {
    case 'n':
      a->ns = optarg;
      break;
    case 'w':
      if (parse_long("--timeout", optarg, 1, 3600000, &a->timeout) != 0)
        return EXIT_USAGE;
      a->timeout_set = 1;
      break;
    case 'D':
      a->db = optarg;
      break;
    case 'c':
      a->config = optarg;
      break;
    case 'J':
      a->json = 1;
      break;
    case 'H':
      a->hot = 1;
      break;
    case 'L':
      a->cold = 1;
      break;
    case 'F':
      a->failed = 1;
      break;
    case 'N':
      if (parse_long("--count", optarg, 1, 1000000, &a->count) != 0)
        return EXIT_USAGE;
      a->count_set = 1;
      break;
    case 'I':
      if (kvp__parse_duration_ms(optarg, &a->interval_ms) != 0 || a->interval_ms < 100) {
        fprintf(stderr, "kvplane: --interval: '%s' is not a duration of 100ms or more\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'W':
      if (parse_long("--workers", optarg, 1, KVP_SIM_MAX_WORKERS, &a->workers) != 0)
        return EXIT_USAGE;
      break;
    case 'M':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "jetstream") != 0) {
        fprintf(stderr, "kvplane: --mode: '%s' is not core or jetstream\n", optarg);
        return EXIT_USAGE;
      }
      a->mode = optarg;
      break;
    case 'X':
      if (parse_long("--limit", optarg, 1, 1L << 40, &a->limit) != 0)
        return EXIT_USAGE;
      break;
    case 'k':
      a->tokens = optarg;
      break;
    case 'b':
      if (parse_long("--block-size", optarg, 1, 1 << 20, &a->block_size) != 0)
        return EXIT_USAGE;
      break;
    case 'l':
      a->lora = optarg;
      break;
    case 'P':
      a->png = optarg;
      break;
    case 'V':
      a->svg = optarg;
      break;
    case 'S':
      if (kvp__parse_duration_ms(optarg, &a->since_ms) != 0 || a->since_ms <= 0) {
        fprintf(stderr, "kvplane: --since: '%s' is not a duration (e.g. 30m, 6h, 2d)\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'h':
      a->help = 1;
      break;
    default:
      return EXIT_USAGE;
    }
  }
  if (optind < argc) {
    a->cmd = argv[optind];
    a->rest = argv + optind + 1;
    a->nrest = argc - optind - 1;
  }
  return 0;
}

/* --- database commands ------------------------------------------------------ */

static int db_path(const args_t *a, char *out, size_t len) {
  if (a->db && a->config) {
    fprintf(stderr, "kvplane: give --db or --config, not both\n");
    return EXIT_USAGE;
  }
  if (a->config) {
    kvp_advisor_config_t cfg;
    char err[512];
    kvp_advisor_config_defaults(&cfg);
    if (kvp_advisor_config_load(&cfg, a->config, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane: %s\n", err);
      return EXIT_USAGE;
    }
    snprintf(out, len, "%s", cfg.db_path);
    return 0;
  }
  snprintf(out, len, "%s", a->db ? a->db : "/var/lib/kvplane/advisor.db");
  return 0;
}

/* --- NATS requests ---------------------------------------------------------- */

/* Sends body to kvplane.api.<ns>.<what> through the advisor client
 * (kvplane/client.h); *doc gets the reply. Returns 0 or an exit status (the
 * cause printed unless quiet). */
static int request(const args_t *a, const char *what, const char *body, long timeout, int quiet,
                   json_t **doc) {
  char err[512];
  kvp_client_t *c = NULL;
  char *reply = NULL;
  int rc;

  *doc = NULL;
  if (!kvp_subject_token_valid(a->ns)) {
    fprintf(stderr, "kvplane: --ns: '%s' must be 1..64 of [A-Za-z0-9_-]\n", a->ns);
    return EXIT_USAGE;
  }
  if (kvp_nats_opts_check(&a->nats, "--", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    return EXIT_USAGE;
  }
  rc = kvp_client_open(&a->nats, a->ns, &c, err, sizeof err);
  if (rc == 0)
    rc = kvp_client_request(c, what, body, (uint32_t)timeout, &reply, err, sizeof err);
  kvp_client_close(c);
  if (rc != 0) {
    if (!quiet)
      fprintf(stderr, "kvplane: %s\n", err);
    return EXIT_UNREACHABLE;
  }
  *doc = json_loads(reply, 0, NULL);
  kvp_client_reply_free(reply);
  if (*doc == NULL) {
    if (!quiet)
      fprintf(stderr, "kvplane: the %s reply is not JSON\n", what);
    return EXIT_UNREACHABLE;
  }
  return json_object_get(*doc, "error") ? EXIT_ADVISOR_ERROR : EXIT_OK;
}

/* Reads token ids from path ("-": standard input). Returns 0 or an exit
 * status. */
static int read_tokens(const char *path, uint32_t **out, size_t *n) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
  size_t cap = 0;
  int c, rc = EXIT_OK;
  unsigned long long v = 0;
  int in_num = 0;

  *out = NULL;
  *n = 0;
  if (f == NULL) {
    fprintf(stderr, "kvplane match: --tokens: cannot read %s\n", path);
    return EXIT_USAGE;
  }
  do {
    c = fgetc(f);
    if (c >= '0' && c <= '9') {
      v = v * 10 + (unsigned)(c - '0');
      in_num = 1;
      if (v > UINT32_MAX) {
        fprintf(stderr, "kvplane match: --tokens: a token id in %s is over 2^32-1\n", path);
        rc = EXIT_USAGE;
        break;
      }
    } else if (c == EOF || c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' ||
               c == '[' || c == ']') {
      if (in_num) {
        if (*n == cap) {
          cap = cap ? cap * 2 : 1024;
          uint32_t *p = realloc(*out, cap * sizeof *p);
          if (p == NULL) {
            rc = EXIT_USAGE;
            break;
          }
          *out = p;
        }
        (*out)[(*n)++] = (uint32_t)v;
      }
      v = 0;
      in_num = 0;
    } else {
      fprintf(stderr, "kvplane match: --tokens: unexpected '%c' in %s (token ids are decimal)\n", c,
              path);
      rc = EXIT_USAGE;
      break;
    }
  } while (c != EOF);
  if (f != stdin)
    fclose(f);
  return rc;
}

static int cmd_match(const args_t *a) {
  json_t *req = json_pack("{s:[]}", "hashes"), *arr = json_object_get(req, "hashes"), *doc;
  uint64_t *hashes = NULL;
  uint32_t *tokens = NULL;
  size_t ntok = 0, nh = 0;
  char hex[24];
  int rc;

  if (a->tokens) {
    if (a->nrest > 0 || a->block_size == 0) {
      fprintf(stderr, "kvplane match: --tokens takes --block-size N and no hashes\n");
      rc = EXIT_USAGE;
      goto out;
    }
    if ((rc = read_tokens(a->tokens, &tokens, &ntok)) != 0)
      goto out;
    size_t cap = ntok / (size_t)a->block_size;
    hashes = malloc((cap ? cap : 1) * sizeof *hashes);
    nh = hashes ? kvp_hash_sequence(tokens, ntok, (size_t)a->block_size, kvp_hash_seed(a->lora),
                                    hashes, cap)
                : 0;
    for (size_t i = 0; i < nh; i++) {
      snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)hashes[i]);
      json_array_append_new(arr, json_string(hex));
    }
  }
  for (int i = 0; i < a->nrest; i++) {
    uint64_t h;
    if (kvp_hash_parse(a->rest[i], &h) != 0) {
      fprintf(stderr, "kvplane match: '%s' is not a hash (see kvplane match --help)\n", a->rest[i]);
      rc = EXIT_USAGE;
      goto out;
    }
    snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)h);
    json_array_append_new(arr, json_string(hex));
  }
  if (json_array_size(arr) == 0) {
    fputs(a->tokens ? "kvplane match: the tokens make no full block\n"
                    : "kvplane match: give at least one hash, or --tokens\n",
          stderr);
    rc = EXIT_USAGE;
    goto out;
  }
  char *body = json_dumps(req, JSON_COMPACT);
  rc = request(a, KVP_API_MATCH, body, a->timeout, 0, &doc);
  free(body);
  if (doc) {
    json_dumpf(doc, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(doc);
  }
out:
  json_decref(req);
  free(tokens);
  free(hashes);
  return rc;
}

static int cmd_stats(const args_t *a) {
  json_t *doc;
  int rc = request(a, KVP_API_STATS, "{}", a->timeout, 0, &doc);
  if (doc) {
    json_dumpf(doc, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(doc);
  }
  return rc;
}

static int cmd_db(const args_t *a) {
  char path[600], err[512];
  sqlite3 *db = NULL;
  kvp__cli_out_t o = {.f = stdout, .json = a->json, .now_ms = kvp__unix_ms()};
  int rc;

  if (strcmp(a->cmd, "blocks") == 0 && a->hot == a->cold) {
    fprintf(stderr, "kvplane blocks: give --hot or --cold\n");
    return EXIT_USAGE;
  }
  if (strcmp(a->cmd, "report") == 0 && (a->png == NULL) == (a->svg == NULL)) {
    fprintf(stderr, "kvplane report: give --png FILE or --svg FILE\n");
    return EXIT_USAGE;
  }
  if (a->nrest > 0) {
    fprintf(stderr, "kvplane %s: unexpected argument '%s'\n", a->cmd, a->rest[0]);
    return EXIT_USAGE;
  }
  if ((rc = db_path(a, path, sizeof path)) != 0)
    return rc;
  if (kvp__cli_db_open(path, &db, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane %s: %s\n", a->cmd, err);
    return EXIT_NODB;
  }
  if (strcmp(a->cmd, "status") == 0) {
    json_t *stats = NULL;
    /* The live figures are optional: a short wait, no complaint. */
    request(a, KVP_API_STATS, "{}", a->timeout_set ? a->timeout : 1000, 1, &stats);
    rc = kvp__cli_status(db, stats, &o, err, sizeof err);
    json_decref(stats);
  } else if (strcmp(a->cmd, "workers") == 0) {
    rc = kvp__cli_workers(db, &o, err, sizeof err);
  } else if (strcmp(a->cmd, "blocks") == 0) {
    rc = kvp__cli_blocks(db, a->hot, (int)a->count, &o, err, sizeof err);
  } else if (strcmp(a->cmd, "report") == 0) {
    kvp__cli_report_opts_t ro = {.path = a->png ? a->png : a->svg,
                                 .svg = a->svg != NULL,
                                 .since_ms = a->since_ms ? (int64_t)o.now_ms - a->since_ms : 0};
    rc = kvp__cli_report(db, &ro, err, sizeof err);
    sqlite3_close(db);
    if (rc == 0) {
      printf("%s\n", ro.path);
      return EXIT_OK;
    }
    fprintf(stderr, "kvplane report: %s: %s\n", path, err);
    return rc == KVP_EIO ? EXIT_TOOL : EXIT_NODB;
  } else {
    rc = kvp__cli_migrations(db, a->failed, (int)a->count, &o, err, sizeof err);
  }
  sqlite3_close(db);
  if (rc != 0) {
    fprintf(stderr, "kvplane %s: %s: %s\n", a->cmd, path, err);
    return EXIT_NODB;
  }
  return EXIT_OK;
}

/* --- long-running commands ------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

static int cmd_top(const args_t *a) {
  char path[600], err[512];
  sqlite3 *db = NULL;
  json_t *prev = NULL;
  uint64_t prev_ms = 0;
  int tty = isatty(STDOUT_FILENO), rc;

  if (a->nrest > 0) {
    fprintf(stderr, "kvplane top: unexpected argument '%s'\n", a->rest[0]);
    return EXIT_USAGE;
  }
  if ((rc = db_path(a, path, sizeof path)) != 0)
    return rc;
  if (kvp__cli_db_open(path, &db, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane top: %s\n", err);
    return EXIT_NODB;
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
    request(a, KVP_API_STATS, "{}", a->timeout_set ? a->timeout : 1000, 1, &cur);
    kvp__cli_rates(prev, cur, now - prev_ms, &r);
    if (tty) {
      kvp__cli_out_t o = {.f = stdout, .json = 0, .now_ms = now};
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
        rc = EXIT_NODB;
        break;
      }
      fflush(stdout);
    } else {
      kvp__cli_top_line(stdout, now, cur, &r);
    }
    json_decref(prev);
    prev = cur;
    prev_ms = now;
  }
  json_decref(prev);
  sqlite3_close(db);
  return rc;
}

static int cmd_replay(const args_t *a) {
  kvp__sim_opts_t o;
  char err[512];

  if (a->nrest != 1) {
    fprintf(stderr, "kvplane replay: give one TRACE file\n");
    return EXIT_USAGE;
  }
  kvp__sim_opts_init(&o);
  o.trace = a->rest[0];
  o.servers = a->nats.servers[0] ? a->nats.servers : o.servers;
  o.ns = a->ns;
  o.workers = (int)a->workers;
  o.mode = strcmp(a->mode, "jetstream") == 0 ? KVP_PUB_JETSTREAM : KVP_PUB_CORE;
  o.limit = (size_t)a->limit;
  int rc = kvp__cli_replay(&o, stdout, isatty(STDOUT_FILENO), err, sizeof err);
  if (rc == 0)
    return EXIT_OK;
  fprintf(stderr, "kvplane replay: %s\n", err);
  return rc == KVP_EINVAL || rc == KVP_EIO || rc == KVP_ENOENT ? EXIT_USAGE : EXIT_UNREACHABLE;
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

static int cmd_bench(const args_t *a) {
  char path[600], err[700];
  bench_path(path, sizeof path);
  int rc = kvp__cli_bench(path, a->rest, a->nrest, stdout, err, sizeof err);
  if (rc == 0)
    return EXIT_OK;
  fprintf(stderr, "kvplane bench: %s\n", err);
  return EXIT_TOOL;
}

int main(int argc, char **argv) {
  args_t a;
  int rc = parse_args(argc, argv, &a);

  if (rc != 0) {
    usage(stderr);
    return rc;
  }
  if (a.cmd == NULL) {
    usage(a.help ? stdout : stderr);
    return a.help ? EXIT_OK : EXIT_USAGE;
  }
  const struct cmd_help_s *c = find_cmd(a.cmd);
  if (c == NULL) {
    fprintf(stderr, "kvplane: unknown command '%s'\n", a.cmd);
    usage(stderr);
    return EXIT_USAGE;
  }
  if (a.help) {
    printf("usage: %s\n\n%s\nkvplane --help lists the options and exit statuses.\n", c->synopsis,
           c->text);
    return EXIT_OK;
  }
  if (strcmp(a.cmd, "match") == 0)
    rc = cmd_match(&a);
  else if (strcmp(a.cmd, "top") == 0)
    rc = cmd_top(&a);
  else if (strcmp(a.cmd, "replay") == 0)
    rc = cmd_replay(&a);
  else if (strcmp(a.cmd, "bench") == 0)
    rc = cmd_bench(&a);
  else if (strcmp(a.cmd, "stats") == 0)
    rc = cmd_stats(&a);
  else
    rc = cmd_db(&a);
  nats_Close();
  return rc;
}
