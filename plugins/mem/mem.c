/* kvplane volume plugin "mem": objects in this process's memory. For
 * benchmarks and tests that want a volume's figures to be the caller's,
 * not a disk's or a kernel's (kvp-bench policy): no system call per
 * operation. Parameters (docs/volumes.md):
 *
 *   store     the store's name (required): volumes opened with the same
 *             name in one process share its objects, and a volume closed
 *             and opened again finds them (until the process exits)
 *   capacity  bytes the store may hold (suffixes as posix's; 0 or absent:
 *             unbounded)
 *
 * The objects live as long as the process: the plugin keeps itself loaded
 * (RTLD_NODELETE) once a store exists, so that closing the last volume
 * does not take them away. A store is never offline (its identity is the
 * process). Thread-safe: one mutex per store. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "plugin_util.h"

typedef struct obj_s {
  struct obj_s *next; /* in its bucket */
  uint64_t hash;
  size_t len;
  char ns[65];
  unsigned char data[];
} obj_t;

typedef struct store_s {
  struct store_s *next;
  char name[256];
  pthread_mutex_t mu;
  uint64_t capacity, used, blocks;
  obj_t **bucket;
  size_t nbuckets;
} store_t;

static pthread_mutex_t stores_mu = PTHREAD_MUTEX_INITIALIZER;
static store_t *stores;

static size_t slot(const store_t *s, uint64_t hash) {
  uint64_t x = hash * 0x9e3779b97f4a7c15ull;
  return (size_t)(x >> 32) & (s->nbuckets - 1);
}

/* The link that points at (ns, hash)'s object, or at the NULL ending its
 * bucket. Called with mu held. */
static obj_t **find(store_t *s, const char *ns, uint64_t hash) {
  obj_t **p = &s->bucket[slot(s, hash)];
  while (*p && ((*p)->hash != hash || strcmp((*p)->ns, ns) != 0))
    p = &(*p)->next;
  return p;
}

/* Twice the buckets when there are more objects than buckets. */
static void grow(store_t *s) {
  size_t n = s->nbuckets * 2;
  obj_t **b = calloc(n, sizeof *b);
  if (b == NULL)
    return; /* longer chains, still correct */
  obj_t **old = s->bucket;
  size_t nold = s->nbuckets;
  s->bucket = b;
  s->nbuckets = n;
  for (size_t i = 0; i < nold; i++)
    for (obj_t *o = old[i], *nx; o; o = nx) {
      nx = o->next;
      o->next = b[slot(s, o->hash)];
      b[slot(s, o->hash)] = o;
    }
  free(old);
}

/* Keeps this plugin loaded until the process exits. */
static void stay_loaded(void) {
  Dl_info info;
  if (dladdr((void *)&stay_loaded, &info) != 0 && info.dli_fname != NULL)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static int mem_open(const kvp_volume_param_t *params, size_t n, void **vol, char *err,
                    size_t errlen) {
  const char *name = NULL;
  uint64_t capacity = 0;
  int cap_set = 0;

  *vol = NULL;
  for (size_t i = 0; i < n; i++) {
    const char *k = params[i].key, *v = params[i].value ? params[i].value : "";
    if (strcmp(k, "store") == 0) {
      name = v;
    } else if (strcmp(k, "capacity") == 0) {
      if (kvp_plugin_parse_size(v, &capacity) != 0) {
        snprintf(err, errlen, "capacity: '%s' is not a size (bytes, or with K/M/G/T)", v);
        return KVP_ECONFIG;
      }
      cap_set = 1;
    } else {
      snprintf(err, errlen, "unknown parameter '%s' (store, capacity)", k);
      return KVP_ECONFIG;
    }
  }
  if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof stores->name) {
    snprintf(err, errlen, "store: required (1..255 characters: the store's name)");
    return KVP_ECONFIG;
  }
  pthread_mutex_lock(&stores_mu);
  store_t *s = stores;
  while (s && strcmp(s->name, name) != 0)
    s = s->next;
  if (s == NULL && (s = calloc(1, sizeof *s)) != NULL) {
    s->nbuckets = 1024;
    if ((s->bucket = calloc(s->nbuckets, sizeof *s->bucket)) == NULL) {
      free(s);
      s = NULL;
    } else {
      snprintf(s->name, sizeof s->name, "%s", name);
      pthread_mutex_init(&s->mu, NULL);
      s->next = stores;
      stores = s;
      stay_loaded();
    }
  }
  if (s != NULL && cap_set) {
    pthread_mutex_lock(&s->mu);
    s->capacity = capacity;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&stores_mu);
  if (s == NULL) {
    snprintf(err, errlen, "store %s: out of memory", name);
    return KVP_ENOMEM;
  }
  *vol = s;
  return 0;
}

static void mem_close(void *vol) {
  (void)vol; /* the store stays, for the next open */
}

static int ns_bad(const char *ns, char *err, size_t errlen) {
  if (kvp_plugin_ns_ok(ns))
    return 0;
  snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
  return KVP_EINVAL;
}

