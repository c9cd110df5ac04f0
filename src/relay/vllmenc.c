/* kvplane events as vLLM KV events; see vllmenc.h. */
#include "relay/vllmenc.h"

#include <msgpack.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvplane/status.h"

void kvp__vout_media_init(kvp__vout_media_t *m) {
  static const char *const def[KVP_TIER_MAX + 1] = {"", "GPU", "CPU", "DISK", "EXTERNAL"};
  for (int t = 0; t <= KVP_TIER_MAX; t++)
    snprintf(m->name[t], sizeof m->name[t], "%s", def[t]);
}

int kvp__vout_media_set(kvp__vout_media_t *m, const char *list, char *err, size_t errlen) {
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ','), *eq;
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char item[64];
    if (n == 0 || n >= sizeof item)
      goto bad;
    memcpy(item, p, n);
    item[n] = '\0';
    eq = strchr(item, '=');
    if (eq == NULL || eq - item != 2 || item[0] != 'G' || item[1] < '1' ||
        item[1] > '0' + KVP_TIER_MAX || strlen(eq + 1) == 0 || strlen(eq + 1) > 31 ||
        strspn(eq + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
            strlen(eq + 1)) {
      snprintf(err, errlen, "--media: '%s' is not G<1..4>=NAME", item);
      return KVP_ECONFIG;
    }
    snprintf(m->name[item[1] - '0'], sizeof m->name[0], "%s", eq + 1);
    p += n + (end != NULL);
    if (end != NULL && *p == '\0')
      goto bad;
  }
  return 0;
bad:
  snprintf(err, errlen, "--media: '%s' is not a list G<n>=NAME,...", list);
  return KVP_ECONFIG;
}

void kvp__vout_state_init(kvp__vout_state_t *st) {
  memset(st, 0, sizeof *st);
  kvp__map64_init(&st->held, 0);
  kvp__map64_init(&st->stage, 0);
  kvp__map64_init(&st->stage_odd, 0);
}

void kvp__vout_state_free(kvp__vout_state_t *st) {
  kvp__map64_free(&st->held);
  kvp__map64_free(&st->stage);
  kvp__map64_free(&st->stage_odd);
}

void kvp__vout_state_forget(kvp__vout_state_t *st) {
  kvp__map64_clear(&st->held);
}

void kvp__vout_state_reset(kvp__vout_state_t *st) {
  kvp__map64_clear(&st->held);
  kvp__map64_clear(&st->stage);
  kvp__map64_clear(&st->stage_odd);
  st->stage_tier = 0;
}

/* The events of one payload, packed one after the other; the header that
 * counts them is written when the payload is done (flush). */
typedef struct out_s {
  msgpack_sbuffer ev;
  msgpack_packer pk;
  size_t n, total; /* events in ev; events handed to the sink before */
  int format;
  const kvp__vout_media_t *media;
  int oom;
  kvp__vout_sink_fn sink;
  void *sink_ctx;
  uint32_t dp_rank;
  uint64_t ts_ms;
} out_t;

static int finish(out_t *o, uint32_t dp_rank, uint64_t ts_ms, uint8_t **payload, size_t *len);

static atomic_uint fail_payloads; /* kvp__vout_test_fail_payloads */

void kvp__vout_test_fail_payloads(unsigned n) {
  atomic_store(&fail_payloads, n);
}

/* Takes one injected failure, if any is left. */
static int injected_failure(void) {
  unsigned n = atomic_load(&fail_payloads);
  while (n > 0 && !atomic_compare_exchange_weak(&fail_payloads, &n, n - 1))
    ;
  return n > 0;
}

/* The events so far as one payload, handed to the sink. */
static void flush(out_t *o) {
  uint8_t *p = NULL;
  size_t len = 0;
  if (o->n == 0 || o->oom)
    return;
  if (injected_failure() || finish(o, o->dp_rank, o->ts_ms, &p, &len) != 0) {
    o->oom = 1;
    return;
  }
  o->sink(o->sink_ctx, p, len);
  o->total += o->n;
  o->n = 0;
  msgpack_sbuffer_clear(&o->ev);
}

