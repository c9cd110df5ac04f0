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
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/subjects.h"

int kvp__cli_client_open(const kvp__cli_args_t *a, int quiet, kvp_client_t **c) {
  return kvp__cli_client_open_why(a, quiet, c, NULL, 0);
}

int kvp__cli_client_open_why(const kvp__cli_args_t *a, int quiet, kvp_client_t **c, char *why,
                             size_t whylen) {
  char err[512];
  *c = NULL;
  if (!kvp_subject_token_valid(a->ns)) {
    fprintf(stderr, "kvplane: --ns: '%s' must be 1..64 of [A-Za-z0-9_-]\n", a->ns);
    return KVP__CLI_EXIT_USAGE;
  }
  if (kvp_nats_opts_check(&a->nats, "--", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    return KVP__CLI_EXIT_USAGE;
  }
  if (kvp_client_open(&a->nats, a->ns, c, err, sizeof err) != 0) {
    if (!quiet)
      fprintf(stderr, "kvplane: %s\n", err);
    else if (why != NULL)
      snprintf(why, whylen, "%s", err);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  return KVP__CLI_EXIT_OK;
}

int kvp__cli_request(const kvp__cli_args_t *a, const char *what, const char *body, long timeout,
                     int quiet, json_t **doc) {
  char err[512];
  kvp_client_t *c = NULL;
  char *reply = NULL;
  int rc;

  *doc = NULL;
  if ((rc = kvp__cli_client_open(a, quiet, &c)) != KVP__CLI_EXIT_OK)
    return rc;
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

/* Opens a client for a's namespace and NATS options; exit status. */
static int open_client(const kvp__cli_args_t *a, kvp_client_t **c) {
  char err[512];
  *c = NULL;
  if (!kvp_subject_token_valid(a->ns)) {
    fprintf(stderr, "kvplane: --ns: '%s' must be 1..64 of [A-Za-z0-9_-]\n", a->ns);
    return KVP__CLI_EXIT_USAGE;
  }
  if (kvp_nats_opts_check(&a->nats, "--", err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    return KVP__CLI_EXIT_USAGE;
  }
  if (kvp_client_open(&a->nats, a->ns, c, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  return KVP__CLI_EXIT_OK;
}

/* The match of the hashes in arr (hex strings), gathered from every
 * advisor (kvp_client_match_all) and printed as one reply: the advisor's
 * format plus "partitions", "replies" and "missing" (the partitions no
 * advisor answered for, also named on stderr). Exit 2 when nothing
 * answered. */
static int gather_match(const kvp__cli_args_t *a, json_t *arr) {
  size_t n = json_array_size(arr), nm = 0, cap = 4096;
  uint64_t *h = malloc(n * sizeof *h);
  kvp_match_t *m = malloc(cap * sizeof *m);
  kvp_gather_info_t info;
  kvp_client_t *c = NULL;
  char err[512];
  int rc;

  if (h == NULL || m == NULL) {
    rc = KVP__CLI_EXIT_UNREACHABLE;
    goto out;
  }
  for (size_t i = 0; i < n; i++)
    kvp_hash_parse(json_string_value(json_array_get(arr, i)), &h[i]);
  if ((rc = open_client(a, &c)) != 0)
    goto out;
  if (kvp_client_match_all(c, h, n, (uint32_t)a->timeout, m, cap, &nm, &info, err, sizeof err) !=
      0) {
    fprintf(stderr, "kvplane: %s\n", err);
    rc = KVP__CLI_EXIT_UNREACHABLE;
    goto out;
  }
  if (info.replies == 0 || info.used == 0) {
    fprintf(stderr, "kvplane: no advisor answered on namespace %s within %ld ms%s\n", a->ns,
            a->timeout, info.errors ? " (the replies were errors)" : "");
    rc = info.errors ? KVP__CLI_EXIT_ADVISOR_ERROR : KVP__CLI_EXIT_UNREACHABLE;
    goto out;
  }
  json_t *o =
      json_pack("{s:I, s:[], s:I, s:I, s:[]}", "hashes", (json_int_t)n, "matches", "partitions",
                (json_int_t)info.partitions, "replies", (json_int_t)info.replies, "missing");
  json_t *rows = json_object_get(o, "matches"), *miss = json_object_get(o, "missing");
  for (size_t i = 0; i < nm && i < cap; i++)
    json_array_append_new(rows,
                          json_pack("{s:s, s:I, s:s, s:I}", "worker", m[i].worker, "dp_rank",
                                    (json_int_t)m[i].dp_rank, "tier", kvp_tier_name(m[i].tier),
                                    "length", (json_int_t)m[i].length));
  for (uint32_t i = 0; i < info.nmissing && i < KVP_GATHER_MISSING_MAX; i++)
    json_array_append_new(miss, json_integer(info.missing[i]));
  if (info.nmissing)
    fprintf(stderr,
            "kvplane: %u partition(s) of %u had no advisor answering within %ld ms: the "
            "answer leaves their workers out\n",
            info.nmissing, info.partitions ? info.partitions : 1, a->timeout);
  json_dumpf(o, stdout, JSON_INDENT(2));
  fputc('\n', stdout);
  json_decref(o);
out:
  kvp_client_close(c);
  free(h);
  free(m);
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
  json_t *req = json_pack("{s:[]}", "hashes"), *arr = json_object_get(req, "hashes");
  int rc = kvp__cli_hashes(a, arr);
  if (rc == 0)
    rc = gather_match(a, arr);
  json_decref(req);
  return rc;
}

int kvp__cli_cmd_stats(const kvp__cli_args_t *a) {
  kvp_client_t *c = NULL;
  char err[512], *reply = NULL;
  int rc;

  if ((rc = open_client(a, &c)) != 0)
    return rc;
  if (kvp_client_request_all(c, KVP_API_STATS, "{}", (uint32_t)a->timeout, &reply, err,
                             sizeof err) != 0) {
    fprintf(stderr, "kvplane: %s\n", err);
    kvp_client_close(c);
    return KVP__CLI_EXIT_UNREACHABLE;
  }
  kvp_client_close(c);
  json_t *doc = json_loads(reply, 0, NULL), *reps = json_object_get(doc, "replies");
  kvp_client_reply_free(reply);
  /* One unpartitioned advisor: its reply as it is, as before partitions. */
  json_t *one =
      json_array_size(reps) == 1 && json_integer_value(json_object_get(doc, "partitions")) == 0
          ? json_array_get(reps, 0)
          : doc;
  if (json_array_size(reps) == 0) {
    fprintf(stderr, "kvplane: no advisor answered on namespace %s within %ld ms\n", a->ns,
            a->timeout);
    rc = KVP__CLI_EXIT_UNREACHABLE;
  } else {
    json_dumpf(one, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    rc = one != doc && json_object_get(one, "error") ? KVP__CLI_EXIT_ADVISOR_ERROR
                                                     : KVP__CLI_EXIT_OK;
    if (json_array_size(json_object_get(doc, "missing")) > 0)
      fprintf(stderr, "kvplane: partitions without an answer: see \"missing\"\n");
  }
  json_decref(doc);
  return rc;
}

int kvp__cli_cmd_nats_config(const kvp__cli_args_t *a) {
  char buf[1024];
  char *end = NULL;
  if (a->nrest != 1) {
    fprintf(stderr, "kvplane nats-config: give the partition count, 1..%d\n", KVP_PARTITIONS_MAX);
    return KVP__CLI_EXIT_USAGE;
  }
  /* Digits only, compared before any narrowing: 4294967304 is not 8. */
  const char *s = a->rest[0];
  unsigned long n = s[0] >= '0' && s[0] <= '9' ? strtoul(s, &end, 10) : 0;
  if (end == NULL || *end != '\0' || n < 1 || n > KVP_PARTITIONS_MAX ||
      kvp_partition_mapping_conf(buf, sizeof buf, (uint32_t)n) != 0) {
    fprintf(stderr, "kvplane nats-config: '%s' is not a partition count (1..%d)\n", s,
            KVP_PARTITIONS_MAX);
    return KVP__CLI_EXIT_USAGE;
  }
  fputs(buf, stdout);
  return KVP__CLI_EXIT_OK;
}
