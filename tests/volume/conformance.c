/* The volume plugin conformance suite: the contract of
 * kvplane/volume_plugin.h checked against one plugin, the same checks for
 * every plugin (posix and s3 in ctest; a vendor's with one command,
 * docs/volumes.md):
 *
 *   kvp-volume-conformance [--s3rver|--s3v|--rgw] [--case NAME] PLUGIN KEY=VALUE...
 *
 * PLUGIN is the path of kvplane-volume-<name>.so, or a plugin name looked
 * up where kvp_volume_open looks. KEY=VALUE are its open parameters; in a
 * value, {tmpdir} becomes a fresh temporary directory per case (removed
 * after it) and, with --s3rver, {s3rver} the endpoint of an s3rver started
 * per case (tests/harness/s3d.h; bucket kvb, keys S3RVER/S3RVER), with --s3v
 * {s3v} the endpoint of the verifying S3 server (tests/harness/s3v.h), with
 * --rgw {rgw} the endpoint of the tests' running radosgw (tests/harness/rgw.h;
 * skipped, 77, without radosgw). {unique} is a name no other process of the
 * suite uses at the same time (for a prefix on a shared bucket).
 *
 * The volume must be a scratch one: every case deletes every object it
 * finds there, before and after. Checks go through the plugin's own
 * operations (kvp_volume_ops), without the frame: bytes identical for sizes
 * from 0 to 64 MiB in several iovecs, missing keys, exists, replacement,
 * capacity (the suite adds capacity=3500; a plugin without that parameter
 * skips the case), stat, iterate (exactly what was put; stopping), reopen,
 * concurrent use from several threads, and error messages that name the
 * object.
 *
 * Why this file is long: it is one program a vendor runs: every case of
 * the contract with its fixture and command line in one source.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"
#include "s3d.h"
#include "rgw.h"
#include "s3v.h"

#define MAXP 64

/* The command line. */
static const char *g_dir, *g_plugin;
static const char *g_keys[MAXP], *g_vals[MAXP];
static size_t g_np;
static int g_s3rver, g_s3v, g_rgw;
static kvp_rgw_t g_rgw_cluster;

typedef struct conf_s {
  char tmp[256];
  kvp_s3d_t s3;
  int s3_up;
  kvp_s3v_t s3v;
  int s3v_up;
  char *vals[MAXP];
  kvp_volume_param_t p[MAXP + 1];
  size_t np;
  kvp_volume_t *v;
  const kvp_volume_ops_t *o;
  void *h;
} conf_t;

/* s with every {name} replaced by its value. */
static char *substitute(const char *s, const conf_t *c) {
  size_t cap = strlen(s) + 1024, n = 0;
  char *out = malloc(cap);
  while (*s && n + 300 < cap) {
    if (strncmp(s, "{tmpdir}", 8) == 0) {
      n += (size_t)snprintf(out + n, cap - n, "%s", c->tmp);
      s += 8;
    } else if (strncmp(s, "{s3rver}", 8) == 0 && c->s3_up) {
      n += (size_t)snprintf(out + n, cap - n, "%s", c->s3.endpoint);
      s += 8;
    } else if (strncmp(s, "{s3v}", 5) == 0 && c->s3v_up) {
      n += (size_t)snprintf(out + n, cap - n, "%s", c->s3v.endpoint);
      s += 5;
    } else if (strncmp(s, "{rgw}", 5) == 0 && g_rgw) {
      n += (size_t)snprintf(out + n, cap - n, "%s", g_rgw_cluster.endpoint);
      s += 5;
    } else if (strncmp(s, "{unique}", 8) == 0) {
      n += (size_t)snprintf(out + n, cap - n, "%ld", (long)getpid());
      s += 8;
    } else
      out[n++] = *s++;
  }
  out[n] = '\0';
  return out;
}

/* Opens the plugin with the command line's parameters, with key set to
 * value (added or replaced) when key is not NULL. */
