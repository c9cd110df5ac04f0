/* libFuzzer target: the advisor client's match reply decoder
 * (kvp__client_match_parse): bytes from whoever answers on
 * kvplane.api.<ns>.match. Properties: it never crashes or leaks; on success
 * every row kept has a valid worker name, a tier in G1..G4 and the count is
 * at least the rows kept; on failure nothing is counted. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_impl.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_match_t rows[4];
  size_t n = 99;
  char err[256];
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