/* Past KVP__VOUT_MSG_BYTES the payload goes and the next events start
 * another: a snapshot of millions of blocks becomes messages a consumer
 * decodes one at a time, not one of hundreds of MB. */
static void maybe_flush(out_t *o) {
  if (o->ev.size >= KVP__VOUT_MSG_BYTES)
    flush(o);
}

static void str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

/* The event's type tag and, in the map layout, nfields more keys. */
static void begin(out_t *o, const char *type, size_t nfields) {
  if (o->format == KVP__VOUT_ARRAY) {
    msgpack_pack_array(&o->pk, 1 + nfields);
  } else {
    msgpack_pack_map(&o->pk, 1 + nfields);
    str(&o->pk, "type");
  }
  str(&o->pk, type);
  o->n++;
}

static void key(out_t *o, const char *k) {
  if (o->format != KVP__VOUT_ARRAY)
    str(&o->pk, k);
}

static void hashes(out_t *o, const uint64_t *h, size_t n) {
  key(o, "block_hashes");
  msgpack_pack_array(&o->pk, n);
  for (size_t i = 0; i < n; i++)
    msgpack_pack_uint64(&o->pk, h[i]);
}

static void stored(out_t *o, int tier, const uint64_t *h, size_t n, int has_parent, uint64_t parent,
                   const uint32_t *tokens, size_t ntokens, uint32_t block_tokens, int32_t lora_id) {
  begin(o, "BlockStored", 7);
  hashes(o, h, n);
  key(o, "parent_block_hash");
  if (has_parent)
    msgpack_pack_uint64(&o->pk, parent);
  else
    msgpack_pack_nil(&o->pk);
  key(o, "token_ids");
  msgpack_pack_array(&o->pk, tokens ? ntokens : 0);
  for (size_t i = 0; tokens && i < ntokens; i++)
    msgpack_pack_uint32(&o->pk, tokens[i]);
  key(o, "block_size");
  msgpack_pack_uint32(&o->pk, block_tokens);
  key(o, "lora_id");
  if (lora_id != 0)
    msgpack_pack_int32(&o->pk, lora_id);
  else
    msgpack_pack_nil(&o->pk);
  key(o, "medium");
  str(&o->pk, o->media->name[tier]);
  key(o, "lora_name");
  msgpack_pack_nil(&o->pk);
}

static void removed(out_t *o, int tier, const uint64_t *h, size_t n) {
  begin(o, "BlockRemoved", 2);
  hashes(o, h, n);
  key(o, "medium");
  str(&o->pk, o->media->name[tier]);
}

/* removed for a set of any size: events of KVP__VOUT_EVENT_HASHES hashes at
 * most, each payload bounded. */
static void removed_all(out_t *o, int tier, const uint64_t *h, size_t n) {
  for (size_t off = 0; off < n; off += KVP__VOUT_EVENT_HASHES) {
    removed(o, tier, h + off, n - off < KVP__VOUT_EVENT_HASHES ? n - off : KVP__VOUT_EVENT_HASHES);
    maybe_flush(o);
  }
}

static void mark(out_t *o, kvp__vout_state_t *st, uint64_t h, int tier, int on) {
  uint64_t bits = 0;
  int had = kvp__map64_get(&st->held, h, &bits) == 0;
  uint64_t nb = on ? bits | 1u << tier : bits & ~(1u << tier);
  if (nb == 0) {
    if (had)
      kvp__map64_del(&st->held, h, NULL);
  } else if (nb != bits || !had) {
    if (kvp__map64_put(&st->held, h, nb) != 0)
      o->oom = 1;
  }
}

