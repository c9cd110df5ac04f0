/* The byte scanner of the payload decoder (decode_impl.h): a tagged-array
 * batch, `[ts, [events...], dp_rank]` with array events, the shape vLLM,
 * SGLang and TensorRT-LLM send, read straight from the msgpack bytes in one
 * pass, without building msgpack-c's object tree (the relay's largest cost:
 * README, relay section). Map batches and map events are left to the tree
 * (KVP__RELAY_SCAN_SHAPE).
 *
 * Every rule is decode.c's for the same bytes: the same fields, types,
 * defaults and errors; kvp__relay_decode_tree is the reference that the
 * tests and the fuzz target compare it with. The payload passed
 * kvp__relay_mp_check, so every object lies within it and the readers need
 * no bounds of their own. */
#include <string.h>

#include "kvplane/hash.h"
#include "relay/decode_impl.h"
#include "relay/mpread.h"

/* Positional slots (decode.c's field order): BlockStored's first 12, and
 * BlockRemoved's block_hashes, medium, group_idx, locality or
 * remaining_copy_counts. */
enum {
  S_HASHES,
  S_PARENT,
  S_TOKENS,
  S_BLOCK_SIZE,
  S_LORA_ID,
  S_MEDIUM,
  S_LORA_NAME,
  S_EXTRA,
  S_GROUP_IDX,
  S_KIND,
  S_SLIDING,
  S_LOCALITY,
  S_STORED
};

static inline uint64_t be(const uint8_t *p, int n) {
  uint64_t x = 0;
  for (int i = 0; i < n; i++)
    x = (x << 8) | p[i];
  return x;
}

/* The object after the one at p. */
static inline const uint8_t *next(const uint8_t *p, const uint8_t *end) {
  uint8_t b = *p;
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
    return p + 1;
  switch (b) {
  case 0xcc:
  case 0xd0:
    return p + 2;
  case 0xcd:
  case 0xd1:
    return p + 3;
  case 0xca:
  case 0xce:
  case 0xd2:
    return p + 5;
  case 0xcb:
  case 0xcf:
  case 0xd3:
    return p + 9;
  default:
    if (b >= 0xa0 && b <= 0xbf)
      return p + 1 + (b & 0x1f);
    kvp__relay_mp_skip(&p, end); /* checked already: cannot fail */
    return p;
  }
}

static inline int is_nil(const uint8_t *p) {
  return !p || *p == 0xc0;
}

/* An integer as msgpack-c reads it: *neg for a negative value (u holds its
 * two's complement). 0, or -1 for anything else. */
static inline int num(const uint8_t *p, uint64_t *u, int *neg) {
  uint8_t b = *p;
  int64_t s;
  *neg = 0;
  if (b <= 0x7f) {
    *u = b;
    return 0;
  }
  switch (b) {
  case 0xcc:
    *u = p[1];
    return 0;
  case 0xcd:
    *u = be(p + 1, 2);
    return 0;
  case 0xce:
    *u = be(p + 1, 4);
    return 0;
  case 0xcf:
    *u = be(p + 1, 8);
    return 0;
  case 0xd0:
    s = (int8_t)p[1];
    break;
  case 0xd1:
    s = (int16_t)(uint16_t)be(p + 1, 2);
    break;
  case 0xd2:
    s = (int32_t)(uint32_t)be(p + 1, 4);
    break;
  case 0xd3:
    s = (int64_t)be(p + 1, 8);
    break;
  default:
    if (b < 0xe0)
      return -1;
    s = (int8_t)b;
    break;
  }
  *u = (uint64_t)s;
  *neg = s < 0;
  return 0;
}

/* kvp__relay_mp_int over bytes. */
static inline int as_int(const uint8_t *p, int64_t *v) {
  uint64_t u;
  int neg;
  if (num(p, &u, &neg) != 0 || (!neg && u > INT64_MAX))
    return KVP_EPROTO;
  *v = (int64_t)u;
  return 0;
}

