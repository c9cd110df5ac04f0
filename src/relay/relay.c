/* kvplane-relay loop (kvplane/relay.h). */
#include "relay/relay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kvplane/hash.h"
#include "kvplane/status.h"
#include "relay/decode.h"
#include "relay/map.h"
#include "relay/metrics.h"

#define CNT(ep, f) __atomic_fetch_add(&(ep)->st.f, 1, __ATOMIC_RELAXED)
#define CNTN(ep, f, n) __atomic_fetch_add(&(ep)->st.f, (n), __ATOMIC_RELAXED)

#define KVP__UNKNOWN_LOGGED 16

typedef struct kvp__ep_s {
  char endpoint[256], replay[256], worker[65];
  void *sub;
  kvp_publisher_t *pub;
  kvp_relay_map_t *map;
  int64_t last_seq; /* -1: nothing seen yet */
  kvp_relay_stats_t st;
  char unknown[KVP__UNKNOWN_LOGGED][32]; /* media already logged */
  size_t nunknown;
} kvp__ep_t;

struct kvp_relay_s {
  void *zctx;
  kvp__ep_t *ep;
  size_t nep;
  int stop;
  int rcvhwm;
  uint32_t replay_timeout_ms, block_size;
  kvp_relay_media_t media;
  kvp_relay_decoder_t *dec;
  uint64_t *hbuf; /* kvplane hashes of one event */
  size_t hcap;
};

void kvp_relay_opts_init(kvp_relay_opts_t *o) {
  memset(o, 0, sizeof *o);
  kvp_publisher_opts_init(&o->pub);
  o->topic = "";
  o->rcvhwm = 100000;
  o->map_cap = (size_t)1 << 20;
  o->replay_timeout_ms = 1000;
}

#define LOG(ep, fmt, ...)                                                                          \
  fprintf(stderr, "kvplane-relay: %s (%s): " fmt "\n", (ep)->endpoint, (ep)->worker, __VA_ARGS__)

static int kvp__be64(const void *p, size_t n, int64_t *seq) {
  if (n != 8)
    return -1;
  const uint8_t *b = p;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | b[i];
  *seq = (int64_t)v;
  return 0;
}

/* Publishes AllBlocksCleared for the worker and forgets its hashes. */
static void kvp__clear(kvp__ep_t *ep, const char *why) {
  LOG(ep, "publishing AllBlocksCleared: %s", why);
  kvp__relay_map_clear(ep->map);
  if (kvp_publisher_cleared(ep->pub, KVP_TIER_ALL) == 0)
    CNT(ep, out_cleared);
  CNT(ep, clears);
}

static void kvp__unknown_medium(kvp__ep_t *ep, const kvp_relay_str_t *m) {
  size_t len = m->len < 31 ? m->len : 31;
  for (size_t i = 0; i < ep->nunknown; i++)
    if (strlen(ep->unknown[i]) == len && memcmp(ep->unknown[i], m->p, len) == 0)
      return;
  if (ep->nunknown < KVP__UNKNOWN_LOGGED) {
    memcpy(ep->unknown[ep->nunknown], m->p, len);
    ep->unknown[ep->nunknown++][len] = 0;
  }
  LOG(ep, "unknown medium \"%.*s\": its events are skipped (--media sets the table)", (int)len,
      m->p);
}

/* A kind other than the main full-attention group. */
static int kvp__hybrid(const kvp_relay_event_t *e) {
  if (e->group_idx > 0 || e->sliding_window > 0)
    return 1;
  if (e->kind.len == 0)
    return 0;
  static const char *const full[] = {"full_attention", "full", "FullAttentionSpec", "mla",
                                     "MLAAttentionSpec"};
  for (size_t i = 0; i < sizeof full / sizeof full[0]; i++)
    if (strlen(full[i]) == e->kind.len && memcmp(full[i], e->kind.p, e->kind.len) == 0)
      return 0;
  return 1;
}