/* The hashes held in tier (malloc'd, *n of them; NULL when none). */
static uint64_t *held_in(const kvp__vout_state_t *st, int tier, const kvp__map64_t *except,
                         size_t *n) {
  size_t it = 0, k = 0, cap = kvp__map64_count(&st->held);
  uint64_t h, bits, *out = cap ? malloc(cap * sizeof *out) : NULL;
  while (out && kvp__map64_next(&st->held, &it, &h, &bits))
    if ((bits & 1u << tier) && (except == NULL || kvp__map64_get(except, h, NULL) != 0))
      out[k++] = h;
  *n = k;
  return out;
}

static void clear_tier(out_t *o, kvp__vout_state_t *st, int tier) {
  size_t n;
  uint64_t *h = held_in(st, tier, NULL, &n);
  if (n) {
    removed_all(o, tier, h, n);
    for (size_t i = 0; i < n; i++)
      mark(o, st, h[i], tier, 0);
  }
  free(h);
}

/* The last chunk of a snapshot of tier: removes what the stream announced
 * and the snapshot lacks, stores what it has and the stream did not. */
static void apply_snapshot(out_t *o, kvp__vout_state_t *st) {
  int tier = st->stage_tier;
  size_t n, it = 0;
  uint64_t *gone = held_in(st, tier, &st->stage, &n), h, parent, bits;

  if (n) {
    removed_all(o, tier, gone, n);
    for (size_t i = 0; i < n; i++)
      mark(o, st, gone[i], tier, 0);
  }
  free(gone);
  int odd = kvp__map64_count(&st->stage_odd) > 0;
  while (kvp__map64_next(&st->stage, &it, &h, &parent)) {
    uint64_t tokens = st->stage_tokens;
    if (kvp__map64_get(&st->held, h, &bits) == 0 && (bits & 1u << tier))
      continue;
    if (odd)
      kvp__map64_get(&st->stage_odd, h, &tokens);
    stored(o, tier, &h, 1, parent != h, parent, NULL, 0, (uint32_t)tokens, 0);
    maybe_flush(o);
  }
  it = 0;
  while (kvp__map64_next(&st->stage, &it, &h, NULL))
    mark(o, st, h, tier, 1);
  kvp__map64_clear(&st->stage);
  kvp__map64_clear(&st->stage_odd);
  st->stage_tier = 0;
}

/* Stages a chunk. A block's vLLM block_size is its chunk's block_tokens:
 * the first chunk's for most (stage_tokens), stage_odd for the blocks of
 * chunks of another shape; a block staged twice keeps its last chunk's. */
static void snapshot(out_t *o, kvp__vout_state_t *st, const kvp_event_t *e) {
  if (e->tier < 1 || e->tier > KVP_TIER_MAX)
    return;
  if (st->stage_tier != e->tier || st->stage_id != e->snapshot_id) {
    kvp__map64_clear(&st->stage); /* a new snapshot: an unfinished one is dropped */
    kvp__map64_clear(&st->stage_odd);
    st->stage_tier = e->tier;
    st->stage_id = e->snapshot_id;
    st->stage_tokens = e->block_tokens;
  }
  int odd = e->block_tokens != st->stage_tokens;
  for (size_t i = 0; i < e->nhashes; i++) {
    uint64_t h = e->hashes[i];
    if (kvp__map64_put(&st->stage, h, e->parent_hashes ? e->parent_hashes[i] : h) != 0)
      o->oom = 1;
    if (odd && kvp__map64_put(&st->stage_odd, h, e->block_tokens) != 0)
      o->oom = 1;
    else if (!odd && kvp__map64_count(&st->stage_odd) > 0)
      kvp__map64_del(&st->stage_odd, h, NULL);
  }
  if (e->last)
    apply_snapshot(o, st);
}

