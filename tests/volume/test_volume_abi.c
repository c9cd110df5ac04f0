/* The volume plugin ABI survives its own next version.
 *
 * This program is the next kvplane: it and src/volume/abi.c (the loader's
 * table adoption, compiled again into this program) are built against a
 * generated kvplane/volume_plugin.h (tests/volume/tests.cmake): the public
 * header with one operation, test_next_op, appended where later versions
 * append theirs and KVP_VOLUME_ABI_VERSION raised by one. Against it:
 *
 *   - a plugin built against version 1 (plugin_v1.c, with a frozen copy of
 *     the version-1 header) loads, its operations are its own, and the
 *     appended operation reads NULL, even when the bytes after its table
 *     are garbage or unreadable (the table placed against a PROT_NONE page);
 *   - a table of the next version keeps its appended operation;
 *   - version 0 and a version newer than the loader are refused, naming the
 *     file and both versions;
 *   - flags the version does not have (KVP_VOLUME_CAN_DEVICE, reserved) and
 *     missing operations are refused. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "volume/abi.h"

#define V1_PATH KVP_TEST_PLUGIN_DIR "/kvplane-volume-v1.so"

/* The version this program was built as: one past the public header's. */
_Static_assert(KVP_VOLUME_ABI_VERSION >= 2, "built against the generated next-version header");

typedef struct fx_s {
  void *dl;
  const kvp_volume_ops_t *table; /* the v1 plugin's, only v1_size bytes of it exist */
  size_t v1_size;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  kvp_volume_entry_fn entry;
  const size_t *size;

  *state = f;
  if ((f->dl = dlopen(V1_PATH, RTLD_NOW | RTLD_LOCAL)) == NULL) {
    print_error("%s\n", dlerror());
    return -1;
  }
  *(void **)&entry = dlsym(f->dl, KVP_VOLUME_ENTRY);
  size = dlsym(f->dl, "kvp_test_v1_table_size");
  if (entry == NULL || size == NULL)
    return -1;
  f->table = entry();
  f->v1_size = *size;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  if (f->dl)
    dlclose(f->dl);
  free(f);
  return 0;
}

/* The version-1 table is shorter than this version's: the test means
 * something only then. */
static void next_version_table_is_longer(void **state) {
  fx_t *f = *state;
  assert_int_equal(f->table->abi_version, 1);
  assert_true(f->v1_size < sizeof(kvp_volume_ops_t));
  assert_true(f->v1_size <= offsetof(kvp_volume_ops_t, test_next_op));
}

static void v1_plugin_loads_and_appended_op_is_null(void **state) {
  fx_t *f = *state;
  kvp_volume_ops_t out;
  kvp_volume_stat_t st;
  char err[512] = "";
  void *vol = NULL;

  assert_int_equal(kvp__volume_adopt_ops(f->table, &out, V1_PATH, err, sizeof err), 0);
  assert_int_equal(out.abi_version, 1);
  assert_string_equal(out.name, "v1");
  assert_null(out.test_next_op);
  assert_null(out.garbage); /* version 2's: past a version-1 table */
  /* The operations are the plugin's own and work. */
  assert_int_equal(out.open(NULL, 0, &vol, err, sizeof err), 0);
  assert_int_equal(out.stat(vol, &st, err, sizeof err), 0);
  assert_int_equal(st.capacity, 0x7631);
  assert_int_equal(out.get(vol, "ns", 0x42, NULL, 0, NULL, err, sizeof err), KVP_ENOENT);
  assert_non_null(strstr(err, "0000000000000042"));
  out.close(vol);
}

/* Garbage after a version-1 table (what the plugin's neighbouring data
 * would be) never becomes an operation. */
static void bytes_after_a_v1_table_are_not_read_as_ops(void **state) {
  fx_t *f = *state;
  unsigned char buf[sizeof(kvp_volume_ops_t) + 64];
  kvp_volume_ops_t out;
  char err[512];

  memset(buf, 0xa5, sizeof buf);
  memcpy(buf, f->table, f->v1_size);
  assert_int_equal(
      kvp__volume_adopt_ops((const kvp_volume_ops_t *)buf, &out, V1_PATH, err, sizeof err), 0);
  assert_null(out.test_next_op);
  assert_ptr_equal(out.put, f->table->put);
  assert_ptr_equal(out.iterate, f->table->iterate);
}

/* A version-1 table that ends where a page ends, the next page unreadable:
 * reading one byte past it would crash this test. */
static void v1_table_is_never_read_past_its_end(void **state) {
  fx_t *f = *state;
  long page = sysconf(_SC_PAGESIZE);
  kvp_volume_ops_t out;
  char err[512];

  unsigned char *map =
      mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(map != MAP_FAILED);
  assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
  unsigned char *at = map + page - f->v1_size;
  memcpy(at, f->table, f->v1_size);
  assert_int_equal(
      kvp__volume_adopt_ops((const kvp_volume_ops_t *)at, &out, V1_PATH, err, sizeof err), 0);
  assert_null(out.test_next_op);
  assert_ptr_equal(out.get, f->table->get);
  munmap(map, (size_t)page * 2);
}

