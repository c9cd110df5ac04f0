/* libFuzzer target: the engine KV-event payload decoder (outside bytes from
 * vLLM or SGLang over ZMQ). Any input must decode or be rejected with an
 * error code, never crash, leak or read out of bounds; every decoded event
 * must be self-consistent, and the same as msgpack-c's object tree reads. */
#include <stdint.h>
#include <stdlib.h>

#include "relay/decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static kvp_relay_decoder_t *d, *td;
  kvp_relay_decoded_t out, tout;
  if (!d && (kvp__relay_decoder_create(&d) != 0 || kvp__relay_decoder_create(&td) != 0))
    abort();
  int rc = kvp__relay_decode(d, data, size, &out);
  /* The byte scanner reads exactly what msgpack-c's object tree reads. */
  if (kvp__relay_decode_tree(td, data, size, &tout) != rc ||
      (rc == 0 && !kvp__relay_decoded_same(&out, &tout)))
    abort();
  if (rc != 0)
    return 0;
  uint64_t sink = 0;
  for (size_t i = 0; i < out.nevents; i++) {
    const kvp_relay_event_t *e = &out.events[i];
    if (e->type < KVP_RELAY_EV_STORED || e->type > KVP_RELAY_EV_CLEARED)
      abort();
    for (size_t k = 0; k < e->nhashes; k++)
      sink += e->hashes[k];
    for (size_t k = 0; k < e->ntokens; k++)
      sink += e->token_ids[k];
    for (size_t k = 0; k < e->medium.len; k++)
      sink += (uint8_t)e->medium.p[k];
    for (size_t b = 0, k = 0; e->mm && b < e->nhashes; b++) /* a count, then the hashes */
      for (uint64_t c = e->mm[k++], j = 0; j < c; j++)
        sink += e->mm[k++];
  }
  __asm__ volatile("" : : "r"(sink));
  return 0;
}
