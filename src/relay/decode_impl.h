/* The payload decoder's insides (decode.h), shared by its two readers: the
 * msgpack-c object tree for every shape (decode.c) and the byte scanner for
 * the tagged-array batches engines send most (scan.c). */
#ifndef KVP_RELAY_DECODE_IMPL_H
#define KVP_RELAY_DECODE_IMPL_H

#include <msgpack.h>
#include <stdlib.h>

#include "kvplane/status.h"
#include "relay/decode.h"

struct kvp_relay_decoder_s {
  msgpack_zone zone; /* reused: cleared, not freed, between payloads */
  msgpack_object root;
  int zone_live;
  kvp_relay_event_t *ev;
  size_t nev, capev;
  uint64_t *h; /* every event's hashes, back to back */
  size_t nh, caph;
  uint32_t *t; /* every event's token ids */
  size_t nt, capt;
};

/* Events keep offsets into h and t while a payload is read (the buffers may
 * move); token_ids and copies_left are stored +1 so that 0 means none. */
static inline int kvp__relay_grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q)
    return KVP_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* Returned by kvp__relay_scan for a payload it leaves to the object tree
 * (a map batch or a map event); nothing of it was kept. */
#define KVP__RELAY_SCAN_SHAPE 1

/* Reads a payload straight from its bytes, checking kvp__relay_mp_check's
 * bounds as it goes, as decode_tree would read it after that check, with
 * events and offsets left in d (the caller rebases them). Returns 0,
 * KVP_EPROTO (also for a payload the check refuses), KVP_ENOMEM or
 * KVP__RELAY_SCAN_SHAPE (the caller then checks and uses the tree). */
int kvp__relay_scan(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                    kvp_relay_decoded_t *out);

#endif
