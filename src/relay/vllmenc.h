/* kvplane events as vLLM KV events (the reverse direction of the relay:
 * kvplane-relay --reverse, vllmout.h): the msgpack payload vLLM's
 * ZmqEventPublisher sends, and the request its replay socket reads.
 *
 * The payload is vLLM's KVEventBatch as msgspec encodes it in vLLM's
 * vllm/distributed/kv_events.py: by default (KVP__VOUT_VLLM) the batch as an
 * array [ts (float seconds), [events], data_parallel_rank] (EventBatch is
 * array_like) whose events are maps tagged "type" (KVCacheEvent is not):
 *   {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids",
 *    "block_size", "lora_id", "medium", "lora_name"}
 *   {"type": "BlockRemoved", "block_hashes", "medium"}
 *   {"type": "AllBlocksCleared"}
 * KVP__VOUT_MAP makes the batch a map {"ts", "events", "data_parallel_rank"}
 * too, KVP__VOUT_ARRAY makes the events tagged arrays in field order
 * (["BlockStored", block_hashes, ...]), the layout of older vLLM releases.
 * Hashes are kvplane's u64 sequence hashes; media are the relay's table
 * read backwards: G1 GPU, G2 CPU, G3 DISK, G4 EXTERNAL (--media changes them).
 *
 * Per stream and dp rank a state remembers which (hash, tier) it has announced
 * stored, so that what vLLM cannot say is said with what it can: a kvplane
 * AllBlocksCleared of one tier becomes a BlockRemoved of the blocks
 * announced in it, and a complete kvplane Snapshot of a tier (the answer to
 * a resync) becomes the BlockRemoved and BlockStored that turn what was
 * announced into the snapshot. Accessed events have no vLLM form and are
 * dropped. */
#ifndef KVP_RELAY_VLLMENC_H
#define KVP_RELAY_VLLMENC_H

#include <stddef.h>
#include <stdint.h>

#include "common/map64.h"
#include "kvplane/event.h"

enum { KVP__VOUT_VLLM = 0, KVP__VOUT_MAP = 1, KVP__VOUT_ARRAY = 2 };

/* Medium names by tier (1..4): G1 GPU, G2 CPU, G3 DISK, G4 EXTERNAL unless
 * kvp__vout_media_set changed them. */
typedef struct kvp__vout_media_s {
  char name[5][32];
} kvp__vout_media_t;

void kvp__vout_media_init(kvp__vout_media_t *m);

/* Applies "G<n>=NAME,..." (NAME [A-Za-z0-9_]{1,31}). Returns 0 or
 * KVP_ECONFIG with err naming the bad item. */
int kvp__vout_media_set(kvp__vout_media_t *m, const char *list, char *err, size_t errlen);

typedef struct kvp__vout_state_s {
  kvp__map64_t held;  /* hash -> bit t set when announced stored in tier t */
  kvp__map64_t stage; /* the snapshot being received: hash -> parent (itself: none) */
  uint64_t stage_id;
  int stage_tier;        /* 0: no snapshot staged */
  uint32_t stage_tokens; /* the first chunk's block_tokens */
  /* hash -> block_tokens of the staged blocks whose chunk's differ from
   * stage_tokens (a snapshot with runs of several block shapes, as the
   * tiering advisor's worker sends): empty in the common case. */
  kvp__map64_t stage_odd;
} kvp__vout_state_t;

void kvp__vout_state_init(kvp__vout_state_t *st);
void kvp__vout_state_free(kvp__vout_state_t *st);

/* Forgets everything announced (after an AllBlocksCleared was sent). */
void kvp__vout_state_reset(kvp__vout_state_t *st);

/* Forgets what was announced stored, as an AllBlocksCleared does (a
 * consumer then holds none of it), and keeps a snapshot being received:
 * its last chunk announces every block it has, those of the chunks
 * before the clear too. */
void kvp__vout_state_forget(kvp__vout_state_t *st);

/* Takes one payload (malloc'd: the sink frees or keeps it). */
typedef void (*kvp__vout_sink_fn)(void *ctx, uint8_t *payload, size_t len);

/* A payload's events are cut after the one that takes it past this many
 * bytes, and an event names at most KVP__VOUT_EVENT_HASHES hashes where
 * the relay makes it up (a tier's clear, a snapshot's removals): a
 * snapshot of millions of blocks goes out as messages of about 1 MiB. */
#define KVP__VOUT_MSG_BYTES (1u << 20)
#define KVP__VOUT_EVENT_HASHES 16384u

/* The vLLM payloads for batch b (from one worker, dp rank b->dp_rank),
 * updating st, handed to sink in order: none when the batch has nothing a
 * vLLM consumer reads (a heartbeat, accesses, a snapshot chunk that is not
 * the last), usually one, more for a large snapshot. *nevents is the
 * number of vLLM events in them. Returns 0 or KVP_ENOMEM (st may then have
 * been updated for part of the batch, and payloads handed over for part
 * of it). */
int kvp__vout_encode(kvp__vout_state_t *st, const kvp_batch_t *b, int format,
                     const kvp__vout_media_t *media, kvp__vout_sink_fn sink, void *sink_ctx,
                     size_t *nevents);

/* Fault injection for tests: the next n payloads the encoder finishes fail
 * as out of memory would (kvp__vout_encode then returns KVP_ENOMEM). 0:
 * none, the default; never set outside tests. */
void kvp__vout_test_fail_payloads(unsigned n);

/* An empty batch (no events) of the format, for a stream with nothing to
 * say: its sequence tells a subscriber what it missed. 0 or KVP_ENOMEM. */
int kvp__vout_encode_empty(int format, uint32_t dp_rank, uint64_t ts_ms, uint8_t **payload,
                           size_t *len);

/* Reads a replay request as a ROUTER socket receives it (outside bytes:
 * fuzz_vllm_out): [identity, "", start] as vLLM's subscribers send it
 * (REQ, or DEALER with the empty delimiter) or [identity, start] (DEALER
 * without one), start an 8-byte big-endian sequence. Returns 0 with *start
 * and *delim (1 when the replies carry the empty delimiter frame), or
 * KVP_EPROTO for any other shape. */
int kvp__vout_replay_request(const uint8_t *const *frames, const size_t *lens, size_t nframes,
                             uint64_t *start, int *delim);

#endif
