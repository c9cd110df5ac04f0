/* Tiering leases in a JetStream key-value bucket; see lease.h.
 * Why this file is long: the lease thread's take, renewal and release of
 * every key say in their own log lines what the key lets the advisor do
 * (tier a partition or the namespace, or delete what an unpartitioned
 * deployment left), and who else holds it; split, they would share all the
 * state. */
#define _GNU_SOURCE
#include "advisor/lease.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

typedef struct slot_s {
  int counted; /* a partition's (unpartitioned: the namespace's): in nheld */
  int want;    /* mutex: the loop wants the lease */
  char holder[KVP__ADV_LEASE_HOLDER_MAX]; /* mutex: who holds it when not this advisor ("": nobody
                                             known) */
  _Atomic uint64_t valid_ms; /* monotonic ms until which the lease is held (0: not held) */
  int held;                  /* thread: the key is at rev, written by this advisor */
  uint64_t rev;              /* thread */
  uint64_t next_ms;          /* thread: the next create or renewal */
  int said;                  /* thread: what was logged last (lines once per change) */
} slot_t;

struct kvp__adv_lease_s {
  jsCtx *js;
  kvStore *kv;
  char bucket[96];
  char value[512];
  int vlen;
  uint64_t ttl_ms;
  uint32_t count;  /* partitions (whole: 1) */
  uint32_t nslots; /* partitioned: count + 1, the last the namespace's (key "all") */
  int whole;       /* one lease for the namespace (lease.h): key "all" */
  char ns[80];     /* for the logs */
  slot_t *s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int started, stop;
  atomic_int nheld;
};

static uint64_t mono_ms(void) {
  return kvp__now_ns() / 1000000u;
}

