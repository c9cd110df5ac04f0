/* Volumes: the block frame and its checks, the plugin loader's errors, and
 * the posix plugin on a real filesystem (bytes identical for many sizes up
 * to 64 MiB, corruption on disk detected, capacity, crash leftovers,
 * concurrent use). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

typedef struct fx_s {
  char dir[256], root[300];
  kvp_volume_t *v;
} fx_t;

static int open_posix(fx_t *f, const char *capacity, const char *fsync_mode) {
  char err[512];
  kvp_volume_param_t p[3] = {{"path", f->root}, {"fsync", fsync_mode}, {"capacity", capacity}};
  int rc = kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-test", p, capacity ? 3 : 2, &f->v,
                           err, sizeof err);
  if (rc != 0)
    print_error("%s\n", err);
  return rc;
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->root, sizeof f->root, "%s/vol", f->dir);
  return open_posix(f, NULL, "on");
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_volume_close(f->v);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

static kvp_frame_t meta_of(uint64_t hash, size_t len) {
  return (kvp_frame_t){.hash = hash,
                       .parent = hash ^ 0x5555,
                       .has_parent = 1,
                       .layout = {.num_layers = 2, .page_size = 16, .inner_dim = 8, .elem_size = 2},
                       .payload_len = len};
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

/* --- the frame ---------------------------------------------------------------- */

static void frame_checks_every_field(void **state) {
  (void)state;
  uint8_t payload[1000], h[KVP_FRAME_HEADER];
  kvp_frame_t m = meta_of(0xabcdef, sizeof payload), out;
  char err[256];

  fill(payload, sizeof payload, 1);
  kvp_frame_encode(&m, payload, h);
  assert_int_equal(kvp_frame_verify(h, payload, sizeof payload, 0xabcdef, &out, err, sizeof err),
                   0);
  assert_int_equal(out.parent, 0xabcdef ^ 0x5555);
  assert_true(out.has_parent);
  assert_int_equal(out.layout.inner_dim, 8);
  assert_int_equal(out.checksum, m.checksum);
  /* Every bit of the header matters. */
  for (int bit = 0; bit < KVP_FRAME_HEADER * 8; bit++) {
    h[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    assert_int_equal(kvp_frame_verify(h, payload, sizeof payload, 0xabcdef, &out, err, sizeof err),
                     KVP_ECORRUPT);
    h[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  }
  payload[500] ^= 4;
  assert_int_equal(kvp_frame_verify(h, payload, sizeof payload, 0xabcdef, &out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "payload checksum"));
  payload[500] ^= 4;
  assert_int_equal(
      kvp_frame_verify(h, payload, sizeof payload - 1, 0xabcdef, &out, err, sizeof err),
      KVP_ECORRUPT);
  assert_non_null(strstr(err, "length"));
  assert_int_equal(kvp_frame_verify(h, payload, sizeof payload, 0xabcdee, &out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "another block"));
  assert_non_null(strstr(err, "0000000000abcdee"));
}

/* --- the loader ----------------------------------------------------------------- */

static void loader_names_file_and_cause(void **state) {
  (void)state;
  kvp_volume_t *v = NULL;
  char err[512];
  kvp_volume_param_t p[1] = {{"path", "/tmp"}};

  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "nosuch", "g3", p, 1, &v, err, sizeof err),
                   KVP_ENOENT);
  assert_non_null(strstr(err, "kvplane-volume-nosuch.so"));
  assert_int_equal(kvp_volume_open(KVP_TEST_PLUGIN_DIR, "badabi", "g3", p, 1, &v, err, sizeof err),
                   KVP_ENOTSUP);
  assert_non_null(strstr(err, "ABI"));
  assert_non_null(strstr(err, "kvplane-volume-badabi.so"));
  assert_int_equal(kvp_volume_open(KVP_TEST_PLUGIN_DIR, "noentry", "g3", p, 1, &v, err, sizeof err),
                   KVP_ENOTSUP);
  assert_non_null(strstr(err, KVP_VOLUME_ENTRY));
  /* The reserved device-memory flag, set while no version has its
   * operations. */
  assert_int_equal(
      kvp_volume_open(KVP_TEST_PLUGIN_DIR, "baddevice", "g3", p, 0, &v, err, sizeof err),
      KVP_ENOTSUP);
  assert_non_null(strstr(err, "kvplane-volume-baddevice.so"));
  assert_non_null(strstr(err, "KVP_VOLUME_CAN_DEVICE is reserved"));
  /* A plugin built against the frozen version-1 header loads; its table is
   * the library's full-size copy. */
  assert_int_equal(kvp_volume_open(KVP_TEST_PLUGIN_DIR, "v1", "g3-v1", p, 0, &v, err, sizeof err),
                   0);
  assert_int_equal(kvp_volume_ops(v)->abi_version, 1);
  assert_string_equal(kvp_volume_ops(v)->name, "v1");
  kvp_volume_stat_t st;
  assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
  assert_int_equal(st.capacity, 0x7631);
  kvp_volume_close(v);
  v = NULL;
  /* The plugin's own refusal, with the volume named. */
  kvp_volume_param_t bad[2] = {{"path", "/tmp"}, {"colour", "blue"}};
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-x", bad, 2, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "volume g3-x"));
  assert_non_null(strstr(err, "colour"));
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-x", bad, 0, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "path"));
  assert_null(v);
  /* The default directory follows KVPLANE_PLUGIN_DIR. */
  setenv("KVPLANE_PLUGIN_DIR", KVP_BUILD_PLUGIN_DIR, 1);
  assert_string_equal(kvp_volume_plugin_dir(), KVP_BUILD_PLUGIN_DIR);
  unsetenv("KVPLANE_PLUGIN_DIR");
}

