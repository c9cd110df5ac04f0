/* Volumes: the block frame and its checks, the plugin loader (its errors,
 * a version-1 plugin, framed access), and what is the posix plugin's own on
 * a real filesystem (corruption on disk detected, crash leftovers removed
 * at open). The contract every plugin keeps (bytes, misses, capacity,
 * stat, iterate, threads) is the conformance suite's: conformance.c. */
#include <fcntl.h>
#include <inttypes.h>
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
  /* Version 2's garbage is not in a version-1 table: NULL, and the engine
   * never compacts such a volume. */
  assert_null(kvp_volume_ops(v)->garbage);
  uint64_t dead, total;
  assert_int_equal(kvp_volume_garbage(v, &dead, &total, err, sizeof err), KVP_ENOTSUP);
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

/* The loader's framed access over a plugin: a block round-trips, a buffer
 * one byte short is KVP_ETOOBIG with the payload's size, a miss names the
 * volume. (The plugin's own contract is the conformance suite's.) */
static void framed_blocks_round_trip_through_the_loader(void **state) {
  fx_t *f = *state;
  const size_t n = 100000;
  uint8_t *in = malloc(n), *out = malloc(n);
  kvp_frame_t m = meta_of(0x1000, n), got;
  char err[512];

  fill(in, n, 7);
  assert_int_equal(kvp_volume_put_block(f->v, "ns1", &m, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_get_block(f->v, "ns1", 0x1000, &got, out, n, err, sizeof err), 0);
  assert_int_equal(got.payload_len, n);
  assert_int_equal(got.parent, 0x1000 ^ 0x5555);
  assert_memory_equal(in, out, n);
  assert_int_equal(kvp_volume_get_block(f->v, "ns1", 0x1000, &got, out, n - 1, err, sizeof err),
                   KVP_ETOOBIG);
  assert_int_equal(got.payload_len, n);
  assert_int_equal(kvp_volume_get_block(f->v, "ns2", 0x1000, &got, out, n, err, sizeof err),
                   KVP_ENOENT);
  assert_non_null(strstr(err, "volume g3-test"));
  free(in);
  free(out);
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

/* Counts the regular files under dir, recursively. */
static int files_under(const char *dir) {
  count_t c = {0};
  char cmd[600];
  snprintf(cmd, sizeof cmd, "find '%s' -type f | wc -l", dir);
  FILE *fp = popen(cmd, "r");
  if (fp == NULL || fscanf(fp, "%" SCNu64, &c.n) != 1)
    c.n = 999;
  if (fp)
    pclose(fp);
  return (int)c.n;
}

/* A dropped mount, simulated: the volume's directory renamed away and an
 * empty one at its path (a bare mountpoint), then deleted: puts and deletes
 * are KVP_EOFFLINE and write nothing under the path, a miss is KVP_EOFFLINE
 * (not "not there"), and once the directory is back the volume works. */
static void posix_without_its_marker_is_offline(void **state) {
  fx_t *f = *state;
  uint8_t in[500], out[500];
  char err[512], away[400];
  kvp_volume_stat_t st;
  kvp_frame_t m = meta_of(0x42, sizeof in), got;

  fill(in, sizeof in, 4);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m, in, err, sizeof err), 0);
  snprintf(away, sizeof away, "%s/away", f->dir);
  assert_int_equal(rename(f->root, away), 0);
  assert_int_equal(mkdir(f->root, 0700), 0); /* the bare mountpoint */
  kvp_frame_t m2 = meta_of(0x43, sizeof in);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m2, in, err, sizeof err), KVP_EOFFLINE);
  assert_non_null(strstr(err, "offline"));
  assert_non_null(strstr(err, f->root));
  assert_int_equal(files_under(f->root), 0);
  assert_int_equal(kvp_volume_delete(f->v, "n", 0x42, err, sizeof err), KVP_EOFFLINE);
  assert_int_equal(kvp_volume_get_block(f->v, "n", 0x42, &got, out, sizeof out, err, sizeof err),
                   KVP_EOFFLINE);
  assert_int_equal(kvp_volume_exists(f->v, "n", 0x42), KVP_EOFFLINE);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), KVP_EOFFLINE);
  /* Deleted: the same. */
  assert_int_equal(rmdir(f->root), 0);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m2, in, err, sizeof err), KVP_EOFFLINE);
  assert_int_not_equal(access(f->root, F_OK), 0); /* the root is never re-created */
  /* Back: online again, the old object there. */
  assert_int_equal(rename(away, f->root), 0);
  assert_int_equal(kvp_volume_exists(f->v, "n", 0x42), 1);
  assert_int_equal(kvp_volume_put_block(f->v, "n", &m2, in, err, sizeof err), 0);
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, 2);
  /* init=never: an empty directory is not taken for the volume. */
  kvp_volume_t *v = NULL;
  char bare[400];
  snprintf(bare, sizeof bare, "%s/bare", f->dir);
  assert_int_equal(mkdir(bare, 0700), 0);
  kvp_volume_param_t p[2] = {{"path", bare}, {"init", "never"}};
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 2, &v, err, sizeof err),
                   KVP_EOFFLINE);
  assert_int_equal(files_under(bare), 0);
}

