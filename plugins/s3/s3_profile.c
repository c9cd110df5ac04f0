/* The AWS shared files and the endpoint's host, read (s3_profile.h). */
#include "s3_profile.h"

#include "kvplane/status.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

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

void kvp__s3_ini_read(FILE *f, const char *profile, int config, s3_prof_t *p) {
  char line[8192], want[300];
  int in = 0, longline = 0;
  if (config && strcmp(profile, "default") != 0)
    snprintf(want, sizeof want, "profile %s", profile);
  else
    snprintf(want, sizeof want, "%s", profile);
  while (fgets(line, sizeof line, f) != NULL) {
    size_t n = strlen(line);
    /* The rest of a line longer than the buffer would read as a line of
     * its own (a key, a section): the whole line is passed over. */
    int ends = n > 0 && line[n - 1] == '\n';
    if (longline || (!ends && !feof(f))) {
      longline = !ends;
      continue;
    }
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
}

int kvp__s3_plain_http_remote(const char *endpoint) {
  if (strncasecmp(endpoint, "http://", 7) != 0)
    return 0;
  const char *h = endpoint + 7;
  /* userinfo@ is not the host. */
  const char *at = strchr(h, '@'), *slash = strchr(h, '/');
  if (at != NULL && (slash == NULL || at < slash))
    h = at + 1;
  size_t n = strcspn(h, ":/?#");
  if (h[0] == '[') { /* an IPv6 literal, brackets kept */
    const char *e = strchr(h, ']');
    n = e != NULL ? (size_t)(e - h) + 1 : strlen(h);
  }
  char host[256];
  snprintf(host, sizeof host, "%.*s", (int)(n < sizeof host ? n : sizeof host - 1), h);
  size_t hl = strlen(host);
  while (hl > 0 && host[hl - 1] == '.') /* "localhost." is localhost */
    host[--hl] = '\0';
  int loop = strcasecmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0 ||
             (hl > 10 && strcasecmp(host + hl - 10, ".localhost") == 0);
  if (!loop && strncmp(host, "127.", 4) == 0) {
    /* 127.0.0.0/8 as a dotted quad, not a name that starts with "127." */
    unsigned a, b, c, d;
    char tail;
    loop =
        sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && b < 256 && c < 256 && d < 256;
  }
  return !loop;
}

int kvp__s3_endpoint_check(const char *endpoint, char *err, size_t errlen) {
  const char *a = strstr(endpoint, "://"), *end, *at, *port = NULL;
  if (a == NULL) {
    snprintf(err, errlen, "endpoint: '%s' is not http:// or https://", endpoint);
    return KVP_ECONFIG;
  }
  a += 3;
  end = a + strcspn(a, "/?#");
  for (at = a; at < end; at++)
    if (*at == '@')
      a = at + 1; /* user info: the host follows */
  if (*a == '[') {
    const char *close = memchr(a, ']', (size_t)(end - a));
    if (close == NULL || close == a + 1) {
      snprintf(err, errlen, "endpoint: '%s' has no host", endpoint);
      return KVP_ECONFIG;
    }
    port = close + 1 < end && close[1] == ':' ? close + 1 : NULL;
    if (close + 1 < end && port == NULL) {
      snprintf(err, errlen, "endpoint: '%s': unexpected text after the address", endpoint);
      return KVP_ECONFIG;
    }
  } else {
    for (const char *c = a; c < end; c++)
      if (*c == ':')
        port = c;
    if ((port ? port : end) == a) {
      snprintf(err, errlen, "endpoint: '%s' has no host", endpoint);
      return KVP_ECONFIG;
    }
  }
  if (port != NULL) {
    size_t n = (size_t)(end - port - 1);
    unsigned long v = 0;
    for (size_t i = 0; i < n && n <= 5; i++)
      v = port[1 + i] >= '0' && port[1 + i] <= '9' ? v * 10 + (unsigned long)(port[1 + i] - '0')
                                                   : 100000;
    if (n == 0 || n > 5 || v < 1 || v > 65535) {
      snprintf(err, errlen, "endpoint: '%s': port '%.*s' is not a number in 1..65535", endpoint,
               (int)n, port + 1);
      return KVP_ECONFIG;
    }
  }
  return 0;
}
