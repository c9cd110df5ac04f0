/* libFuzzer target: one trace line (outside bytes from a trace file). */
#include <stdint.h>
#include <stdlib.h>

#include "sim/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_trace_req_t req;
  uint64_t *ids = NULL;
  size_t cap = 0;
  char err[256];

  if (kvp_trace_parse_line((const char *)data, size, &req, &ids, &cap, err, sizeof err) == 0 &&
      req.nhash_ids > cap)
    abort();
  free(ids);
  return 0;
}
