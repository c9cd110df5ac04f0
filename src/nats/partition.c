/* Partitioned event subjects: the partition function, the subjects of a
 * partition and the server configuration that makes them; see
 * include/kvplane/subjects.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/subjects.h"

uint32_t kvp_partition_of(const char *worker, uint32_t count) {
  uint32_t h = 2166136261u; /* FNV-1a 32, as Go's hash/fnv New32a */
  for (const unsigned char *p = (const unsigned char *)worker; *p; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return count ? h % count : 0;
}

int kvp_subject_pevents(char *buf, size_t len, const char *ns, uint32_t p) {
  if (!kvp_subject_token_valid(ns) || p >= KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  int n = snprintf(buf, len, "kvplane.pev.%s.%" PRIu32 ".*", ns, p);
  return n >= 0 && (size_t)n < len ? 0 : KVP_ETOOBIG;
}

int kvp_subject_pevents_all(char *buf, size_t len, uint32_t p) {
  if (p >= KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  int n = snprintf(buf, len, "kvplane.pev.*.%" PRIu32 ".*", p);
  return n >= 0 && (size_t)n < len ? 0 : KVP_ETOOBIG;
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
