/* The index's worker and volume names (index.h): the rules a name must
 * follow, over the interning tables of intern.c. Thread: the advisor's loop
 * thread. */
#include <string.h>

#include "index/index.h"
#include "index/index_impl.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

int kvp__index_worker(kvp__index_t *ix, const char *name, uint32_t dp_rank, uint16_t *id) {
  if (!kvp_subject_token_valid(name))
    return KVP_EINVAL;
  return kvp__index_intern_id(&ix->workers, name, dp_rank, 0, id);
}

const char *kvp__index_worker_name(const kvp__index_t *ix, uint16_t id, uint32_t *dp_rank) {
  return kvp__index_intern_name(&ix->workers, id, dp_rank);
}

size_t kvp__index_worker_count(const kvp__index_t *ix) {
  return ix->workers.n;
}

int kvp__index_volume(kvp__index_t *ix, const char *name, uint16_t *id) {
  if (name == NULL || name[0] == '\0') {
    *id = 0;
    return 0;
  }
  if (strlen(name) > 255)
    return KVP_EINVAL;
  return kvp__index_intern_id(&ix->volumes, name, 0, 1, id);
}

const char *kvp__index_volume_name(const kvp__index_t *ix, uint16_t id) {
  return kvp__index_intern_name(&ix->volumes, id, NULL);
}

size_t kvp__index_volume_count(const kvp__index_t *ix) {
  return ix->volumes.n;
}

int kvp__index_set_source(kvp__index_t *ix, uint16_t worker, uint64_t epoch) {
  if (epoch == 0) {
    kvp__map64_del(&ix->sources, worker, NULL);
    return 0;
  }
  return kvp__map64_put(&ix->sources, worker, epoch) == 0 ? 0 : KVP_ENOMEM;
}

uint64_t kvp__index_source(const kvp__index_t *ix, uint16_t worker) {
  uint64_t epoch = 0;
  if (kvp__map64_count(&ix->sources) == 0 || kvp__map64_get(&ix->sources, worker, &epoch) != 0)
    return 0;
  return epoch;
}
