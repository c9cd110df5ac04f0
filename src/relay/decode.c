/* Engine KV-event payload decoder (decode.h). */
#include "relay/decode.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "relay/decode_impl.h"
#include "relay/mpread.h"

/* Field slots, in the positional order of the tagged-array encoding. */
enum {
  F_HASHES,
  F_PARENT,
  F_TOKENS,
  F_BLOCK_SIZE,
  F_LORA_ID,
  F_MEDIUM,
  F_LORA_NAME,
  F_EXTRA_KEYS,
  F_GROUP_IDX,
  F_KIND,
  F_SLIDING,
  F_LOCALITY,   /* vLLM 0.28+: where the copy lives ("LOCAL"); never part of a hash */
  F_POSITIONAL, /* slots up to here come positionally; the rest by key only */
  F_CACHE_SALT = F_POSITIONAL,
  F_COPIES,   /* BlockRemoved: remaining_copy_counts */
  F_MM_INFOS, /* Dynamo's TensorRT-LLM publisher: block_mm_infos */
  F_COUNT
};
static const char *const stored_keys[F_COUNT] = {"block_hashes",
                                                 "parent_block_hash",
                                                 "token_ids",
                                                 "block_size",
                                                 "lora_id",
                                                 "medium",
                                                 "lora_name",
                                                 "extra_keys",
                                                 "group_idx",
                                                 "kv_cache_spec_kind",
                                                 "kv_cache_spec_sliding_window",
                                                 "locality",
                                                 "cache_salt",
                                                 "remaining_copy_counts",
                                                 "block_mm_infos"};
/* BlockRemoved positional: block_hashes, medium, group_idx, then locality
 * (vLLM 0.28) or remaining_copy_counts (newer): told apart by type. */
static const int removed_pos[] = {F_HASHES, F_MEDIUM, F_GROUP_IDX, F_LOCALITY};

/* One item of a block's extra_keys (README, relay section: extra keys):
 * 1 with *id for a multimodal identifier (a 64-hex digest, or [id, offset]
 * as vLLM 0.19+ tags them), 0 for the LoRA name (already in the seed), -1
 * for anything kvplane cannot hash (cache salt, prompt embeddings). */
