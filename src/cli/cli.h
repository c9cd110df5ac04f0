/* The kvplane command line's commands as library code: tools/kvplane.c
 * parses argv into a kvp__cli_args_t and calls one kvp__cli_cmd_* function,
 * which checks the command's operands, does the work (through inspect.h,
 * report.h, live.h and the advisor client) and returns the documented exit
 * status. The help texts are here too (usage.c), so that --help and the
 * dispatch name the same commands. Thread: the caller's; top installs
 * SIGINT and SIGTERM handlers. */
#ifndef KVP_CLI_CLI_H
#define KVP_CLI_CLI_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include "kvplane/client.h"
#include "kvplane/nats.h"

/* Exit statuses, as `kvplane --help` documents them. */
enum {
  KVP__CLI_EXIT_OK = 0,
  KVP__CLI_EXIT_USAGE = 1,
  KVP__CLI_EXIT_UNREACHABLE = 2,
  KVP__CLI_EXIT_ADVISOR_ERROR = 3,
  KVP__CLI_EXIT_NODB = 4,
  KVP__CLI_EXIT_TOOL = 5
};

/* Every option of every command, as parsed from argv. */
typedef struct kvp__cli_args_s {
  const char *cmd;
  const char *ns, *db, *config, *tokens, *lora, *png, *svg;
  int64_t since_ms, interval_ms;
  const char *mode;
  long workers, limit;
  long partitions; /* replay: the servers' event partitions (0: none) */
  int count_set;
  kvp_nats_opts_t nats;
  long timeout;
  int timeout_set, json, hot, cold, failed, help, version;
  int ns_set, nats_set; /* -n, a NATS option given on the command line */
  long count, block_size;
  int tier;                  /* move, delete: --tier 3|4 (0: not given) */
  const char *volume, *note; /* move: --volume; pin: --note */
  char **rest;               /* operands after the command */
  int nrest;
} kvp__cli_args_t;

/* The usage text (synopses, options, exit statuses) on f. */
void kvp__cli_usage(FILE *f);

/* Returns 1 when name is one of the commands, else 0. */
int kvp__cli_known(const char *name);

/* The --help text of the command name (kvp__cli_known) on f. */
void kvp__cli_help(const char *name, FILE *f);

/* Checks --ns and the NATS options and opens a client (*c, closed by the
 * caller). Returns KVP__CLI_EXIT_OK, _USAGE (bad options, said on stderr)
 * or _UNREACHABLE (said on stderr, or with quiet into why when why is not
 * NULL). (query.c) */
int kvp__cli_client_open(const kvp__cli_args_t *a, int quiet, kvp_client_t **c);
int kvp__cli_client_open_why(const kvp__cli_args_t *a, int quiet, kvp_client_t **c, char *why,
                             size_t whylen);

/* Sends body to kvplane.api.<ns>.<what> through the advisor client
 * (kvplane/client.h), waiting timeout ms; *doc gets the reply (NULL when
 * none). Returns KVP__CLI_EXIT_OK, _USAGE (bad --ns or NATS options),
 * _UNREACHABLE (no connection, no reply, or a reply that is not JSON) or
 * _ADVISOR_ERROR (the reply has an "error"); the cause goes to stderr
 * unless quiet. */
int kvp__cli_request(const kvp__cli_args_t *a, const char *what, const char *body, long timeout,
                     int quiet, json_t **doc);

/* The stats of every advisor of a's namespace, gathered as `kvplane stats`
 * does (kvp_client_request_all, until every partition is covered or
 * timeout ms) and merged by kvp__cli_stats_merge into *doc (NULL when none
 * answered). Returns as kvp__cli_request. With quiet and why, the cause of
 * no answer (the server that could not be reached, the subject nobody
 * answered on) is written into why instead of stderr. (gathered.c) */
int kvp__cli_stats_all(const kvp__cli_args_t *a, long timeout, int quiet, json_t **doc);
int kvp__cli_stats_all_why(const kvp__cli_args_t *a, long timeout, int quiet, json_t **doc,
                           char *why, size_t whylen);

/* The gathered stats g ({"partitions": C, "missing": [...], "replies":
 * [...]}, kvp_client_request_all's reply) as one stats object, new
 * reference, NULL when there is no reply: one unpartitioned advisor's reply
 * as it is; else the figures of a cover of the partitions (whole advisors
 * whose owned sets do not overlap, the freshest of each partition first,
 * so that a standby is not counted twice, also beside advisors owning
 * uneven sets) summed, freshness lags their maximum,
 * uptime the youngest's, tiering the tiering advisor's, and "gathered":
 * {"count", "missing", "partitions": [{"partition", "answered":
 * [{"advisor", "position"}]}], "advisors": [{"advisor", "owned", "ready",
 * "blocks", "locations", "error"}], "summed": [advisor, ...]}. */
json_t *kvp__cli_stats_merge(const json_t *g);

/* The database path: --db, the store path of the --config file, or
 * /var/lib/kvplane/advisor.db. Returns 0 or KVP__CLI_EXIT_USAGE (both given,
 * or the configuration does not load; the cause on stderr). */
int kvp__cli_db_path(const kvp__cli_args_t *a, char *out, size_t len);

/* The advisor whose live figures go with the database db (status, top):
 * *live is a copy of a asking namespace ns (filled here) of the NATS servers
 * given on the command line; without -n, the namespace of the -c
 * configuration, else the database's own (meta.namespace); without NATS
 * options, those of the -c configuration. Returns 0, or KVP__CLI_EXIT_USAGE
 * when the namespace asked is not the database's (two advisors would be
 * mixed; the cause on stderr). */
int kvp__cli_live_args(const kvp__cli_args_t *a, sqlite3 *db, kvp__cli_args_t *live, char *ns,
                       size_t nslen);

/* 0 when the stats reply (or its absence) belongs with live's namespace; else
 * KVP__CLI_EXIT_USAGE, the cause on stderr. */
int kvp__cli_live_check(const kvp__cli_args_t *live, const json_t *stats);

/* The commands; each returns an exit status. */
/* Appends the hashes of the operands, or of --tokens/--block-size/--lora,
 * to arr as hex strings. 0, or an exit status with the cause on stderr.
 * (query.c) */
int kvp__cli_hashes(const kvp__cli_args_t *a, json_t *arr);
int kvp__cli_cmd_match(const kvp__cli_args_t *a); /* query.c */
/* pin, unpin, move, delete (control.c). */
int kvp__cli_cmd_control(const kvp__cli_args_t *a);
int kvp__cli_cmd_partitions(const kvp__cli_args_t *a);  /* partitions.c */
int kvp__cli_cmd_stats(const kvp__cli_args_t *a);       /* query.c */
int kvp__cli_cmd_nats_config(const kvp__cli_args_t *a); /* query.c */
int kvp__cli_cmd_db(const kvp__cli_args_t *a);          /* database.c: status, workers, blocks,
                                                           migrations, report */
int kvp__cli_cmd_top(const kvp__cli_args_t *a);         /* live.c */
int kvp__cli_cmd_replay(const kvp__cli_args_t *a);      /* live.c */
int kvp__cli_cmd_bench(const kvp__cli_args_t *a);       /* live.c */

#endif
