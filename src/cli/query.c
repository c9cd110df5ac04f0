/* kvplane's questions to a running advisor over NATS request/reply (match,
 * stats), and the request helper the database commands use for the
 * advisor's live figures. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kvplane/client.h"
#include "kvplane/hash.h"
#include "kvplane/subjects.h"

int kvp__cli_request(const kvp__cli_args_t *a, const char *what, const char *body, long timeout,
                     int quiet, json_t **doc) {
  char err[512];
  kvp_client_t *c = NULL;
  char *reply = NULL;
  int rc;

  *doc = NULL;
  if (!kvp_subject_token_valid(a->ns)) {
    fprintf(stderr, "kvplane: --ns: '%s' must be 1..64 of [A-Za-z0-9_-]\n", a->ns);
    return KVP__CLI_EXIT_USAGE;
  }
  if (kvp_nats_opts_check(&a->nats, "--", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    return KVP__CLI_EXIT_USAGE;
  }
  rc = kvp_client_open(&a->nats, a->ns, &c, err, sizeof err);
  if (rc == 0)
    rc = kvp_client_request(c, what, body, (uint32_t)timeout, &reply, err, sizeof err);
  kvp_client_close(c);
  if (rc != 0) {
    if (!quiet)
      fprintf(stderr, "kvplane: %s\n", err);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  *doc = json_loads(reply, 0, NULL);
  kvp_client_reply_free(reply);
  if (*doc == NULL) {
    if (!quiet)
      fprintf(stderr, "kvplane: the %s reply is not JSON\n", what);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  return json_object_get(*doc, "error") ? KVP__CLI_EXIT_ADVISOR_ERROR : KVP__CLI_EXIT_OK;
}

/* Reads token ids from path ("-": standard input). Returns 0 or an exit
 * status. */
static int read_tokens(const char *path, uint32_t **out, size_t *n) {
  FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
  size_t cap = 0;
  int c, rc = KVP__CLI_EXIT_OK;
  unsigned long long v = 0;
  int in_num = 0;

  *out = NULL;
  *n = 0;
  if (f == NULL) {
    fprintf(stderr, "kvplane: --tokens: cannot read %s\n", path);
    return KVP__CLI_EXIT_USAGE;
  }
  do {
    c = fgetc(f);
    if (c >= '0' && c <= '9') {
      v = v * 10 + (unsigned)(c - '0');
      in_num = 1;
      if (v > UINT32_MAX) {
        fprintf(stderr, "kvplane match: --tokens: a token id in %s is over 2^32-1\n", path);
        rc = KVP__CLI_EXIT_USAGE;
        break;
      }
    } else if (c == EOF || c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' ||
               c == '[' || c == ']') {
      if (in_num) {
        if (*n == cap) {
          cap = cap ? cap * 2 : 1024;
          uint32_t *p = realloc(*out, cap * sizeof *p);
          if (p == NULL) {
            rc = KVP__CLI_EXIT_USAGE;
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
      rc = KVP__CLI_EXIT_USAGE;
      break;
    }
  } while (c != EOF);
  if (f != stdin)
    fclose(f);
  return rc;
}

int kvp__cli_hashes(const kvp__cli_args_t *a, json_t *arr) {
  uint64_t *hashes = NULL;
  uint32_t *tokens = NULL;
  size_t ntok = 0, nh = 0;
  char hex[24];
  int rc = KVP__CLI_EXIT_OK;

  if (a->tokens) {
    if (a->nrest > 0 || a->block_size == 0) {
      fprintf(stderr, "kvplane %s: --tokens takes --block-size N and no hashes\n", a->cmd);
      rc = KVP__CLI_EXIT_USAGE;
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
      fprintf(stderr, "kvplane %s: '%s' is not a hash (see kvplane match --help)\n", a->cmd,
              a->rest[i]);
      rc = KVP__CLI_EXIT_USAGE;
      goto out;
    }
    snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)h);
    json_array_append_new(arr, json_string(hex));
  }
  if (json_array_size(arr) == 0) {
    fprintf(stderr,
            a->tokens ? "kvplane %s: the tokens make no full block\n"
                      : "kvplane %s: give at least one hash, or --tokens\n",
            a->cmd);
    rc = KVP__CLI_EXIT_USAGE;
  }
out:
  free(tokens);
  free(hashes);
  return rc;
}

int kvp__cli_cmd_match(const kvp__cli_args_t *a) {
  json_t *req = json_pack("{s:[]}", "hashes"), *doc;
  int rc;

  if ((rc = kvp__cli_hashes(a, json_object_get(req, "hashes"))) != 0)
    goto out;
  char *body = json_dumps(req, JSON_COMPACT);
  rc = kvp__cli_request(a, KVP_API_MATCH, body, a->timeout, 0, &doc);
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

int kvp__cli_cmd_stats(const kvp__cli_args_t *a) {
  json_t *doc;
  int rc = kvp__cli_request(a, KVP_API_STATS, "{}", a->timeout, 0, &doc);
  if (doc) {
    json_dumpf(doc, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(doc);
  }
  return rc;
}