/* --- posix -------------------------------------------------------------------- */

static void posix_bytes_identical_for_many_sizes(void **state) {
  fx_t *f = *state;
  static const size_t sizes[] = {1, 7, 64, 4096, 65536, 2u << 20, (2u << 20) + 3, 64u << 20};
  char err[512];

  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    uint8_t *in = malloc(n), *out = malloc(n);
    kvp_frame_t m = meta_of(0x1000 + i, n), got;
    fill(in, n, i + 7);
    assert_int_equal(kvp_volume_put_block(f->v, "ns1", &m, in, err, sizeof err), 0);
    memset(out, 0, n);
    assert_int_equal(kvp_volume_get_block(f->v, "ns1", 0x1000 + i, &got, out, n, err, sizeof err),
                     0);
    assert_int_equal(got.payload_len, n);
    assert_memory_equal(in, out, n);
    /* A buffer one byte short is refused with the size. */
    assert_int_equal(
        kvp_volume_get_block(f->v, "ns1", 0x1000 + i, &got, out, n - 1, err, sizeof err),
        KVP_ETOOBIG);
    assert_int_equal(got.payload_len, n);
    free(in);
    free(out);
  }
  /* Namespaces are separate keys. */
  uint8_t b[8];
  kvp_frame_t got;
  assert_int_equal(kvp_volume_get_block(f->v, "ns2", 0x1000, &got, b, sizeof b, err, sizeof err),
                   KVP_ENOENT);
  assert_non_null(strstr(err, "volume g3-test"));
}

static void file_of(const fx_t *f, const char *ns, uint64_t hash, char *out, size_t len) {
  snprintf(out, len, "%s/%s/%02x/%016llx", f->root, ns, (unsigned)(hash >> 56),
           (unsigned long long)hash);
}

static void posix_corruption_on_disk_is_detected(void **state) {
  fx_t *f = *state;
  uint8_t in[4096], out[4096];
  char err[512], path[512], other[512];
  kvp_frame_t m = meta_of(0x77, sizeof in), got;

  fill(in, sizeof in, 3);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m, in, err, sizeof err), 0);
  file_of(f, "n", 0x77, path, sizeof path);
  /* A flipped bit in the payload. */
  int fd = open(path, O_RDWR);
  uint8_t byte;
  assert_int_equal(pread(fd, &byte, 1, KVP_FRAME_HEADER + 1000), 1);
  byte ^= 0x10;
  assert_int_equal(pwrite(fd, &byte, 1, KVP_FRAME_HEADER + 1000), 1);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x77, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "checksum"));
  /* Truncated. */
  assert_int_equal(ftruncate(fd, KVP_FRAME_HEADER + 100), 0);
  close(fd);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x77, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_int_equal(truncate(path, 10), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x77, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  /* Another block's object under this name. */
  kvp_frame_t m2 = meta_of(0x78, sizeof in);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m2, in, err, sizeof err), 0);
  file_of(f, "n", 0x78, other, sizeof other);
  assert_int_equal(rename(other, path), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x77, &got, out, sizeof out, err, sizeof err),
                   KVP_ECORRUPT);
  assert_non_null(strstr(err, "another block"));
  /* Deleted behind the volume's back: a miss. */
  unlink(path);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x77, &got, out, sizeof out, err, sizeof err),
                   KVP_ENOENT);
  assert_int_equal(kvp_volume_exists(f->v, "n", 0x77), 0);
}

static void posix_capacity_is_enforced_and_store_stays_consistent(void **state) {
  fx_t *f = *state;
  uint8_t in[1000], out[1000];
  char err[512];
  kvp_volume_stat_t st;
  kvp_frame_t got;

  kvp_volume_close(f->v);
  f->v = NULL;
  /* Room for three framed blocks of 1000 bytes (1064 each), not four. */
  assert_int_equal(open_posix(f, "3500", "on"), 0);
  for (uint64_t h = 1; h <= 3; h++) {
    kvp_frame_t m = meta_of(h, sizeof in);
    fill(in, sizeof in, h);
    assert_int_equal(kvp_volume_put_block(f->v, "n", &m, in, err, sizeof err), 0);
  }
  kvp_frame_t m4 = meta_of(4, sizeof in);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m4, in, err, sizeof err), KVP_ENOSPC);
  assert_non_null(strstr(err, "volume g3-test"));
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 3);
  assert_int_equal(st.used, 3 * (sizeof in + KVP_FRAME_HEADER));
  assert_int_equal(st.capacity, 3500);
  assert_int_equal(kvp_volume_exists(f->v, "n", 4), 0);
  /* Replacing an object of the same size fits; the old ones read back. */
  kvp_frame_t m2 = meta_of(2, sizeof in);
  fill(in, sizeof in, 22);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m2, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 2, &got, out, sizeof out, err, sizeof err), 0);
  assert_memory_equal(in, out, sizeof in);
  fill(in, sizeof in, 1);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 1, &got, out, sizeof out, err, sizeof err), 0);
  assert_memory_equal(in, out, sizeof in);
  /* Deleting makes room. */
  assert_int_equal(kvp_volume_delete(f->v, "n", 3, err, sizeof err), 0);
  assert_int_equal(kvp_volume_delete(f->v, "n", 3, err, sizeof err), KVP_ENOENT);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m4, in, err, sizeof err), 0);
  /* Bad capacity values are configuration errors. */
  kvp_volume_t *v2 = NULL;
  kvp_volume_param_t p[2] = {{"path", f->root}, {"capacity", "lots"}};
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-y", p, 2, &v2, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "capacity"));
}

