/* EventBatch codec over protobuf-c (generated from kvplane.proto at build
 * time). Encoding maps borrowed C arrays straight into the protobuf-c structs,
 * so packing copies each hash array once; decoding keeps the unpacked message
 * and points the public view into it. */
#include "kvplane/wire.h"

#include <stdlib.h>
#include <string.h>

#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "kvplane.pb-c.h"

struct kvp_wire_batch_s {
  Kvplane__V1__EventBatch *msg;
  kvp_batch_t view;
  kvp_event_t *events;
};

static size_t slen(const char *s) {
  return s ? strlen(s) : 0;
}

/* Events that must carry at least one hash. */
static int needs_hashes(int type) {
  return type == KVP_EV_STORED || type == KVP_EV_REMOVED || type == KVP_EV_ACCESSED;
}

static int event_valid(const kvp_event_t *e) {
  if (e->type < KVP_EV_STORED || e->type > KVP_EV_SNAPSHOT)
    return 0;
  if (e->tier < 0 || e->tier > KVP_TIER_MAX)
    return 0;
  if (e->tier == KVP_TIER_ALL && e->type != KVP_EV_CLEARED)
    return 0;
  if (needs_hashes(e->type) && (e->nhashes == 0 || e->hashes == NULL))
    return 0;
  if (e->nhashes > 0 && e->hashes == NULL)
    return 0;
  if (e->ntoken_ids > 0 && e->token_ids == NULL)
    return 0;
  return 1;
}

size_t kvp_wire_encoded_size(const kvp_batch_t *b) {
  /* Generous per-field overheads: tag + varint length is at most 11 bytes,
   * a varint at most 10. */
  size_t n = 128 + slen(b->ns) + slen(b->worker_id) + slen(b->model);

  if (!kvp_subject_token_valid(b->worker_id) || (b->nevents && !b->events))
    return 0;
  for (size_t i = 0; i < b->nevents; i++) {
    const kvp_event_t *e = &b->events[i];
    if (!event_valid(e))
      return 0;
    n += 128 + slen(e->volume) + 8 * e->nhashes;
    if (e->hit_counts)
      n += 5 * e->nhashes;
    if (e->parent_hashes)
      n += 8 * e->nhashes;
    n += 5 * e->ntoken_ids;
  }
  return n;
}

/* Casts away const for protobuf-c's non-const input fields; packing only
 * reads them. */
#define MUT(p) ((void *)(uintptr_t)(p))

static char *str_or_empty(const char *s) {
  return s ? MUT(s) : (char *)protobuf_c_empty_string;
}

