/* kvplane: the operator's command line. A thin main: it parses the options
 * into a kvp__cli_args_t and calls the command; the commands, their help
 * texts and their exit statuses are library code in src/cli/ (cli.h), so
 * tests run them in-process. Subcommands ask a running advisor over NATS
 * request/reply (match, stats, and status's live figures) or read its
 * SQLite database read-only (status, workers, blocks, migrations, report). */
#include <getopt.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "kvplane/nats.h"
#include "kvplane/subjects.h"
#include "metrics/build_info.h"
#include "sim/sim.h"

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
static int parse_args(int argc, char **argv, kvp__cli_args_t *a) {
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
                                           {"partitions", required_argument, NULL, 'Q'},
                                           {"tier", required_argument, NULL, 'G'},
                                           {"volume", required_argument, NULL, 'O'},
                                           {"note", required_argument, NULL, 'E'},
                                           {"version", no_argument, NULL, 'v'},
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
        return KVP__CLI_EXIT_USAGE;
      }
      taken = 1;
      a->nats_set = 1;
    }
    if (taken)
      continue;
    switch (opt) {
    case 'n':
      a->ns = optarg;
      a->ns_set = 1;
      break;
    case 'w':
      if (parse_long("--timeout", optarg, 1, 3600000, &a->timeout) != 0)
        return KVP__CLI_EXIT_USAGE;
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
        return KVP__CLI_EXIT_USAGE;
      a->count_set = 1;
      break;
    case 'I':
      if (kvp__parse_duration_ms(optarg, &a->interval_ms) != 0 || a->interval_ms < 100) {
        fprintf(stderr, "kvplane: --interval: '%s' is not a duration of 100ms or more\n", optarg);
        return KVP__CLI_EXIT_USAGE;
      }
      break;
    case 'W':
      if (parse_long("--workers", optarg, 1, KVP_SIM_MAX_WORKERS, &a->workers) != 0)
        return KVP__CLI_EXIT_USAGE;
      break;
    case 'Q':
      if (parse_long("--partitions", optarg, 1, KVP_PARTITIONS_MAX, &a->partitions) != 0)
        return KVP__CLI_EXIT_USAGE;
      break;
    case 'M':
      if (strcmp(optarg, "core") != 0 && strcmp(optarg, "jetstream") != 0) {
        fprintf(stderr, "kvplane: --mode: '%s' is not core or jetstream\n", optarg);
        return KVP__CLI_EXIT_USAGE;
      }
      a->mode = optarg;
      break;
    case 'X':
      if (parse_long("--limit", optarg, 1, 1L << 40, &a->limit) != 0)
        return KVP__CLI_EXIT_USAGE;
      break;
    case 'k':
      a->tokens = optarg;
      break;
    case 'G': {
      long t;
      if (parse_long("--tier", optarg, 3, 4, &t) != 0)
        return KVP__CLI_EXIT_USAGE;
      a->tier = (int)t;
      break;
    }
    case 'O':
      a->volume = optarg;
      break;
    case 'E':
      a->note = optarg;
      break;
    case 'b':
      if (parse_long("--block-size", optarg, 1, 1 << 20, &a->block_size) != 0)
        return KVP__CLI_EXIT_USAGE;
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
        return KVP__CLI_EXIT_USAGE;
      }
      break;
    case 'h':
      a->help = 1;
      break;
    case 'v':
      a->version = 1;
      break;
    default:
      /* getopt named the option; a negative decimal hash looks like one. */
      if (optopt >= '0' && optopt <= '9')
        fprintf(stderr, "kvplane: a negative HASH needs -- before it: kvplane match -- -%c...\n",
                optopt);
      return KVP__CLI_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    a->cmd = argv[optind];
    a->rest = argv + optind + 1;
    a->nrest = argc - optind - 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  kvp__cli_args_t a;
  char *base = strrchr(argv[0], '/');
  if (base != NULL)
    argv[0] = base + 1; /* getopt's messages name the program, not its path */
  int rc = parse_args(argc, argv, &a);

  if (rc != 0) {
    kvp__cli_usage(stderr);
    return rc;
  }
  if (a.version) {
    kvp__build_print_version(stdout, "kvplane");
    return KVP__CLI_EXIT_OK;
  }
  if (a.cmd == NULL) {
    kvp__cli_usage(a.help ? stdout : stderr);
    return a.help ? KVP__CLI_EXIT_OK : KVP__CLI_EXIT_USAGE;
  }
  if (!kvp__cli_known(a.cmd)) {
    fprintf(stderr, "kvplane: unknown command '%s'\n", a.cmd);
    kvp__cli_usage(stderr);
    return KVP__CLI_EXIT_USAGE;
  }
  if (a.help) {
    kvp__cli_help(a.cmd, stdout);
    return KVP__CLI_EXIT_OK;
  }
  if (strcmp(a.cmd, "match") == 0)
    rc = kvp__cli_cmd_match(&a);
  else if (strcmp(a.cmd, "top") == 0)
    rc = kvp__cli_cmd_top(&a);
  else if (strcmp(a.cmd, "replay") == 0)
    rc = kvp__cli_cmd_replay(&a);
  else if (strcmp(a.cmd, "bench") == 0)
    rc = kvp__cli_cmd_bench(&a);
  else if (strcmp(a.cmd, "stats") == 0)
    rc = kvp__cli_cmd_stats(&a);
  else if (strcmp(a.cmd, "pin") == 0 || strcmp(a.cmd, "unpin") == 0 || strcmp(a.cmd, "move") == 0 ||
           strcmp(a.cmd, "delete") == 0)
    rc = kvp__cli_cmd_control(&a);
  else if (strcmp(a.cmd, "partitions") == 0)
    rc = kvp__cli_cmd_partitions(&a);
  else if (strcmp(a.cmd, "nats-config") == 0)
    rc = kvp__cli_cmd_nats_config(&a);
  else
    rc = kvp__cli_cmd_db(&a);
  nats_Close();
  return rc;
}
