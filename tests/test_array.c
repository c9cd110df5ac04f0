/* common/array: the growable-array helper every module uses. */
#include <stdint.h>
#include <stdlib.h>

#include "common/array.h"
#include "harness.h"
#include "kvplane/status.h"

static void reserve_doubles_from_first_and_keeps_contents(void **state) {
  (void)state;
  uint32_t *v = NULL;
  size_t cap = 0;
  assert_int_equal(KVP_ARRAY_RESERVE(v, cap, 1, 4), 0);
  assert_int_equal(cap, 4);
  for (uint32_t i = 0; i < 4; i++)
    v[i] = i * 7;
  assert_int_equal(KVP_ARRAY_RESERVE(v, cap, 5, 4), 0);
  assert_int_equal(cap, 8);
  assert_int_equal(KVP_ARRAY_RESERVE(v, cap, 100, 4), 0);
  assert_int_equal(cap, 128);
  for (uint32_t i = 0; i < 4; i++)
    assert_int_equal(v[i], i * 7);
  /* Room already: nothing moves. */
  uint32_t *before = v;
  assert_int_equal(KVP_ARRAY_RESERVE(v, cap, 128, 4), 0);
  assert_ptr_equal(v, before);
  free(v);
}

static void reserve_half_grows_by_half(void **state) {
  (void)state;
  uint64_t *v = NULL;
  size_t cap = 0;
  assert_int_equal(KVP_ARRAY_RESERVE_HALF(v, cap, 17, 16), 0);
  assert_int_equal(cap, 24);
  assert_int_equal(KVP_ARRAY_RESERVE_HALF(v, cap, 25, 16), 0);
  assert_int_equal(cap, 36);
  free(v);
}

static void reserve_refuses_a_size_that_overflows(void **state) {
  (void)state;
  uint64_t *v = NULL;
  size_t cap = 0;
  assert_int_equal(KVP_ARRAY_RESERVE(v, cap, SIZE_MAX / 4, 16), KVP_ETOOBIG);
  assert_null(v);
  assert_int_equal(cap, 0);
}

static void reserve_n_grows_columns_together(void **state) {
  (void)state;
  uint64_t *a = NULL;
  uint8_t *b = NULL;
  size_t cap = 0;
  void **const arrs[] = {(void **)&a, (void **)&b};
  const size_t elems[] = {sizeof *a, sizeof *b};
  assert_int_equal(kvp__array_reserve_n(arrs, elems, 2, &cap, 300, 256), 0);
  assert_int_equal(cap, 512);
  a[511] = 1;
  b[511] = 2;
  assert_int_equal(kvp__array_reserve_n(arrs, elems, 2, &cap, 512, 256), 0);
  assert_int_equal(cap, 512);
  assert_int_equal(kvp__array_reserve_n(arrs, elems, 2, &cap, SIZE_MAX / 2, 256), KVP_ETOOBIG);
  assert_int_equal(cap, 512);
  free(a);
  free(b);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(reserve_doubles_from_first_and_keeps_contents),
    cmocka_unit_test(reserve_half_grows_by_half),
    cmocka_unit_test(reserve_refuses_a_size_that_overflows),
    cmocka_unit_test(reserve_n_grows_columns_together),
};

KVP_TEST_MAIN("array", tests)