static int open_with(conf_t *c, const char *key, const char *value, kvp_volume_t **v, char *err,
                     size_t errlen) {
  kvp_volume_param_t p[MAXP + 1];
  size_t n = 0;
  for (size_t i = 0; i < c->np; i++)
    if (key == NULL || strcmp(c->p[i].key, key) != 0)
      p[n++] = c->p[i];
  if (key != NULL)
    p[n++] = (kvp_volume_param_t){key, value};
  return kvp_volume_open(g_dir, g_plugin, "conformance", p, n, v, err, errlen);
}

typedef struct obj_s {
  char ns[80];
  uint64_t hash, bytes;
  int seen;
} obj_t;

typedef struct objs_s {
  obj_t *k;
  size_t n, cap;
} objs_t;

static int collect_one(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  objs_t *ks = ctx;
  if (ks->n == ks->cap) {
    ks->cap = ks->cap ? ks->cap * 2 : 64;
    ks->k = realloc(ks->k, ks->cap * sizeof *ks->k);
  }
  obj_t *k = &ks->k[ks->n++];
  snprintf(k->ns, sizeof k->ns, "%s", ns);
  k->hash = hash;
  k->bytes = bytes;
  k->seen = 0;
  return 0;
}

/* Deletes every object of the volume; 0 or the first error. */
static int wipe(conf_t *c) {
  objs_t ks = {0};
  char err[512];
  int rc = c->o->iterate(c->h, collect_one, &ks, err, sizeof err);
  for (size_t i = 0; rc == 0 && i < ks.n; i++)
    if ((rc = c->o->del(c->h, ks.k[i].ns, ks.k[i].hash, err, sizeof err)) == KVP_ENOENT)
      rc = 0;
  if (rc != 0)
    print_error("wiping the volume: %s: %s\n", kvp_err_name(rc), err);
  free(ks.k);
  return rc;
}

static int attach(conf_t *c, kvp_volume_t *v) {
  c->v = v;
  c->o = kvp_volume_ops(v);
  c->h = kvp_volume_handle(v);
  return 0;
}

static int setup(void **state) {
  conf_t *c = calloc(1, sizeof *c);
  kvp_volume_t *v = NULL;
  char err[512];

  *state = c;
  if (kvp_test_tmpdir(c->tmp, sizeof c->tmp) == NULL)
    return -1;
  if (g_s3rver) {
    if (kvp_s3d_start(&c->s3) != 0)
      return -1;
    c->s3_up = 1;
  }
  if (g_s3v) {
    if (kvp_s3v_start(&c->s3v, NULL) != 0)
      return -1;
    c->s3v_up = 1;
  }
  for (size_t i = 0; i < g_np; i++) {
    c->vals[i] = substitute(g_vals[i], c);
    c->p[i] = (kvp_volume_param_t){g_keys[i], c->vals[i]};
  }
  c->np = g_np;
  if (open_with(c, NULL, NULL, &v, err, sizeof err) != 0) {
    print_error("open: %s\n", err);
    return -1;
  }
  attach(c, v);
  return wipe(c);
}

static int teardown(void **state) {
  conf_t *c = *state;
  if (c->v != NULL)
    wipe(c);
  kvp_volume_close(c->v);
  if (c->s3_up)
    kvp_s3d_stop(&c->s3);
  if (c->s3v_up)
    kvp_s3v_stop(&c->s3v);
  kvp_test_rmtree(c->tmp);
  for (size_t i = 0; i < c->np; i++)
    free(c->vals[i]);
  free(c);
  return 0;
}

static void fill(uint8_t *b, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = (uint8_t)x;
  }
}

/* Puts n bytes made from seed under (ns, hash) as one iovec. */
static int put_seeded(conf_t *c, const char *ns, uint64_t hash, size_t n, uint64_t seed, char *err,
                      size_t errlen) {
  uint8_t *b = malloc(n ? n : 1);
  fill(b, n, seed);
  struct iovec iov = {b, n};
  int rc = c->o->put(c->h, ns, hash, &iov, 1, err, errlen);
  free(b);
  return rc;
}

