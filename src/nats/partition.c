/* The partition function of partitioned event subjects (nats-server's
 * partition()); the subjects themselves are built and read in subjects.c.
 * See include/kvplane/subjects.h. */
#include "kvplane/subjects.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvplane/status.h"

uint32_t kvp_partition_of(const char *worker, uint32_t count) {
  uint32_t h = 2166136261u; /* FNV-1a 32, as Go's hash/fnv New32a */
  for (const unsigned char *p = (const unsigned char *)worker; *p; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return count ? h % count : 0;
}

int kvp_partition_volume_ns(char *buf, size_t len, const char *ns, uint32_t p) {
  if (p >= KVP_PARTITIONS_MAX)
    return KVP_EINVAL;
  int n = snprintf(buf, len, "%s-p%" PRIu32, ns, p);
  if (n < 0 || (size_t)n >= len || n > KVP_PARTITION_NS_MAX)
    return KVP_ETOOBIG;
  return 0;
}

int kvp_worker_is_advisor(const char *name) {
  return name != NULL && strncmp(name, "_advisor", 8) == 0 && (name[8] == '\0' || name[8] == '-');
}

int kvp_partition_advisor_worker(char *buf, size_t len, uint32_t p, uint32_t count) {
  if (count == 0 || count > KVP_PARTITIONS_MAX || p >= count)
    return KVP_EINVAL;
  /* FNV-1a mod count hits p about once in count tries: 64 * count tries
   * miss with probability e^-64. */
  for (uint32_t k = 0; k < 64u * count; k++) {
    int n = snprintf(buf, len, "_advisor-p%" PRIu32 "-%" PRIu32, p, k);
    if (n < 0 || (size_t)n >= len)
      return KVP_ETOOBIG;
    if (kvp_partition_of(buf, count) == p)
      return 0;
  }
  return KVP_ENOENT;
}
