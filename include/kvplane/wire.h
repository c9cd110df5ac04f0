/* Wire codec: kvp_batch_t <-> kvplane.v1.EventBatch bytes (src/wire/kvplane.proto).
 *
 * Encoding writes into a caller buffer; decoding validates everything from
 * outside (limits, tiers, required fields) and returns an error code for bad
 * input, never crashes.
 */
#ifndef KVPLANE_WIRE_H
#define KVPLANE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/event.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Upper bound of the encoded size of b, in bytes; 0 when b is invalid. */
size_t kvp_wire_encoded_size(const kvp_batch_t *b);

/* Encodes b into buf. On success stores the length in *len and returns 0.
 * Returns KVP_EINVAL for an invalid batch (bad worker id, unknown tier or
 * event type, a STORED/REMOVED/ACCESSED event without hashes) and
 * KVP_ETOOBIG when cap is smaller than the encoding; buf is then undefined. */
int kvp_wire_encode(const kvp_batch_t *b, uint8_t *buf, size_t cap, size_t *len);

/* Limits applied while decoding. A zero field takes the default below. */
typedef struct kvp_wire_limits_s {
  size_t max_bytes;  /* message size; default 8 MiB */
  size_t max_events; /* events per batch; default 65536 */
  size_t max_blocks; /* hashes (plus token ids / 16) per batch; default 1 Mi */
} kvp_wire_limits_t;

#define KVP_WIRE_DEFAULT_MAX_BYTES (8u << 20)
#define KVP_WIRE_DEFAULT_MAX_EVENTS 65536u
#define KVP_WIRE_DEFAULT_MAX_BLOCKS (1u << 20)

/* A decoded batch: the public view plus the memory behind it. */
typedef struct kvp_wire_batch_s kvp_wire_batch_t;

/* Decodes len bytes. On success *out owns a batch readable through
 * kvp_wire_batch_view() until kvp_wire_batch_free(). Errors, with *out NULL:
 *   KVP_ETOOBIG  len, events or blocks over the limits (lim may be NULL);
 *   KVP_EPROTO   not a valid EventBatch encoding (truncated, garbage);
 *   KVP_ETIER    an event names a tier outside 0..4 (0 only for cleared);
 *   KVP_EINVAL   a structurally valid batch that breaks the contract: a
 *                bad worker id, an event with no payload, a STORED, REMOVED
 *                or ACCESSED event without hashes, hit_counts or
 *                parent_hashes not parallel to the hashes, a non-monotonic
 *                event id;
 *   KVP_ENOMEM   out of memory. */
int kvp_wire_decode(const uint8_t *buf, size_t len, const kvp_wire_limits_t *lim,
                    kvp_wire_batch_t **out);

/* The decoded batch; valid until kvp_wire_batch_free(). */
const kvp_batch_t *kvp_wire_batch_view(const kvp_wire_batch_t *wb);

/* Frees a decoded batch; NULL is accepted. */
void kvp_wire_batch_free(kvp_wire_batch_t *wb);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_WIRE_H */
