/* Reading msgpack from outside (DESIGN.md, "Engine adapters"): the bounds
 * walk over a payload's raw bytes, done before msgpack-c allocates anything,
 * and the typed readers of msgpack objects the event decoder (decode.c) uses.
 *
 * The readers are inline: the decoder calls them once per token id and block
 * hash, most of a payload. */
#ifndef KVP_RELAY_MPREAD_H
#define KVP_RELAY_MPREAD_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvplane/status.h"
#include "relay/decode.h"

/* Checks that data[0..len) is exactly one msgpack object, nested at most
 * KVP_RELAY_MAX_DEPTH deep, whose every declared length fits in the bytes
 * left (one byte per element at least), so nothing absurd reaches the
 * allocator. Returns 0, or KVP_EPROTO (for len 0 too). */
int kvp__relay_mp_check(const uint8_t *data, size_t len);

/* Skips the one object at *pp (which must end by end) with
 * kvp__relay_mp_check's rules, the object being nested depth deep in its
 * payload (0 for the payload itself); 0, or KVP_EPROTO with *pp unchanged. */
int kvp__relay_mp_skip(const uint8_t **pp, const uint8_t *end, int depth);

/* Reads a block hash as engines send it: a signed or unsigned integer, or
 * bytes (the lower 64 bits, big-endian). Returns 0 or KVP_EPROTO. */
int kvp__relay_hash_from(const msgpack_object *o, uint64_t *out);

/* 1 for an absent (NULL) or nil object. */
static inline int kvp__relay_mp_nil(const msgpack_object *o) {
  return !o || o->type == MSGPACK_OBJECT_NIL;
}

/* An integer that fits in int64_t; 0 or KVP_EPROTO. */
static inline int kvp__relay_mp_int(const msgpack_object *o, int64_t *v) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o->via.u64 > INT64_MAX)
      return KVP_EPROTO;
    *v = (int64_t)o->via.u64;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *v = o->via.i64;
    return 0;
  }
  return KVP_EPROTO;
}

/* A string borrowed from the payload; absent or nil gives len 0. 0 or
 * KVP_EPROTO. */
static inline int kvp__relay_mp_str(const msgpack_object *o, kvp_relay_str_t *s) {
  if (kvp__relay_mp_nil(o)) {
    s->p = NULL;
    s->len = 0;
    return 0;
  }
  if (o->type != MSGPACK_OBJECT_STR)
    return KVP_EPROTO;
  s->p = o->via.str.ptr;
  s->len = o->via.str.size;
  return 0;
}

/* 1 when o is the string s. */
static inline int kvp__relay_mp_str_is(const msgpack_object *o, const char *s) {
  size_t n = strlen(s);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

#endif