static void event(out_t *o, kvp__vout_state_t *st, const kvp_event_t *e) {
  int tier = e->tier;
  switch (e->type) {
  case KVP_EV_STORED:
    if (tier < 1 || tier > KVP_TIER_MAX || e->nhashes == 0)
      return;
    stored(o, tier, e->hashes, e->nhashes, e->has_parent, e->parent_hash, e->token_ids,
           e->ntoken_ids, e->block_tokens, e->lora_id);
    for (size_t i = 0; i < e->nhashes; i++)
      mark(o, st, e->hashes[i], tier, 1);
    return;
  case KVP_EV_REMOVED:
    if (tier < 1 || tier > KVP_TIER_MAX || e->nhashes == 0)
      return;
    removed_all(o, tier, e->hashes, e->nhashes);
    for (size_t i = 0; i < e->nhashes; i++)
      mark(o, st, e->hashes[i], tier, 0);
    return;
  case KVP_EV_CLEARED:
    if (tier == KVP_TIER_ALL) {
      begin(o, "AllBlocksCleared", 0);
      kvp__vout_state_forget(st);
    } else if (tier >= 1 && tier <= KVP_TIER_MAX) {
      clear_tier(o, st, tier);
    }
    return;
  case KVP_EV_SNAPSHOT:
    snapshot(o, st, e);
    return;
  default: /* accessed: no vLLM form */
    return;
  }
}

/* The batch around the packed events. */
static int finish(out_t *o, uint32_t dp_rank, uint64_t ts_ms, uint8_t **payload, size_t *len) {
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  int map = o->format == KVP__VOUT_MAP;
  if (map) {
    msgpack_pack_map(&pk, 3);
    str(&pk, "ts");
  } else {
    msgpack_pack_array(&pk, 3);
  }
  msgpack_pack_double(&pk, (double)ts_ms / 1000.0);
  if (map)
    str(&pk, "events");
  msgpack_pack_array(&pk, o->n);
  if (o->ev.size)
    msgpack_sbuffer_write(&b, o->ev.data, o->ev.size);
  if (map)
    str(&pk, "data_parallel_rank");
  msgpack_pack_uint32(&pk, dp_rank);
  if (b.data == NULL) {
    msgpack_sbuffer_destroy(&b);
    return KVP_ENOMEM;
  }
  *len = b.size;
  *payload = (uint8_t *)msgpack_sbuffer_release(&b);
  return 0;
}

int kvp__vout_encode(kvp__vout_state_t *st, const kvp_batch_t *b, int format,
                     const kvp__vout_media_t *media, kvp__vout_sink_fn sink, void *sink_ctx,
                     size_t *nevents) {
  out_t o = {.format = format,
             .media = media,
             .sink = sink,
             .sink_ctx = sink_ctx,
             .dp_rank = b->dp_rank,
             .ts_ms = b->timestamp_ms ? b->timestamp_ms : kvp__unix_ms()};

  *nevents = 0;
  msgpack_sbuffer_init(&o.ev);
  msgpack_packer_init(&o.pk, &o.ev, msgpack_sbuffer_write);
  for (size_t i = 0; i < b->nevents && !o.oom; i++) {
    event(&o, st, &b->events[i]);
    maybe_flush(&o);
  }
  flush(&o);
  *nevents = o.total;
  msgpack_sbuffer_destroy(&o.ev);
  return o.oom ? KVP_ENOMEM : 0;
}

int kvp__vout_encode_empty(int format, uint32_t dp_rank, uint64_t ts_ms, uint8_t **payload,
                           size_t *len) {
  out_t o = {.format = format};
  msgpack_sbuffer_init(&o.ev);
  int rc = finish(&o, dp_rank, ts_ms, payload, len);
  msgpack_sbuffer_destroy(&o.ev);
  return rc;
}

int kvp__vout_replay_request(const uint8_t *const *frames, const size_t *lens, size_t nframes,
                             uint64_t *start, int *delim) {
  const uint8_t *s;
  if (nframes == 3 && lens[1] == 0 && lens[2] == 8) {
    s = frames[2];
    *delim = 1;
  } else if (nframes == 2 && lens[1] == 8) {
    s = frames[1];
    *delim = 0;
  } else {
    return KVP_EPROTO;
  }
  if (lens[0] == 0) /* a ROUTER always puts the peer's identity first */
    return KVP_EPROTO;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = v << 8 | s[i];
  *start = v;
  return 0;
}