typedef struct count_s {
  uint64_t n, bytes;
} count_t;

static int count_keys(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  count_t *c = ctx;
  (void)ns;
  (void)hash;
  c->n++;
  c->bytes += bytes;
  return 0;
}

static void posix_open_removes_leftovers_and_rebuilds_usage(void **state) {
  fx_t *f = *state;
  uint8_t in[500];
  char err[512], path[512], tmp[600];
  kvp_volume_stat_t st;
  count_t c = {0};

  fill(in, sizeof in, 9);
  for (uint64_t h = 10; h < 20; h++) {
    kvp_frame_t m = meta_of(h << 56 | h, sizeof in);
    assert_int_equal(kvp_volume_put_block(f->v, "a", &m, in, err, sizeof err), 0);
  }
  /* A put cut off by a crash leaves its temporary file. */
  file_of(f, "a", 10ull << 56 | 10, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.99999.1", path);
  FILE *fp = fopen(tmp, "w");
  fputs("half a block", fp);
  fclose(fp);
  kvp_volume_close(f->v);
  f->v = NULL;
  assert_int_equal(open_posix(f, NULL, "on"), 0);
  assert_int_not_equal(access(tmp, F_OK), 0);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 10);
  assert_int_equal(st.used, 10 * (sizeof in + KVP_FRAME_HEADER));
  assert_int_equal(kvp_volume_iterate(f->v, count_keys, &c, err, sizeof err), 0);
  assert_int_equal(c.n, 10);
  assert_int_equal(c.bytes, st.used);
  assert_int_equal(kvp_volume_exists(f->v, "a", 15ull << 56 | 15), 1);
}

typedef struct worker_s {
  kvp_volume_t *v;
  int id;
  atomic_int *bad;
} worker_t;

static void *hammer(void *arg) {
  worker_t *w = arg;
  uint8_t in[2048], out[2048];
  char err[512];
  for (int i = 0; i < 200; i++) {
    uint64_t h = (uint64_t)(i % 50) + 1; /* keys shared by every thread */
    kvp_frame_t m = meta_of(h, sizeof in), got;
    fill(in, sizeof in, h); /* same key, same bytes: any complete object is right */
    if (kvp_volume_put_block(w->v, "c", &m, in, err, sizeof err) != 0)
      atomic_fetch_add(w->bad, 1);
    int rc = kvp_volume_get_block(w->v, "c", (uint64_t)((i * 7 + w->id) % 50) + 1, &got, out,
                                  sizeof out, err, sizeof err);
    if (rc != 0 && rc != KVP_ENOENT)
      atomic_fetch_add(w->bad, 1);
  }
  return NULL;
}

static void posix_is_thread_safe_per_volume(void **state) {
  fx_t *f = *state;
  pthread_t th[4];
  worker_t w[4];
  atomic_int bad = 0;
  kvp_volume_stat_t st;
  count_t c = {0};
  char err[512];

  kvp_volume_close(f->v);
  f->v = NULL;
  assert_int_equal(open_posix(f, NULL, "off"), 0);
  for (int i = 0; i < 4; i++) {
    w[i] = (worker_t){f->v, i, &bad};
    pthread_create(&th[i], NULL, hammer, &w[i]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&bad), 0);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(kvp_volume_iterate(f->v, count_keys, &c, err, sizeof err), 0);
  assert_int_equal(c.n, 50);
  assert_int_equal(st.blocks, 50);
  assert_int_equal(st.used, c.bytes);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(frame_checks_every_field),
    cmocka_unit_test(loader_names_file_and_cause),
    cmocka_unit_test_setup_teardown(posix_bytes_identical_for_many_sizes, setup, teardown),
    cmocka_unit_test_setup_teardown(posix_corruption_on_disk_is_detected, setup, teardown),
    cmocka_unit_test_setup_teardown(posix_capacity_is_enforced_and_store_stays_consistent, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(posix_open_removes_leftovers_and_rebuilds_usage, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(posix_is_thread_safe_per_volume, setup, teardown),
};

KVP_TEST_MAIN("volume", tests)
