/* The partition function of partitioned event subjects (nats-server's
 * partition()); the subjects themselves are built and read in subjects.c.
 * See include/kvplane/subjects.h. */
#include "kvplane/subjects.h"

uint32_t kvp_partition_of(const char *worker, uint32_t count) {
  uint32_t h = 2166136261u; /* FNV-1a 32, as Go's hash/fnv New32a */
  for (const unsigned char *p = (const unsigned char *)worker; *p; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return count ? h % count : 0;
}
