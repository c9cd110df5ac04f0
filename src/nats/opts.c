/* NATS connection options: defaults, setting by name, checks; see
 * include/kvplane/nats.h. */
#include "kvplane/nats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvplane/status.h"

void kvp_nats_opts_init(kvp_nats_opts_t *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->servers, sizeof o->servers, "%s", KVP_NATS_DEFAULT_SERVERS);
  o->connect_timeout_ms = 5000;
}

#define STR(f) {#f, offsetof(kvp_nats_opts_t, f), sizeof(((kvp_nats_opts_t *)0)->f)}
static const struct {
  const char *name;
  size_t offset, cap;
} strs[] = {STR(servers), STR(user),   STR(password), STR(token),
            STR(creds),   STR(tls_ca), STR(tls_cert), STR(tls_key)};
#undef STR

int kvp_nats_opts_set(kvp_nats_opts_t *o, const char *name, const char *value, char *err,
                      size_t errlen) {
  if (strcmp(name, "connect_timeout_ms") == 0) {
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v < 1 || v > 3600000) {
      snprintf(err, errlen, "connect_timeout_ms: '%s' is not 1..3600000", value);
      return KVP_ECONFIG;
    }
    o->connect_timeout_ms = v;
    return 0;
  }
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    if (strcmp(name, strs[i].name) != 0)
      continue;
    if (strlen(value) >= strs[i].cap) {
      snprintf(err, errlen, "%s: longer than %zu characters", name, strs[i].cap - 1);
      return KVP_ECONFIG;
    }
    memcpy((char *)o + strs[i].offset, value, strlen(value) + 1);
    return 0;
  }
  snprintf(err, errlen, "%s: not a NATS option", name);
  return KVP_ECONFIG;
}

static int bad(char *err, size_t errlen, const char *prefix, const char *name, const char *why,
               const char *arg) {
  snprintf(err, errlen, "%s%s: %s%s", prefix ? prefix : "", name, why, arg ? arg : "");
  return KVP_ECONFIG;
}

/* Each comma-separated entry must look like scheme://host... */
static int servers_ok(const char *s) {
  while (*s) {
    size_t n = strcspn(s, ",");
    const char *sep = strstr(s, "://");
    if (n == 0 || sep == NULL || sep >= s + n || sep == s)
      return 0;
    s += n;
    if (*s == ',')
      s++;
  }
  return 1;
}

int kvp_nats_opts_check(const kvp_nats_opts_t *o, const char *prefix, char *err, size_t errlen) {
  static char dummy[1];
  if (err == NULL) {
    err = dummy;
    errlen = sizeof dummy;
  }
  if (o->servers[0] == '\0')
    return bad(err, errlen, prefix, "servers", "must not be empty", NULL);
  if (!servers_ok(o->servers))
    return bad(err, errlen, prefix, "servers", "expected URLs like nats://host:4222, not ",
               o->servers);
  if ((o->user[0] != 0) != (o->password[0] != 0))
    return bad(err, errlen, prefix, o->user[0] ? "password" : "user",
               "user and password go together", NULL);
  if ((o->user[0] != 0) + (o->token[0] != 0) + (o->creds[0] != 0) > 1)
    return bad(err, errlen, prefix, o->token[0] ? "token" : "creds",
               "set only one of user/password, token and creds", NULL);
  if ((o->tls_cert[0] != 0) != (o->tls_key[0] != 0))
    return bad(err, errlen, prefix, o->tls_cert[0] ? "tls_key" : "tls_cert",
               "tls_cert and tls_key go together", NULL);
  if (o->connect_timeout_ms < 1)
    return bad(err, errlen, prefix, "connect_timeout", "must be positive", NULL);
  const struct {
    const char *name, *path;
  } files[] = {{"creds", o->creds}, {"tls_ca", o->tls_ca}, {"tls_cert", o->tls_cert},
               {"tls_key", o->tls_key}};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (files[i].path[0] && access(files[i].path, R_OK) != 0) {
      snprintf(err, errlen, "%s%s: cannot read %s: %s", prefix ? prefix : "", files[i].name,
               files[i].path, strerror(errno));
      return KVP_ECONFIG;
    }
  return 0;
}