int kvp_wire_encode(const kvp_batch_t *b, uint8_t *buf, size_t cap, size_t *len) {
  Kvplane__V1__EventBatch msg = KVPLANE__V1__EVENT_BATCH__INIT;
  Kvplane__V1__Event *evs = NULL, **evp = NULL;
  union payload {
    Kvplane__V1__BlockStored stored;
    Kvplane__V1__BlockRemoved removed;
    Kvplane__V1__BlockAccessed accessed;
    Kvplane__V1__AllBlocksCleared cleared;
    Kvplane__V1__Snapshot snapshot;
  } *pl = NULL;
  size_t need;
  int rc = 0;

  if (b == NULL || buf == NULL || len == NULL)
    return KVP_EINVAL;
  if (kvp_wire_encoded_size(b) == 0)
    return KVP_EINVAL;

  if (b->nevents > 0) {
    evs = malloc(b->nevents * sizeof *evs);
    evp = malloc(b->nevents * sizeof *evp);
    pl = malloc(b->nevents * sizeof *pl);
    if (!evs || !evp || !pl) {
      rc = KVP_ENOMEM;
      goto out;
    }
  }

  msg.worker_id = str_or_empty(b->worker_id);
  msg.dp_rank = b->dp_rank;
  msg.epoch = b->epoch;
  msg.model = str_or_empty(b->model);
  msg.namespace_ = str_or_empty(b->ns);
  msg.first_event_id = b->first_event_id;
  msg.timestamp_ms = b->timestamp_ms;
  msg.dropped_events = b->dropped_events;
  msg.n_events = b->nevents;
  msg.events = evp;

  for (size_t i = 0; i < b->nevents; i++) {
    const kvp_event_t *e = &b->events[i];
    Kvplane__V1__Event *ev = &evs[i];

    kvplane__v1__event__init(ev);
    ev->event_id = e->event_id;
    evp[i] = ev;
    switch (e->type) {
    case KVP_EV_STORED: {
      Kvplane__V1__BlockStored *s = &pl[i].stored;
      kvplane__v1__block_stored__init(s);
      s->tier = (Kvplane__V1__Tier)e->tier;
      s->volume = str_or_empty(e->volume);
      s->has_parent = e->has_parent != 0;
      s->parent_hash = e->has_parent ? e->parent_hash : 0;
      s->n_block_hashes = e->nhashes;
      s->block_hashes = MUT(e->hashes);
      s->block_tokens = e->block_tokens;
      s->block_bytes = e->block_bytes;
      s->lora_id = e->lora_id;
      s->engine_native = e->engine_native != 0;
      s->n_token_ids = e->ntoken_ids;
      s->token_ids = MUT(e->token_ids);
      ev->payload_case = KVPLANE__V1__EVENT__PAYLOAD_STORED;
      ev->stored = s;
      break;
    }
    case KVP_EV_REMOVED: {
      Kvplane__V1__BlockRemoved *r = &pl[i].removed;
      kvplane__v1__block_removed__init(r);
      r->tier = (Kvplane__V1__Tier)e->tier;
      r->volume = str_or_empty(e->volume);
      r->n_block_hashes = e->nhashes;
      r->block_hashes = MUT(e->hashes);
      ev->payload_case = KVPLANE__V1__EVENT__PAYLOAD_REMOVED;
      ev->removed = r;
      break;
    }
    case KVP_EV_ACCESSED: {
      Kvplane__V1__BlockAccessed *a = &pl[i].accessed;
      kvplane__v1__block_accessed__init(a);
      a->tier = (Kvplane__V1__Tier)e->tier;
      a->n_block_hashes = e->nhashes;
      a->block_hashes = MUT(e->hashes);
      a->n_hit_counts = e->hit_counts ? e->nhashes : 0;
      a->hit_counts = MUT(e->hit_counts);
      ev->payload_case = KVPLANE__V1__EVENT__PAYLOAD_ACCESSED;
      ev->accessed = a;
      break;
    }
    case KVP_EV_CLEARED: {
      Kvplane__V1__AllBlocksCleared *c = &pl[i].cleared;
      kvplane__v1__all_blocks_cleared__init(c);
      c->tier = (Kvplane__V1__Tier)e->tier;
      ev->payload_case = KVPLANE__V1__EVENT__PAYLOAD_CLEARED;
      ev->cleared = c;
      break;
    }
    default: { /* KVP_EV_SNAPSHOT; event_valid() rejected anything else */
      Kvplane__V1__Snapshot *s = &pl[i].snapshot;
      kvplane__v1__snapshot__init(s);
      s->tier = (Kvplane__V1__Tier)e->tier;
      s->volume = str_or_empty(e->volume);
      s->snapshot_id = e->snapshot_id;
      s->chunk = e->chunk;
      s->last = e->last != 0;
      s->n_block_hashes = e->nhashes;
      s->block_hashes = MUT(e->hashes);
      s->n_parent_hashes = e->parent_hashes ? e->nhashes : 0;
      s->parent_hashes = MUT(e->parent_hashes);
      s->block_tokens = e->block_tokens;
      s->block_bytes = e->block_bytes;
      ev->payload_case = KVPLANE__V1__EVENT__PAYLOAD_SNAPSHOT;
      ev->snapshot = s;
      break;
    }
    }
  }

  need = kvplane__v1__event_batch__get_packed_size(&msg);
  if (need > cap) {
    rc = KVP_ETOOBIG;
    goto out;
  }
  *len = kvplane__v1__event_batch__pack(&msg, buf);

out:
  free(pl);
  free(evp);
  free(evs);
  return rc;
}

static void limits_or_default(const kvp_wire_limits_t *lim, kvp_wire_limits_t *l) {
  l->max_bytes = lim && lim->max_bytes ? lim->max_bytes : KVP_WIRE_DEFAULT_MAX_BYTES;
  l->max_events = lim && lim->max_events ? lim->max_events : KVP_WIRE_DEFAULT_MAX_EVENTS;
  l->max_blocks = lim && lim->max_blocks ? lim->max_blocks : KVP_WIRE_DEFAULT_MAX_BLOCKS;
}

static int tier_ok(int tier, int allow_all) {
  return (tier >= KVP_TIER_G1 && tier <= KVP_TIER_MAX) || (allow_all && tier == KVP_TIER_ALL);
}

/* Fills e from ev; returns 0 or a KVP_E* code. *blocks accumulates the block
 * count for the max_blocks limit. */
