/* libFuzzer target: the EventBatch decoder (outside bytes from NATS).
 * Any input must decode or be rejected with an error code, never crash or
 * leak; a decoded batch must re-encode and decode to the same shape. */
#include <stdint.h>
#include <stdlib.h>

#include "kvplane/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_wire_limits_t lim = {.max_bytes = 1 << 20, .max_events = 4096, .max_blocks = 1 << 16};
  kvp_wire_batch_t *wb = NULL, *again = NULL;

  if (kvp_wire_decode(data, size, &lim, &wb) != 0)
    return 0;
  const kvp_batch_t *b = kvp_wire_batch_view(wb);
  size_t cap = kvp_wire_encoded_size(b), len = 0;
  uint8_t *buf = cap ? malloc(cap) : NULL;
  if (buf && kvp_wire_encode(b, buf, cap, &len) == 0) {
    if (kvp_wire_decode(buf, len, &lim, &again) != 0 ||
        kvp_wire_batch_view(again)->nevents != b->nevents)
      abort();
    kvp_wire_batch_free(again);
  }
  free(buf);
  kvp_wire_batch_free(wb);
  return 0;
}