/* Gets (ns, hash) and checks it is n bytes made from seed. */
static void assert_seeded(conf_t *c, const char *ns, uint64_t hash, size_t n, uint64_t seed) {
  uint8_t *want = malloc(n + 1), *got = malloc(n + 1);
  char err[512] = "";
  size_t len = 0;
  fill(want, n, seed);
  struct iovec iov = {got, n + 1};
  int rc = c->o->get(c->h, ns, hash, &iov, 1, &len, err, sizeof err);
  if (rc != 0)
    print_error("get %s/%016llx: %s: %s\n", ns, (unsigned long long)hash, kvp_err_name(rc), err);
  assert_int_equal(rc, 0);
  assert_int_equal(len, n);
  assert_memory_equal(want, got, n);
  free(want);
  free(got);
}

/* err is a message naming the object: it holds the hash in 16 hex digits. */
static void assert_names(const char *err, uint64_t hash) {
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
  if (strstr(err, hex) == NULL)
    print_error("the message does not name object %s: '%s'\n", hex, err);
  assert_non_null(strstr(err, hex));
}

static void bytes_identical_for_many_sizes(void **state) {
  conf_t *c = *state;
  static const size_t sizes[] = {0, 1, 7, 4096, 65536 + 3, (2u << 20) + 1, 64u << 20};
  char err[512];

  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i], len = 0, a = n / 3, b = n / 2;
    uint64_t hash = i % 2 ? 0x1000 + i : 0xfedcba9876543210ull - i; /* all 64 bits matter */
    uint8_t *in = malloc(n + 1), *out = malloc(n + 1);
    fill(in, n, i + 7);
    /* Three iovecs in, the middle one empty; two out, split elsewhere. */
    struct iovec up[3] = {{in, a}, {in + a, 0}, {in + a, n - a}};
    assert_int_equal(c->o->put(c->h, "conf", hash, up, 3, err, sizeof err), 0);
    memset(out, 0, n + 1);
    struct iovec down[2] = {{out, b}, {out + b, n - b}};
    assert_int_equal(c->o->get(c->h, "conf", hash, down, 2, &len, err, sizeof err), 0);
    assert_int_equal(len, n);
    assert_memory_equal(in, out, n);
    /* Bigger buffers than the object: the size is the object's. */
    struct iovec roomy = {out, n + 1};
    assert_int_equal(c->o->get(c->h, "conf", hash, &roomy, 1, &len, err, sizeof err), 0);
    assert_int_equal(len, n);
    /* A byte short: KVP_ETOOBIG with the size, the object named. */
    if (n > 0) {
      struct iovec shortb = {out, n - 1};
      len = 0;
      err[0] = '\0';
      assert_int_equal(c->o->get(c->h, "conf", hash, &shortb, 1, &len, err, sizeof err),
                       KVP_ETOOBIG);
      assert_int_equal(len, n);
      assert_names(err, hash);
    }
    len = 0;
    assert_int_equal(c->o->exists(c->h, "conf", hash, &len), 1);
    assert_int_equal(len, n);
    assert_int_equal(c->o->exists(c->h, "conf", hash, NULL), 1);
    /* Namespaces are separate keys. */
    assert_int_equal(c->o->exists(c->h, "conf2", hash, NULL), 0);
    free(in);
    free(out);
  }
}