static void kvp__stored(kvp_relay_t *r, kvp__ep_t *ep, const kvp_relay_event_t *e, int tier) {
  kvp_event_t ev = {.type = KVP_EV_STORED, .tier = tier, .lora_id = e->lora_id};
  size_t n = e->nhashes;
  uint32_t bs = e->block_size ? e->block_size : r->block_size;
  if (n == 0)
    return;
  if (r->hcap < n) {
    uint64_t *h = realloc(r->hbuf, n * sizeof *h);
    if (!h)
      return;
    r->hbuf = h;
    r->hcap = n;
  }
  int own = e->token_ids && !e->has_extra_keys && bs > 0 && e->ntokens >= (size_t)bs * n;
  uint64_t parent = 0;
  int has_parent = 0;
  if (own && e->has_parent) {
    has_parent = kvp__relay_map_get(ep->map, e->parent, &parent);
    if (!has_parent)
      own = 0; /* parent unknown to us: cannot chain, pass the engine's hashes */
  }
  if (own) {
    char salt[256];
    const kvp_relay_str_t *s = e->lora_name.len ? &e->lora_name : &e->cache_salt;
    size_t sl = s->len < sizeof salt - 1 ? s->len : sizeof salt - 1;
    if (sl)
      memcpy(salt, s->p, sl);
    salt[sl] = 0;
    uint64_t seed = kvp_hash_seed(salt);
    /* The engine's token_ids cover exactly these blocks; the last n full
     * blocks are the ones announced. */
    const uint32_t *tok = e->token_ids + (e->ntokens - (size_t)bs * n);
    uint64_t prev = parent;
    for (size_t i = 0; i < n; i++) {
      uint64_t local = kvp_hash_block(tok + i * bs, bs, seed);
      prev = (i == 0 && !has_parent) ? local : kvp_hash_chain(prev, local, seed);
      r->hbuf[i] = prev;
      if (kvp__relay_map_put(ep->map, e->hashes[i], prev))
        CNT(ep, map_evictions);
    }
    ev.hashes = r->hbuf;
    ev.has_parent = has_parent;
    ev.parent_hash = parent;
    CNTN(ep, blocks_kvp, n);
  } else {
    ev.hashes = e->hashes;
    ev.has_parent = e->has_parent;
    ev.parent_hash = e->parent;
    ev.engine_native = 1;
    CNTN(ep, blocks_native, n);
  }
  ev.nhashes = n;
  ev.block_tokens = bs;
  if (kvp_publisher_emit(ep->pub, &ev) == 0)
    CNT(ep, out_stored);
}

static void kvp__removed(kvp_relay_t *r, kvp__ep_t *ep, const kvp_relay_event_t *e, int tier) {
  size_t n = 0;
  if (r->hcap < e->nhashes) {
    uint64_t *h = realloc(r->hbuf, e->nhashes * sizeof *h);
    if (!h)
      return;
    r->hbuf = h;
    r->hcap = e->nhashes;
  }
  for (size_t i = 0; i < e->nhashes; i++) {
    uint64_t k;
    if (kvp__relay_map_take(ep->map, e->hashes[i], &k))
      r->hbuf[n++] = k;
    else
      r->hbuf[n++] = e->hashes[i], CNT(ep, skip_unmapped); /* engine-native, or evicted */
  }
  if (n && kvp_publisher_removed(ep->pub, tier, NULL, r->hbuf, n) == 0)
    CNT(ep, out_removed);
}

/* Applies one decoded payload. */
static void kvp__apply(kvp_relay_t *r, kvp__ep_t *ep, const uint8_t *payload, size_t len) {
  kvp_relay_decoded_t d;
  int rc = kvp__relay_decode(r->dec, payload, len, &d);
  if (rc != 0) {
    CNT(ep, decode_errors);
    LOG(ep, "payload of %zu bytes skipped: %s", len, kvp_strerror(rc));
    return;
  }
  CNTN(ep, event_errors, d.errors);
  for (size_t i = 0; i < d.nevents; i++) {
    const kvp_relay_event_t *e = &d.events[i];
    int tier;
    switch (e->type) {
    case KVP_RELAY_EV_CLEARED:
      CNT(ep, in_cleared);
      kvp__relay_map_clear(ep->map);
      if (kvp_publisher_cleared(ep->pub, KVP_TIER_ALL) == 0)
        CNT(ep, out_cleared);
      continue;
    case KVP_RELAY_EV_STORED:
      CNT(ep, in_stored);
      break;
    default:
      CNT(ep, in_removed);
      break;
    }
    if (kvp__hybrid(e)) {
      CNT(ep, skip_group);
      continue;
    }
    tier = kvp__relay_media_tier(&r->media, e->medium.p, e->medium.len);
    if (tier == 0) {
      CNT(ep, skip_medium);
      kvp__unknown_medium(ep, &e->medium);
      continue;
    }
    if (e->type == KVP_RELAY_EV_STORED)
      kvp__stored(r, ep, e, tier);
    else
      kvp__removed(r, ep, e, tier);
  }
}

