/* libFuzzer target: kvplane-relay --reverse's inputs from outside
 * (src/relay/vllmenc.c).
 *   First byte < 0x80: a replay request as the ROUTER socket receives it,
 *   (byte & 7) frames, each a length byte and that many bytes:
 *   kvp__vout_replay_request accepts exactly [identity, "", 8 bytes] and
 *   [identity, 8 bytes] and reads the 8 bytes big-endian.
 *   First byte >= 0x80: the rest is an EventBatch from NATS; decoded, it is
 *   encoded as a vLLM payload (the layout chosen by the size) through one
 *   stream state kept across inputs (stores, removes, clears and snapshots
 *   accumulate), and each payload must be one well-formed msgpack batch of
 *   ts, events (maps, or arrays in the array layout; at least one) and
 *   data_parallel_rank, their events adding up to the count returned.
 * Properties: no crash, no leak, the checks above. */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/wire.h"
#include "relay/vllmenc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void replay(const uint8_t *data, size_t size) {
  const uint8_t *frames[8] = {0};
  size_t lens[8] = {0}, n = 0, want = data[0] & 7, at = 1;
  while (n < want && at < size) {
    size_t len = data[at++];
    if (len > size - at)
      len = size - at;
    frames[n] = data + at;
    lens[n++] = len;
    at += len;
  }
  uint64_t start = 0;
  int delim = -1;
  int rc = kvp__vout_replay_request(frames, lens, n, &start, &delim);
  int ok3 = n == 3 && lens[0] > 0 && lens[1] == 0 && lens[2] == 8;
  int ok2 = n == 2 && lens[0] > 0 && lens[1] == 8;
  if ((rc == 0) != (ok3 || ok2) || (rc != 0 && rc != KVP_EPROTO))
    abort();
  if (rc == 0) {
    const uint8_t *s = frames[n - 1];
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
      v = v << 8 | s[i];
    if (v != start || delim != ok3)
      abort();
  }
}

/* Each payload: one well-formed batch of the format; its events counted
 * into the sum. */
typedef struct check_s {
  int format;
  size_t events;
} check_t;

static void check(void *ctx, uint8_t *p, size_t len) {
  check_t *c = ctx;
  msgpack_unpacked u;
  size_t off = 0, n;
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, (const char *)p, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
    abort();
  const msgpack_object *o = &u.data;
  if (c->format != KVP__VOUT_MAP) {
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY)
      abort();
    n = o->via.array.ptr[1].via.array.size;
    for (uint32_t i = 0; i < n; i++)
      if (o->via.array.ptr[1].via.array.ptr[i].type !=
          (c->format == KVP__VOUT_ARRAY ? MSGPACK_OBJECT_ARRAY : MSGPACK_OBJECT_MAP))
        abort();
  } else {
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size != 3 ||
        o->via.map.ptr[1].val.type != MSGPACK_OBJECT_ARRAY)
      abort();
    n = o->via.map.ptr[1].val.via.array.size;
  }
  if (n == 0) /* a payload is sent only with events in it */
    abort();
  c->events += n;
  msgpack_unpacked_destroy(&u);
  free(p);
}

static void encode(const uint8_t *data, size_t size) {
  static kvp__vout_state_t st;
  static kvp__vout_media_t media;
  static int ready;
  kvp_wire_batch_t *wb = NULL;
  size_t n = 0;

  if (!ready) {
    kvp__vout_state_init(&st);
    kvp__vout_media_init(&media);
    ready = 1;
  }
  if (kvp_wire_decode(data, size, NULL, &wb) != 0)
    return;
  check_t c = {.format = (int)(size % 3)}; /* KVP__VOUT_VLLM, _MAP, _ARRAY */
  int rc = kvp__vout_encode(&st, kvp_wire_batch_view(wb), c.format, &media, check, &c, &n);
  kvp_wire_batch_free(wb);
  if (rc != 0 && rc != KVP_ENOMEM)
    abort();
  if (rc == 0 && n != c.events) /* the count is what the payloads hold */
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  if (data[0] < 0x80)
    replay(data, size);
  else
    encode(data + 1, size - 1);
  return 0;
}