static int mem_put(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                   char *err, size_t errlen) {
  store_t *s = vol;
  size_t len = 0;
  int rc;
  if ((rc = ns_bad(ns, err, errlen)) != 0)
    return rc;
  for (int i = 0; i < iovcnt; i++)
    len += iov[i].iov_len;
  obj_t *o = malloc(sizeof *o + len);
  if (o == NULL) {
    snprintf(err, errlen, "%s/%016" PRIx64 ": out of memory", ns, hash);
    return KVP_ENOMEM;
  }
  o->hash = hash;
  o->len = len;
  snprintf(o->ns, sizeof o->ns, "%s", ns);
  for (size_t i = 0, off = 0; i < (size_t)iovcnt; off += iov[i].iov_len, i++)
    memcpy(o->data + off, iov[i].iov_base, iov[i].iov_len);
  pthread_mutex_lock(&s->mu);
  obj_t **p = find(s, ns, hash);
  size_t old = *p ? (*p)->len : 0;
  if (s->capacity && s->used - old + len > s->capacity) {
    pthread_mutex_unlock(&s->mu);
    free(o);
    snprintf(err, errlen, "%s/%016" PRIx64 ": store %s is full (%" PRIu64 " of %" PRIu64 " bytes)",
             ns, hash, s->name, s->used, s->capacity);
    return KVP_ENOSPC;
  }
  if (*p) { /* replaced whole */
    o->next = (*p)->next;
    free(*p);
    *p = o;
  } else {
    o->next = NULL;
    *p = o;
    s->blocks++;
  }
  s->used = s->used - old + len;
  if (s->blocks > s->nbuckets)
    grow(s);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int mem_get(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                   size_t *len, char *err, size_t errlen) {
  store_t *s = vol;
  size_t cap = 0;
  int rc;
  if ((rc = ns_bad(ns, err, errlen)) != 0)
    return rc;
  for (int i = 0; i < iovcnt; i++)
    cap += iov[i].iov_len;
  pthread_mutex_lock(&s->mu);
  obj_t *o = *find(s, ns, hash);
  if (o == NULL) {
    pthread_mutex_unlock(&s->mu);
    snprintf(err, errlen, "%s/%016" PRIx64 ": not in store %s", ns, hash, s->name);
    return KVP_ENOENT;
  }
  *len = o->len;
  if (o->len > cap) {
    pthread_mutex_unlock(&s->mu);
    snprintf(err, errlen, "%s/%016" PRIx64 ": %zu bytes, more than the %zu-byte buffer", ns, hash,
             *len, cap);
    return KVP_ETOOBIG;
  }
  size_t off = 0;
  for (int i = 0; i < iovcnt && off < o->len; i++) {
    size_t n = iov[i].iov_len < o->len - off ? iov[i].iov_len : o->len - off;
    memcpy(iov[i].iov_base, o->data + off, n);
    off += n;
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static int mem_del(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen) {
  store_t *s = vol;
  int rc;
  if ((rc = ns_bad(ns, err, errlen)) != 0)
    return rc;
  pthread_mutex_lock(&s->mu);
  obj_t **p = find(s, ns, hash), *o = *p;
  if (o == NULL) {
    pthread_mutex_unlock(&s->mu);
    snprintf(err, errlen, "%s/%016" PRIx64 ": not in store %s", ns, hash, s->name);
    return KVP_ENOENT;
  }
  *p = o->next;
  s->used -= o->len;
  s->blocks--;
  pthread_mutex_unlock(&s->mu);
  free(o);
  return 0;
}

static int mem_exists(void *vol, const char *ns, uint64_t hash, size_t *len) {
  store_t *s = vol;
  if (!kvp_plugin_ns_ok(ns))
    return KVP_EINVAL;
  pthread_mutex_lock(&s->mu);
  obj_t *o = *find(s, ns, hash);
  if (o && len)
    *len = o->len;
  pthread_mutex_unlock(&s->mu);
  return o != NULL;
}

static int mem_stat(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen) {
  store_t *s = vol;
  (void)err, (void)errlen;
  pthread_mutex_lock(&s->mu);
  *st = (kvp_volume_stat_t){.capacity = s->capacity, .used = s->used, .blocks = s->blocks};
  pthread_mutex_unlock(&s->mu);
  return 0;
}

/* fn is called without the lock (it may use the volume): the keys are
 * copied first. */
static int mem_iterate(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  store_t *s = vol;
  typedef struct key_s {
    char ns[65];
    uint64_t hash, len;
  } key_t;
  pthread_mutex_lock(&s->mu);
  size_t n = 0, cap = s->blocks;
  key_t *k = malloc((cap ? cap : 1) * sizeof *k);
  if (k == NULL) {
    pthread_mutex_unlock(&s->mu);
    snprintf(err, errlen, "store %s: out of memory", s->name);
    return KVP_ENOMEM;
  }
  for (size_t b = 0; b < s->nbuckets; b++)
    for (obj_t *o = s->bucket[b]; o && n < cap; o = o->next) {
      memcpy(k[n].ns, o->ns, sizeof o->ns);
      k[n].hash = o->hash;
      k[n++].len = o->len;
    }
  pthread_mutex_unlock(&s->mu);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = fn(ctx, k[i].ns, k[i].hash, k[i].len);
  free(k);
  return rc;
}

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION,
    .name = "mem",
    .flags = 0,
    .open = mem_open,
    .close = mem_close,
    .put = mem_put,
    .get = mem_get,
    .del = mem_del,
    .exists = mem_exists,
    .stat = mem_stat,
    .iterate = mem_iterate,
};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}
