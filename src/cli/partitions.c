/* kvplane partitions: live rebalancing, a request to one advisor on
 * kvplane.api.<ns>.partitions.<advisor> (src/advisor/rebalance.c says the
 * request and reply). Operands: ADVISOR [add P[,P...]] [drop P[,P...]]
 * [tier P[,P...]] [untier P[,P...]] [wait]; with wait, the state is asked again every 200 ms until
 * no partition is catching up, within --timeout. The last reply is printed as it came (JSON). */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* "2,3" into a JSON list; 0, or -1 for something that is not one. */
static int parse_list(const char *s, json_t *out) {
  char buf[256], *sp = NULL;
  snprintf(buf, sizeof buf, "%s", s);
  for (char *t = strtok_r(buf, ",", &sp); t; t = strtok_r(NULL, ",", &sp)) {
    char *end;
    long v = strtol(t, &end, 10);
    if (*t < '0' || *t > '9' || *end || v < 0 || v >= KVP_PARTITIONS_MAX)
      return -1;
    json_array_append_new(out, json_integer(v));
  }
  return json_array_size(out) ? 0 : -1;
}

/* One request; *doc the reply. Returns an exit status. */
static int ask(natsConnection *nc, const char *subj, const char *body, long timeout, json_t **doc) {
  natsMsg *reply = NULL;
  natsStatus s = natsConnection_RequestString(&reply, nc, subj, body, timeout);
  *doc = NULL;
  if (s != NATS_OK) {
    fprintf(stderr, "kvplane partitions: %s: %s (is the advisor's consumer name right?)\n", subj,
            natsStatus_GetText(s));
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  *doc = json_loadb(natsMsg_GetData(reply), (size_t)natsMsg_GetDataLength(reply), 0, NULL);
  natsMsg_Destroy(reply);
  if (*doc == NULL) {
    fprintf(stderr, "kvplane partitions: the reply is not JSON\n");
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  return json_object_get(*doc, "error") ? KVP__CLI_EXIT_ADVISOR_ERROR : KVP__CLI_EXIT_OK;
}

int kvp__cli_cmd_partitions(const kvp__cli_args_t *a) {
  char subj[KVP_SUBJECT_MAX], err[512];
  json_t *req = json_object(), *doc = NULL;
  natsConnection *nc = NULL;
  int rc = KVP__CLI_EXIT_USAGE, wait = 0;

  if (a->nrest < 1 ||
      kvp_subject_api_advisor(subj, sizeof subj, a->ns, KVP_API_PARTITIONS, a->rest[0]) != 0) {
    fprintf(stderr, "kvplane partitions: ADVISOR (its [jetstream] consumer name) and -n NS must "
                    "be 1..64 of [A-Za-z0-9_-]\n");
    goto out;
  }
  for (int i = 1; i < a->nrest; i++) {
    const char *w = a->rest[i];
    if (strcmp(w, "wait") == 0) {
      wait = 1;
      continue;
    }
    if ((strcmp(w, "add") != 0 && strcmp(w, "drop") != 0 && strcmp(w, "tier") != 0 &&
         strcmp(w, "untier") != 0) ||
        i + 1 == a->nrest || json_object_get(req, w) != NULL) {
      fprintf(stderr,
              "kvplane partitions: '%s': expected add, drop, tier or untier P[,P...], or wait\n",
              w);
      goto out;
    }
    json_t *l = json_array();
    json_object_set_new(req, w, l);
    if (parse_list(a->rest[++i], l) != 0) {
      fprintf(stderr, "kvplane partitions: %s '%s' is not a list of partitions\n", w, a->rest[i]);
      goto out;
    }
  }
  kvp__nats_conn_args_t ca = {.name = "kvplane partitions", .reconnect_wait_ms = 250};
  if (kvp__nats_connect(&a->nats, &ca, &nc, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane partitions: %s\n", err);
    rc = KVP__CLI_EXIT_UNREACHABLE;
    goto out;
  }
  char *body = json_dumps(req, JSON_COMPACT);
  uint64_t end = mono_ms() + (uint64_t)a->timeout;
  rc = ask(nc, subj, body ? body : "{}", a->timeout, &doc);
  free(body);
  while (rc == KVP__CLI_EXIT_OK && wait &&
         json_array_size(json_object_get(doc, "catching_up")) > 0) {
    if (mono_ms() >= end) {
      fprintf(stderr, "kvplane partitions: still catching up after %ld ms\n", a->timeout);
      rc = KVP__CLI_EXIT_ADVISOR_ERROR;
      break;
    }
    nats_Sleep(200);
    json_decref(doc);
    rc = ask(nc, subj, "{}", a->timeout, &doc);
  }
  if (doc != NULL) {
    char *text = json_dumps(doc, JSON_COMPACT);
    if (text)
      printf("%s\n", text);
    free(text);
  }
out:
  json_decref(doc);
  json_decref(req);
  natsConnection_Destroy(nc);
  return rc;
}