static void missing_keys_are_enoent_and_named(void **state) {
  conf_t *c = *state;
  const uint64_t hash = 0xdeadbeef00000001ull;
  uint8_t b[16];
  char err[512] = "";
  size_t len;
  struct iovec iov = {b, sizeof b};

  assert_int_equal(c->o->get(c->h, "conf", hash, &iov, 1, &len, err, sizeof err), KVP_ENOENT);
  assert_names(err, hash);
  err[0] = '\0';
  assert_int_equal(c->o->del(c->h, "conf", hash, err, sizeof err), KVP_ENOENT);
  assert_names(err, hash);
  assert_int_equal(c->o->exists(c->h, "conf", hash, &len), 0);
  /* Put, then deleted: missing again. */
  assert_int_equal(put_seeded(c, "conf", hash, 100, 1, err, sizeof err), 0);
  assert_int_equal(c->o->del(c->h, "conf", hash, err, sizeof err), 0);
  err[0] = '\0';
  assert_int_equal(c->o->get(c->h, "conf", hash, &iov, 1, &len, err, sizeof err), KVP_ENOENT);
  assert_names(err, hash);
  assert_int_equal(c->o->del(c->h, "conf", hash, err, sizeof err), KVP_ENOENT);
  assert_int_equal(c->o->exists(c->h, "conf", hash, NULL), 0);
}

static void replace_is_whole_and_counted_once(void **state) {
  conf_t *c = *state;
  kvp_volume_stat_t st;
  char err[512];

  assert_int_equal(put_seeded(c, "conf", 0x11, 1000, 1, err, sizeof err), 0);
  assert_int_equal(put_seeded(c, "conf", 0x11, 3000, 2, err, sizeof err), 0);
  assert_seeded(c, "conf", 0x11, 3000, 2);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 1);
  assert_int_equal(st.used, 3000);
  assert_int_equal(put_seeded(c, "conf", 0x11, 10, 3, err, sizeof err), 0);
  assert_seeded(c, "conf", 0x11, 10, 3);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 1);
  assert_int_equal(st.used, 10);
}

static void capacity_is_enospc_and_keeps_the_old_object(void **state) {
  conf_t *c = *state;
  kvp_volume_t *v = NULL;
  kvp_volume_stat_t st;
  char err[512] = "";

  kvp_volume_close(c->v);
  c->v = NULL;
  int rc = open_with(c, "capacity", "3500", &v, err, sizeof err);
  if (rc == KVP_ECONFIG && strstr(err, "capacity") != NULL) {
    print_message("the plugin has no capacity parameter (%s): skipped\n", err);
    assert_int_equal(open_with(c, NULL, NULL, &v, err, sizeof err), 0);
    attach(c, v);
    skip();
  }
  assert_int_equal(rc, 0);
  attach(c, v);
  /* Room for three objects of 1000 bytes, not four. */
  for (uint64_t h = 1; h <= 3; h++)
    assert_int_equal(put_seeded(c, "cap", h, 1000, h, err, sizeof err), 0);
  err[0] = '\0';
  assert_int_equal(put_seeded(c, "cap", 4, 1000, 4, err, sizeof err), KVP_ENOSPC);
  assert_names(err, 4);
  assert_int_equal(c->o->exists(c->h, "cap", 4, NULL), 0);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.capacity, 3500);
  assert_int_equal(st.used, 3000);
  assert_int_equal(st.blocks, 3);
  /* A replacement that does not fit leaves the old object as it was. */
  err[0] = '\0';
  assert_int_equal(put_seeded(c, "cap", 1, 1600, 11, err, sizeof err), KVP_ENOSPC);
  assert_names(err, 1);
  assert_seeded(c, "cap", 1, 1000, 1);
  /* One of the same size fits. */
  assert_int_equal(put_seeded(c, "cap", 2, 1000, 22, err, sizeof err), 0);
  assert_seeded(c, "cap", 2, 1000, 22);
  /* Deleting makes room. */
  assert_int_equal(c->o->del(c->h, "cap", 3, err, sizeof err), 0);
  assert_int_equal(put_seeded(c, "cap", 4, 1000, 4, err, sizeof err), 0);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.used, 3000);
  assert_int_equal(st.blocks, 3);
  /* A capacity that is not a size is a configuration error naming it. */
  kvp_volume_t *bad = NULL;
  assert_int_equal(open_with(c, "capacity", "lots", &bad, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "capacity"));
  assert_null(bad);
}

