/* kvplane-advisor: the storage-advisor daemon. A thin main over
 * include/kvplane/advisor.h: parse the command line, load the config, run. */
#include <getopt.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/advisor.h"
#include "kvplane/status.h"
#include "metrics/build_info.h"

static void usage(FILE *f) {
  fputs("usage: kvplane-advisor [--config FILE] [-o section.key=value]... [--print-config]\n"
        "       kvplane-advisor --config-reference\n"
        "\n"
        "The kvplane storage advisor: consumes KV events from NATS (JetStream durable\n"
        "consumer or core subscriptions on kvplane.ev.<ns>.>), keeps an index of where\n"
        "every block lives (worker, tier, volume), writes it behind to a SQLite database\n"
        "(WAL, mode 0600; see docs/sql.md for the tables and views), asks workers for a\n"
        "resync on kvplane.ctl.<ns>.<worker>.resync after a gap, and answers\n"
        "kvplane.api.<ns>.match and kvplane.api.<ns>.stats (try the kvplane CLI).\n"
        "With [http] enabled it also serves the routers' indexer API (the Mooncake\n"
        "conductor indexer API: POST /query, /query_by_hash) on [http] listen\n"
        "(default 127.0.0.1:13333), answered from the same index.\n"
        "Both HTTP servers ([http], [metrics]) close a request whose headers and body\n"
        "are not in within request_timeout (default 10 s) and limit the connections\n"
        "of one client address (max_connections_per_client).\n"
        "\n"
        "options:\n"
        "  -c, --config FILE      read FILE (INI; etc/kvplane-advisor.conf documents every key)\n"
        "  -o, --set S.K=VALUE    override one key after the file, e.g. -o store.path=/tmp/a.db\n"
        "      --print-config     check the configuration (the [volume] sections too: the\n"
        "                         plugin, a path's parent directory and the parameters, as\n"
        "                         the plugin's open takes them, writing nothing), print it\n"
        "                         and exit (1 with file:line when it is wrong)\n"
        "      --config-reference print every key with its type, default, range and\n"
        "                         meaning (Markdown; docs/config.md) and exit\n"
        "      --takeover         replace a JetStream consumer of the configured name that\n"
        "                         this database did not create (normally a refusal: another\n"
        "                         advisor may own it)\n"
        "  -V, --version          print the version, git revision, build type and volume\n"
        "                         plugin ABI, and exit\n"
        "  -h, --help             this text\n"
        "\n"
        "signals: SIGTERM or SIGINT applies what was received, flushes and exits 0;\n"
        "SIGHUP reopens the log file.\n"
        "exit status: 0 after a clean stop, 1 for a configuration error (a [metrics]\n"
        "or [http] listen address in use included, as kvplane-relay --metrics, and a\n"
        "[log] file that cannot be opened), 2 when the database or NATS cannot be\n"
        "opened (or another advisor holds the database), 3 when the final flush failed.\n",
        f);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"config", required_argument, NULL, 'c'}, {"set", required_argument, NULL, 'o'},
      {"print-config", no_argument, NULL, 'p'}, {"config-reference", no_argument, NULL, 'R'},
      {"takeover", no_argument, NULL, 'T'},     {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  kvp_advisor_config_t cfg;
  kvp_advisor_t *adv = NULL;
  const char *config = NULL;
  char err[1024];
  int opt, print = 0, takeover = 0, rc;
  char **overrides = calloc((size_t)argc, sizeof *overrides);
  int noverrides = 0;

  if (overrides == NULL)
    return 2;
  if (strrchr(argv[0], '/') != NULL)
    argv[0] = strrchr(argv[0], '/') + 1; /* getopt's messages: the name, not the path */
  while ((opt = getopt_long(argc, argv, "c:o:hV", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c':
      config = optarg;
      break;
    case 'o':
      overrides[noverrides++] = optarg;
      break;
    case 'T':
      takeover = 1;
      break;
    case 'p':
      print = 1;
      break;
    case 'R':
      kvp_advisor_config_reference(stdout);
      free(overrides);
      return 0;
    case 'V':
      kvp__build_print_version(stdout, "kvplane-advisor");
      free(overrides);
      return 0;
    case 'h':
      usage(stdout);
      free(overrides);
      return 0;
    default:
      usage(stderr);
      free(overrides);
      return 1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "kvplane-advisor: unexpected argument '%s'\n", argv[optind]);
    free(overrides);
    return 1;
  }
  kvp_advisor_config_defaults(&cfg);
  rc = config ? kvp_advisor_config_load(&cfg, config, err, sizeof err) : 0;
  for (int i = 0; rc == 0 && i < noverrides; i++)
    rc = kvp_advisor_config_set(&cfg, overrides[i], err, sizeof err);
  if (rc == 0)
    rc = kvp_advisor_config_check(&cfg, err, sizeof err);
  /* The volumes as the advisor would open them: --print-config is the check
   * to run before a restart. */
  if (rc == 0 && (print || cfg.tiering))
    rc = kvp_advisor_config_check_volumes(&cfg, err, sizeof err);
  free(overrides);
  if (rc != 0) {
    fprintf(stderr, "kvplane-advisor: %s\n", err);
    return 1;
  }
  if (print) {
    kvp_advisor_config_print(&cfg, stdout);
    return 0;
  }
  cfg.handle_signals = 1;
  cfg.takeover = takeover;
  if ((rc = kvp_advisor_open(&cfg, &adv, err, sizeof err)) != 0) {
    fprintf(stderr, "kvplane-advisor: %s (%s)\n", err, kvp_err_name(rc));
    nats_Close();
    return rc == KVP_ECONFIG ? 1 : 2;
  }
  rc = kvp_advisor_run(adv);
  kvp_advisor_close(adv);
  nats_Close();
  return rc == 0 ? 0 : 3;
}
