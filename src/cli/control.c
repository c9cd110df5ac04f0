/* kvplane pin, unpin, move and delete: the operator's tiering controls,
 * sent to every advisor on kvplane.api.<ns>.tier (src/advisor/control.c
 * says the request and reply) and gathered by kvp_client_tier_all: in a
 * partitioned deployment each partition's advisor acts on its own
 * blocks. The merged reply is printed (JSON); exit 3 when it has "error"
 * (an advisor refused, or a partition's advisor did not answer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kvplane/client.h"

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
  char *body = json_dumps(req, JSON_COMPACT), *reply = NULL, err[512];
  kvp_client_t *c = NULL;
  if (body == NULL) {
    rc = KVP__CLI_EXIT_TOOL;
  } else if ((rc = kvp__cli_client_open(a, 0, &c)) == KVP__CLI_EXIT_OK) {
    if (kvp_client_tier_all(c, body, (uint32_t)a->timeout, &reply, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane %s: %s\n", a->cmd, err);
      rc = KVP__CLI_EXIT_UNREACHABLE;
    } else if ((doc = json_loads(reply, 0, NULL)) != NULL && json_object_get(doc, "error")) {
      rc = KVP__CLI_EXIT_ADVISOR_ERROR;
    }
    kvp_client_reply_free(reply);
    kvp_client_close(c);
  }
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
