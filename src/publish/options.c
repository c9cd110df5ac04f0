/* Publisher options: defaults, validation (messages name the option) and an
 * owned copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errf.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "publish/pub.h"

void kvp_publisher_opts_init(kvp_publisher_opts_t *o) {
  memset(o, 0, sizeof *o);
  kvp_nats_opts_init(&o->nats);
  o->ns = "default";
  o->mode = KVP_PUB_CORE;
  o->stream = "KVPLANE_EVENTS";
  o->stream_create = 1;
  o->overflow = KVP_OVERFLOW_BLOCK;
  o->coalesce = 1;
}

static int set(const char *s) {
  return s != NULL && s[0] != '\0';
}

int kvp__pub_opts_check(const kvp_publisher_opts_t *o, char *err, size_t errlen) {
  if (o == NULL)
    return kvp__errf(err, errlen, KVP_EINVAL, "options: NULL");
  if (!set(o->worker_id) || !kvp_subject_token_valid(o->worker_id))
    return kvp__errf(err, errlen, KVP_ECONFIG, "worker_id: required, 1..64 of [A-Za-z0-9_-]");
  if (set(o->ns) && !kvp_subject_token_valid(o->ns))
    return kvp__errf(err, errlen, KVP_ECONFIG, "ns: must be 1..64 of [A-Za-z0-9_-]");
  if (o->mode != KVP_PUB_CORE && o->mode != KVP_PUB_JETSTREAM)
    return kvp__errf(err, errlen, KVP_ECONFIG, "mode: must be core (0) or jetstream (1)");
  for (int t = 0; t <= KVP_TIER_MAX; t++)
    if (memchr(o->snapshot_volumes[t], '\0', sizeof o->snapshot_volumes[t]) == NULL)
      return kvp__errf(err, errlen, KVP_ECONFIG, "snapshot_volumes: a name is not NUL-terminated");
  if (o->mode == KVP_PUB_JETSTREAM && o->stream != NULL &&
      (o->stream[0] == '\0' || strpbrk(o->stream, " .*>\t") != NULL))
    return kvp__errf(err, errlen, KVP_ECONFIG, "stream: empty or contains ' ', '.', '*' or '>'");
  if (o->partitions > KVP_PARTITIONS_MAX)
    return kvp__errf(err, errlen, KVP_ECONFIG, "partitions: at most %d", KVP_PARTITIONS_MAX);
  if (o->stream_replicas > 5)
    return kvp__errf(err, errlen, KVP_ECONFIG, "stream_replicas: 0..5");
  if (o->overflow != KVP_OVERFLOW_BLOCK && o->overflow != KVP_OVERFLOW_DROP)
    return kvp__errf(err, errlen, KVP_ECONFIG, "overflow: must be block (0) or drop (1)");
  if (o->queue_capacity > (1u << 26))
    return kvp__errf(err, errlen, KVP_ECONFIG, "queue_capacity: at most 67108864 events");
  if (o->batch_max_events > 65536u)
    return kvp__errf(err, errlen, KVP_ECONFIG, "batch_max_events: at most 65536");
  if (o->batch_max_blocks > (1u << 20))
    return kvp__errf(err, errlen, KVP_ECONFIG, "batch_max_blocks: at most 1048576");
  if (o->batch_max_bytes != 0 && (o->batch_max_bytes < 1024 || o->batch_max_bytes > (8u << 20)))
    return kvp__errf(err, errlen, KVP_ECONFIG, "batch_max_bytes: between 1024 and 8388608");
  if (o->max_delay_ms > 60000)
    return kvp__errf(err, errlen, KVP_ECONFIG, "max_delay_ms: at most 60000");
  if (o->snapshot_tiers & ~0x1eu)
    return kvp__errf(err, errlen, KVP_ECONFIG, "snapshot_tiers: only bits 1 << 1 .. 1 << 4");
  if (o->model != NULL && strlen(o->model) > 255)
    return kvp__errf(err, errlen, KVP_ECONFIG, "model: at most 255 characters");
  kvp_nats_opts_t n = o->nats;
  if (n.servers[0] == '\0')
    snprintf(n.servers, sizeof n.servers, "%s", KVP_NATS_DEFAULT_SERVERS);
  if (n.connect_timeout_ms == 0)
    n.connect_timeout_ms = 5000;
  return kvp_nats_opts_check(&n, "nats.", err, errlen);
}

static size_t slen(const char *s) {
  return s ? strlen(s) + 1 : 0;
}

static const char *scopy(char **p, const char *s) {
  if (s == NULL)
    return NULL;
  size_t l = strlen(s) + 1;
  memcpy(*p, s, l);
  const char *r = *p;
  *p += l;
  return r;
}

int kvp__pub_opts_copy(kvp_publisher_t *pub, const kvp_publisher_opts_t *o) {
  kvp_publisher_opts_t c = *o;
  if (c.nats.servers[0] == '\0')
    snprintf(c.nats.servers, sizeof c.nats.servers, "%s", KVP_NATS_DEFAULT_SERVERS);
  if (c.nats.connect_timeout_ms == 0)
    c.nats.connect_timeout_ms = 5000;
  if (!set(c.ns))
    c.ns = "default";
  if (!set(c.stream))
    c.stream = "KVPLANE_EVENTS";
  size_t total = slen(c.ns) + slen(c.worker_id) + slen(c.model) + slen(c.stream);
  char *p = malloc(total + 1);
  if (p == NULL)
    return KVP_ENOMEM;
  pub->strs = p;
  c.ns = scopy(&p, c.ns);
  c.worker_id = scopy(&p, c.worker_id);
  c.model = scopy(&p, c.model);
  c.stream = scopy(&p, c.stream);
  if (c.batch_max_events == 0)
    c.batch_max_events = 4096;
  if (c.batch_max_blocks == 0)
    c.batch_max_blocks = 16384;
  if (c.batch_max_bytes == 0)
    c.batch_max_bytes = 256u << 10;
  if (c.max_delay_ms == 0)
    c.max_delay_ms = 5;
  if (c.queue_capacity == 0)
    c.queue_capacity = 65536;
  if (c.heartbeat_ms == 0)
    c.heartbeat_ms = 2000;
  if (c.ack_wait_ms == 0)
    c.ack_wait_ms = 2000;
  if (c.close_timeout_ms == 0)
    c.close_timeout_ms = 5000;
  if (c.js_max_inflight == 0)
    c.js_max_inflight = 256;
  if (c.snapshot_tiers == 0)
    c.snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2) | (1u << KVP_TIER_G3);
  pub->o = c;
  return 0;
}