void kvp__adv_lease_bucket(const char *ns, char *buf, size_t len) {
  snprintf(buf, len, "kvplane-leases-%s", ns);
  for (char *c = buf; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_'))
      *c = '_';
}

int kvp__adv_lease_holder(const void *data, size_t len, char *out, size_t outlen) {
  json_t *o = json_loadb(data, len, 0, NULL);
  const char *name = NULL, *host = NULL;
  json_int_t pid = -1, parts = 0;
  if (json_is_object(o)) {
    name = json_string_value(json_object_get(o, "advisor"));
    host = json_string_value(json_object_get(o, "host"));
    json_t *p = json_object_get(o, "pid"), *n = json_object_get(o, "partitions");
    pid = json_is_integer(p) ? json_integer_value(p) : -1;
    parts = json_is_integer(n) ? json_integer_value(n) : 0;
  }
  if (name == NULL || host == NULL || pid < 0) {
    snprintf(out, outlen, "an unknown holder (%zu bytes that are not a lease's value)", len);
    json_decref(o);
    return KVP_EINVAL;
  }
  snprintf(out, outlen, "advisor %.64s (host %.64s, pid %lld)%s", name, host, (long long)pid,
           parts > 0 ? ", partitioned" : "");
  json_decref(o);
  return 0;
}

/* Whether slot p is the namespace's lease (key "all"). */
static int is_ns(const kvp__adv_lease_t *l, uint32_t p) {
  return l->whole || p == l->count;
}

/* The slot of partition p, or of the namespace (KVP__ADV_LEASE_NS); NULL
 * when there is none. */
static slot_t *slot_of(const kvp__adv_lease_t *l, uint32_t p) {
  if (l == NULL || (p >= l->count && p != KVP__ADV_LEASE_NS))
    return NULL;
  return p == KVP__ADV_LEASE_NS ? &l->s[l->nslots - 1] : &l->s[p];
}

static void key_of(const kvp__adv_lease_t *l, uint32_t p, char *buf, size_t len) {
  if (is_ns(l, p))
    snprintf(buf, len, "all");
  else
    snprintf(buf, len, "p%" PRIu32, p);
}

/* What a lease is for, in the logs: "partition P" or "namespace NS". */
static const char *name_of(const kvp__adv_lease_t *l, uint32_t p, char *buf, size_t len) {
  if (is_ns(l, p))
    snprintf(buf, len, "namespace %s", l->ns);
  else
    snprintf(buf, len, "partition %" PRIu32, p);
  return buf;
}

/* What holding slot p lets this advisor do, in the logs. */
static const char *does(const kvp__adv_lease_t *l, uint32_t p) {
  return is_ns(l, p) && !l->whole ? "delete what an unpartitioned deployment left under its key "
                                    "namespace (the scrub)"
                                  : "tier";
}

static void set_valid(kvp__adv_lease_t *l, slot_t *s, uint64_t until) {
  uint64_t was = atomic_exchange(&s->valid_ms, until);
  if (s->counted && (was != 0) != (until != 0))
    atomic_fetch_add(&l->nheld, until != 0 ? 1 : -1);
}

/* Who holds p's key now, into the slot (mutex); 1 when the key exists
 * (*mine: with this advisor's own value, at revision *rev), 0 when it does
 * not, -1 without an answer. */
static int look(kvp__adv_lease_t *l, slot_t *s, const char *key, int *mine, uint64_t *rev) {
  kvEntry *e = NULL;
  char who[KVP__ADV_LEASE_HOLDER_MAX];
  natsStatus st = kvStore_Get(&e, l->kv, key);
  *mine = 0;
  if (st != NATS_OK)
    return st == NATS_NOT_FOUND ? 0 : -1;
  kvp__adv_lease_holder(kvEntry_Value(e), (size_t)kvEntry_ValueLen(e), who, sizeof who);
  /* The value names this process and its start: nobody else writes it. */
  *mine =
      kvEntry_ValueLen(e) == l->vlen && memcmp(kvEntry_Value(e), l->value, (size_t)l->vlen) == 0;
  *rev = kvEntry_Revision(e);
  kvEntry_Destroy(e);
  pthread_mutex_lock(&l->mu);
  snprintf(s->holder, sizeof s->holder, "%s", who);
  pthread_mutex_unlock(&l->mu);
  return 1;
}

enum { SAID_NONE, SAID_HELD, SAID_WAIT, SAID_ERR, SAID_GONE };

static void acquire(kvp__adv_lease_t *l, uint32_t p, slot_t *s, uint64_t now) {
  char key[16], nm[96];
  uint64_t rev = 0;
  key_of(l, p, key, sizeof key);
  natsStatus st = kvStore_Create(&rev, l->kv, key, l->value, l->vlen);
  s->next_ms = now + l->ttl_ms / 3;
  if (st == NATS_OK) {
    s->held = 1;
    s->rev = rev;
    set_valid(l, s, now + 2 * l->ttl_ms / 3);
    pthread_mutex_lock(&l->mu);
    s->holder[0] = '\0';
    pthread_mutex_unlock(&l->mu);
    kvp_log_info("tiering: %s: this advisor holds its tiering lease "
                 "(bucket %s, revision %" PRIu64 ", TTL %" PRIu64 " ms)%s",
                 name_of(l, p, nm, sizeof nm), l->bucket, rev, l->ttl_ms,
                 is_ns(l, p) && !l->whole ? ": its scrub deletes what an unpartitioned deployment "
                                            "left under the namespace's own key namespace"
                                          : "");
    s->said = SAID_HELD;
    return;
  }
  const char *why = nats_GetLastError(NULL);
  char why_copy[200];
  snprintf(why_copy, sizeof why_copy, "%s", why ? why : natsStatus_GetText(st));
  char before[KVP__ADV_LEASE_HOLDER_MAX];
  pthread_mutex_lock(&l->mu);
  snprintf(before, sizeof before, "%s", s->holder);
  pthread_mutex_unlock(&l->mu);
  int mine = 0;
  int there = look(l, s, key, &mine, &rev);
  if (there == 1 && mine) {
    /* Ours already (a create whose answer was lost): renewed from it. */
    s->held = 1;
    s->rev = rev;
    s->next_ms = now; /* renewed at once: its validity is not known */
    return;
  }
  if (there == 1) {
    char who[KVP__ADV_LEASE_HOLDER_MAX];
    pthread_mutex_lock(&l->mu);
    snprintf(who, sizeof who, "%s", s->holder);
    pthread_mutex_unlock(&l->mu);
    if ((s->said != SAID_WAIT || strcmp(before, who) != 0) && is_ns(l, p) && !l->whole)
      kvp_log_info("tiering: %s: %s holds its lease: what an unpartitioned deployment left under "
                   "its key namespace is not deleted here (another partitioned advisor deletes "
                   "it, or an unpartitioned tiering advisor still runs); trying again every "
                   "%" PRIu64 " ms",
                   name_of(l, p, nm, sizeof nm), who, l->ttl_ms / 3);
    else if ((s->said != SAID_WAIT || strcmp(before, who) != 0) && l->whole &&
             strstr(who, ", partitioned"))
      kvp_log_warn("tiering: namespace %s: %s holds its lease: the deployment is partitioned, "
                   "and that advisor deletes what was left under key namespace %s; this "
                   "unpartitioned advisor does not tier (stop it: docs/SCALE.md)",
                   l->ns, who, l->ns);
    else if (s->said != SAID_WAIT || strcmp(before, who) != 0) /* once per holder */
      kvp_log_info("tiering: %s is tiered by %s, which holds its lease: not "
                   "tiered here; trying again every %" PRIu64 " ms (a standby)",
                   name_of(l, p, nm, sizeof nm), who, l->ttl_ms / 3);
    s->said = SAID_WAIT;
    return;
  }
  if (there == 0 && s->said != SAID_GONE && s->said != SAID_ERR) {
    /* Gone between the two calls (released or expired): at once, quietly
     * the first time (a hand-over, lease.h). */
    s->next_ms = now + 50;
    s->said = SAID_GONE;
    return;
  }
  if (there == 0)
    s->next_ms = now + 50;
  if (s->said != SAID_ERR)
    kvp_log_warn("tiering: %s: its lease cannot be taken (bucket %s: %s): this advisor "
                 "does not %s until it is",
                 name_of(l, p, nm, sizeof nm), l->bucket, why_copy, does(l, p));
  s->said = SAID_ERR;
}

static void renew(kvp__adv_lease_t *l, uint32_t p, slot_t *s, uint64_t now) {
  char key[16], nm[96];
  uint64_t rev = 0;
  key_of(l, p, key, sizeof key);
  natsStatus st = kvStore_Update(&rev, l->kv, key, l->value, l->vlen, s->rev);
  if (st == NATS_OK) {
    s->rev = rev;
    s->next_ms = now + l->ttl_ms / 3;
    set_valid(l, s, now + 2 * l->ttl_ms / 3);
    if (s->said != SAID_HELD)
      kvp_log_info("tiering: %s: its lease is renewed again", name_of(l, p, nm, sizeof nm));
    s->said = SAID_HELD;
    return;
  }
  int mine = 0;
  int there = look(l, s, key, &mine, &rev);
  if (there == 1 && mine) {
    /* Still ours (an update whose answer was lost, or refused for another
     * cause): tried again soon from the revision there; valid as before. */
    s->rev = rev;
    s->next_ms = now + l->ttl_ms / 10 + 1;
    if (now >= atomic_load(&s->valid_ms))
      set_valid(l, s, 0); /* until a renewal succeeds */
    return;
  }
  if (there >= 0) {
    /* Another revision, or no key: another advisor took it, or it expired. */
    s->held = 0;
    set_valid(l, s, 0);
    s->next_ms = there ? now + l->ttl_ms / 3 : now;
    kvp_log_warn("tiering: %s: this advisor lost its tiering lease (%s): it "
                 "stops (%s) before its next operation",
                 name_of(l, p, nm, sizeof nm), there ? "another advisor holds it" : "it expired",
                 does(l, p));
    s->said = SAID_NONE;
    return;
  }
  /* No answer: held while valid, tried again soon. */
  s->next_ms = now + l->ttl_ms / 10 + 1;
  if (now >= atomic_load(&s->valid_ms)) {
    set_valid(l, s, 0);
    if (s->said != SAID_ERR)
      kvp_log_warn("tiering: %s: no answer from the lease bucket %s for %" PRIu64
                   " ms: this advisor does not %s until the lease is renewed or taken again",
                   name_of(l, p, nm, sizeof nm), l->bucket, 2 * l->ttl_ms / 3, does(l, p));
    s->said = SAID_ERR;
  }
}

/* Deletes p's key if it is still at this advisor's revision (else it is
 * left: another's, or it expires by itself). Returns -1 when the servers
 * did not answer, else 0. */
static int release(kvp__adv_lease_t *l, uint32_t p, slot_t *s) {
  char subj[160], key[16], nm[96];
  natsMsg *m = NULL;
  jsPubOptions po;
  key_of(l, p, key, sizeof key);
  set_valid(l, s, 0);
  s->held = 0;
  s->said = SAID_NONE;
  snprintf(subj, sizeof subj, "$KV.%s.%s", l->bucket, key);
  jsPubOptions_Init(&po);
  po.ExpectLastSubjectSeq = s->rev;
  po.MaxWait = (int64_t)(l->ttl_ms / 3 + 1);
  natsStatus st = natsMsg_Create(&m, subj, NULL, NULL, 0);
  if (st == NATS_OK)
    st = natsMsgHeader_Set(m, "KV-Operation", "DEL");
  if (st == NATS_OK)
    st = js_PublishMsg(NULL, l->js, m, &po, NULL);
  int ok = st == NATS_OK;
  if (ok)
    kvp_log_info("tiering: %s: its tiering lease is released", name_of(l, p, nm, sizeof nm));
  else
    kvp_log_info("tiering: %s: its tiering lease was not released (%s): it "
                 "expires by itself",
                 name_of(l, p, nm, sizeof nm),
                 nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "no answer");
  natsMsg_Destroy(m);
  return ok || st != NATS_TIMEOUT ? 0 : -1; /* -1: no answer */
}

static void *run(void *arg) {
  kvp__adv_lease_t *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    uint64_t now = mono_ms(), wake = now + l->ttl_ms / 3;
    for (uint32_t p = 0; p < l->nslots && !l->stop; p++) {
      slot_t *s = &l->s[p];
      int want = s->want;
      if (!want && !s->held)
        continue;
      if ((want && now < s->next_ms) || (!want && !s->held)) {
        if (s->next_ms < wake)
          wake = s->next_ms;
        continue;
      }
      pthread_mutex_unlock(&l->mu);
      if (!want)
        release(l, p, s);
      else if (s->held)
        renew(l, p, s, now);
      else
        acquire(l, p, s, now);
      now = mono_ms();
      pthread_mutex_lock(&l->mu);
      if (s->want && s->next_ms < wake)
        wake = s->next_ms;
    }
    now = mono_ms();
    if (!l->stop && wake > now) {
      struct timespec ts = kvp__realtime_in((wake - now) * 1000000u);
      pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
  }
  pthread_mutex_unlock(&l->mu);
  /* A clean stop releases what is held; after one release without an
   * answer the others are left to expire (a stop does not wait TTL/3 per
   * partition while the servers are away). */
  int answered = 1;
  for (uint32_t p = 0; p < l->nslots; p++)
    if (l->s[p].held) {
      if (answered)
        answered = release(l, p, &l->s[p]) == 0;
      set_valid(l, &l->s[p], 0);
      l->s[p].held = 0;
    }
  return NULL;
}

static int describe(kvp__adv_lease_t *l, const char *me) {
  char host[128] = "";
  gethostname(host, sizeof host - 1);
  json_t *v = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "advisor", me, "host", host, "pid",
                        (json_int_t)getpid(), "started_ms", (json_int_t)kvp__unix_ms(), "lease_ms",
                        (json_int_t)l->ttl_ms, "partitions", (json_int_t)(l->whole ? 0 : l->count));
  char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  if (text == NULL || strlen(text) >= sizeof l->value) {
    free(text);
    return KVP_ENOMEM;
  }
  l->vlen = snprintf(l->value, sizeof l->value, "%s", text);
  free(text);
  return 0;
}

