/* Why this file is long: it is one reader, in one pass, of the shape that
 * carries most of the traffic, and every rule in it mirrors decode.c's;
 * split, the bounds it checks as it reads would be spread over files.
 *
 * The byte scanner of the payload decoder (decode_impl.h): a tagged-array
 * batch, `[ts, [events...], dp_rank]` with array events, the shape vLLM,
 * SGLang and TensorRT-LLM send, read straight from the msgpack bytes in one
 * pass, without building msgpack-c's object tree (the relay's largest cost:
 * README, relay section). Map batches and map events are left to the tree
 * (KVP__RELAY_SCAN_SHAPE).
 *
 * Every rule is decode.c's for the same bytes: the same fields, types,
 * defaults and errors; kvp__relay_decode_tree is the reference that the
 * tests and the fuzz target compare it with.
 *
 * One pass: the bounds of kvp__relay_mp_check are checked as the bytes are
 * read. The block hashes and token ids, most of a payload, are read with
 * their bounds (read_hashes, read_tokens); every other object is first
 * skipped with kvp__relay_mp_skip at its depth, which validates it, and then
 * read by the readers below, which need no bounds of their own inside a
 * validated object. A payload that breaks a bound anywhere is KVP_EPROTO,
 * as kvp__relay_mp_check makes it for the tree. */
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
    kvp__relay_mp_skip(&p, end, 0); /* within a validated object: cannot fail */
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

/* A payload that breaks kvp__relay_mp_check's rules (distinct from an
 * event's own KVP_EPROTO, which only skips the event). */
#define BAD 3

/* The encoded width of an integer at p, or 0 for another type. */
static inline size_t int_width(uint8_t b) {
  if (b <= 0x7f || b >= 0xe0)
    return 1;
  switch (b) {
  case 0xcc:
  case 0xd0:
    return 2;
  case 0xcd:
  case 0xd1:
    return 3;
  case 0xce:
  case 0xd2:
    return 5;
  case 0xcf:
  case 0xd3:
    return 9;
  default:
    return 0;
  }
}

/* An array header at *pp with its bounds: 1 with the count and *pp at the
 * first element; 0 for another type (*pp unchanged); BAD when the header
 * or the count (one byte per element at least) does not fit. */
static inline int array_at(const uint8_t **pp, const uint8_t *end, uint32_t *n) {
  const uint8_t *p = *pp;
  size_t h;
  if (p >= end)
    return BAD;
  uint8_t b = *p;
  if (b >= 0x90 && b <= 0x9f)
    h = 1, *n = b & 0x0f;
  else if (b == 0xdc && end - p >= 3)
    h = 3, *n = (uint32_t)be(p + 1, 2);
  else if (b == 0xdd && end - p >= 5)
    h = 5, *n = (uint32_t)be(p + 1, 4);
  else if (b == 0xdc || b == 0xdd)
    return BAD;
  else
    return 0;
  if (*n > (size_t)(end - p) - h)
    return BAD;
  *pp = p + h;
  return 1;
}

/* Skips the object at *pp nested depth deep; 0 or BAD. */
static inline int skip(const uint8_t **pp, const uint8_t *end, int depth) {
  return *pp < end && kvp__relay_mp_skip(pp, end, depth) == 0 ? 0 : BAD;
}

/* block_hashes at *pp (depth 3) into d->h, with bounds; *pp moves past it.
 * 0 with the count, KVP_EPROTO for a malformed list (*pp past it), BAD,
 * KVP_ENOMEM. */
