/* kvplane pin, unpin, move and delete: the operator's tiering controls,
 * sent to the advisor on kvplane.api.<ns>.tier (src/advisor/control.c says
 * the request and reply); the reply is printed as it came (JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kvplane/subjects.h"

int kvp__cli_cmd_control(const kvp__cli_args_t *a) {
  json_t *req = json_pack("{s:s, s:[]}", "op", a->cmd, "hashes"), *doc = NULL;
  int rc;

  if (strcmp(a->cmd, "move") == 0 && a->tier == 0) {
    fprintf(stderr, "kvplane move: --tier 3 or --tier 4 is required\n");
    rc = KVP__CLI_EXIT_USAGE;
    goto out;
  }
  if ((a->tier && strcmp(a->cmd, "move") != 0 && strcmp(a->cmd, "delete") != 0) ||
      (a->volume && strcmp(a->cmd, "move") != 0) || (a->note && strcmp(a->cmd, "pin") != 0)) {
    fprintf(stderr,
            "kvplane %s: --tier is for move and delete, --volume for move, --note for "
            "pin\n",
            a->cmd);
    rc = KVP__CLI_EXIT_USAGE;
    goto out;
  }
  if ((rc = kvp__cli_hashes(a, json_object_get(req, "hashes"))) != 0)
    goto out;
  if (a->tier)
    json_object_set_new(req, "tier", json_integer(a->tier));
  if (a->volume)
    json_object_set_new(req, "volume", json_string(a->volume));
  if (a->note)
    json_object_set_new(req, "note", json_string(a->note));
  char *body = json_dumps(req, JSON_COMPACT);
  rc = body ? kvp__cli_request(a, KVP_API_TIER, body, a->timeout, 0, &doc)
            : KVP__CLI_EXIT_UNREACHABLE;
  free(body);
  if (doc) {
    json_dumpf(doc, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(doc);
  }
out:
  json_decref(req);
  return rc;
}