/* The marker records the namespace of the caller that created the volume
 * (kvp_volume_open_ns adds namespace= for a plugin with
 * KVP_VOLUME_KNOWS_NAMESPACE); a volume of another namespace is refused,
 * naming both; a version-1 plugin, which refuses unknown parameters, is
 * not given it and still opens. */
static void posix_marker_names_its_namespace(void **state) {
  fx_t *f = *state;
  kvp_volume_t *v = NULL;
  char err[512], root[400], marker[480], text[512] = "";

  snprintf(root, sizeof root, "%s/ns-vol", f->dir);
  kvp_volume_param_t p[1] = {{"path", root}};
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", "ns-a", p, 1, &v, err, sizeof err),
      0);
  assert_true(kvp_volume_ops(v)->flags & KVP_VOLUME_KNOWS_NAMESPACE);
  kvp_volume_close(v);
  snprintf(marker, sizeof marker, "%s/.kvplane-volume", root);
  FILE *fp = fopen(marker, "r");
  assert_non_null(fp);
  assert_true(fread(text, 1, sizeof text - 1, fp) > 0);
  fclose(fp);
  assert_non_null(strstr(text, "\nnamespace=ns-a\n"));
  /* Another namespace: refused, both named, nothing written. */
  v = NULL;
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", "ns-b", p, 1, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_null(v);
  assert_non_null(strstr(err, "'ns-a'"));
  assert_non_null(strstr(err, "'ns-b'"));
  assert_non_null(strstr(err, root));
  /* Its own namespace, and a caller that names none, open it. */
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", "ns-a", p, 1, &v, err, sizeof err),
      0);
  kvp_volume_close(v);
  assert_int_equal(kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g4", p, 1, &v, err, sizeof err),
                   0);
  kvp_volume_close(v);
  /* A namespace parameter that disagrees with the caller's. */
  kvp_volume_param_t q[2] = {{"path", root}, {"namespace", "ns-b"}};
  assert_int_equal(
      kvp_volume_open_ns(KVP_BUILD_PLUGIN_DIR, "posix", "g4", "ns-a", q, 2, &v, err, sizeof err),
      KVP_ECONFIG);
  /* A version-1 plugin takes no parameters and gets none. */
  assert_int_equal(
      kvp_volume_open_ns(KVP_TEST_PLUGIN_DIR, "v1", "g3-v1", "ns-a", NULL, 0, &v, err, sizeof err),
      0);
  kvp_volume_close(v);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(frame_checks_every_field),
    cmocka_unit_test(loader_names_file_and_cause),
    cmocka_unit_test_setup_teardown(framed_blocks_round_trip_through_the_loader, setup, teardown),
    cmocka_unit_test_setup_teardown(posix_corruption_on_disk_is_detected, setup, teardown),
    cmocka_unit_test_setup_teardown(posix_open_removes_leftovers_and_rebuilds_usage, setup,
                                    teardown),
    cmocka_unit_test_setup_teardown(posix_without_its_marker_is_offline, setup, teardown),
    cmocka_unit_test_setup_teardown(posix_marker_names_its_namespace, setup, teardown),
};

KVP_TEST_MAIN("volume", tests)
