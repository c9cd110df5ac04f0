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
#include "s3_profile.h"

/* One shared file of the chain; a missing one gives nothing. */
static void read_ini(const char *path, const char *profile, int config, s3_prof_t *p) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  kvp__s3_ini_read(f, profile, config, p);
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
  if (kvp__s3_plain_http_remote(endpoint) && atomic_exchange(&warned, 1) == 0)
    fprintf(stderr,
            "kvplane s3: warning: endpoint %s is plain http:// to a host that is not loopback: "
            "blocks travel unencrypted (use https://)\n",
            endpoint);
}

/* 1 when name is one DNS label a bucket host can start with: 3..63 of
 * a-z 0-9 '-', beginning and ending with a letter or digit. */
static int dns_label(const char *name) {
  size_t n = strlen(name);
  if (n < 3 || n > 63 || name[0] == '-' || name[n - 1] == '-')
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
          name[i] == '-'))
      return 0;
  return 1;
}

int kvp__s3_resolve(s3_t *s, const s3_given_t *given, char *err, size_t errlen) {
  s3_prof_t p = {0};
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
      /* AWS itself: virtual-hosted, as new buckets need; but a bucket name
       * that is not one DNS label (dots, which AWS's wildcard certificate
       * does not cover over https; capitals or '_' of legacy buckets) goes
       * path-style, as the AWS SDKs do (botocore's check_dns_name). */
      snprintf(s->endpoint, sizeof s->endpoint, "https://s3.%s.amazonaws.com", s->region);
      if (!given->addressing)
        s->virtual_host = dns_label(s->bucket);
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
  if ((rc = kvp__s3_endpoint_check(s->endpoint, err, errlen)) != 0)
    return rc;
  warn_plain_http(s->endpoint);
  return 0;
}
