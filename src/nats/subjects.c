/* Subject builders and parsers, partitioned event subjects and the server
 * mapping that makes them included: every kvplane subject string is
 * written here. See include/kvplane/subjects.h. */
#include "kvplane/subjects.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvplane/status.h"

int kvp_subject_token_valid(const char *s) {
  size_t n = 0;

  if (s == NULL)
    return 0;
  for (; s[n] != '\0'; n++) {
    unsigned char c = (unsigned char)s[n];
    if (n >= KVP_SUBJECT_TOKEN_MAX)
      return 0;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return 0;
  }
  return n > 0;
}

/* Formats into buf after checking the ntok tokens that follow fmt. */
static int build(char *buf, size_t len, int ntok, const char *fmt, ...) {
  va_list ap;
  int n;

  va_start(ap, fmt);
  for (int i = 0; i < ntok; i++)
    if (!kvp_subject_token_valid(va_arg(ap, const char *))) {
      va_end(ap);
      return KVP_EINVAL;
    }
  va_end(ap);
  va_start(ap, fmt);
  n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  return n >= 0 && (size_t)n < len ? 0 : KVP_ETOOBIG;
}

int kvp_subject_events(char *buf, size_t len, const char *ns, const char *worker) {
  return build(buf, len, 2, "kvplane.ev.%s.%s", ns, worker);
}

int kvp_subject_events_ns(char *buf, size_t len, const char *ns) {
  return build(buf, len, 1, "kvplane.ev.%s.>", ns);
}

int kvp_subject_resync(char *buf, size_t len, const char *ns, const char *worker) {
  return build(buf, len, 2, "kvplane.ctl.%s.%s.resync", ns, worker);
}

int kvp_subject_api(char *buf, size_t len, const char *ns, const char *call) {
  return build(buf, len, 2, "kvplane.api.%s.%s", ns, call);
}

int kvp_subject_api_advisor(char *buf, size_t len, const char *ns, const char *call,
                            const char *advisor) {
  return build(buf, len, 3, "kvplane.api.%s.%s.%s", ns, call, advisor);
}

/* Copies the token at s up to the next '.' (or the end) into out; returns
 * its length, or 0 when it is not a valid token. */
static size_t token(const char *s, char out[KVP_SUBJECT_TOKEN_MAX + 1]) {
  size_t n = strcspn(s, ".");
  if (n == 0 || n > KVP_SUBJECT_TOKEN_MAX)
    return 0;
  memcpy(out, s, n);
  out[n] = '\0';
  return kvp_subject_token_valid(out) ? n : 0;
}

int kvp_subject_parse_events(const char *subject, char ns[KVP_SUBJECT_TOKEN_MAX + 1],
                             char worker[KVP_SUBJECT_TOKEN_MAX + 1]) {
  static const char prefix[] = "kvplane.ev.";
  const char *p;
  size_t n;

  if (subject == NULL || strncmp(subject, prefix, sizeof prefix - 1) != 0)
    return KVP_EPROTO;
  p = subject + sizeof prefix - 1;
  if ((n = token(p, ns)) == 0 || p[n] != '.')
    return KVP_EPROTO;
  p += n + 1;
  if ((n = token(p, worker)) == 0 || p[n] != '\0')
    return KVP_EPROTO;
  return 0;
}

/* --- partitioned event subjects ------------------------------------------ */

int kvp_subject_pevents(char *buf, size_t len, const char *ns, uint32_t p) {
  if (p >= KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  return build(buf, len, 1, "kvplane.pev.%s.%" PRIu32 ".*", ns, p);
}

int kvp_subject_pevents_ns(char *buf, size_t len, const char *ns) {
  return build(buf, len, 1, "kvplane.pev.%s.*.*", ns);
}

int kvp_subject_pevents_all(char *buf, size_t len, uint32_t p) {
  if (p >= KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  int n = snprintf(buf, len, "kvplane.pev.*.%" PRIu32 ".*", p);
  return n >= 0 && (size_t)n < len ? 0 : KVP_ETOOBIG;
}

int kvp_subject_parse_any_events(const char *subject, char ns[KVP_SUBJECT_TOKEN_MAX + 1],
                                 char worker[KVP_SUBJECT_TOKEN_MAX + 1], uint32_t *partition) {
  static const char prefix[] = "kvplane.pev.";
  const char *p;
  size_t n;
  uint32_t part = 0;

  *partition = UINT32_MAX;
  if (subject == NULL || strncmp(subject, prefix, sizeof prefix - 1) != 0)
    return kvp_subject_parse_events(subject, ns, worker);
  p = subject + sizeof prefix - 1;
  if ((n = token(p, ns)) == 0 || p[n] != '.')
    return KVP_EPROTO;
  p += n + 1;
  /* The partition: decimal, no leading zero, below KVP_PARTITIONS_MAX. */
  n = 0;
  while (p[n] >= '0' && p[n] <= '9' && n < 5) {
    part = part * 10 + (uint32_t)(p[n] - '0');
    n++;
  }
  if (n == 0 || p[n] != '.' || (n > 1 && p[0] == '0') || part >= KVP_PARTITIONS_MAX)
    return KVP_EPROTO;
  p += n + 1;
  if ((n = token(p, worker)) == 0 || p[n] != '\0')
    return KVP_EPROTO;
  *partition = part;
  return 0;
}

int kvp_partition_mapping_conf(char *buf, size_t len, uint32_t count) {
  if (count < 1 || count > KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  int n = snprintf(buf, len,
                   "# kvplane: %" PRIu32 " event partitions (kvplane.ev.<ns>.<worker> ->\n"
                   "# kvplane.pev.<ns>.<partition>.<worker>); the same block on every server.\n"
                   "mappings = {\n"
                   "  \"kvplane.ev.*.*\": "
                   "\"kvplane.pev.{{wildcard(1)}}.{{partition(%" PRIu32 ",2)}}.{{wildcard(2)}}\"\n"
                   "}\n",
                   count, count);
  return n >= 0 && (size_t)n < len ? 0 : KVP_ETOOBIG;
}
