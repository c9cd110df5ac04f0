/* The s3 plugin's credential chain (s3.h, kvp__s3_resolve), in the order
 * the AWS SDKs use: parameters, the environment, the shared profile files.
 * Instance metadata (IMDS), ECS container credentials, web identity
 * (AWS_WEB_IDENTITY_TOKEN_FILE), SSO and credential_process are not read:
 * docs/volumes.md says so, and a deployment on them passes keys through
 * the environment or the profile files. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "s3.h"

/* The values a profile may give. */
typedef struct prof_s {
  char access[256], secret[256], token[2048];
  char region[64], endpoint[512], ca_bundle[1024];
  int found;
} prof_t;

static char *trim(char *a) {
  while (*a == ' ' || *a == '\t')
    a++;
  char *e = a + strlen(a);
  while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
    *--e = '\0';
  return a;
}

static void put(char *dst, size_t cap, const char *v) {
  if (dst[0] == '\0')
    snprintf(dst, cap, "%s", v);
}

/* Reads section `want` of an INI file (the credentials file names a
 * section [name], the config file [profile name] or [default]); the first
 * value of each key wins. Nested sub-sections ("s3 =" then indented keys)
 * are skipped. A missing file is no error. */
static void read_ini(const char *path, const char *profile, int config, prof_t *p) {
  FILE *f = fopen(path, "r");
  char line[4096], want[200];
  int in = 0;
  if (f == NULL)
    return;
  if (config && strcmp(profile, "default") != 0)
    snprintf(want, sizeof want, "profile %s", profile);
  else
    snprintf(want, sizeof want, "%s", profile);
  while (fgets(line, sizeof line, f) != NULL) {
    int indented = line[0] == ' ' || line[0] == '\t';
    char *l = trim(line);
    if (*l == '\0' || *l == '#' || *l == ';')
      continue;
    if (*l == '[') {
      char *e = strchr(l, ']');
      if (e == NULL)
        continue;
      *e = '\0';
      in = strcmp(trim(l + 1), want) == 0;
      p->found |= in;
      continue;
    }
    char *eq = strchr(l, '=');
    if (!in || indented || eq == NULL)
      continue;
    *eq = '\0';
    char *k = trim(l), *v = trim(eq + 1);
    if (strcmp(k, "aws_access_key_id") == 0)
      put(p->access, sizeof p->access, v);
    else if (strcmp(k, "aws_secret_access_key") == 0)
      put(p->secret, sizeof p->secret, v);
    else if (strcmp(k, "aws_session_token") == 0)
      put(p->token, sizeof p->token, v);
    else if (strcmp(k, "region") == 0)
      put(p->region, sizeof p->region, v);
    else if (strcmp(k, "endpoint_url") == 0)
      put(p->endpoint, sizeof p->endpoint, v);
    else if (strcmp(k, "ca_bundle") == 0)
      put(p->ca_bundle, sizeof p->ca_bundle, v);
  }
  fclose(f);
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && v[0] ? v : NULL;
}

static int fits(char *dst, size_t cap, const char *v, const char *from, char *err, size_t errlen) {
  if (strlen(v) >= cap) {
    snprintf(err, errlen, "%s: longer than %zu bytes", from, cap - 1);
    return KVP_ECONFIG;
  }
  snprintf(dst, cap, "%s", v);
  return 0;
}

/* http:// to anything but loopback sends the data in the clear (the
 * signature keeps the secret, not the bytes): said once per process. */
static void warn_plain_http(const char *endpoint) {
  static atomic_int warned;
  if (strncmp(endpoint, "http://", 7) != 0)
    return;
  const char *h = endpoint + 7;
  size_t n = strcspn(h, ":/");
  if (h[0] == '[')
    n = strcspn(h, "]") + 1;
  char host[256];
  snprintf(host, sizeof host, "%.*s", (int)(n < sizeof host ? n : sizeof host - 1), h);
  size_t hl = strlen(host);
  int loop = strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
             strcmp(host, "[::1]") == 0 || (hl > 10 && strcmp(host + hl - 10, ".localhost") == 0);
  if (!loop && atomic_exchange(&warned, 1) == 0)
    fprintf(stderr,
            "kvplane s3: warning: endpoint %s is plain http:// to a host that is not loopback: "
            "blocks travel unencrypted (use https://)\n",
            endpoint);
}

