/* libFuzzer target: the advisor client's match reply decoder
 * (kvp__client_match_parse): bytes from whoever answers on
 * kvplane.api.<ns>.match. Properties: it never crashes or leaks; on success
 * every row kept has a valid worker name, a tier in G1..G4 and the count is
 * at least the rows kept; on failure nothing is counted. The same bytes go
 * through the scatter-gather merge (kvp_match_merge), alone and as two
 * replies split at the first byte's offset: it never crashes or leaks, a
 * merge counts at most the partitions it reports, and a failure is
 * KVP_EPROTO with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void merge(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_match_t rows[4];
  size_t n = 99;
  char err[256];
  merge(data, size);
  int rc = kvp__client_match_parse(data, size, rows, 4, &n, err, sizeof err);

  if (rc != 0) {
    if (rc != KVP_EPROTO || n != 0 || err[0] == '\0')
      abort();
    return 0;
  }
  for (size_t i = 0; i < n && i < 4; i++) {
    if (rows[i].tier < KVP_TIER_G1 || rows[i].tier > KVP_TIER_MAX ||
        strlen(rows[i].worker) > KVP_SUBJECT_TOKEN_MAX)
      abort();
  }
  return 0;
}

/* Both replies through the merge. */
static void merge(const uint8_t *data, size_t size) {
  size_t cut = size ? data[0] % (size + 1) : 0;
  const char *reps[2] = {(const char *)data, (const char *)data + cut};
  size_t lens[2] = {cut, size - cut}, n = 0;
  kvp_match_t rows[4];
  kvp_gather_info_t info;
  char err[256] = "";
  for (size_t k = 1; k <= 2; k++) {
    const char *one[1] = {(const char *)data};
    size_t onelen[1] = {size};
    int rc = k == 1 ? kvp_match_merge(one, onelen, 1, rows, 4, &n, &info, err, sizeof err)
                    : kvp_match_merge(reps, lens, 2, rows, 4, &n, &info, err, sizeof err);
    if (rc != 0 && (rc != KVP_EPROTO || err[0] == '\0'))
      abort();
    if (rc == 0 && (info.partitions > KVP_PARTITIONS_MAX || info.used > info.replies))
      abort();
  }
}
