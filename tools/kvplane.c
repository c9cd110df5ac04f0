/* kvplane: command-line client of a running advisor (request/reply over
 * NATS). Subcommands: match, stats. Replies are printed as JSON. */
#include <getopt.h>
#include <jansson.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/hash.h"
#include "kvplane/nats.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "nats/conn.h"

static void usage(FILE *f) {
  fputs("usage: kvplane match [options] HASH...\n"
        "       kvplane stats [options]\n"
        "\n"
        "Queries a running kvplane-advisor over NATS request/reply.\n"
        "  match  sends the sequence hashes to kvplane.api.<ns>.match and prints,\n"
        "         per worker and tier, how many leading hashes are cached\n"
        "         consecutively. A HASH is 0x-prefixed hex (0x1f), exactly 16 hex\n"
        "         digits as logs print them (00ab12cd34ef5678; 16 digits are always\n"
        "         hex), or a decimal as sqlite3 shows them: signed (-8446744073709551616)\n"
        "         or unsigned (+1234 forces decimal for 16 digits); put -- before\n"
        "         negative ones: kvplane match -- -6917529027641081856\n"
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
        "      --tls-cert FILE  client certificate chain, with --tls-key\n"
        "      --tls-key FILE   client private key\n"
        "  -w, --timeout MS     reply timeout (default 5000)\n"
        "  -h, --help\n"
        "exit status: 0 with a reply, 1 usage or a bad option, 2 no reply or\n"
        "connection failure,\n"
        "3 the advisor answered with an error.\n",
        f);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"server", required_argument, NULL, 's'}, {"ns", required_argument, NULL, 'n'},
      {"user", required_argument, NULL, 'u'},   {"password", required_argument, NULL, 'p'},
      {"token", required_argument, NULL, 't'},  {"creds", required_argument, NULL, 'C'},
      {"tls-ca", required_argument, NULL, 'A'}, {"tls-cert", required_argument, NULL, 'T'},
      {"tls-key", required_argument, NULL, 'K'}, {"timeout", required_argument, NULL, 'w'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char *ns = "default";
  kvp_nats_opts_t no;
  char err[512];
  long timeout = 5000;
  natsConnection *nc = NULL;
  natsMsg *rep = NULL;
  natsStatus s;
  json_t *req = NULL, *arr, *doc = NULL;
  char *body = NULL, subj[KVP_SUBJECT_MAX];
  int opt, rc = 2;

  kvp_nats_opts_init(&no);
  while ((opt = getopt_long(argc, argv, "s:n:u:p:t:w:h", longopts, NULL)) != -1) {
    static const struct {
      int opt;
      const char *name;
    } nats_flags[] = {{'s', "servers"}, {'u', "user"},   {'p', "password"}, {'t', "token"},
                      {'C', "creds"},   {'A', "tls_ca"}, {'T', "tls_cert"}, {'K', "tls_key"}};
    int taken = 0;
    for (size_t i = 0; i < sizeof nats_flags / sizeof nats_flags[0]; i++) {
      if (nats_flags[i].opt != opt)
        continue;
      if (kvp_nats_opts_set(&no, nats_flags[i].name, optarg, err, sizeof err) != 0) {
        fprintf(stderr, "kvplane: %s\n", err);
        return 1;
      }
      taken = 1;
    }
    if (taken)
      continue;
    switch (opt) {
    case 'n':
      ns = optarg;
      break;
    case 'w': {
      char *end;
      timeout = strtol(optarg, &end, 10);
      if (end == optarg || *end != '\0' || timeout < 1 || timeout > 3600000) {
        fprintf(stderr, "kvplane: --timeout: '%s' is not 1..3600000 ms\n", optarg);
        return 1;
      }
      break;
    }
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 1;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 1;
  }
  if (strcmp(argv[optind], "match") != 0 && strcmp(argv[optind], "stats") != 0) {
    fprintf(stderr, "kvplane: unknown command '%s' (match or stats)\n", argv[optind]);
    usage(stderr);
    return 1;
  }
  int match = strcmp(argv[optind], "match") == 0;
  if (match) {
    req = json_pack("{s:[]}", "hashes");
    arr = json_object_get(req, "hashes");
    for (int i = optind + 1; i < argc; i++) {
      uint64_t h;
      char hex[24];
      if (kvp_hash_parse(argv[i], &h) != 0) {
        fprintf(stderr, "kvplane match: '%s' is not a hash (see --help for the forms)\n",
                argv[i]);
        json_decref(req);
        return 1;
      }
      snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)h);
      json_array_append_new(arr, json_string(hex));
    }
    if (json_array_size(arr) == 0) {
      fputs("kvplane match: give at least one hash\n", stderr);
      json_decref(req);
      return 1;
    }
    body = json_dumps(req, JSON_COMPACT);
  }
  if (kvp_subject_api(subj, sizeof subj, ns, match ? KVP_API_MATCH : KVP_API_STATS) != 0) {
    fprintf(stderr, "kvplane: --ns: '%s' must be 1..64 of [A-Za-z0-9_-]\n", ns);
    rc = 1;
    goto done;
  }
  if (kvp_nats_opts_check(&no, "--", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    rc = 1;
    goto done;
  }
  if (kvp__nats_connect(&no, NULL, &nc, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
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
  nats_Close();
  return rc;
}