/* A str or bin: 1 with its bytes (is_str tells which), else 0. */
static inline int raw(const uint8_t *p, const uint8_t **s, size_t *n, int *is_str) {
  uint8_t b = *p;
  *is_str = 1;
  if (b >= 0xa0 && b <= 0xbf) {
    *n = b & 0x1f, *s = p + 1;
    return 1;
  }
  switch (b) {
  case 0xc4:
  case 0xd9:
    *n = p[1], *s = p + 2;
    break;
  case 0xc5:
  case 0xda:
    *n = be(p + 1, 2), *s = p + 3;
    break;
  case 0xc6:
  case 0xdb:
    *n = be(p + 1, 4), *s = p + 5;
    break;
  default:
    return 0;
  }
  *is_str = b >= 0xd9;
  return 1;
}

/* kvp__relay_mp_str over bytes. */
static inline int as_str(const uint8_t *p, kvp_relay_str_t *out) {
  const uint8_t *s;
  size_t n;
  int is_str;
  if (is_nil(p)) {
    out->p = NULL, out->len = 0;
    return 0;
  }
  if (!raw(p, &s, &n, &is_str) || !is_str)
    return KVP_EPROTO;
  out->p = (const char *)s, out->len = n;
  return 0;
}

static inline int str_is(const uint8_t *p, const char *lit, size_t n) {
  const uint8_t *s;
  size_t len;
  int is_str;
  return raw(p, &s, &len, &is_str) && is_str && len == n && memcmp(s, lit, n) == 0;
}

/* kvp__relay_hash_from over bytes. */
static inline int as_hash(const uint8_t *p, uint64_t *out) {
  const uint8_t *s;
  size_t n;
  int neg, is_str;
  if (num(p, out, &neg) == 0)
    return 0;
  if (!raw(p, &s, &n, &is_str) || n == 0)
    return KVP_EPROTO;
  *out = be(s + (n > 8 ? n - 8 : 0), n > 8 ? 8 : (int)n);
  return 0;
}

/* 1 with the element count and the first element for an array, else 0. */
static inline int as_array(const uint8_t *p, uint32_t *n, const uint8_t **first) {
  uint8_t b = *p;
  if (b >= 0x90 && b <= 0x9f) {
    *n = b & 0x0f, *first = p + 1;
    return 1;
  }
  if (b == 0xdc) {
    *n = (uint32_t)be(p + 1, 2), *first = p + 3;
    return 1;
  }
  if (b == 0xdd) {
    *n = (uint32_t)be(p + 1, 4), *first = p + 5;
    return 1;
  }
  return 0;
}

static inline int is_map(const uint8_t *p) {
  return (*p >= 0x80 && *p <= 0x8f) || *p == 0xde || *p == 0xdf;
}

/* decode.c's mm_item over bytes: 1 with *id, 0 for the LoRA name, -1. */
static int mm_item(const uint8_t *p, const uint8_t *end, const kvp_relay_str_t *lora,
                   uint64_t *id) {
  const uint8_t *s, *q;
  size_t n;
  uint32_t na;
  uint64_t u;
  int is_str, neg;
  if (raw(p, &s, &n, &is_str)) {
    if (!is_str)
      return -1;
    if (lora->len && n == lora->len && memcmp(s, lora->p, n) == 0)
      return 0;
    return kvp_hash_is_digest((const char *)s, n) &&
                   kvp_hash_mm_identifier((const char *)s, n, id) == 0
               ? 1
               : -1;
  }
  if (as_array(p, &na, &q) && na == 2 && raw(q, &s, &n, &is_str) && is_str &&
      num(next(q, end), &u, &neg) == 0)
    return kvp_hash_mm_identifier((const char *)s, n, id) == 0 ? 1 : -1;
  return -1;
}

/* decode.c's extra_fill for extra_keys at x (positional events carry no
 * block_mm_infos). */
