/* kvplane: command-line client of a running advisor (request/reply over
 * NATS). Subcommands: match, stats. Replies are printed as JSON. */
#include <getopt.h>
#include <jansson.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fputs("usage: kvplane match [options] HASH...\n"
        "       kvplane stats [options]\n"
        "\n"
        "Queries a running kvplane-advisor over NATS request/reply.\n"
        "  match  sends the sequence hashes (hex u64, with or without 0x) to\n"
        "         kvplane.api.<ns>.match and prints, per worker and tier, how many\n"
        "         leading hashes are cached consecutively\n"
        "  stats  prints the advisor's figures from kvplane.api.<ns>.stats\n"
        "\n"
        "options:\n"
        "  -s, --server URL     NATS server (default nats://127.0.0.1:4222)\n"
        "  -n, --ns NS          namespace (default: default)\n"
        "  -u, --user USER      with --password\n"
        "  -p, --password PASS\n"
        "  -t, --token TOKEN\n"
        "      --creds FILE     user credentials file\n"
        "      --tls-ca FILE    CA certificates; enables TLS\n"
        "  -w, --timeout MS     reply timeout (default 5000)\n"
        "  -h, --help\n"
        "exit status: 0 with a reply, 1 usage, 2 no reply or connection failure,\n"
        "3 the advisor answered with an error.\n",
        f);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"server", required_argument, NULL, 's'}, {"ns", required_argument, NULL, 'n'},
      {"user", required_argument, NULL, 'u'},   {"password", required_argument, NULL, 'p'},
      {"token", required_argument, NULL, 't'},  {"creds", required_argument, NULL, 'C'},
      {"tls-ca", required_argument, NULL, 'A'}, {"timeout", required_argument, NULL, 'w'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char *server = "nats://127.0.0.1:4222", *ns = "default", *user = NULL, *pass = NULL;
  const char *token = NULL, *creds = NULL, *ca = NULL;
  long timeout = 5000;
  natsOptions *o = NULL;
  natsConnection *nc = NULL;
  natsMsg *rep = NULL;
  natsStatus s;
  json_t *req = NULL, *arr, *doc = NULL;
  char *body = NULL, subj[160];
  int opt, rc = 2;

  while ((opt = getopt_long(argc, argv, "s:n:u:p:t:w:h", longopts, NULL)) != -1) {
    switch (opt) {
    case 's':
      server = optarg;
      break;
    case 'n':
      ns = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case 'p':
      pass = optarg;
      break;
    case 't':
      token = optarg;
      break;
    case 'C':
      creds = optarg;
      break;
    case 'A':
      ca = optarg;
      break;
    case 'w':
      timeout = strtol(optarg, NULL, 10);
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 1;
    }
  }
  if (optind >= argc ||
      (strcmp(argv[optind], "match") != 0 && strcmp(argv[optind], "stats") != 0)) {
    usage(stderr);
    return 1;
  }
  int match = strcmp(argv[optind], "match") == 0;
  if (match) {
    req = json_pack("{s:[]}", "hashes");
    arr = json_object_get(req, "hashes");
    for (int i = optind + 1; i < argc; i++)
      json_array_append_new(arr, json_string(argv[i]));
    if (json_array_size(arr) == 0) {
      fputs("kvplane match: give at least one hash\n", stderr);
      json_decref(req);
      return 1;
    }
    body = json_dumps(req, JSON_COMPACT);
  }
  snprintf(subj, sizeof subj, "kvplane.api.%s.%s", ns, match ? "match" : "stats");
  s = natsOptions_Create(&o);
  if (s == NATS_OK)
    s = natsOptions_SetURL(o, server);
  if (s == NATS_OK && user)
    s = natsOptions_SetUserInfo(o, user, pass ? pass : "");
  if (s == NATS_OK && token)
    s = natsOptions_SetToken(o, token);
  if (s == NATS_OK && creds)
    s = natsOptions_SetUserCredentialsFromFiles(o, creds, NULL);
  if (s == NATS_OK && ca)
    s = natsOptions_SetSecure(o, true);
  if (s == NATS_OK && ca)
    s = natsOptions_LoadCATrustedCertificates(o, ca);
  if (s == NATS_OK)
    s = natsConnection_Connect(&nc, o);
  if (s != NATS_OK) {
    fprintf(stderr, "kvplane: %s: %s\n", server, natsStatus_GetText(s));
    goto done;
  }
  s = natsConnection_RequestString(&rep, nc, subj, body ? body : "{}", timeout);
  if (s != NATS_OK) {
    fprintf(stderr, "kvplane: no reply on %s: %s\n", subj, natsStatus_GetText(s));
    goto done;
  }
  doc = json_loadb(natsMsg_GetData(rep), (size_t)natsMsg_GetDataLength(rep), 0, NULL);
  if (doc == NULL) {
    fprintf(stderr, "kvplane: reply is not JSON\n");
    goto done;
  }
  json_dumpf(doc, stdout, JSON_INDENT(2));
  fputc('\n', stdout);
  rc = json_object_get(doc, "error") ? 3 : 0;
done:
  json_decref(doc);
  json_decref(req);
  free(body);
  natsMsg_Destroy(rep);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(o);
  nats_Close();
  return rc;
}
