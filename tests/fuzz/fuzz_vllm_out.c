/* libFuzzer target: kvplane-relay --reverse's inputs from outside
 * (src/relay/vllmenc.c).
 *   First byte < 0x80: a replay request as the ROUTER socket receives it,
 *   (byte & 7) frames, each a length byte and that many bytes:
 *   kvp__vout_replay_request accepts exactly [identity, "", 8 bytes] and
 *   [identity, 8 bytes] and reads the 8 bytes big-endian.
 *   First byte >= 0x80: the rest is an EventBatch from NATS; decoded, it is
 *   encoded as a vLLM payload (the layout chosen by the size) through one
 *   stream state kept across inputs (stores, removes, clears and snapshots
 *   accumulate), and the payload must be one well-formed msgpack batch of
 *   ts, events (maps, or arrays in the array layout) and data_parallel_rank.
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

static void encode(const uint8_t *data, size_t size) {
  static kvp__vout_state_t st;
  static kvp__vout_media_t media;
  static int ready;
  kvp_wire_batch_t *wb = NULL;
  uint8_t *p = NULL;
  size_t len = 0, n = 0;

  if (!ready) {
    kvp__vout_state_init(&st);
    kvp__vout_media_init(&media);
    ready = 1;
  }
  if (kvp_wire_decode(data, size, NULL, &wb) != 0)
    return;
  int format = (int)(size % 3); /* KVP__VOUT_VLLM, _MAP, _ARRAY */
  int rc = kvp__vout_encode(&st, kvp_wire_batch_view(wb), format, &media, &p, &len, &n);
  kvp_wire_batch_free(wb);
  if (rc != 0 && rc != KVP_ENOMEM)
    abort();
  if (p == NULL)
    return;
  msgpack_unpacked u;
  size_t off = 0;
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, (const char *)p, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
    abort();
  const msgpack_object *o = &u.data;
  if (format != KVP__VOUT_MAP) {
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3 ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY || o->via.array.ptr[1].via.array.size != n)
      abort();
    for (uint32_t i = 0; i < n; i++)
      if (o->via.array.ptr[1].via.array.ptr[i].type !=
          (format == KVP__VOUT_ARRAY ? MSGPACK_OBJECT_ARRAY : MSGPACK_OBJECT_MAP))
        abort();
  } else if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size != 3 ||
             o->via.map.ptr[1].val.type != MSGPACK_OBJECT_ARRAY ||
             o->via.map.ptr[1].val.via.array.size != n) {
    abort();
  }
  msgpack_unpacked_destroy(&u);
  free(p);
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
