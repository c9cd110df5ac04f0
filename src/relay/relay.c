/* kvplane-relay (relay/relay.h): options, open, the poll loop over the
 * endpoints' SUB sockets, close and the figures. A message's handling is in
 * recover.c and apply.c. */
#include "relay/relay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/flock.h"
#include "kvplane/status.h"
#include "relay/metrics.h"
#include "relay/state.h"

void kvp_relay_opts_init(kvp_relay_opts_t *o) {
  memset(o, 0, sizeof *o);
  kvp_publisher_opts_init(&o->pub);
  o->topic = "";
  o->rcvhwm = 100000;
  o->map_cap = (size_t)1 << 20;
  o->replay_timeout_ms = 1000;
  o->join_window = 1u << 20;
  o->state_interval_ms = 200;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The publisher's snapshot source (kvplane/publisher.h): the blocks the
 * relay has published and not removed, per tier, with their parents, from
 * its map; called from
 * kvp_publisher_poll on the loop thread, which owns the map. Blocks whose
 * entries the map's LRU bound evicted are not in it. */
static int snapshot(void *ctx, int tier, uint64_t **hashes, uint64_t **parents, size_t *n) {
  kvp__relay_ep_t *ep = ctx;
  size_t cap = kvp__relay_map_size(ep->map);
  uint64_t *h = malloc((cap ? cap : 1) * sizeof *h), *p = malloc((cap ? cap : 1) * sizeof *p);
  if (!h || !p) {
    free(h);
    free(p);
    return KVP_ENOMEM;
  }
  *n = kvp__relay_map_tier(ep->map, tier, h, p);
  *hashes = h;
  *parents = p;            /* the prefix tree: the advisor re-stores each block under its parent */
  if (tier == KVP_TIER_G1) /* the first tier of each answer */
    CNT(ep, resyncs);
  return 0;
}

void kvp__relay_save(kvp__relay_ep_t *ep, int closing) {
  int rc;
  if (!ep->state_path[0] || !ep->pub || ep->last_seq < 0)
    return;
  int64_t seq = ep->last_seq;
  if (seq != ep->saved_seq) {
    kvp_publisher_stats_t ps;
    kvp_publisher_stats(ep->pub, &ps); /* before the flush: ids only grow after */
    if ((rc = kvp_publisher_flush(ep->pub, 2000)) != 0) {
      LOG(ep, "state not written: publisher flush: %s", kvp_strerror(rc));
      return;
    }
    kvp__relay_saved_t sv = {.seq = seq,
                             .epoch = kvp_publisher_epoch(ep->pub),
                             .next_event_id = ep->first_event_id + ps.queued};
    if ((rc = kvp__relay_state_write(ep->state_path, ep->endpoint, &sv)) != 0) {
      LOG(ep, "state not written to %s: %s", ep->state_path, kvp_strerror(rc));
      return;
    }
    ep->saved_seq = seq;
  }
  /* The map after the state: a crash between leaves a map behind the state,
   * which the replay buffer brings up to date, never one ahead of it. A
   * large map is written less often (at most 5% of the time), but always
   * at a stop, also when the state was written before it: a restart then
   * needs no replay (an engine's buffer may no longer reach back to an
   * older map, and the relay would have to clear the worker). */
  if (ep->map_file_seq == seq)
    return;
  uint64_t t0 = now_ms();
  if (!closing && t0 - ep->map_saved_ms < 20 * ep->map_cost_ms)
    return;
  if ((rc = kvp__relay_map_write(ep->map_path, seq, ep->map)) != 0) {
    LOG(ep, "map not written to %s: %s", ep->map_path, kvp_strerror(rc));
    return;
  }
  ep->map_file_seq = seq;
  ep->map_saved_ms = now_ms();
  ep->map_cost_ms = ep->map_saved_ms - t0;
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
  if (o->state_dir && o->state_dir[0] && access(o->state_dir, W_OK | X_OK) != 0) {
    snprintf(err, errlen, "--state-dir %s: not a writable directory", o->state_dir);
    return KVP_ECONFIG;
  }
  r = calloc(1, sizeof *r);
  if (!r)
    return KVP_ENOMEM;
  r->rcvhwm = o->rcvhwm > 0 ? o->rcvhwm : 100000;
  r->replay_timeout_ms = o->replay_timeout_ms ? o->replay_timeout_ms : 1000;
  r->join_window = o->join_window ? o->join_window : 1u << 20;
  r->block_size = o->block_size;
  r->state_interval_ms = o->state_interval_ms ? o->state_interval_ms : 200;
  kvp__relay_media_default(&r->media);
  if (o->media && (rc = kvp__relay_media_parse(&r->media, o->media, err, errlen)) != 0)
    goto fail;
  rc = KVP_ENOMEM;
  if (kvp__relay_decoder_create(&r->dec) != 0 || kvp__relay_decoder_create(&r->rdec) != 0 ||
      !(r->ep = calloc(o->nendpoints, sizeof *r->ep)) || !(r->zctx = zmq_ctx_new()))
    goto fail;
  for (size_t i = 0; i < o->nendpoints; i++) {
    const kvp_relay_endpoint_t *e = &o->endpoints[i];
    kvp__relay_ep_t *ep = &r->ep[i];
    r->nep++;
    ep->lock_fd = -1;
    ep->last_seq = -1;
    ep->st.last_seq = -1;
    ep->resume_seq = -1;
    ep->saved_seq = -1;
    ep->map_seq = -1;
    ep->map_file_seq = -1;
    if (!e->endpoint || strlen(e->endpoint) >= sizeof ep->endpoint ||
        (e->replay && strlen(e->replay) >= sizeof ep->replay)) {
      snprintf(err, errlen, "--endpoint: missing or too long (endpoint %zu)", i);
      rc = KVP_ECONFIG;
      goto fail;
    }
    snprintf(ep->endpoint, sizeof ep->endpoint, "%s", e->endpoint);
    snprintf(ep->replay, sizeof ep->replay, "%s", e->replay ? e->replay : "");
    snprintf(ep->worker, sizeof ep->worker, "%s", e->worker_id ? e->worker_id : "");
    if ((rc = kvp__relay_map_create(o->map_cap, &ep->map)) != 0)
      goto fail;
    kvp_publisher_opts_t po = o->pub;
    po.worker_id = e->worker_id;
    po.dp_rank = e->dp_rank;
    po.snapshot = snapshot;
    po.snapshot_ctx = ep;
    if (o->state_dir && o->state_dir[0]) {
      kvp__relay_saved_t sv;
      char lock[512];
      if (kvp__relay_state_path(ep->state_path, sizeof ep->state_path, o->state_dir, ep->worker,
                                "state") != 0 ||
          kvp__relay_state_path(ep->map_path, sizeof ep->map_path, o->state_dir, ep->worker,
                                "map") != 0 ||
          kvp__relay_state_path(lock, sizeof lock, o->state_dir, ep->worker, "lock") != 0) {
        snprintf(err, errlen, "--state-dir: path too long");
        rc = KVP_ECONFIG;
        goto fail;
      }
      /* One relay per worker and state directory: two would each publish
       * the worker under an epoch of their own (the advisor then takes
       * every batch of one as a restart of the other) and overwrite each
       * other's restart state. The lock file is never replaced, unlike the
       * state file (renamed over), so its lock holds across saves. */
      if ((rc = kvp__flock_take(lock, 1, &ep->lock_fd)) != 0) {
        if (rc == KVP_EBUSY)
          snprintf(err, errlen,
                   "--state-dir %s: worker %s is relayed by another kvplane-relay (%s is locked): "
                   "one relay per worker and state directory",
                   o->state_dir, ep->worker, lock);
        else
          snprintf(err, errlen, "--state-dir %s: cannot lock %s: %s", o->state_dir, lock,
                   strerror(errno));
        goto fail;
      }
      rc = kvp__relay_state_read(ep->state_path, ep->endpoint, &sv);
      if (rc == 0) {
        po.epoch = sv.epoch;
        po.first_event_id = sv.next_event_id + KVP__RELAY_ID_MARGIN;
        ep->resume_seq = ep->saved_seq = sv.seq;
        int mrc = kvp__relay_map_read(ep->map_path, &ep->map_seq, ep->map);
        if (mrc != 0 || ep->map_seq > sv.seq) {
          if (mrc == 0 || mrc != KVP_ENOENT)
            LOG(ep, "map file %s ignored (%s): rebuilt from the replay buffer", ep->map_path,
                mrc ? kvp_strerror(mrc) : "ahead of the state");
          kvp__relay_map_clear(ep->map);
          ep->map_seq = -1;
        }
        ep->map_file_seq = ep->map_seq;
        LOG(ep,
            "resuming epoch %" PRIu64 " after sequence %" PRId64 " (%s; map of %zu as of %" PRId64
            ")",
            sv.epoch, sv.seq, ep->state_path, kvp__relay_map_size(ep->map), ep->map_seq);
      } else if (rc != KVP_ENOENT) {
        LOG(ep, "state file %s ignored (%s): starting afresh", ep->state_path, kvp_strerror(rc));
      }
    }
    ep->first_event_id = po.first_event_id ? po.first_event_id : 1;
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
  uint64_t saved_at = now_ms();
  while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
    for (size_t i = 0; i < r->nep; i++) {
      /* Answers a due resync with the map's blocks; but not from a resumed
       * map older than what the last run published (a large map is saved
       * less often than the state): its older set would take the advisor
       * back, and the replay that brings the map up to date is silent for
       * what was published. The first engine message replays it (recover.c). */
      const kvp__relay_ep_t *ep = &r->ep[i];
      if (ep->resume_seq < 0 || ep->map_seq >= ep->resume_seq)
        kvp_publisher_poll(ep->pub);
    }
    if (now_ms() - saved_at >= r->state_interval_ms) {
      for (size_t i = 0; i < r->nep; i++)
        kvp__relay_save(&r->ep[i], 0);
      saved_at = now_ms();
    }
    int n = zmq_poll(items, (int)r->nep, 100);
    if (n <= 0)
      continue;
    for (size_t i = 0; i < r->nep; i++)
      if (items[i].revents & ZMQ_POLLIN)
        for (int k = 0; k < 256; k++) { /* drain a little, then let the others in */
          int ev = 0;
          size_t sz = sizeof ev;
          kvp__relay_on_message(r, &r->ep[i]);
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
    kvp__relay_save(&r->ep[i], 1);
    kvp_publisher_close(r->ep[i].pub);
    kvp__relay_map_destroy(r->ep[i].map);
    kvp__flock_release(r->ep[i].lock_fd); /* after the last save */
  }
  if (r->zctx)
    zmq_ctx_term(r->zctx);
  kvp__relay_decoder_destroy(r->dec);
  kvp__relay_decoder_destroy(r->rdec);
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
            ",\"kind\":%" PRIu64 ",\"kind_unknown\":%" PRIu64 "},\"gaps\":%" PRIu64
            ",\"replays\":%" PRIu64 ",\"replayed_msgs\":%" PRIu64 ",\"clears\":%" PRIu64
            ",\"restarts\":%" PRIu64 ",\"decode_errors\":%" PRIu64 ",\"lost\":%" PRIu64
            ",\"resyncs\":%" PRIu64 ",\"event_errors\":%" PRIu64 ",\"map_evictions\":%" PRIu64
            ",\"heartbeats\":%" PRIu64 ",\"last_seq\":%" PRId64 "}\n",
            r->ep[i].endpoint, r->ep[i].worker, s.msgs, s.in_stored, s.in_removed, s.in_cleared,
            s.out_stored, s.out_removed, s.out_cleared, s.blocks_kvp, s.blocks_native, s.skip_group,
            s.skip_medium, s.skip_dup, s.skip_kind, s.skip_kind_unknown, s.gaps, s.replays,
            s.replay_msgs, s.clears, s.restarts, s.decode_errors, s.lost, s.resyncs, s.event_errors,
            s.map_evictions, s.heartbeats, s.last_seq);
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