static void stat_counts_objects_and_bytes(void **state) {
  conf_t *c = *state;
  kvp_volume_stat_t st;
  char err[512];

  for (uint64_t h = 1; h <= 5; h++)
    assert_int_equal(put_seeded(c, h % 2 ? "sa" : "sb", h, (size_t)h * 100, h, err, sizeof err), 0);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 5);
  assert_int_equal(st.used, 1500);
  assert_int_equal(c->o->del(c->h, "sb", 4, err, sizeof err), 0);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 4);
  assert_int_equal(st.used, 1100);
}

static int stop_at_first(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  (void)ns, (void)hash, (void)bytes;
  ++*(int *)ctx;
  return 7;
}

static void iterate_sees_exactly_what_was_put(void **state) {
  conf_t *c = *state;
  objs_t ks = {0};
  char err[512];
  int calls = 0;

  for (uint64_t i = 0; i < 20; i++)
    assert_int_equal(
        put_seeded(c, i % 3 ? "ia" : "ib", i << 59 | i, (size_t)i * 37, i, err, sizeof err), 0);
  assert_int_equal(c->o->iterate(c->h, collect_one, &ks, err, sizeof err), 0);
  assert_int_equal(ks.n, 20);
  for (uint64_t i = 0; i < 20; i++) {
    int found = 0;
    for (size_t j = 0; j < ks.n; j++)
      if (ks.k[j].hash == (i << 59 | i) && strcmp(ks.k[j].ns, i % 3 ? "ia" : "ib") == 0) {
        assert_int_equal(ks.k[j].bytes, i * 37);
        assert_int_equal(ks.k[j].seen, 0);
        ks.k[j].seen = 1;
        found = 1;
      }
    assert_true(found);
  }
  free(ks.k);
  /* A non-zero return stops the iteration and is returned by it. */
  assert_int_equal(c->o->iterate(c->h, stop_at_first, &calls, err, sizeof err), 7);
  assert_int_equal(calls, 1);
}

static void reopen_keeps_objects_and_usage(void **state) {
  conf_t *c = *state;
  kvp_volume_t *v = NULL;
  kvp_volume_stat_t st;
  char err[512];

  for (uint64_t h = 1; h <= 3; h++)
    assert_int_equal(put_seeded(c, "re", h, (size_t)h * 1000, h, err, sizeof err), 0);
  kvp_volume_close(c->v);
  c->v = NULL;
  assert_int_equal(open_with(c, NULL, NULL, &v, err, sizeof err), 0);
  attach(c, v);
  for (uint64_t h = 1; h <= 3; h++)
    assert_seeded(c, "re", h, (size_t)h * 1000, h);
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 3);
  assert_int_equal(st.used, 6000);
}

typedef struct worker_s {
  conf_t *c;
  int id;
  atomic_int *bad;
} worker_t;

#define SHARED 20

/* Key h always holds the same bytes (4096 + h of them, from seed h), so any
 * complete object read is exactly those: a torn read shows. */
static void *hammer(void *arg) {
  worker_t *w = arg;
  conf_t *c = w->c;
  uint8_t want[4096 + SHARED + 1], got[4096 + SHARED + 1];
  char err[512], ns[16];

  snprintf(ns, sizeof ns, "own%d", w->id);
  for (int i = 0; i < 30; i++) {
    uint64_t h = (uint64_t)(i * 7 + w->id) % SHARED + 1, own = (uint64_t)w->id << 32 | (uint64_t)i;
    size_t len = 0;
    if (put_seeded(c, "cc", h, 4096 + h, h, err, sizeof err) != 0 &&
        atomic_fetch_add(w->bad, 1) < 3)
      print_error("put cc/%016llx: %s\n", (unsigned long long)h, err);
    uint64_t r = (uint64_t)(i * 13 + w->id * 5) % SHARED + 1;
    fill(want, 4096 + r, r);
    struct iovec iov = {got, sizeof got};
    int rc = c->o->get(c->h, "cc", r, &iov, 1, &len, err, sizeof err);
    if ((rc != 0 && rc != KVP_ENOENT) ||
        (rc == 0 && (len != 4096 + r || memcmp(want, got, len) != 0))) {
      if (atomic_fetch_add(w->bad, 1) < 3)
        print_error("get cc/%016llx: %s: %s\n", (unsigned long long)r, kvp_err_name(rc), err);
    }
    /* A key of this thread alone: put, read back, delete. Each thread has
     * its own namespace: s3rver crashes when a delete empties a "directory"
     * another put is writing into, a race of the test server's own. */
    if (put_seeded(c, ns, own, 1000, own, err, sizeof err) != 0 ||
        c->o->get(c->h, ns, own, &iov, 1, &len, err, sizeof err) != 0 || len != 1000 ||
        c->o->del(c->h, ns, own, err, sizeof err) != 0) {
      if (atomic_fetch_add(w->bad, 1) < 3)
        print_error("%s/%016llx: %s\n", ns, (unsigned long long)own, err);
    }
  }
  return NULL;
}