int kvp__adv_lease_open(const kvp_advisor_config_t *cfg, natsConnection *nc, uint32_t count,
                        const char *me, kvp__adv_lease_t **out, char *err, size_t errlen) {
  kvp__adv_lease_t *l = calloc(1, sizeof *l);
  jsOptions jo;
  kvConfig kc;
  natsStatus st;
  *out = NULL;
  if (l == NULL || (l->s = calloc(count ? count + 1 : 1, sizeof *l->s)) == NULL) {
    free(l);
    return KVP_ENOMEM;
  }
  l->whole = count == 0;
  l->count = count ? count : 1;
  l->nslots = count ? count + 1 : 1;
  snprintf(l->ns, sizeof l->ns, "%s", cfg->ns);
  l->ttl_ms = (uint64_t)cfg->tier_lease_ms;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  atomic_init(&l->nheld, 0);
  for (uint32_t p = 0; p < l->nslots; p++) {
    atomic_init(&l->s[p].valid_ms, 0);
    l->s[p].counted = l->whole || p < l->count; /* not the namespace's beside partitions */
  }
  kvp__adv_lease_bucket(cfg->ns, l->bucket, sizeof l->bucket);
  jsOptions_Init(&jo);
  jo.Wait = (int64_t)(l->ttl_ms / 3 + 1); /* a call never outlasts a renewal period */
  if ((st = natsConnection_JetStream(&l->js, nc, &jo)) != NATS_OK)
    goto nats_fail;
  kvConfig_Init(&kc);
  kc.Bucket = l->bucket;
  kc.Description = "kvplane: which advisor tiers each partition, or the namespace (docs/SCALE.md)";
  kc.History = 1;
  kc.TTL = (int64_t)l->ttl_ms * 1000000; /* nanoseconds: the stream's max_age */
  kc.StorageType = js_FileStorage;
  kc.Replicas = (int)cfg->replicas;
  if ((st = js_CreateKeyValue(&l->kv, l->js, &kc)) != NATS_OK) {
    /* There already, perhaps with another TTL: bound to as it is. */
    char why[256];
    snprintf(why, sizeof why, "%s",
             nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(st));
    if ((st = js_KeyValue(&l->kv, l->js, l->bucket)) != NATS_OK) {
      snprintf(err, errlen, "[tiering] lease_ms: the lease bucket %s cannot be made: %s", l->bucket,
               why);
      kvp__adv_lease_close(l);
      return KVP_ECONN;
    }
  }
  kvStatus *ks = NULL;
  if (kvStore_Status(&ks, l->kv) == NATS_OK) {
    uint64_t ttl = (uint64_t)kvStatus_TTL(ks) / 1000000; /* ns */
    kvStatus_Destroy(ks);
    if (ttl > 0 && ttl != l->ttl_ms) {
      kvp_log_warn("tiering: the lease bucket %s has a TTL of %" PRIu64 " ms, not [tiering] "
                   "lease_ms %" PRIu64 ": its TTL is used (every advisor of namespace %s must "
                   "have the same lease_ms)",
                   l->bucket, ttl, l->ttl_ms, cfg->ns);
      int shorter = ttl < l->ttl_ms;
      l->ttl_ms = ttl;
      /* The calls' wait was set from lease_ms: with a shorter TTL one
       * unanswered call would outlast a renewal period, and the other
       * leases with it. Bound again with the bucket's. */
      if (shorter) {
        kvStore_Destroy(l->kv);
        l->kv = NULL;
        jsCtx_Destroy(l->js);
        l->js = NULL;
        jo.Wait = (int64_t)(l->ttl_ms / 3 + 1);
        if ((st = natsConnection_JetStream(&l->js, nc, &jo)) != NATS_OK ||
            (st = js_KeyValue(&l->kv, l->js, l->bucket)) != NATS_OK)
          goto nats_fail;
      }
    }
  }
  if (describe(l, me) != 0) {
    kvp__adv_lease_close(l);
    return KVP_ENOMEM;
  }
  if (pthread_create(&l->thread, NULL, run, l) != 0) {
    kvp__adv_lease_close(l);
    return KVP_ENOMEM;
  }
  l->started = 1;
  kvp_log_info("tiering: leases in bucket %s (TTL %" PRIu64 " ms): %s is tiered only by the "
               "advisor holding its lease",
               l->bucket, l->ttl_ms, l->whole ? "the namespace" : "a partition");
  *out = l;
  return 0;
nats_fail:
  snprintf(err, errlen, "[tiering] lease_ms: the lease bucket %s cannot be made: %s", l->bucket,
           nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(st));
  kvp__adv_lease_close(l);
  return KVP_ECONN;
}