static int read_hashes(kvp_relay_decoder_t *d, const uint8_t **pp, const uint8_t *end,
                       uint32_t *count) {
  const uint8_t *start = *pp, *q = *pp;
  uint32_t n;
  int rc = array_at(&q, end, &n);
  if (rc != 1)
    goto malformed;
  if ((rc = kvp__relay_grow((void **)&d->h, &d->caph, d->nh + n + 1, sizeof *d->h)))
    return rc;
  for (uint32_t i = 0; i < n; i++) {
    size_t w = q < end ? int_width(*q) : 0;
    if (w == 0 || (size_t)(end - q) < w) { /* bytes, or beyond the end */
      const uint8_t *s;
      size_t len;
      int is_str;
      const uint8_t *o = q;
      if (skip(&q, end, 4) != 0)
        return BAD;
      if (!raw(o, &s, &len, &is_str) || len == 0)
        goto malformed;
      d->h[d->nh + i] = be(s + (len > 8 ? len - 8 : 0), len > 8 ? 8 : (int)len);
      continue;
    }
    as_hash(q, &d->h[d->nh + i]);
    q += w;
  }
  *count = n;
  *pp = q;
  return 0;
malformed:
  *pp = start;
  return skip(pp, end, 3) ? BAD : KVP_EPROTO;
}

/* token_ids at *pp (depth 3, not nil) into d->t as read_hashes does. */
static int read_tokens(kvp_relay_decoder_t *d, const uint8_t **pp, const uint8_t *end,
                       uint32_t *count) {
  const uint8_t *start = *pp, *q = *pp;
  uint32_t n;
  int64_t v;
  int rc = array_at(&q, end, &n);
  if (rc != 1)
    goto malformed;
  if ((rc = kvp__relay_grow((void **)&d->t, &d->capt, d->nt + n + 1, sizeof *d->t)))
    return rc;
  uint32_t *t = d->t + d->nt;
  for (uint32_t i = 0; i < n; i++) {
    if (q >= end)
      return BAD;
    uint8_t b = *q;
    if (b <= 0x7f) { /* the common token ids, inline */
      t[i] = b, q++;
      continue;
    }
    size_t w = int_width(b);
    if (w == 0 || (size_t)(end - q) < w)
      goto malformed;
    if (b == 0xcd) {
      t[i] = (uint32_t)be(q + 1, 2), q += 3;
      continue;
    }
    if (b == 0xce) {
      t[i] = (uint32_t)be(q + 1, 4), q += 5;
      continue;
    }
    if (as_int(q, &v) || v < 0 || v > UINT32_MAX)
      goto malformed;
    t[i] = (uint32_t)v;
    q += w;
  }
  *count = n;
  *pp = q;
  return 0;
malformed:
  *pp = start;
  return skip(pp, end, 3) ? BAD : KVP_EPROTO;
}

/* decode.c's event_fill for the slots f that are not read yet (the hashes
 * and token ids are). */
