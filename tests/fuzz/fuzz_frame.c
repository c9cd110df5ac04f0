/* libFuzzer target: the block frame check (kvp_frame_verify), the decoder of
 * every object a volume plugin returns. Input: 8 bytes of the expected hash,
 * then header + payload as read from a store. Whatever the bytes, it returns
 * 0 or KVP_ECORRUPT, and 0 only when re-encoding the parsed frame over the
 * same payload gives the same header (the check accepts exactly what the
 * encoder writes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t hash;
  kvp_frame_t f;
  char err[256];

  if (size < 8 + KVP_FRAME_HEADER)
    return 0;
  memcpy(&hash, data, 8);
  const uint8_t *h = data + 8, *payload = h + KVP_FRAME_HEADER;
  size_t len = size - 8 - KVP_FRAME_HEADER;
  int rc = kvp_frame_verify(h, payload, len, hash, &f, err, sizeof err);
  if (rc != 0 && rc != KVP_ECORRUPT)
    abort();
  if (rc == 0) {
    uint8_t again[KVP_FRAME_HEADER];
    kvp_frame_t g = f;
    kvp_frame_encode(&g, payload, again);
    if (g.checksum != f.checksum || f.payload_len != len || f.hash != hash)
      abort();
    /* The parent hash is stored only with the flag; otherwise it is zero. */
    if (memcmp(again, h, KVP_FRAME_HEADER) != 0)
      abort();
  }
  return 0;
}