void kvp__adv_lease_want(kvp__adv_lease_t *l, uint32_t p, int want) {
  slot_t *s = slot_of(l, p);
  if (s == NULL)
    return;
  pthread_mutex_lock(&l->mu);
  if (s->want != want) {
    s->want = want;
    pthread_cond_signal(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
}

int kvp__adv_lease_held(const kvp__adv_lease_t *l, uint32_t p) {
  slot_t *s = slot_of(l, p);
  if (s == NULL)
    return 0;
  uint64_t until = atomic_load(&s->valid_ms);
  return until != 0 && mono_ms() < until;
}

int kvp__adv_lease_gate(void *ctx, uint32_t p) {
  return kvp__adv_lease_held(ctx, p);
}

int kvp__adv_lease_wanted(kvp__adv_lease_t *l, uint32_t p, char *holder, size_t len) {
  int want = 0;
  slot_t *s = slot_of(l, p);
  if (len)
    holder[0] = '\0';
  if (s == NULL)
    return 0;
  pthread_mutex_lock(&l->mu);
  want = s->want;
  snprintf(holder, len, "%s", s->holder);
  pthread_mutex_unlock(&l->mu);
  return want;
}

uint64_t kvp__adv_lease_ttl(const kvp__adv_lease_t *l) {
  return l ? l->ttl_ms : 0;
}

int kvp__adv_lease_count(const kvp__adv_lease_t *l) {
  return l ? atomic_load(&((kvp__adv_lease_t *)l)->nheld) : 0;
}

void kvp__adv_lease_close(kvp__adv_lease_t *l) {
  if (l == NULL)
    return;
  if (l->started) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  kvStore_Destroy(l->kv);
  jsCtx_Destroy(l->js);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l->s);
  free(l);
}