static int extra_fill(kvp_relay_decoder_t *d, kvp_relay_event_t *e, const uint8_t *x,
                      const uint8_t *end) {
  const uint8_t *q;
  uint32_t nb;
  size_t start = d->nh, any = 0;
  if (is_nil(x))
    return 0;
  if (!as_array(x, &nb, &q) || nb > e->nhashes) {
    e->extra_opaque = 1;
    return 0;
  }
  for (size_t b = 0; b < e->nhashes && !e->extra_opaque; b++) {
    if (kvp__relay_grow((void **)&d->h, &d->caph, d->nh + 2, sizeof *d->h))
      return KVP_ENOMEM;
    size_t at = d->nh++;
    uint64_t count = 0;
    if (b < nb) {
      const uint8_t *k = q, *it;
      uint32_t ni;
      q = next(q, end);
      if (!is_nil(k)) {
        if (!as_array(k, &ni, &it)) {
          e->extra_opaque = 1;
          break;
        }
        for (uint32_t j = 0; j < ni; j++, it = next(it, end)) {
          uint64_t id;
          int r = mm_item(it, end, &e->lora_name, &id);
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
    }
    d->h[at] = count;
    any += count;
  }
  if (e->extra_opaque || any == 0) {
    d->nh = start;
    return 0;
  }
  e->mm = (const uint64_t *)(uintptr_t)(start + 1);
  return 0;
}

/* decode.c's event_fill for the slots f. */
static int fill(kvp_relay_decoder_t *d, kvp_relay_event_t *e, const uint8_t *const f[S_STORED],
                const uint8_t *copies, const uint8_t *end) {
  const uint8_t *q;
  uint32_t n;
  int64_t v;
  int rc;
  if (e->type == KVP_RELAY_EV_CLEARED)
    return 0;
  if (!f[S_HASHES] || !as_array(f[S_HASHES], &n, &q))
    return KVP_EPROTO;
  if ((rc = kvp__relay_grow((void **)&d->h, &d->caph, d->nh + n + 1, sizeof *d->h)))
    return rc;
  for (uint32_t i = 0; i < n; i++, q = next(q, end))
    if (as_hash(q, &d->h[d->nh + i]) != 0)
      return KVP_EPROTO;
  e->nhashes = n;
  e->hashes = (const uint64_t *)(uintptr_t)d->nh;
  d->nh += n;
  if (as_str(f[S_MEDIUM], &e->medium))
    return KVP_EPROTO;
  if (!is_nil(f[S_GROUP_IDX]) && as_int(f[S_GROUP_IDX], &e->group_idx))
    return KVP_EPROTO;
  if (e->type == KVP_RELAY_EV_REMOVED) {
    if (is_nil(copies))
      return 0;
    if (!as_array(copies, &n, &q) || n != e->nhashes)
      return KVP_EPROTO;
    if ((rc = kvp__relay_grow((void **)&d->h, &d->caph, d->nh + n + 1, sizeof *d->h)))
      return rc;
    for (uint32_t i = 0; i < n; i++, q = next(q, end)) {
      if (as_int(q, &v) || v < 0)
        return KVP_EPROTO;
      d->h[d->nh + i] = (uint64_t)v;
    }
    e->copies_left = (const uint64_t *)(uintptr_t)(d->nh + 1);
    d->nh += n;
    return 0;
  }
  if (!is_nil(f[S_PARENT])) {
    if (as_hash(f[S_PARENT], &e->parent))
      return KVP_EPROTO;
    e->has_parent = 1;
  }
  if (!is_nil(f[S_TOKENS])) {
    if (!as_array(f[S_TOKENS], &n, &q))
      return KVP_EPROTO;
    if ((rc = kvp__relay_grow((void **)&d->t, &d->capt, d->nt + n + 1, sizeof *d->t)))
      return rc;
    uint32_t *t = d->t + d->nt;
    for (uint32_t i = 0; i < n; i++) {
      uint8_t b = *q;
      if (b <= 0x7f) { /* the common token ids, inline */
        t[i] = b, q++;
        continue;
      }
      if (b == 0xcd) {
        t[i] = (uint32_t)be(q + 1, 2), q += 3;
        continue;
      }
      if (b == 0xce) {
        t[i] = (uint32_t)be(q + 1, 4), q += 5;
        continue;
      }
      if (as_int(q, &v) || v < 0 || v > UINT32_MAX)
        return KVP_EPROTO;
      t[i] = (uint32_t)v;
      q = next(q, end);
    }
    e->ntokens = n;
    e->token_ids = (const uint32_t *)(uintptr_t)(d->nt + 1);
    d->nt += n;
  }
  if (!is_nil(f[S_BLOCK_SIZE])) {
    if (as_int(f[S_BLOCK_SIZE], &v) || v < 0 || v > UINT32_MAX)
      return KVP_EPROTO;
    e->block_size = (uint32_t)v;
  }
  if (!is_nil(f[S_LORA_ID])) {
    if (as_int(f[S_LORA_ID], &v) || v < INT32_MIN || v > INT32_MAX)
      return KVP_EPROTO;
    e->lora_id = (int32_t)v;
  }
  if (as_str(f[S_LORA_NAME], &e->lora_name) || as_str(f[S_KIND], &e->kind))
    return KVP_EPROTO; /* cache_salt has no positional slot: it stays empty */
  if (!is_nil(f[S_SLIDING]) && as_int(f[S_SLIDING], &e->sliding_window))
    return KVP_EPROTO;
  return extra_fill(d, e, f[S_EXTRA], end);
}

/* One event at *pp, which moves past it. 0, KVP_EPROTO for a malformed
 * event, KVP_ENOMEM or KVP__RELAY_SCAN_SHAPE for a map event. */
static int event(kvp_relay_decoder_t *d, const uint8_t **pp, const uint8_t *end,
                 kvp_relay_event_t *e) {
  const uint8_t *f[S_STORED] = {0}, *copies = NULL, *q, *tag;
  uint32_t n;
  memset(e, 0, sizeof *e);
  if (is_map(*pp))
    return KVP__RELAY_SCAN_SHAPE;
  if (!as_array(*pp, &n, &q)) {
    *pp = next(*pp, end);
    return KVP_EPROTO;
  }
  tag = q;
  if (n > 0)
    q = next(q, end);
  for (uint32_t i = 1; i < n; i++, q = next(q, end))
    if (i - 1 < S_STORED)
      f[i - 1] = q;
  *pp = q;
  if (n == 0)
    return KVP_EPROTO;
  if (str_is(tag, "BlockStored", 11)) {
    e->type = KVP_RELAY_EV_STORED;
  } else if (str_is(tag, "BlockRemoved", 12)) {
    /* block_hashes, medium, group_idx, then locality (ignored) or
     * remaining_copy_counts, told apart by type */
    const uint8_t *r[4] = {f[0], f[1], f[2], f[3]};
    memset(f, 0, sizeof f);
    f[S_HASHES] = r[0], f[S_MEDIUM] = r[1], f[S_GROUP_IDX] = r[2];
    if (r[3] && as_array(r[3], &n, &q))
      copies = r[3];
    e->type = KVP_RELAY_EV_REMOVED;
  } else if (str_is(tag, "AllBlocksCleared", 16)) {
    e->type = KVP_RELAY_EV_CLEARED;
  } else {
    return KVP_EPROTO;
  }
  return fill(d, e, f, copies, end);
}

int kvp__relay_scan(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                    kvp_relay_decoded_t *out) {
  const uint8_t *end = data + len, *p, *ts, *evs, *rank = NULL;
  uint32_t n, nev;
  uint64_t u;
  int neg, rc;
  d->nev = d->nh = d->nt = 0;
  if (is_map(data))
    return KVP__RELAY_SCAN_SHAPE;
  if (!as_array(data, &n, &p) || n < 2)
    return KVP_EPROTO;
  ts = p;
  evs = p = next(p, end);
  if (n > 2)
    rank = next(p, end);
  if (!as_array(evs, &nev, &p))
    return KVP_EPROTO;
  if (*ts == 0xcb) {
    uint64_t x = be(ts + 1, 8);
    memcpy(&out->ts, &x, sizeof out->ts);
  } else if (*ts == 0xca) {
    uint32_t x = (uint32_t)be(ts + 1, 4);
    float f;
    memcpy(&f, &x, sizeof f);
    out->ts = f;
  } else if (num(ts, &u, &neg) == 0 && !neg) {
    out->ts = (double)u;
  }
  if (rank && !is_nil(rank) && as_int(rank, &out->dp_rank) != 0)
    out->dp_rank = -1;
  if ((rc = kvp__relay_grow((void **)&d->ev, &d->capev, (size_t)nev + 1, sizeof *d->ev)))
    return rc;
  for (uint32_t i = 0; i < nev; i++) {
    size_t nh = d->nh, nt = d->nt;
    rc = event(d, &p, end, &d->ev[d->nev]);
    if (rc == KVP_ENOMEM || rc == KVP__RELAY_SCAN_SHAPE)
      return rc;
    if (rc != 0) {
      d->nh = nh;
      d->nt = nt;
      out->errors++;
      continue;
    }
    d->nev++;
  }
  return 0;
}
