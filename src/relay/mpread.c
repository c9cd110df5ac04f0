/* Reading msgpack from outside (mpread.h): the bounds walk over a payload's
 * raw bytes and the block-hash reader. */
#include "relay/mpread.h"

#include <stdint.h>

static int be(const uint8_t *p, int n, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < n; i++)
    x = (x << 8) | p[i];
  *v = x;
  return 0;
}

/* The encoded width of a msgpack number, nil or boolean starting with type
 * byte b (the byte included), or 0 for anything else. */
static inline size_t mp_scalar_width(uint8_t b) {
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
    return 1;
  switch (b) {
  case 0xcc:
  case 0xd0:
    return 2;
  case 0xcd:
  case 0xd1:
    return 3;
  case 0xca:
  case 0xce:
  case 0xd2:
    return 5;
  case 0xcb:
  case 0xcf:
  case 0xd3:
    return 9;
  default:
    return 0;
  }
}

/* Skips one object at *pp; 0 or -1. Every declared length must fit in the
 * bytes left (one byte per element at least), so nothing absurd reaches the
 * allocator. */
static int mp_skip(const uint8_t **pp, const uint8_t *end, int depth) {
  const uint8_t *p = *pp;
  uint64_t n = 0, len = 0;
  int items_per = 0;
  if (depth > KVP_RELAY_MAX_DEPTH || p >= end)
    return -1;
  uint8_t b = *p++;
  size_t left = (size_t)(end - p);
#define NEED(k)                                                                                    \
  do {                                                                                             \
    if (left < (size_t)(k))                                                                        \
      return -1;                                                                                   \
  } while (0)
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    /* scalar in the type byte */
  } else if (b >= 0x80 && b <= 0x8f) {
    n = b & 0x0f;
    items_per = 2;
  } else if (b >= 0x90 && b <= 0x9f) {
    n = b & 0x0f;
    items_per = 1;
  } else if (b >= 0xa0 && b <= 0xbf) {
    len = b & 0x1f;
  } else {
    switch (b) {
    case 0xc4:
    case 0xd9:
      NEED(1);
      be(p, 1, &len);
      p += 1;
      break;
    case 0xc5:
    case 0xda:
      NEED(2);
      be(p, 2, &len);
      p += 2;
      break;
    case 0xc6:
    case 0xdb:
      NEED(4);
      be(p, 4, &len);
      p += 4;
      break;
    case 0xc7:
      NEED(2);
      be(p, 1, &len);
      len += 1;
      p += 1;
      break;
    case 0xc8:
      NEED(3);
      be(p, 2, &len);
      len += 1;
      p += 2;
      break;
    case 0xc9:
      NEED(5);
      be(p, 4, &len);
      len += 1;
      p += 4;
      break;
    case 0xca:
      len = 4;
      break;
    case 0xcb:
      len = 8;
      break;
    case 0xcc:
    case 0xd0:
      len = 1;
      break;
    case 0xcd:
    case 0xd1:
      len = 2;
      break;
    case 0xce:
    case 0xd2:
      len = 4;
      break;
    case 0xcf:
    case 0xd3:
      len = 8;
      break;
    case 0xd4:
      len = 2;
      break;
    case 0xd5:
      len = 3;
      break;
    case 0xd6:
      len = 5;
      break;
    case 0xd7:
      len = 9;
      break;
    case 0xd8:
      len = 17;
      break;
    case 0xdc:
      NEED(2);
      be(p, 2, &n);
      p += 2;
      items_per = 1;
      break;
    case 0xdd:
      NEED(4);
      be(p, 4, &n);
      p += 4;
      items_per = 1;
      break;
    case 0xde:
      NEED(2);
      be(p, 2, &n);
      p += 2;
      items_per = 2;
      break;
    case 0xdf:
      NEED(4);
      be(p, 4, &n);
      p += 4;
      items_per = 2;
      break;
    default:
      return -1; /* 0xc1 */
    }
  }
#undef NEED
  left = (size_t)(end - p);
  if (items_per) {
    if (n > left / (uint64_t)items_per)
      return -1;
    for (uint64_t i = 0; i < n * (uint64_t)items_per; i++) {
      /* Numbers and nil inline: token ids and block hashes are most of a
       * payload, and a call per element was the decoder's largest cost. */
      size_t w = p < end ? mp_scalar_width(*p) : 0;
      if (w > 0 && (size_t)(end - p) >= w) {
        p += w;
        continue;
      }
      if (mp_skip(&p, end, depth + 1) != 0)
        return -1;
    }
  } else {
    if (len > left)
      return -1;
    p += len;
  }
  *pp = p;
  return 0;
}

int kvp__relay_mp_check(const uint8_t *data, size_t len) {
  const uint8_t *p = data;
  if (len == 0 || mp_skip(&p, data + len, 0) != 0 || p != data + len)
    return KVP_EPROTO;
  return 0;
}

int kvp__relay_mp_skip(const uint8_t **pp, const uint8_t *end, int depth) {
  const uint8_t *p = *pp;
  if (mp_skip(&p, end, depth) != 0)
    return KVP_EPROTO;
  *pp = p;
  return 0;
}

int kvp__relay_hash_from(const msgpack_object *o, uint64_t *out) {
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    *out = o->via.u64;
    return 0;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    *out = (uint64_t)o->via.i64;
    return 0;
  case MSGPACK_OBJECT_BIN:
  case MSGPACK_OBJECT_STR: {
    const uint8_t *p =
        (const uint8_t *)(o->type == MSGPACK_OBJECT_BIN ? o->via.bin.ptr : o->via.str.ptr);
    uint32_t n = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.str.size;
    if (n == 0)
      return KVP_EPROTO;
    uint64_t v = 0;
    for (uint32_t i = n > 8 ? n - 8 : 0; i < n; i++)
      v = (v << 8) | p[i];
    *out = v;
    return 0;
  }
  default:
    return KVP_EPROTO;
  }
}