/* A plugin of this (next) version keeps the operation its version has. */
static int next_op(void *vol, char *err, size_t errlen) {
  (void)vol;
  snprintf(err, errlen, "next");
  return 7;
}

static void next_version_plugin_keeps_its_appended_op(void **state) {
  fx_t *f = *state;
  kvp_volume_ops_t t, out;
  char err[512];

  memset(&t, 0, sizeof t);
  memcpy(&t, f->table, f->v1_size);
  t.abi_version = KVP_VOLUME_ABI_VERSION;
  t.test_next_op = next_op;
  assert_int_equal(kvp__volume_adopt_ops(&t, &out, "next.so", err, sizeof err), 0);
  assert_int_equal(out.abi_version, KVP_VOLUME_ABI_VERSION);
  assert_ptr_equal(out.test_next_op, next_op);
  assert_int_equal(out.test_next_op(NULL, err, sizeof err), 7);
  /* An appended operation a plugin leaves NULL stays absent. */
  t.test_next_op = NULL;
  assert_int_equal(kvp__volume_adopt_ops(&t, &out, "next.so", err, sizeof err), 0);
  assert_null(out.test_next_op);
}

static void newer_and_zero_versions_are_refused_by_name(void **state) {
  fx_t *f = *state;
  kvp_volume_ops_t t, out;
  char err[512], want[64];

  memset(&t, 0, sizeof t);
  memcpy(&t, f->table, f->v1_size);
  t.abi_version = KVP_VOLUME_ABI_VERSION + 1;
  assert_int_equal(kvp__volume_adopt_ops(&t, &out, "/x/kvplane-volume-future.so", err, sizeof err),
                   KVP_ENOTSUP);
  print_message("refused: %s\n", err);
  assert_non_null(strstr(err, "/x/kvplane-volume-future.so"));
  snprintf(want, sizeof want, "ABI %u,", (unsigned)KVP_VOLUME_ABI_VERSION + 1);
  assert_non_null(strstr(err, want));
  snprintf(want, sizeof want, "versions 1 to %u", (unsigned)KVP_VOLUME_ABI_VERSION);
  assert_non_null(strstr(err, want));
  assert_non_null(strstr(err, "newer kvplane"));
  assert_null(out.put);
  t.abi_version = 0;
  assert_int_equal(kvp__volume_adopt_ops(&t, &out, "/x/zero.so", err, sizeof err), KVP_ENOTSUP);
  assert_non_null(strstr(err, "/x/zero.so"));
  assert_non_null(strstr(err, "ABI 0,"));
}

static void reserved_and_unknown_flags_and_missing_ops_are_refused(void **state) {
  fx_t *f = *state;
  kvp_volume_ops_t t, out;
  char err[512];

  for (uint32_t v = 1; v <= KVP_VOLUME_ABI_VERSION; v++) {
    memset(&t, 0, sizeof t);
    memcpy(&t, f->table, f->v1_size);
    t.abi_version = v;
    t.flags = KVP_VOLUME_CAN_DEVICE;
    assert_int_equal(kvp__volume_adopt_ops(&t, &out, "dev.so", err, sizeof err), KVP_ENOTSUP);
    assert_non_null(strstr(err, "dev.so"));
    assert_non_null(strstr(err, "KVP_VOLUME_CAN_DEVICE is reserved"));
    t.flags = 1u << 9;
    assert_int_equal(kvp__volume_adopt_ops(&t, &out, "odd.so", err, sizeof err), KVP_ENOTSUP);
    assert_non_null(strstr(err, "0x200"));
    t.flags = KVP_VOLUME_CAN_COPY; /* flagged, but no copy */
    assert_int_equal(kvp__volume_adopt_ops(&t, &out, "copy.so", err, sizeof err), KVP_ENOTSUP);
    assert_non_null(strstr(err, "'copy (flagged)'"));
    t.flags = 0;
    t.del = NULL;
    assert_int_equal(kvp__volume_adopt_ops(&t, &out, "nodel.so", err, sizeof err), KVP_ENOTSUP);
    assert_non_null(strstr(err, "nodel.so has no 'del' operation"));
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(next_version_table_is_longer, setup, teardown),
    cmocka_unit_test_setup_teardown(v1_plugin_loads_and_appended_op_is_null, setup, teardown),
    cmocka_unit_test_setup_teardown(bytes_after_a_v1_table_are_not_read_as_ops, setup, teardown),
    cmocka_unit_test_setup_teardown(v1_table_is_never_read_past_its_end, setup, teardown),
    cmocka_unit_test_setup_teardown(next_version_plugin_keeps_its_appended_op, setup, teardown),
    cmocka_unit_test_setup_teardown(newer_and_zero_versions_are_refused_by_name, setup, teardown),
    cmocka_unit_test_setup_teardown(reserved_and_unknown_flags_and_missing_ops_are_refused, setup,
                                    teardown),
};

KVP_TEST_MAIN("volume_abi", tests)
