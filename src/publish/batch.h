/* The batch window of the publisher's loop thread: queued events are added
 * here, consecutive stored blocks of one chain merge into one Stored event,
 * coalescing drops a block stored and removed in the same window, and the
 * window is encoded into one EventBatch with contiguous event ids. Loop
 * thread only. */
#ifndef KVP_PUBLISH_BATCH_H
#define KVP_PUBLISH_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/map64.h"
#include "kvplane/event.h"
#include "publish/queue.h"

typedef struct kvp__bev_s {
  int type, tier;
  char volume[KVP__VOLUME_MAX];
  int has_parent;
  uint64_t parent_hash;
  size_t hoff, n; /* hashes in h[] (and alive flags in dead[]) */
  size_t xoff;    /* hits (in x32) or parents (in h) */
  int has_x;
  size_t toff, ntok; /* token ids in x32 */
  uint32_t block_tokens;
  uint64_t block_bytes;
  int32_t lora_id;
  int engine_native;
  uint64_t snapshot_id;
  uint32_t chunk;
  int last;
  size_t ndead;
} kvp__bev_t;

typedef struct kvp__batch_s {
  kvp__bev_t *ev;
  size_t nev, evcap;
  uint64_t *h;
  uint8_t *dead;
  size_t nh, hcap;
  uint32_t *x32;
  size_t nx, xcap;
  /* coalescing index: hash ^ tier << 61 -> position in h of its newest store */
  kvp__map64_t stored;
  int coalesce;
  size_t blocks;    /* live hashes */
  size_t est_bytes; /* encoded size estimate */
  uint64_t oldest_ns;
  /* output */
  kvp_event_t *out;
  size_t outcap;
  uint8_t *buf;
  size_t bufcap;
} kvp__batch_t;

int kvp__batch_init(kvp__batch_t *b, int coalesce);
void kvp__batch_destroy(kvp__batch_t *b);

/* Adds hashes [from, from + count) of item (and its other arrays). Returns 0
 * or KVP_ENOMEM. */
int kvp__batch_add(kvp__batch_t *b, const kvp__pubq_item_t *it, size_t from, size_t count);

/* Events the window would encode (after coalescing), for the id counter. */
size_t kvp__batch_nevents(const kvp__batch_t *b);

/* Encodes the window with ids from hdr->first_event_id (hdr->events are
 * filled in here). *buf stays owned by b until the next call. Returns 0 or
 * a KVP_E code. Does not reset the window. */
int kvp__batch_encode(kvp__batch_t *b, kvp_batch_t *hdr, const uint8_t **buf, size_t *len);

void kvp__batch_reset(kvp__batch_t *b);

#endif
