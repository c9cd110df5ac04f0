/* The block frame (include/kvplane/volume.h). Header, little-endian:
 *
 *    0  magic "KVPB"            32  flags u32 (bit 0: has parent)
 *    4  version u16             36  num_layers u32
 *    6  header length u16 (64)  40  page_size u32
 *    8  payload length u64      44  inner_dim u32
 *   16  sequence hash u64       48  elem_size u32
 *   24  parent hash u64         52  header checksum u32: low half of the
 *                                   XXH3-64 of the 64-byte header with
 *                                   bytes 52..55 (this field) zeroed
 *                               56  XXH3-64 of the payload
 *
 * XXH3 (libxxhash) is the same hash family as the block hashes: fast enough
 * to check every block on every read. */
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "kvplane/status.h"
#include "kvplane/volume.h"

static const uint8_t magic[4] = {'K', 'V', 'P', 'B'};

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint32_t header_sum(const uint8_t *h) {
  uint8_t tmp[KVP_FRAME_HEADER];
  memcpy(tmp, h, sizeof tmp);
  memset(tmp + 52, 0, 4);
  return (uint32_t)XXH3_64bits(tmp, sizeof tmp);
}

void kvp_frame_encode(kvp_frame_t *f, const void *payload, uint8_t out[KVP_FRAME_HEADER]) {
  f->checksum = XXH3_64bits(payload, (size_t)f->payload_len);
  memcpy(out, magic, 4);
  put16(out + 4, KVP_FRAME_VERSION);
  put16(out + 6, KVP_FRAME_HEADER);
  put64(out + 8, f->payload_len);
  put64(out + 16, f->hash);
  put64(out + 24, f->has_parent ? f->parent : 0);
  put32(out + 32, f->has_parent ? 1u : 0u);
  put32(out + 36, f->layout.num_layers);
  put32(out + 40, f->layout.page_size);
  put32(out + 44, f->layout.inner_dim);
  put32(out + 48, f->layout.elem_size);
  put32(out + 52, 0);
  put64(out + 56, f->checksum);
  put32(out + 52, header_sum(out));
}

int kvp_frame_verify(const uint8_t *h, const void *payload, size_t len, uint64_t hash,
                     kvp_frame_t *f, char *err, size_t errlen) {
  const char *why;
  uint64_t got;

  if (memcmp(h, magic, 4) != 0)
    why = "bad magic: not a kvplane block";
  else if (get16(h + 4) != KVP_FRAME_VERSION)
    why = "unknown frame version";
  else if (get16(h + 6) != KVP_FRAME_HEADER)
    why = "bad header length";
  else if (get32(h + 52) != header_sum(h))
    why = "header checksum mismatch";
  else if ((get32(h + 32) & ~1u) != 0 || (!(get32(h + 32) & 1u) && get64(h + 24) != 0))
    why = "unknown flags, or a parent hash without the parent flag";
  else if (get64(h + 8) != len)
    why = "truncated or extended: the payload length differs from the header's";
  else if ((got = get64(h + 16)) != hash)
    why = "the frame holds another block's hash";
  else if (get64(h + 56) != XXH3_64bits(payload, len))
    why = "payload checksum mismatch";
  else
    why = NULL;
  if (why != NULL) {
    snprintf(err, errlen, "block %016llx: %s", (unsigned long long)hash, why);
    return KVP_ECORRUPT;
  }
  f->hash = hash;
  f->payload_len = len;
  f->has_parent = (get32(h + 32) & 1u) != 0;
  f->parent = get64(h + 24);
  f->layout = (kvp_layout_t){.num_layers = get32(h + 36),
                             .page_size = get32(h + 40),
                             .inner_dim = get32(h + 44),
                             .elem_size = get32(h + 48)};
  f->checksum = get64(h + 56);
  return 0;
}
