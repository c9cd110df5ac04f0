/* Decoder of engine KV-event payloads (vLLM, SGLang, TensorRT-LLM through
 * Dynamo; README, relay section, has the table of shapes per engine): the
 * msgpack part of a ZMQ message, `[timestamp, [events...](, dp_rank)]` or
 * the same as a map {"ts", "events", "data_parallel_rank"}. DESIGN.md,
 * "Engine adapters".
 *
 * Events come as tagged arrays (["BlockStored", block_hashes,
 * parent_block_hash, token_ids, block_size, lora_id, medium, lora_name,
 * extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window,
 * locality],
 * ["BlockRemoved", block_hashes, medium, group_idx], ["AllBlocksCleared"])
 * or as maps with a "type" key (which may also carry cache_salt,
 * remaining_copy_counts and Dynamo's block_mm_infos). Missing keys and trailing elements take their
 * defaults; unknown keys and extra elements are ignored. An event missing a
 * required field (block_hashes) or with a field of the wrong type is counted
 * as an error and skipped; the other events of the batch are kept.
 *
 * Outside bytes: the decoder bounds the input size, nesting depth and every
 * declared container length (a length larger than the bytes left is
 * rejected before anything is allocated: mpread.h). The decoder itself,
 * decode.c, maps the two event shapes onto one set of fields. */
#ifndef KVP_RELAY_DECODE_H
#define KVP_RELAY_DECODE_H

#include <stddef.h>
#include <stdint.h>

#define KVP_RELAY_MAX_PAYLOAD (16u << 20) /* bytes */
#define KVP_RELAY_MAX_DEPTH 16

typedef enum kvp_relay_ev_e {
  KVP_RELAY_EV_STORED = 1,
  KVP_RELAY_EV_REMOVED = 2,
  KVP_RELAY_EV_CLEARED = 3,
} kvp_relay_ev_t;

/* A string borrowed from the payload (not NUL-terminated); len 0 = absent. */
typedef struct kvp_relay_str_s {
  const char *p;
  size_t len;
} kvp_relay_str_t;

/* One decoded event. Arrays point into the decoder's buffers, valid until
 * the next decode or free. */
typedef struct kvp_relay_event_s {
  int type; /* kvp_relay_ev_t */
  const uint64_t *hashes;
  size_t nhashes;
  int has_parent;
  uint64_t parent;
  const uint32_t *token_ids; /* NULL when absent */
  size_t ntokens;
  uint32_t block_size; /* 0 when absent */
  int32_t lora_id;     /* 0 when absent */
  kvp_relay_str_t lora_name, medium, cache_salt, kind;
  int extra_opaque;            /* some block's extra keys are not kvplane-hashable (cache salt,
                                * prompt embeddings, unknown keys): the event stays engine-native */
  const uint64_t *mm;          /* per block, in order: a count, then that many multimodal hashes
                                * (vLLM extra_keys, Dynamo block_mm_infos); NULL when none has any */
  const uint64_t *copies_left; /* Removed: remaining_copy_counts, one per hash, or NULL */
  int64_t group_idx;           /* 0 when absent */
  int64_t sliding_window;
} kvp_relay_event_t;

typedef struct kvp_relay_decoded_s {
  double ts;
  int64_t dp_rank; /* -1 when absent */
  const kvp_relay_event_t *events;
  size_t nevents;
  size_t errors; /* events skipped as malformed */
} kvp_relay_decoded_t;

typedef struct kvp_relay_decoder_s kvp_relay_decoder_t;

/* Returns 0 with *out set, or KVP_ENOMEM with *out NULL. */
int kvp__relay_decoder_create(kvp_relay_decoder_t **out);
/* Frees the decoder and the events of its last decode. NULL is accepted. */
void kvp__relay_decoder_destroy(kvp_relay_decoder_t *d);

/* Decodes one payload. Returns 0 with *out filled (events whose fields were
 * malformed are counted in out->errors and left out), KVP_EPROTO for a
 * payload that is not a batch (bad msgpack, wrong outer shape, nesting or
 * lengths beyond the bounds), KVP_ETOOBIG for a payload above
 * KVP_RELAY_MAX_PAYLOAD, KVP_ENOMEM. */
int kvp__relay_decode(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                      kvp_relay_decoded_t *out);

/* The same through msgpack-c's object tree only (kvp__relay_decode reads
 * tagged-array batches from the bytes instead): the reference the tests and
 * the fuzz target hold the fast reader to. */
int kvp__relay_decode_tree(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                           kvp_relay_decoded_t *out);

/* 1 when two decodes hold the same batch, field by field, else 0. */
int kvp__relay_decoded_same(const kvp_relay_decoded_t *a, const kvp_relay_decoded_t *b);

#endif