static int mm_item(const msgpack_object *it, const kvp_relay_str_t *lora, uint64_t *id) {
  if (it->type == MSGPACK_OBJECT_STR) {
    const char *p = it->via.str.ptr;
    size_t n = it->via.str.size;
    if (lora->len && n == lora->len && memcmp(p, lora->p, n) == 0)
      return 0;
    return kvp_hash_is_digest(p, n) && kvp_hash_mm_identifier(p, n, id) == 0 ? 1 : -1;
  }
  if (it->type == MSGPACK_OBJECT_ARRAY && it->via.array.size == 2 &&
      it->via.array.ptr[0].type == MSGPACK_OBJECT_STR &&
      (it->via.array.ptr[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
       it->via.array.ptr[1].type == MSGPACK_OBJECT_NEGATIVE_INTEGER))
    return kvp_hash_mm_identifier(it->via.array.ptr[0].via.str.ptr,
                                  it->via.array.ptr[0].via.str.size, id) == 0
               ? 1
               : -1;
  return -1;
}

/* Block b's multimodal hashes from Dynamo's block_mm_infos entry
 * ({"mm_objects": [{"mm_hash": u64, ...}]}), appended at d->h; their count,
 * or -1 for an entry of another shape. */
static int mm_infos_block(kvp_relay_decoder_t *d, const msgpack_object *o) {
  const msgpack_object *objs = NULL;
  int k = 0;
  if (o->type != MSGPACK_OBJECT_MAP)
    return -1;
  for (uint32_t i = 0; i < o->via.map.size; i++)
    if (kvp__relay_mp_str_is(&o->via.map.ptr[i].key, "mm_objects"))
      objs = &o->via.map.ptr[i].val;
  if (!objs || objs->type != MSGPACK_OBJECT_ARRAY)
    return -1;
  for (uint32_t j = 0; j < objs->via.array.size; j++) {
    const msgpack_object *ob = &objs->via.array.ptr[j], *h = NULL;
    if (ob->type != MSGPACK_OBJECT_MAP)
      return -1;
    for (uint32_t i = 0; i < ob->via.map.size; i++)
      if (kvp__relay_mp_str_is(&ob->via.map.ptr[i].key, "mm_hash"))
        h = &ob->via.map.ptr[i].val;
    if (!h ||
        (h->type != MSGPACK_OBJECT_POSITIVE_INTEGER && h->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
      return -1;
    if (kvp__relay_grow((void **)&d->h, &d->caph, d->nh + 2, sizeof *d->h))
      return -2;
    d->h[d->nh++] = h->via.u64;
    k++;
  }
  return k;
}

/* The event's per-block multimodal hashes (decode.h, mm) from extra_keys x
 * and block_mm_infos y; sets extra_opaque for keys kvplane cannot hash.
 * KVP_ENOMEM, else 0. */
static int extra_fill(kvp_relay_decoder_t *d, kvp_relay_event_t *e, const msgpack_object *x,
                      const msgpack_object *y) {
  size_t start = d->nh, any = 0;
  if (kvp__relay_mp_nil(x) && kvp__relay_mp_nil(y))
    return 0;
  if ((!kvp__relay_mp_nil(x) &&
       (x->type != MSGPACK_OBJECT_ARRAY || x->via.array.size > e->nhashes)) ||
      (!kvp__relay_mp_nil(y) &&
       (y->type != MSGPACK_OBJECT_ARRAY || y->via.array.size > e->nhashes))) {
    e->extra_opaque = 1;
    return 0;
  }
  for (size_t b = 0; b < e->nhashes && !e->extra_opaque; b++) {
    if (kvp__relay_grow((void **)&d->h, &d->caph, d->nh + 2, sizeof *d->h))
      return KVP_ENOMEM;
    size_t at = d->nh++;
    uint64_t count = 0;
    if (!kvp__relay_mp_nil(x) && b < x->via.array.size &&
        !kvp__relay_mp_nil(&x->via.array.ptr[b])) {
      const msgpack_object *k = &x->via.array.ptr[b];
      if (k->type != MSGPACK_OBJECT_ARRAY) {
        e->extra_opaque = 1;
        break;
      }
      for (uint32_t j = 0; j < k->via.array.size; j++) {
        uint64_t id;
        int r = mm_item(&k->via.array.ptr[j], &e->lora_name, &id);
        if (r < 0) {
          e->extra_opaque = 1;
          break;
        }
        if (r == 1) {
          if (kvp__relay_grow((void **)&d->h, &d->caph, d->nh + 2, sizeof *d->h))
            return KVP_ENOMEM;
          d->h[d->nh++] = id;
          count++;
        }
      }
    }
    if (!e->extra_opaque && !kvp__relay_mp_nil(y) && b < y->via.array.size &&
        !kvp__relay_mp_nil(&y->via.array.ptr[b])) {
      int r = mm_infos_block(d, &y->via.array.ptr[b]);
      if (r == -2)
        return KVP_ENOMEM;
      if (r < 0)
        e->extra_opaque = 1;
      else
        count += (uint64_t)r;
    }
    d->h[at] = count;
    any += count;
  }
  if (e->extra_opaque || any == 0) {
    d->nh = start;
    return 0;
  }
  e->mm = (const uint64_t *)(uintptr_t)(start + 1); /* +1: 0 means none */
  return 0;
}

/* Fills the event from the field slots; KVP_EPROTO for a missing or
 * malformed field, KVP_ENOMEM. */
static int event_fill(kvp_relay_decoder_t *d, kvp_relay_event_t *e,
                      const msgpack_object *f[F_COUNT]) {
  int64_t v;
  int rc;
  if (e->type == KVP_RELAY_EV_CLEARED)
    return 0;
  const msgpack_object *h = f[F_HASHES];
  if (!h || h->type != MSGPACK_OBJECT_ARRAY)
    return KVP_EPROTO;
  if ((rc = kvp__relay_grow((void **)&d->h, &d->caph, d->nh + h->via.array.size + 1, sizeof *d->h)))
    return rc;
  size_t h0 = d->nh;
  for (uint32_t i = 0; i < h->via.array.size; i++)
    if (kvp__relay_hash_from(&h->via.array.ptr[i], &d->h[h0 + i]) != 0)
      return KVP_EPROTO;
  e->nhashes = h->via.array.size;
  e->hashes = (const uint64_t *)(uintptr_t)h0; /* rebased once every event is read */
  d->nh += e->nhashes;
  if (kvp__relay_mp_str(f[F_MEDIUM], &e->medium))
    return KVP_EPROTO;
  if (!kvp__relay_mp_nil(f[F_GROUP_IDX]) && kvp__relay_mp_int(f[F_GROUP_IDX], &e->group_idx))
    return KVP_EPROTO;
  if (e->type == KVP_RELAY_EV_REMOVED) {
    const msgpack_object *c = f[F_COPIES];
    if (kvp__relay_mp_nil(c))
      return 0;
    if (c->type != MSGPACK_OBJECT_ARRAY || c->via.array.size != e->nhashes)
      return KVP_EPROTO;
    if ((rc = kvp__relay_grow((void **)&d->h, &d->caph, d->nh + e->nhashes + 1, sizeof *d->h)))
      return rc;
    for (uint32_t i = 0; i < c->via.array.size; i++) {
      if (kvp__relay_mp_int(&c->via.array.ptr[i], &v) || v < 0)
        return KVP_EPROTO;
      d->h[d->nh + i] = (uint64_t)v;
    }
    e->copies_left = (const uint64_t *)(uintptr_t)(d->nh + 1); /* +1: 0 means none */
    d->nh += e->nhashes;
    return 0;
  }
  if (!kvp__relay_mp_nil(f[F_PARENT])) {
    if (kvp__relay_hash_from(f[F_PARENT], &e->parent))
      return KVP_EPROTO;
    e->has_parent = 1;
  }
  const msgpack_object *t = f[F_TOKENS];
  if (!kvp__relay_mp_nil(t)) {
    if (t->type != MSGPACK_OBJECT_ARRAY)
      return KVP_EPROTO;
    if ((rc = kvp__relay_grow((void **)&d->t, &d->capt, d->nt + t->via.array.size + 1,
                              sizeof *d->t)))
      return rc;
    for (uint32_t i = 0; i < t->via.array.size; i++) {
      if (kvp__relay_mp_int(&t->via.array.ptr[i], &v) || v < 0 || v > UINT32_MAX)
        return KVP_EPROTO;
      d->t[d->nt + i] = (uint32_t)v;
    }
    e->ntokens = t->via.array.size;
    e->token_ids = (const uint32_t *)(uintptr_t)(d->nt + 1); /* +1: 0 means none */
    d->nt += e->ntokens;
  }
  if (!kvp__relay_mp_nil(f[F_BLOCK_SIZE])) {
    if (kvp__relay_mp_int(f[F_BLOCK_SIZE], &v) || v < 0 || v > UINT32_MAX)
      return KVP_EPROTO;
    e->block_size = (uint32_t)v;
  }
  if (!kvp__relay_mp_nil(f[F_LORA_ID])) {
    if (kvp__relay_mp_int(f[F_LORA_ID], &v) || v < INT32_MIN || v > INT32_MAX)
      return KVP_EPROTO;
    e->lora_id = (int32_t)v;
  }
  if (kvp__relay_mp_str(f[F_LORA_NAME], &e->lora_name) || kvp__relay_mp_str(f[F_KIND], &e->kind) ||
      kvp__relay_mp_str(f[F_CACHE_SALT], &e->cache_salt))
    return KVP_EPROTO;
  if (!kvp__relay_mp_nil(f[F_SLIDING]) && kvp__relay_mp_int(f[F_SLIDING], &e->sliding_window))
    return KVP_EPROTO;
  return extra_fill(d, e, f[F_EXTRA_KEYS], f[F_MM_INFOS]);
}

/* Decodes one event object; KVP_EPROTO when it is malformed or of an
 * unknown type. */
static int event_decode(kvp_relay_decoder_t *d, const msgpack_object *o, kvp_relay_event_t *e) {
  const msgpack_object *f[F_COUNT] = {0};
  const msgpack_object *tag = NULL;
  memset(e, 0, sizeof *e);
  if (o->type == MSGPACK_OBJECT_ARRAY) {
    if (o->via.array.size == 0)
      return KVP_EPROTO;
    tag = &o->via.array.ptr[0];
  } else if (o->type == MSGPACK_OBJECT_MAP) {
    for (uint32_t i = 0; i < o->via.map.size; i++)
      if (kvp__relay_mp_str_is(&o->via.map.ptr[i].key, "type"))
        tag = &o->via.map.ptr[i].val;
    if (!tag)
      return KVP_EPROTO;
  } else {
    return KVP_EPROTO;
  }
  if (kvp__relay_mp_str_is(tag, "BlockStored"))
    e->type = KVP_RELAY_EV_STORED;
  else if (kvp__relay_mp_str_is(tag, "BlockRemoved"))
    e->type = KVP_RELAY_EV_REMOVED;
  else if (kvp__relay_mp_str_is(tag, "AllBlocksCleared"))
    e->type = KVP_RELAY_EV_CLEARED;
  else
    return KVP_EPROTO;
  if (o->type == MSGPACK_OBJECT_ARRAY) {
    uint32_t n = o->via.array.size - 1;
    const msgpack_object *a = o->via.array.ptr + 1;
    if (e->type == KVP_RELAY_EV_STORED) {
      /* Upstream's positional order (vLLM kv_events.py): no cache_salt
       * slot; slot 11 is locality. */
      for (uint32_t i = 0; i < n && i < F_POSITIONAL; i++)
        f[i] = &a[i];
    } else if (e->type == KVP_RELAY_EV_REMOVED) {
      for (uint32_t i = 0; i < n && i < sizeof removed_pos / sizeof removed_pos[0]; i++)
        f[removed_pos[i]] = &a[i];
      if (n > 3 && a[3].type == MSGPACK_OBJECT_ARRAY) {
        f[F_COPIES] = &a[3];
        f[F_LOCALITY] = NULL;
      }
    }
  } else {
    for (uint32_t i = 0; i < o->via.map.size; i++) {
      const msgpack_object *k = &o->via.map.ptr[i].key;
      for (int j = 0; j < F_COUNT; j++)
        if (kvp__relay_mp_str_is(k, stored_keys[j]))
          f[j] = &o->via.map.ptr[i].val;
    }
  }
  return event_fill(d, e, f);
}

int kvp__relay_decoder_create(kvp_relay_decoder_t **out) {
  kvp_relay_decoder_t *d = calloc(1, sizeof(kvp_relay_decoder_t));
  *out = NULL;
  if (!d)
    return KVP_ENOMEM;
  if (!msgpack_zone_init(&d->zone, 64 * 1024)) {
    free(d);
    return KVP_ENOMEM;
  }
  d->zone_live = 1;
  *out = d;
  return 0;
}

void kvp__relay_decoder_destroy(kvp_relay_decoder_t *d) {
  if (!d)
    return;
  if (d->zone_live)
    msgpack_zone_destroy(&d->zone);
  free(d->ev);
  free(d->h);
  free(d->t);
  free(d);
}

/* Offsets to pointers, now that the buffers no longer move. */
static void finish(kvp_relay_decoder_t *d, kvp_relay_decoded_t *out) {
  for (size_t i = 0; i < d->nev; i++) {
    kvp_relay_event_t *e = &d->ev[i];
    e->hashes = e->nhashes ? d->h + (uintptr_t)e->hashes : NULL;
    if (e->token_ids)
      e->token_ids = d->t + ((uintptr_t)e->token_ids - 1);
    if (e->copies_left)
      e->copies_left = d->h + ((uintptr_t)e->copies_left - 1);
    if (e->mm)
      e->mm = d->h + ((uintptr_t)e->mm - 1);
  }
  out->events = d->ev;
  out->nevents = d->nev;
}

/* The msgpack-c path, for every shape: the payload unpacked into the
 * decoder's zone, then read object by object. data passed mp_check. */
static int decode_tree(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                       kvp_relay_decoded_t *out) {
  const msgpack_object *evs = NULL, *ts = NULL, *rank = NULL;
  size_t off = 0;
  int rc;

  memset(out, 0, sizeof *out);
  out->dp_rank = -1;
  d->nev = d->nh = d->nt = 0;
  msgpack_zone_clear(&d->zone);
  msgpack_unpack_return r = msgpack_unpack((const char *)data, len, &off, &d->zone, &d->root);
  if (r == MSGPACK_UNPACK_NOMEM_ERROR)
    return KVP_ENOMEM;
  if (r != MSGPACK_UNPACK_SUCCESS)
    return KVP_EPROTO;
  const msgpack_object *root = &d->root;
  if (root->type == MSGPACK_OBJECT_ARRAY) {
    if (root->via.array.size < 2)
      return KVP_EPROTO;
    ts = &root->via.array.ptr[0];
    evs = &root->via.array.ptr[1];
    if (root->via.array.size > 2)
      rank = &root->via.array.ptr[2];
  } else if (root->type == MSGPACK_OBJECT_MAP) {
    for (uint32_t i = 0; i < root->via.map.size; i++) {
      const msgpack_object *k = &root->via.map.ptr[i].key;
      if (kvp__relay_mp_str_is(k, "ts") || kvp__relay_mp_str_is(k, "timestamp"))
        ts = &root->via.map.ptr[i].val;
      else if (kvp__relay_mp_str_is(k, "events"))
        evs = &root->via.map.ptr[i].val;
      else if (kvp__relay_mp_str_is(k, "data_parallel_rank") || kvp__relay_mp_str_is(k, "dp_rank"))
        rank = &root->via.map.ptr[i].val;
    }
  } else {
    return KVP_EPROTO;
  }
  if (!evs || evs->type != MSGPACK_OBJECT_ARRAY)
    return KVP_EPROTO;
  if (ts && ts->type == MSGPACK_OBJECT_FLOAT64)
    out->ts = ts->via.f64;
  else if (ts && ts->type == MSGPACK_OBJECT_FLOAT32)
    out->ts = ts->via.f64;
  else if (ts && ts->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
    out->ts = (double)ts->via.u64;
  if (rank && !kvp__relay_mp_nil(rank) && kvp__relay_mp_int(rank, &out->dp_rank) != 0)
    out->dp_rank = -1;
  if ((rc = kvp__relay_grow((void **)&d->ev, &d->capev, evs->via.array.size + 1, sizeof *d->ev)))
    return rc;
  for (uint32_t i = 0; i < evs->via.array.size; i++) {
    size_t nh = d->nh, nt = d->nt;
    rc = event_decode(d, &evs->via.array.ptr[i], &d->ev[d->nev]);
    if (rc == KVP_ENOMEM)
      return rc;
    if (rc != 0) {
      d->nh = nh; /* drop what the bad event appended */
      d->nt = nt;
      out->errors++;
      continue;
    }
    d->nev++;
  }
  finish(d, out);
  return 0;
}

static int checked(const uint8_t *data, size_t len, kvp_relay_decoded_t *out) {
  memset(out, 0, sizeof *out);
  out->dp_rank = -1;
  if (len > KVP_RELAY_MAX_PAYLOAD)
    return KVP_ETOOBIG;
  return kvp__relay_mp_check(data, len) != 0 ? KVP_EPROTO : 0;
}

int kvp__relay_decode(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                      kvp_relay_decoded_t *out) {
  memset(out, 0, sizeof *out);
  out->dp_rank = -1;
  if (len > KVP_RELAY_MAX_PAYLOAD)
    return KVP_ETOOBIG;
  /* One pass: the scanner checks the bounds as it reads (scan.c); the
   * shapes it leaves to the tree are checked first, as the tree needs. */
  int rc = kvp__relay_scan(d, data, len, out);
  if (rc == KVP__RELAY_SCAN_SHAPE) {
    rc = checked(data, len, out);
    return rc != 0 ? rc : decode_tree(d, data, len, out);
  }
  if (rc == 0)
    finish(d, out);
  return rc;
}

int kvp__relay_decode_tree(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                           kvp_relay_decoded_t *out) {
  int rc = checked(data, len, out);
  return rc != 0 ? rc : decode_tree(d, data, len, out);
}

static int str_same(kvp_relay_str_t a, kvp_relay_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

int kvp__relay_decoded_same(const kvp_relay_decoded_t *a, const kvp_relay_decoded_t *b) {
  if (memcmp(&a->ts, &b->ts, sizeof a->ts) != 0 || a->dp_rank != b->dp_rank ||
      a->nevents != b->nevents || a->errors != b->errors)
    return 0;
  for (size_t i = 0; i < a->nevents; i++) {
    const kvp_relay_event_t *x = &a->events[i], *y = &b->events[i];
    if (x->type != y->type || x->nhashes != y->nhashes || x->has_parent != y->has_parent ||
        x->parent != y->parent || x->ntokens != y->ntokens || !x->token_ids != !y->token_ids ||
        x->block_size != y->block_size || x->lora_id != y->lora_id ||
        x->extra_opaque != y->extra_opaque || !x->mm != !y->mm ||
        !x->copies_left != !y->copies_left || x->group_idx != y->group_idx ||
        x->sliding_window != y->sliding_window || !str_same(x->lora_name, y->lora_name) ||
        !str_same(x->medium, y->medium) || !str_same(x->cache_salt, y->cache_salt) ||
        !str_same(x->kind, y->kind))
      return 0;
    for (size_t k = 0; k < x->nhashes; k++)
      if (x->hashes[k] != y->hashes[k] ||
          (x->copies_left && x->copies_left[k] != y->copies_left[k]))
        return 0;
    for (size_t k = 0; k < x->ntokens; k++)
      if (x->token_ids[k] != y->token_ids[k])
        return 0;
    for (size_t b = 0, k = 0; x->mm && b < x->nhashes; b++) {
      uint64_t c = x->mm[k];
      for (uint64_t j = 0; j <= c; j++, k++)
        if (x->mm[k] != y->mm[k])
          return 0;
    }
  }
  return 1;
}