static void concurrent_use_from_several_threads(void **state) {
  conf_t *c = *state;
  pthread_t th[4];
  worker_t w[4];
  atomic_int bad = 0;
  kvp_volume_stat_t st;
  objs_t ks = {0};
  char err[512];
  uint64_t bytes = 0;

  for (int i = 0; i < 4; i++) {
    w[i] = (worker_t){c, i, &bad};
    assert_int_equal(pthread_create(&th[i], NULL, hammer, &w[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&bad), 0);
  for (uint64_t h = 1; h <= SHARED; h++) {
    assert_seeded(c, "cc", h, 4096 + h, h);
    bytes += 4096 + h;
  }
  assert_int_equal(c->o->stat(c->h, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, SHARED);
  assert_int_equal(st.used, bytes);
  assert_int_equal(c->o->iterate(c->h, collect_one, &ks, err, sizeof err), 0);
  assert_int_equal(ks.n, SHARED);
  free(ks.k);
}

static void unknown_parameter_is_econfig_and_named(void **state) {
  conf_t *c = *state;
  kvp_volume_t *v = NULL;
  char err[512] = "";

  assert_int_equal(open_with(c, "conformance_no_such_parameter", "1", &v, err, sizeof err),
                   KVP_ECONFIG);
  assert_null(v);
  assert_non_null(strstr(err, "conformance_no_such_parameter"));
}

/* KVP_VOLUME_KNOWS_NAMESPACE (ABI 2): kvp_volume_open_ns opens every
 * plugin, adding namespace= only to one with the flag, which must accept
 * it and work as before; one without the flag is opened with its
 * parameters as they are. */
static void namespace_parameter_when_flagged(void **state) {
  conf_t *c = *state;
  kvp_volume_t *v = NULL;
  char err[512] = "";
  int flagged = (c->o->flags & KVP_VOLUME_KNOWS_NAMESPACE) != 0;

  kvp_volume_close(c->v);
  c->v = NULL;
  assert_int_equal(kvp_volume_open_ns(g_dir, g_plugin, "conformance", "conf-ns", c->p, c->np, &v,
                                      err, sizeof err),
                   0);
  attach(c, v);
  assert_int_equal(put_seeded(c, "conf-ns", 7, 1000, 7, err, sizeof err), 0);
  assert_seeded(c, "conf-ns", 7, 1000, 7);
  if (flagged) {
    /* Reopened with the parameter given by hand (closed first: a plugin
     * may allow one open of a volume at a time, as posix's packed layout
     * does). */
    kvp_volume_t *w = NULL;
    kvp_volume_close(c->v);
    c->v = NULL;
    assert_int_equal(open_with(c, "namespace", "conf-ns", &w, err, sizeof err), 0);
    attach(c, w);
    assert_seeded(c, "conf-ns", 7, 1000, 7);
  }
  print_message("the plugin %s KVP_VOLUME_KNOWS_NAMESPACE\n", flagged ? "has" : "has not");
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(bytes_identical_for_many_sizes, setup, teardown),
    cmocka_unit_test_setup_teardown(missing_keys_are_enoent_and_named, setup, teardown),
    cmocka_unit_test_setup_teardown(replace_is_whole_and_counted_once, setup, teardown),
    cmocka_unit_test_setup_teardown(capacity_is_enospc_and_keeps_the_old_object, setup, teardown),
    cmocka_unit_test_setup_teardown(stat_counts_objects_and_bytes, setup, teardown),
    cmocka_unit_test_setup_teardown(iterate_sees_exactly_what_was_put, setup, teardown),
    cmocka_unit_test_setup_teardown(reopen_keeps_objects_and_usage, setup, teardown),
    cmocka_unit_test_setup_teardown(concurrent_use_from_several_threads, setup, teardown),
    cmocka_unit_test_setup_teardown(unknown_parameter_is_econfig_and_named, setup, teardown),
    cmocka_unit_test_setup_teardown(namespace_parameter_when_flagged, setup, teardown),
};

static int usage(void) {
  fprintf(
      stderr,
      "usage: kvp-volume-conformance [--s3rver|--s3v|--rgw] [--case NAME] PLUGIN [KEY=VALUE...]\n"
      "  PLUGIN     path of kvplane-volume-<name>.so, or a plugin name\n"
      "  KEY=VALUE  open parameters; {tmpdir} in a value is a fresh directory per case,\n"
      "             {s3rver} (with --s3rver) the endpoint of an s3rver started per case,\n"
      "             {s3v} (with --s3v) the endpoint of the verifying S3 server\n"
      "             (tests/tools/s3_verify.py; keys KVPTESTKEY / kvp/test+secret=1),\n"
      "             {rgw} (with --rgw) the endpoint of the tests' radosgw\n"
      "             (tests/tools/rgw_cluster.sh; keys KVPRGWKEY / kvp/rgw+secret=1),\n"
      "             {unique} a name no other process of the suite uses\n"
      "  The volume must be a scratch one: every case deletes all its objects.\n"
      "  Cases:");
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
    fprintf(stderr, " %s", tests[i].name);
  fprintf(stderr, "\n");
  return 2;
}

int main(int argc, char **argv) {
  static char dir[4096], name[256];
  const char *only = NULL;
  int i = 1;

  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    if (strcmp(argv[i], "--s3rver") == 0)
      g_s3rver = 1;
    else if (strcmp(argv[i], "--s3v") == 0)
      g_s3v = 1;
    else if (strcmp(argv[i], "--rgw") == 0)
      g_rgw = 1;
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only = argv[++i];
    else
      return usage();
  }
  if (i >= argc)
    return usage();
  /* A path: its directory and the name inside kvplane-volume-<name>.so. */
  const char *slash = strrchr(argv[i], '/');
  if (slash != NULL) {
    size_t bl = strlen(slash + 1);
    if (strncmp(slash + 1, "kvplane-volume-", 15) != 0 || bl <= 18 ||
        strcmp(slash + 1 + bl - 3, ".so") != 0) {
      fprintf(stderr, "kvp-volume-conformance: %s: not a kvplane-volume-<name>.so\n", argv[i]);
      return 2;
    }
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - argv[i]), argv[i]);
    snprintf(name, sizeof name, "%.*s", (int)(bl - 18), slash + 16);
    g_dir = dir[0] ? dir : "/";
    g_plugin = name;
  } else
    g_plugin = argv[i];
  for (i++; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (eq == NULL || eq == argv[i] || g_np == MAXP) {
      fprintf(stderr, "kvp-volume-conformance: '%s' is not KEY=VALUE\n", argv[i]);
      return 2;
    }
    *eq = '\0';
    g_keys[g_np] = argv[i];
    g_vals[g_np++] = eq + 1;
  }
  if (g_rgw && kvp_rgw_attach(&g_rgw_cluster) != 0)
    return 1;
  if (only != NULL)
    cmocka_set_test_filter(only);
  return _cmocka_run_group_tests("volume_conformance", tests, sizeof tests / sizeof tests[0], NULL,
                                 NULL);
}
