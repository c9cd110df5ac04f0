/* Status codes: names and messages come from one table. */
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"

static void codes_are_negative_and_distinct(void **state) {
  (void)state;
  int seen[KVP__STATUS_COUNT] = {0};
#define XX(name, msg)                                                                              \
  assert_true(KVP_##name < 0);                                                                     \
  assert_int_equal(seen[-KVP_##name], 0);                                                          \
  seen[-KVP_##name] = 1;
  KVP_STATUS_MAP(XX)
#undef XX
}

static void names_and_messages(void **state) {
  (void)state;
  assert_string_equal(kvp_err_name(KVP_ENOSPC), "KVP_ENOSPC");
  assert_string_equal(kvp_strerror(KVP_ENOSPC), "no free or evictable block");
  assert_string_equal(kvp_err_name(0), "KVP_OK");
  assert_string_equal(kvp_strerror(0), "success");
  assert_string_equal(kvp_err_name(-9999), "KVP_EUNKNOWN");
  assert_string_equal(kvp_strerror(12345), "unknown error");
#define XX(name, msg)                                                                              \
  assert_string_equal(kvp_err_name(KVP_##name), "KVP_" #name);                                     \
  assert_string_equal(kvp_strerror(KVP_##name), msg);
  KVP_STATUS_MAP(XX)
#undef XX
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(codes_are_negative_and_distinct),
    cmocka_unit_test(names_and_messages),
};

KVP_TEST_MAIN("status", tests)