int kvp__s3_resolve(s3_t *s, const s3_given_t *given, char *err, size_t errlen) {
  prof_t p = {0};
  char path[1200];
  const char *home = getenv("HOME"), *v;
  int named = s->profile[0] != '\0';
  int rc = 0;

  if (!named && (v = env("AWS_PROFILE")) != NULL) {
    if ((rc = fits(s->profile, sizeof s->profile, v, "AWS_PROFILE", err, errlen)) != 0)
      return rc;
    named = 1;
  }
  if (!s->profile[0])
    snprintf(s->profile, sizeof s->profile, "default");
  if ((v = env("AWS_SHARED_CREDENTIALS_FILE")) != NULL)
    snprintf(path, sizeof path, "%s", v);
  else
    snprintf(path, sizeof path, "%s/.aws/credentials", home ? home : "");
  read_ini(path, s->profile, 0, &p);
  if ((v = env("AWS_CONFIG_FILE")) != NULL)
    snprintf(path, sizeof path, "%s", v);
  else
    snprintf(path, sizeof path, "%s/.aws/config", home ? home : "");
  read_ini(path, s->profile, 1, &p);
  if (named && !p.found) {
    snprintf(err, errlen, "profile '%s' is in neither ~/.aws/credentials nor ~/.aws/config",
             s->profile);
    return KVP_ECONFIG;
  }

  /* Credentials come whole from one place, a session token with them. */
  if (given->access != given->secret) {
    snprintf(err, errlen, "access_key and secret_key are given together or not at all");
    return KVP_ECONFIG;
  }
  if (given->token && !given->access) {
    snprintf(err, errlen, "session_token is given only with access_key and secret_key");
    return KVP_ECONFIG;
  }
  if (!given->access) {
    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
    const char *tok = env("AWS_SESSION_TOKEN");
    const char *from = "AWS_ACCESS_KEY_ID";
    if (ak && sk) {
      rc = fits(s->access, sizeof s->access, ak, from, err, errlen);
      if (rc == 0)
        rc = fits(s->secret, sizeof s->secret, sk, "AWS_SECRET_ACCESS_KEY", err, errlen);
      if (rc == 0 && tok)
        rc = fits(s->token, sizeof s->token, tok, "AWS_SESSION_TOKEN", err, errlen);
    } else if (p.access[0] && p.secret[0]) {
      snprintf(s->access, sizeof s->access, "%s", p.access);
      snprintf(s->secret, sizeof s->secret, "%s", p.secret);
      snprintf(s->token, sizeof s->token, "%s", p.token);
    } else {
      snprintf(err, errlen,
               "no credentials: set access_key and secret_key, or AWS_ACCESS_KEY_ID and "
               "AWS_SECRET_ACCESS_KEY, or aws_access_key_id and aws_secret_access_key of "
               "profile '%s' in ~/.aws/credentials (instance metadata and web identity are "
               "not read)",
               s->profile);
      return KVP_ECONFIG;
    }
    if (rc != 0)
      return rc;
  }

  if (!given->region) {
    if ((v = env("AWS_REGION")) != NULL || (v = env("AWS_DEFAULT_REGION")) != NULL)
      rc = fits(s->region, sizeof s->region, v, "AWS_REGION", err, errlen);
    else if (p.region[0])
      snprintf(s->region, sizeof s->region, "%s", p.region);
    if (rc != 0)
      return rc;
  }
  if (!given->endpoint) {
    if ((v = env("AWS_ENDPOINT_URL_S3")) != NULL || (v = env("AWS_ENDPOINT_URL")) != NULL)
      rc = fits(s->endpoint, sizeof s->endpoint, v, "AWS_ENDPOINT_URL", err, errlen);
    else if (p.endpoint[0])
      snprintf(s->endpoint, sizeof s->endpoint, "%s", p.endpoint);
    else {
      /* AWS itself: virtual-hosted, as new buckets need. */
      snprintf(s->endpoint, sizeof s->endpoint, "https://s3.%s.amazonaws.com", s->region);
      if (!given->addressing)
        s->virtual_host = 1;
    }
    if (rc != 0)
      return rc;
  }
  const char *ca_from = "ca_file";
  if (!given->ca_file) {
    if ((v = env("AWS_CA_BUNDLE")) != NULL) {
      rc = fits(s->ca_file, sizeof s->ca_file, v, "AWS_CA_BUNDLE", err, errlen);
      ca_from = "AWS_CA_BUNDLE";
    } else if (p.ca_bundle[0]) {
      snprintf(s->ca_file, sizeof s->ca_file, "%s", p.ca_bundle);
      ca_from = "ca_bundle of the profile";
    }
    if (rc != 0)
      return rc;
  }
  if (s->ca_file[0] && access(s->ca_file, R_OK) != 0) {
    snprintf(err, errlen, "%s '%s' cannot be read: %s", ca_from, s->ca_file, strerror(errno));
    return KVP_ECONFIG;
  }
  if (strncmp(s->endpoint, "http://", 7) != 0 && strncmp(s->endpoint, "https://", 8) != 0) {
    snprintf(err, errlen, "endpoint: '%s' is not http:// or https://", s->endpoint);
    return KVP_ECONFIG;
  }
  warn_plain_http(s->endpoint);
  return 0;
}