static int fill(kvp_relay_decoder_t *d, kvp_relay_event_t *e, const uint8_t *const f[S_STORED],
                const uint8_t *copies, const uint8_t *end) {
  const uint8_t *q;
  uint32_t n;
  int64_t v;
  int rc;
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

/* One event at *pp (depth 2), which moves past it. 0, KVP_EPROTO for a
 * malformed event, BAD, KVP_ENOMEM or KVP__RELAY_SCAN_SHAPE for a map
 * event. */
static int event(kvp_relay_decoder_t *d, const uint8_t **pp, const uint8_t *end,
                 kvp_relay_event_t *e) {
  const uint8_t *f[S_STORED] = {0}, *copies = NULL, *q = *pp, *tag;
  uint32_t n, cnt;
  int rc, err = 0;
  memset(e, 0, sizeof *e);
  if (q >= end)
    return BAD;
  if (is_map(q))
    return KVP__RELAY_SCAN_SHAPE;
  if ((rc = array_at(&q, end, &n)) != 1)
    return rc == BAD || skip(pp, end, 2) ? BAD : KVP_EPROTO;
  if (n == 0) {
    *pp = q;
    return KVP_EPROTO;
  }
  tag = q;
  if (skip(&q, end, 3))
    return BAD;
  if (str_is(tag, "BlockStored", 11))
    e->type = KVP_RELAY_EV_STORED;
  else if (str_is(tag, "BlockRemoved", 12))
    e->type = KVP_RELAY_EV_REMOVED;
  else if (str_is(tag, "AllBlocksCleared", 16))
    e->type = KVP_RELAY_EV_CLEARED;
  else
    err = 1;
  /* BlockRemoved: block_hashes, medium, group_idx, then locality (ignored)
   * or remaining_copy_counts, told apart by type. */
  static const int removed_slot[4] = {S_HASHES, S_MEDIUM, S_GROUP_IDX, -1};
  for (uint32_t i = 1; i < n; i++) {
    const uint8_t *s = q;
    int slot = (int)i - 1;
    if (q >= end)
      return BAD;
    if (e->type == KVP_RELAY_EV_REMOVED)
      slot = i - 1 < 4 ? removed_slot[i - 1] : S_STORED;
    if (!err && slot == S_HASHES && e->type != KVP_RELAY_EV_CLEARED) {
      rc = read_hashes(d, &q, end, &cnt);
      if (rc == KVP_EPROTO)
        err = 1;
      else if (rc != 0)
        return rc;
      else {
        e->nhashes = cnt;
        e->hashes = (const uint64_t *)(uintptr_t)d->nh; /* rebased once every event is read */
        d->nh += cnt;
      }
      f[S_HASHES] = s;
      continue;
    }
    if (!err && slot == S_TOKENS && e->type == KVP_RELAY_EV_STORED && !is_nil(q)) {
      rc = read_tokens(d, &q, end, &cnt);
      if (rc == KVP_EPROTO)
        err = 1;
      else if (rc != 0)
        return rc;
      else {
        e->ntokens = cnt;
        e->token_ids = (const uint32_t *)(uintptr_t)(d->nt + 1); /* +1: 0 means none */
        d->nt += cnt;
      }
      continue;
    }
    if (skip(&q, end, 3))
      return BAD;
    if (slot == -1 && as_array(s, &cnt, &tag))
      copies = s;
    else if (slot >= 0 && slot < S_STORED)
      f[slot] = s;
  }
  *pp = q;
  if (err || (e->type != KVP_RELAY_EV_CLEARED && !f[S_HASHES]))
    return KVP_EPROTO;
  if (e->type == KVP_RELAY_EV_CLEARED)
    return 0;
  return fill(d, e, f, copies, end);
}

int kvp__relay_scan(kvp_relay_decoder_t *d, const uint8_t *data, size_t len,
                    kvp_relay_decoded_t *out) {
  const uint8_t *end = data + len, *p = data, *ts, *rank = NULL;
  uint32_t n, nev;
  uint64_t u;
  int neg, rc;
  d->nev = d->nh = d->nt = 0;
  if (len == 0)
    return KVP_EPROTO;
  if (is_map(data))
    return KVP__RELAY_SCAN_SHAPE;
  if (array_at(&p, end, &n) != 1)
    return KVP_EPROTO; /* neither array nor map: the tree refuses it too */
  if (n < 2) {
    for (uint32_t i = 0; i < n; i++)
      if (skip(&p, end, 1))
        return KVP_EPROTO;
    return KVP_EPROTO;
  }
  ts = p;
  if (skip(&p, end, 1))
    return KVP_EPROTO;
  if (array_at(&p, end, &nev) != 1)
    return KVP_EPROTO; /* events not an array: the tree refuses the batch too */
  if ((rc = kvp__relay_grow((void **)&d->ev, &d->capev, (size_t)nev + 1, sizeof *d->ev)))
    return rc;
  for (uint32_t i = 0; i < nev; i++) {
    size_t nh = d->nh, nt = d->nt;
    rc = event(d, &p, end, &d->ev[d->nev]);
    if (rc == KVP_ENOMEM || rc == KVP__RELAY_SCAN_SHAPE)
      return rc;
    if (rc == BAD)
      return KVP_EPROTO;
    if (rc != 0) {
      d->nh = nh;
      d->nt = nt;
      out->errors++;
      continue;
    }
    d->nev++;
  }
  for (uint32_t i = 2; i < n; i++) {
    if (i == 2)
      rank = p;
    if (skip(&p, end, 1))
      return KVP_EPROTO;
  }
  if (p != end)
    return KVP_EPROTO; /* more than one object */
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
  return 0;
}