/* Reads one multipart message into parts (up to max, sizes in n); returns
 * the frame count (beyond max frames are read and dropped), or -1. */
static int kvp__recv_parts(void *sock, zmq_msg_t *parts, int max, int flags) {
  int count = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, count == 0 ? flags : 0) < 0) {
      zmq_msg_close(&m);
      for (int i = 0; i < count && i < max; i++)
        zmq_msg_close(&parts[i]);
      return -1;
    }
    more = zmq_msg_more(&m);
    if (count < max)
      parts[count] = m;
    else
      zmq_msg_close(&m);
    count++;
  }
  return count;
}

static void kvp__close_parts(zmq_msg_t *parts, int n, int max) {
  for (int i = 0; i < n && i < max; i++)
    zmq_msg_close(&parts[i]);
}

/* Asks the replay socket for start..; applies what comes back up to (not
 * including) until. Returns 0 when every sequence from start to until-1
 * arrived, -1 otherwise. */
static int kvp__replay(kvp_relay_t *r, kvp__ep_t *ep, int64_t start, int64_t until) {
  int ok = -1, linger = 0, tmo = (int)r->replay_timeout_ms;
  int64_t next = start;
  void *d = zmq_socket(r->zctx, ZMQ_DEALER);
  if (!d)
    return -1;
  CNT(ep, replays);
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(d, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  if (zmq_connect(d, ep->replay) != 0)
    goto done;
  uint8_t be[8];
  for (int i = 0; i < 8; i++)
    be[i] = (uint8_t)((uint64_t)start >> (56 - 8 * i));
  if (zmq_send(d, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(d, be, 8, 0) < 0)
    goto done;
  for (;;) {
    zmq_msg_t p[4];
    int n = kvp__recv_parts(d, p, 4, 0);
    if (n < 0) {
      LOG(ep, "replay from %" PRId64 ": no answer in %u ms", start, r->replay_timeout_ms);
      goto done;
    }
    int si; /* index of the sequence frame */
    if (n == 4 && zmq_msg_size(&p[0]) == 0)
      si = 2;
    else if (n == 3 && zmq_msg_size(&p[0]) == 0)
      si = 1;
    else if (n == 2)
      si = 0;
    else {
      CNT(ep, decode_errors);
      kvp__close_parts(p, n, 4);
      continue;
    }
    int64_t seq;
    if (kvp__be64(zmq_msg_data(&p[si]), zmq_msg_size(&p[si]), &seq) != 0) {
      CNT(ep, decode_errors);
      kvp__close_parts(p, n, 4);
      continue;
    }
    if (seq == -1) {
      kvp__close_parts(p, n, 4);
      break;
    }
    if (seq == next && seq < until) {
      CNT(ep, replay_msgs);
      CNT(ep, msgs);
      kvp__apply(r, ep, zmq_msg_data(&p[si + 1]), zmq_msg_size(&p[si + 1]));
      next++;
      ep->last_seq = seq;
    } else {
      CNT(ep, skip_dup); /* outside the range asked for, or out of order */
    }
    kvp__close_parts(p, n, 4);
  }
  ok = next >= until ? 0 : -1;
  if (ok)
    LOG(ep, "replay from %" PRId64 " ended at %" PRId64 ", wanted up to %" PRId64, start, next,
        until - 1);
done:
  zmq_close(d);
  return ok;
}

static void kvp__on_message(kvp_relay_t *r, kvp__ep_t *ep) {
  zmq_msg_t p[3];
  int n = kvp__recv_parts(ep->sub, p, 3, ZMQ_DONTWAIT);
  int64_t seq;
  if (n < 0)
    return;
  if (n != 3 || kvp__be64(zmq_msg_data(&p[1]), zmq_msg_size(&p[1]), &seq) != 0) {
    CNT(ep, decode_errors);
    LOG(ep, "message of %d frames skipped (want topic, 8-byte seq, payload)", n);
    goto out;
  }
  CNT(ep, msgs);
  if (ep->last_seq >= 0) {
    if (seq <= ep->last_seq) {
      /* PUB/SUB never repeats a message on the live socket, and replayed
       * messages never go past the live one that asked for them: a
       * sequence that goes back is a restarted engine publisher (which
       * counts from 0 again, though its first messages may be lost). */
      CNT(ep, restarts);
      kvp__clear(ep, "engine publisher restarted (sequence went back)");
    } else if (seq > ep->last_seq + 1) {
      CNT(ep, gaps);
      LOG(ep, "sequence gap: %" PRId64 " after %" PRId64, seq, ep->last_seq);
      if (!ep->replay[0] || kvp__replay(r, ep, ep->last_seq + 1, seq) != 0)
        kvp__clear(ep, ep->replay[0] ? "replay failed or too short" : "no replay endpoint");
    }
  }
  kvp__apply(r, ep, zmq_msg_data(&p[2]), zmq_msg_size(&p[2]));
  ep->last_seq = seq;
  __atomic_store_n(&ep->st.last_seq, seq, __ATOMIC_RELAXED);
out:
  kvp__close_parts(p, n, 3);
}

int kvp_relay_open(const kvp_relay_opts_t *o, kvp_relay_t **out, char *err, size_t errlen) {
  int rc = KVP_ENOMEM;
  kvp_relay_t *r = NULL;
  *out = NULL;
  if (o->nendpoints == 0 || o->nendpoints > KVP_RELAY_MAX_ENDPOINTS) {
    snprintf(err, errlen, "--endpoint: between 1 and %d endpoints", KVP_RELAY_MAX_ENDPOINTS);
    return KVP_ECONFIG;
  }
  if (o->map_cap == 0 || o->map_cap > (1u << 30)) {
    snprintf(err, errlen, "--map-cap: 1..%u", 1u << 30);
    return KVP_ECONFIG;
  }
  r = calloc(1, sizeof *r);
  if (!r)
    return KVP_ENOMEM;
  r->rcvhwm = o->rcvhwm > 0 ? o->rcvhwm : 100000;
  r->replay_timeout_ms = o->replay_timeout_ms ? o->replay_timeout_ms : 1000;
  r->block_size = o->block_size;
  kvp__relay_media_default(&r->media);
  if (o->media && (rc = kvp__relay_media_parse(&r->media, o->media, err, errlen)) != 0)
    goto fail;
  rc = KVP_ENOMEM;
  r->dec = kvp__relay_decoder_new();
  r->ep = calloc(o->nendpoints, sizeof *r->ep);
  r->zctx = zmq_ctx_new();
  if (!r->dec || !r->ep || !r->zctx)
    goto fail;
  for (size_t i = 0; i < o->nendpoints; i++) {
    const kvp_relay_endpoint_t *e = &o->endpoints[i];
    kvp__ep_t *ep = &r->ep[i];
    r->nep++;
    ep->last_seq = -1;
    ep->st.last_seq = -1;
    if (!e->endpoint || strlen(e->endpoint) >= sizeof ep->endpoint ||
        (e->replay && strlen(e->replay) >= sizeof ep->replay)) {
      snprintf(err, errlen, "--endpoint: missing or too long (endpoint %zu)", i);
      rc = KVP_ECONFIG;
      goto fail;
    }
    snprintf(ep->endpoint, sizeof ep->endpoint, "%s", e->endpoint);
    snprintf(ep->replay, sizeof ep->replay, "%s", e->replay ? e->replay : "");
    snprintf(ep->worker, sizeof ep->worker, "%s", e->worker_id ? e->worker_id : "");
    if (!(ep->map = kvp__relay_map_new(o->map_cap)))
      goto fail;
    kvp_publisher_opts_t po = o->pub;
    po.worker_id = e->worker_id;
    po.dp_rank = e->dp_rank;
    if ((rc = kvp_publisher_open(&po, &ep->pub, err, errlen)) != 0)
      goto fail;
    rc = KVP_EIO;
    ep->sub = zmq_socket(r->zctx, ZMQ_SUB);
    int linger = 0;
    if (!ep->sub || zmq_setsockopt(ep->sub, ZMQ_RCVHWM, &r->rcvhwm, sizeof r->rcvhwm) != 0 ||
        zmq_setsockopt(ep->sub, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(ep->sub, ZMQ_SUBSCRIBE, o->topic ? o->topic : "",
                       o->topic ? strlen(o->topic) : 0) != 0 ||
        zmq_connect(ep->sub, ep->endpoint) != 0) {
      snprintf(err, errlen, "--endpoint %s: %s", ep->endpoint, zmq_strerror(zmq_errno()));
      rc = KVP_ECONFIG;
      goto fail;
    }
  }
  *out = r;
  return 0;
fail:
  kvp_relay_close(r);
  return rc;
}

int kvp_relay_run(kvp_relay_t *r) {
  zmq_pollitem_t items[KVP_RELAY_MAX_ENDPOINTS];
  for (size_t i = 0; i < r->nep; i++)
    items[i] = (zmq_pollitem_t){.socket = r->ep[i].sub, .events = ZMQ_POLLIN};
  while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
    int n = zmq_poll(items, (int)r->nep, 100);
    if (n <= 0)
      continue;
    for (size_t i = 0; i < r->nep; i++)
      if (items[i].revents & ZMQ_POLLIN)
        for (int k = 0; k < 256; k++) { /* drain a little, then let the others in */
          int ev = 0;
          size_t sz = sizeof ev;
          kvp__on_message(r, &r->ep[i]);
          if (zmq_getsockopt(r->ep[i].sub, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN))
            break;
        }
  }
  return 0;
}

void kvp_relay_stop(kvp_relay_t *r) {
  __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
}

int kvp_relay_stopped(kvp_relay_t *r) {
  return __atomic_load_n(&r->stop, __ATOMIC_RELAXED);
}

void kvp_relay_close(kvp_relay_t *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nep; i++) {
    if (r->ep[i].sub)
      zmq_close(r->ep[i].sub);
    kvp_publisher_close(r->ep[i].pub);
    kvp__relay_map_free(r->ep[i].map);
  }
  if (r->zctx)
    zmq_ctx_term(r->zctx);
  kvp__relay_decoder_free(r->dec);
  free(r->hbuf);
  free(r->ep);
  free(r);
}

int kvp_relay_stats(kvp_relay_t *r, size_t i, kvp_relay_stats_t *s) {
  if (i >= r->nep)
    return KVP_EINVAL;
  const uint64_t *src = (const uint64_t *)&r->ep[i].st;
  uint64_t *dst = (uint64_t *)s;
  for (size_t k = 0; k < sizeof *s / sizeof(uint64_t); k++)
    dst[k] = __atomic_load_n(&src[k], __ATOMIC_RELAXED);
  return 0;
}

void kvp_relay_stats_print(kvp_relay_t *r, void *file) {
  FILE *f = file;
  for (size_t i = 0; i < r->nep; i++) {
    kvp_relay_stats_t s;
    kvp_relay_stats(r, i, &s);
    fprintf(f,
            "{\"endpoint\":\"%s\",\"worker\":\"%s\",\"msgs\":%" PRIu64
            ",\"in\":{\"stored\":%" PRIu64 ",\"removed\":%" PRIu64 ",\"cleared\":%" PRIu64
            "},\"out\":{\"stored\":%" PRIu64 ",\"removed\":%" PRIu64 ",\"cleared\":%" PRIu64
            "},\"blocks\":{\"kvplane\":%" PRIu64 ",\"engine_native\":%" PRIu64
            "},\"skipped\":{\"group\":%" PRIu64 ",\"medium\":%" PRIu64 ",\"duplicate\":%" PRIu64
            "},\"gaps\":%" PRIu64 ",\"replays\":%" PRIu64 ",\"replayed_msgs\":%" PRIu64
            ",\"clears\":%" PRIu64 ",\"restarts\":%" PRIu64 ",\"decode_errors\":%" PRIu64
            ",\"event_errors\":%" PRIu64 ",\"map_evictions\":%" PRIu64 ",\"last_seq\":%" PRId64
            "}\n",
            r->ep[i].endpoint, r->ep[i].worker, s.msgs, s.in_stored, s.in_removed, s.in_cleared,
            s.out_stored, s.out_removed, s.out_cleared, s.blocks_kvp, s.blocks_native, s.skip_group,
            s.skip_medium, s.skip_dup, s.gaps, s.replays, s.replay_msgs, s.clears, s.restarts,
            s.decode_errors, s.event_errors, s.map_evictions, s.last_seq);
  }
  fflush(f);
}

size_t kvp__relay_endpoint_count(const kvp_relay_t *r) {
  return r->nep;
}

const char *kvp__relay_endpoint_worker(const kvp_relay_t *r, size_t i) {
  return r->ep[i].worker;
}

kvp_publisher_t *kvp__relay_endpoint_publisher(const kvp_relay_t *r, size_t i) {
  return r->ep[i].pub;
}