static int map_event(const Kvplane__V1__Event *ev, kvp_event_t *e, size_t *blocks) {
  memset(e, 0, sizeof *e);
  e->event_id = ev->event_id;
  switch (ev->payload_case) {
  case KVPLANE__V1__EVENT__PAYLOAD_STORED: {
    const Kvplane__V1__BlockStored *s = ev->stored;
    e->type = KVP_EV_STORED;
    e->tier = (int)s->tier;
    e->volume = s->volume;
    e->has_parent = s->has_parent;
    e->parent_hash = s->parent_hash;
    e->hashes = s->block_hashes;
    e->nhashes = s->n_block_hashes;
    e->block_tokens = s->block_tokens;
    e->block_bytes = s->block_bytes;
    e->lora_id = s->lora_id;
    e->engine_native = s->engine_native;
    e->token_ids = s->n_token_ids ? s->token_ids : NULL;
    e->ntoken_ids = s->n_token_ids;
    *blocks += s->n_token_ids / 16;
    break;
  }
  case KVPLANE__V1__EVENT__PAYLOAD_REMOVED:
    e->type = KVP_EV_REMOVED;
    e->tier = (int)ev->removed->tier;
    e->volume = ev->removed->volume;
    e->hashes = ev->removed->block_hashes;
    e->nhashes = ev->removed->n_block_hashes;
    break;
  case KVPLANE__V1__EVENT__PAYLOAD_ACCESSED: {
    const Kvplane__V1__BlockAccessed *a = ev->accessed;
    e->type = KVP_EV_ACCESSED;
    e->tier = (int)a->tier;
    e->hashes = a->block_hashes;
    e->nhashes = a->n_block_hashes;
    if (a->n_hit_counts != 0 && a->n_hit_counts != a->n_block_hashes)
      return KVP_EINVAL;
    e->hit_counts = a->n_hit_counts ? a->hit_counts : NULL;
    break;
  }
  case KVPLANE__V1__EVENT__PAYLOAD_CLEARED:
    e->type = KVP_EV_CLEARED;
    e->tier = (int)ev->cleared->tier;
    break;
  case KVPLANE__V1__EVENT__PAYLOAD_SNAPSHOT: {
    const Kvplane__V1__Snapshot *s = ev->snapshot;
    e->type = KVP_EV_SNAPSHOT;
    e->tier = (int)s->tier;
    e->volume = s->volume;
    e->snapshot_id = s->snapshot_id;
    e->chunk = s->chunk;
    e->last = s->last;
    e->hashes = s->block_hashes;
    e->nhashes = s->n_block_hashes;
    if (s->n_parent_hashes != 0 && s->n_parent_hashes != s->n_block_hashes)
      return KVP_EINVAL;
    e->parent_hashes = s->n_parent_hashes ? s->parent_hashes : NULL;
    e->block_tokens = s->block_tokens;
    e->block_bytes = s->block_bytes;
    break;
  }
  default:
    return KVP_EINVAL;
  }
  if (!tier_ok(e->tier, e->type == KVP_EV_CLEARED))
    return KVP_ETIER;
  if (needs_hashes(e->type) && e->nhashes == 0)
    return KVP_EINVAL;
  if (e->volume && e->volume[0] == '\0')
    e->volume = NULL;
  *blocks += e->nhashes;
  return 0;
}

int kvp_wire_decode(const uint8_t *buf, size_t len, const kvp_wire_limits_t *lim,
                    kvp_wire_batch_t **out) {
  kvp_wire_limits_t l;
  kvp_wire_batch_t *wb = NULL;
  Kvplane__V1__EventBatch *msg;
  size_t blocks = 0;
  int rc;

  if (out == NULL || (buf == NULL && len > 0))
    return KVP_EINVAL;
  *out = NULL;
  limits_or_default(lim, &l);
  if (len > l.max_bytes)
    return KVP_ETOOBIG;

  msg = kvplane__v1__event_batch__unpack(NULL, len, buf);
  if (msg == NULL)
    return KVP_EPROTO;
  if (msg->n_events > l.max_events) {
    rc = KVP_ETOOBIG;
    goto fail;
  }
  if (!kvp_subject_token_valid(msg->worker_id)) {
    rc = KVP_EINVAL;
    goto fail;
  }
  wb = calloc(1, sizeof *wb);
  if (wb == NULL) {
    rc = KVP_ENOMEM;
    goto fail;
  }
  wb->msg = msg;
  if (msg->n_events > 0) {
    wb->events = malloc(msg->n_events * sizeof *wb->events);
    if (wb->events == NULL) {
      rc = KVP_ENOMEM;
      goto fail;
    }
  }
  for (size_t i = 0; i < msg->n_events; i++) {
    rc = map_event(msg->events[i], &wb->events[i], &blocks);
    if (rc != 0)
      goto fail;
    if (i > 0 && wb->events[i].event_id <= wb->events[i - 1].event_id) {
      rc = KVP_EINVAL;
      goto fail;
    }
    if (blocks > l.max_blocks) {
      rc = KVP_ETOOBIG;
      goto fail;
    }
  }
  wb->view.ns = msg->namespace_[0] ? msg->namespace_ : NULL;
  wb->view.worker_id = msg->worker_id;
  wb->view.dp_rank = msg->dp_rank;
  wb->view.epoch = msg->epoch;
  wb->view.model = msg->model[0] ? msg->model : NULL;
  wb->view.first_event_id = msg->first_event_id;
  wb->view.timestamp_ms = msg->timestamp_ms;
  wb->view.dropped_events = msg->dropped_events;
  wb->view.events = wb->events;
  wb->view.nevents = msg->n_events;
  *out = wb;
  return 0;

fail:
  if (wb != NULL) {
    free(wb->events);
    free(wb);
  }
  kvplane__v1__event_batch__free_unpacked(msg, NULL);
  return rc;
}

const kvp_batch_t *kvp_wire_batch_view(const kvp_wire_batch_t *wb) {
  return wb ? &wb->view : NULL;
}

void kvp_wire_batch_free(kvp_wire_batch_t *wb) {
  if (wb == NULL)
    return;
  kvplane__v1__event_batch__free_unpacked(wb->msg, NULL);
  free(wb->events);
  free(wb);
}
