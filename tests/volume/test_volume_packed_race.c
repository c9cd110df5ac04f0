/* The posix plugin's packed layout (plugins/posix/pack.c) through
 * interleavings the other tests reach only by chance: a put held in flight
 * (its version taken, its bytes not yet written) while another opener
 * deletes the key and a third compacts. The write is held by this
 * program's pwritev, which the plugin calls (the executable exports it, so
 * that it comes before libc's): armed for one thread, it stops that
 * thread's next write until the test lets it go.
 *
 * Several opens of one volume in one process behave as several processes
 * do: each has its own descriptors, so its own segment locks. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

#define NS "race"

/* --- a write held in flight ---------------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_t g_main;
static int g_armed, g_held, g_go;

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
  static ssize_t (*real)(int, const struct iovec *, int, off_t);
  if (real == NULL)
    real = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
  pthread_mutex_lock(&g_mu);
  if (g_armed && !pthread_equal(pthread_self(), g_main)) {
    g_armed = 0;
    g_held = 1;
    pthread_cond_broadcast(&g_cv);
    while (!g_go)
      pthread_cond_wait(&g_cv, &g_mu);
  }
  pthread_mutex_unlock(&g_mu);
  return real(fd, iov, n, off);
}

typedef struct fx_s {
  char dir[256], root[300];
} fx_t;

static int open_vol(fx_t *f, kvp_volume_t **v) {
  char err[512];
  kvp_volume_param_t p[] = {{"path", f->root},
                            {"fsync", "off"},
                            {"layout", "packed"},
                            {"pack_max", "2K"},
                            {"segment_size", "8K"}};
  int rc = kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-race", p, 5, v, err, sizeof err);
  if (rc != 0)
    print_message("open: %s\n", err);
  return rc;
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->root, sizeof f->root, "%s/vol", f->dir);
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Object i of generation gen: 500 bytes. */
static void body(uint64_t i, int gen, uint8_t *b) {
  for (size_t k = 0; k < 500; k++)
    b[k] = (uint8_t)(i * 31 + (uint64_t)gen * 7 + k);
}

static int put(kvp_volume_t *v, uint64_t i, int gen) {
  uint8_t b[500];
  char err[512];
  kvp_frame_t m = {.hash = i, .payload_len = sizeof b};
  body(i, gen, b);
  return kvp_volume_put_block(v, NS, &m, b, err, sizeof err);
}

/* The generation v reads for object i, or -1 when it is absent. */
static int gen_of(kvp_volume_t *v, uint64_t i) {
  uint8_t b[600], want[500];
  char err[512];
  kvp_frame_t m;
  int rc = kvp_volume_get_block(v, NS, i, &m, b, sizeof b, err, sizeof err);
  if (rc == KVP_ENOENT)
    return -1;
  assert_int_equal(rc, 0);
  assert_int_equal(m.payload_len, sizeof want);
  for (int g = 0; g < 4; g++) {
    body(i, g, want);
    if (memcmp(b, want, sizeof want) == 0)
      return g;
  }
  fail_msg("object %llu: bytes of no generation", (unsigned long long)i);
  return -2;
}

static void compact_all(kvp_volume_t *v) {
  char err[512];
  int rc, steps = 0;
  while ((rc = kvp_volume_compact(v, err, sizeof err)) == 1)
    assert_true(++steps < 1000);
  assert_int_equal(rc, 0);
}

typedef struct held_s {
  kvp_volume_t *v;
  uint64_t key;
  int gen, rc;
} held_t;

static void *put_thread(void *arg) {
  held_t *h = arg;
  h->rc = put(h->v, h->key, h->gen);
  return NULL;
}

/* Starts put(v, key, gen) on a thread and returns once its record's
 * version is taken and its write is held (the thread's first write is the
 * record: a new segment is created before it, not written). */
static void put_held(held_t *h, pthread_t *t) {
  pthread_mutex_lock(&g_mu);
  g_main = pthread_self();
  g_held = g_go = 0;
  g_armed = 1;
  pthread_mutex_unlock(&g_mu);
  assert_int_equal(pthread_create(t, NULL, put_thread, h), 0);
  pthread_mutex_lock(&g_mu);
  while (!g_held)
    pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

static void release(pthread_t t) {
  pthread_mutex_lock(&g_mu);
  g_go = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  assert_int_equal(pthread_join(t, NULL), 0);
}

/* A put of generation 1 takes its version, then its write is held; another
 * opener deletes the object (it reads generation 0, the put in flight is in
 * no segment yet), a third compacts everything while the write is held,
 * then the write lands and its put is acknowledged. The delete's tombstone
 * has the higher version: every opener, old or new, must read the object
 * as absent. Before compaction looked at the writes in flight of all
 * openers (the shared page's slots), the compactor dropped the tombstone
 * (no dead put older than it anywhere: the one in flight was not on disk),
 * so a new open read generation 1 back while an older open, which had read
 * the tombstone, read it absent. */
static void a_tombstone_outlives_a_put_in_flight_before_it(void **state) {
  fx_t *f = *state;
  kvp_volume_t *a, *b, *c, *e, *d;
  char err[512];
  pthread_t t;

  assert_int_equal(open_vol(f, &a), 0);
  assert_int_equal(put(a, 7, 0), 0);
  kvp_volume_close(a); /* generation 0's segment sealed */
  assert_int_equal(open_vol(f, &a), 0);
  assert_int_equal(open_vol(f, &e), 0);
  assert_int_equal(gen_of(e, 7), 0);

  held_t h = {.v = a, .key = 7, .gen = 1};
  put_held(&h, &t); /* version v1 taken, bytes not written */

  assert_int_equal(open_vol(f, &b), 0);
  assert_int_equal(gen_of(b, 7), 0);
  assert_int_equal(kvp_volume_delete(b, NS, 7, err, sizeof err), 0); /* version v2 > v1 */
  assert_int_equal(gen_of(b, 7), -1);
  kvp_volume_close(b); /* the tombstone's segment sealed */
  assert_int_equal(gen_of(e, 7), -1);

  assert_int_equal(open_vol(f, &c), 0);
  compact_all(c); /* while the write is held */

  release(t);
  assert_int_equal(h.rc, 0);
  /* Both acknowledged; the tombstone is the newer. */
  assert_int_equal(gen_of(e, 7), -1);
  assert_int_equal(gen_of(a, 7), -1);
  assert_int_equal(gen_of(c, 7), -1);
  assert_int_equal(open_vol(f, &d), 0);
  assert_int_equal(gen_of(d, 7), -1);
  /* And after everything is compacted, in a new open too. */
  compact_all(c);
  kvp_volume_close(d);
  assert_int_equal(open_vol(f, &d), 0);
  assert_int_equal(gen_of(d, 7), -1);
  assert_int_equal(gen_of(e, 7), -1);
  kvp_volume_close(d);
  kvp_volume_close(c);
  kvp_volume_close(e);
  kvp_volume_close(a);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_tombstone_outlives_a_put_in_flight_before_it, setup,
                                      teardown),
  };
  return kvp_test_run("volume_packed_race", tests, sizeof tests / sizeof tests[0], argc, argv);
}
