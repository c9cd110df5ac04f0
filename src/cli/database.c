/* kvplane's database commands (status, workers, blocks, migrations,
 * report): which database (--db, or the store path of an advisor
 * configuration), opened read-only, the view asked for (inspect.c,
 * report.c), and the exit status for each failure. */
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "advisor/advisor.h"
#include "cli/cli.h"
#include "cli/inspect.h"
#include "cli/report.h"
#include "common/clock.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

int kvp__cli_db_path(const kvp__cli_args_t *a, char *out, size_t len) {
  if (a->db && a->config) {
    fprintf(stderr, "kvplane: give --db or --config, not both\n");
    return KVP__CLI_EXIT_USAGE;
  }
  if (a->config) {
    kvp_advisor_config_t cfg;
    char err[512];
    kvp_advisor_config_defaults(&cfg);
    if (kvp_advisor_config_load(&cfg, a->config, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane: %s\n", err);
      return KVP__CLI_EXIT_USAGE;
    }
    snprintf(out, len, "%s", cfg.db_path);
    return 0;
  }
  snprintf(out, len, "%s", a->db ? a->db : "/var/lib/kvplane/advisor.db");
  return 0;
}

/* The database's namespace (meta.namespace) into ns; "" when it has none. */
static void db_namespace(sqlite3 *db, char *ns, size_t len) {
  sqlite3_stmt *st = NULL;
  ns[0] = '\0';
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'namespace'", -1, &st, NULL) ==
          SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
    snprintf(ns, len, "%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
}

int kvp__cli_live_args(const kvp__cli_args_t *a, sqlite3 *db, kvp__cli_args_t *live, char *ns,
                       size_t nslen) {
  char dbns[128];

  *live = *a;
  db_namespace(db, dbns, sizeof dbns);
  snprintf(ns, nslen, "%s", a->ns);
  if (a->config) {
    kvp_advisor_config_t cfg;
    char err[512];
    kvp_advisor_config_defaults(&cfg);
    if (kvp_advisor_config_load(&cfg, a->config, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane: %s\n", err);
      return KVP__CLI_EXIT_USAGE;
    }
    if (!a->ns_set)
      snprintf(ns, nslen, "%s", cfg.ns);
    if (!a->nats_set)
      live->nats = cfg.nats;
  } else if (!a->ns_set && dbns[0]) {
    snprintf(ns, nslen, "%s", dbns);
  }
  live->ns = ns;
  if (dbns[0] && strcmp(dbns, ns) != 0) {
    fprintf(stderr,
            "kvplane %s: the database holds namespace '%s', but the live figures would be "
            "namespace '%s''s advisor: not mixing two advisors (give -n %s, or the other "
            "advisor's --db or -c)\n",
            a->cmd, dbns, ns, dbns);
    return KVP__CLI_EXIT_USAGE;
  }
  return 0;
}

int kvp__cli_live_check(const kvp__cli_args_t *live, const json_t *stats) {
  const char *got = json_string_value(json_object_get(stats, "namespace"));
  if (stats == NULL || got == NULL || strcmp(got, live->ns) == 0)
    return 0;
  fprintf(stderr,
          "kvplane %s: the advisor that answered serves namespace '%s', not '%s': not mixing "
          "two advisors\n",
          live->cmd, got, live->ns);
  return KVP__CLI_EXIT_USAGE;
}

int kvp__cli_cmd_db(const kvp__cli_args_t *a) {
  char path[600], err[512];
  sqlite3 *db = NULL;
  kvp__cli_out_t o = {.f = stdout, .json = a->json, .now_ms = kvp__unix_ms()};
  int rc;

  if (strcmp(a->cmd, "blocks") == 0 && a->hot == a->cold) {
    fprintf(stderr, "kvplane blocks: give --hot or --cold\n");
    return KVP__CLI_EXIT_USAGE;
  }
  if (strcmp(a->cmd, "report") == 0 && (a->png == NULL) == (a->svg == NULL)) {
    fprintf(stderr, "kvplane report: give --png FILE or --svg FILE\n");
    return KVP__CLI_EXIT_USAGE;
  }
  if (a->nrest > 0) {
    fprintf(stderr, "kvplane %s: unexpected argument '%s'\n", a->cmd, a->rest[0]);
    return KVP__CLI_EXIT_USAGE;
  }
  if ((rc = kvp__cli_db_path(a, path, sizeof path)) != 0)
    return rc;
  if (kvp__cli_db_open(path, &db, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane %s: %s\n", a->cmd, err);
    return KVP__CLI_EXIT_NODB;
  }
  if (strcmp(a->cmd, "status") == 0) {
    json_t *stats = NULL;
    kvp__cli_args_t live;
    char ns[128], why[512] = "";
    /* The live figures are optional (a short wait, no complaint), but never
     * those of another namespace's advisor. */
    if ((rc = kvp__cli_live_args(a, db, &live, ns, sizeof ns)) != 0) {
      sqlite3_close(db);
      return rc;
    }
    kvp__cli_stats_all_why(&live, a->timeout_set ? a->timeout : 1000, 1, &stats, why, sizeof why);
    o.no_answer = why;
    if ((rc = kvp__cli_live_check(&live, stats)) != 0) {
      json_decref(stats);
      sqlite3_close(db);
      return rc;
    }
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
      return KVP__CLI_EXIT_OK;
    }
    fprintf(stderr, "kvplane report: %s: %s\n", path, err);
    return rc == KVP_EIO ? KVP__CLI_EXIT_TOOL : KVP__CLI_EXIT_NODB;
  } else {
    rc = kvp__cli_migrations(db, a->failed, (int)a->count, &o, err, sizeof err);
  }
  sqlite3_close(db);
  if (rc != 0) {
    fprintf(stderr, "kvplane %s: %s: %s\n", a->cmd, path, err);
    return KVP__CLI_EXIT_NODB;
  }
  return KVP__CLI_EXIT_OK;
}
