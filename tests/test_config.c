/* INI config: good files load; each kind of mistake names file, line and key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "harness.h"
#include "kvplane/status.h"

typedef struct {
  char url[128];
  int64_t batch;
  int64_t delay_ms;
  int64_t cap;
  int flag;
  int mode;
  double decay;
} conf_t;

static const char *const modes[] = {"core", "jetstream", NULL};
static const kvp_conf_key_t keys[] = {
    {"nats", "url", KVP_CONF_STR, offsetof(conf_t, url), 0, 128, NULL, "server", NULL},
    {"nats", "mode", KVP_CONF_ENUM, offsetof(conf_t, mode), 0, 0, modes, "mode", NULL},
    {"batch", "max_events", KVP_CONF_INT, offsetof(conf_t, batch), 1, 65536, NULL, "n", NULL},
    {"batch", "max_delay", KVP_CONF_DURATION, offsetof(conf_t, delay_ms), 0, 60000, NULL, "d",
     NULL},
    {"batch", "max_bytes", KVP_CONF_SIZE, offsetof(conf_t, cap), 1024, 1 << 30, NULL, "b", NULL},
    {"batch", "coalesce", KVP_CONF_BOOL, offsetof(conf_t, flag), 0, 0, NULL, "c", NULL},
    {"index", "decay", KVP_CONF_DOUBLE, offsetof(conf_t, decay), 0, 1, NULL, "x", NULL},
};
#define NKEYS (sizeof keys / sizeof keys[0])

static char path[256];

static int load(const char *text, conf_t *c, char *err, size_t n) {
  snprintf(path, sizeof path, "%s/kvp-conf-%d.conf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  memset(c, 0, sizeof *c);
  int rc = kvp__conf_load(path, keys, NKEYS, c, err, n);
  remove(path);
  return rc;
}

static void loads_every_type(void **state) {
  (void)state;
  conf_t c;
  char err[512];
  assert_int_equal(load("# comment\n[nats]\nurl = nats://127.0.0.1:4222\nmode = jetstream\n"
                        "[batch]\nmax_events = 512\nmax_delay = 5s\nmax_bytes = 64KiB\n"
                        "coalesce = yes\n[index]\ndecay = 0.5\n",
                        &c, err, sizeof err),
                   0);
  assert_string_equal(c.url, "nats://127.0.0.1:4222");
  assert_int_equal(c.mode, 1);
  assert_int_equal(c.batch, 512);
  assert_int_equal(c.delay_ms, 5000);
  assert_int_equal(c.cap, 65536);
  assert_int_equal(c.flag, 1);
  assert_true(c.decay == 0.5);
}

static void expect_error(const char *text, const char *needle) {
  conf_t c;
  char err[512] = "";
  assert_int_equal(load(text, &c, err, sizeof err), KVP_ECONFIG);
  if (strstr(err, needle) == NULL || strstr(err, path) == NULL)
    fail_msg("error '%s' lacks '%s' or the path", err, needle);
}

static void errors_name_file_line_key(void **state) {
  (void)state;
  expect_error("[nats]\nurl = x\nbogus = 1\n", ":3: [nats] bogus: unknown key");
  expect_error("[nope]\nurl = x\n", ":2: unknown section [nope]");
  expect_error("[batch]\nmax_events = lots\n", ":2: [batch] max_events: 'lots' is not an integer");
  expect_error("[batch]\nmax_events = 0\n", "[batch] max_events: 0 is out of range");
  /* Digits past int64 are out of range, not "not an integer". */
  expect_error("[batch]\nmax_events = 99999999999999999999\n",
               "[batch] max_events: 99999999999999999999 is out of range [1, 65536]");
  expect_error("[batch]\nmax_delay = 99999999999999999999s\n",
               "max_delay: 99999999999999999999s is out of range");
  expect_error("[batch]\nmax_bytes = 9999999999999TiB\n",
               "max_bytes: 9999999999999TiB is out of range");
  expect_error("[batch]\nmax_events = 99999999999999999999x\n",
               "'99999999999999999999x' is not an integer");
  expect_error("[batch]\nmax_delay = 5 fortnights\n",
               "max_delay: '5 fortnights' is not a duration");
  expect_error("[batch]\nmax_bytes = 12XB\n", "max_bytes: '12XB' is not a size");
  expect_error("[batch]\ncoalesce = maybe\n", "coalesce: 'maybe' is not a boolean");
  expect_error("[nats]\nmode = carrier-pigeon\n",
               "mode: 'carrier-pigeon' is not one of core jetstream");
  expect_error("[index]\ndecay = 2\n", "decay: '2' is not a number");
  expect_error("[nats]\nthis line is not ini\n", ":2:");
  /* Past libinih's 200-byte line: a key line is an error naming its line;
   * a comment is cut and the keys after it still load. */
  char text[2048], note[600];
  memset(note, 'x', sizeof note - 1);
  note[sizeof note - 1] = '\0';
  snprintf(text, sizeof text, "[nats]\nurl = %.300s\n", note);
  expect_error(text, ":2: the line is longer than");
  snprintf(text, sizeof text, "# %s\n[nats]\n; %s\nurl = nats://h:1\n[batch]\nmax_events = 7\n",
           note, note);
  conf_t c;
  char err[512] = "";
  assert_int_equal(load(text, &c, err, sizeof err), 0);
  assert_string_equal(c.url, "nats://h:1");
  assert_int_equal(c.batch, 7);
  snprintf(text, sizeof text, "[batch]\nmax_events = 7\nmax_events = 8x\n");
  expect_error(text, ":3: [batch] max_events");
}

static void missing_file_is_eio(void **state) {
  (void)state;
  conf_t c;
  char err[512];
  assert_int_equal(kvp__conf_load("/nonexistent/kvp.conf", keys, NKEYS, &c, err, sizeof err),
                   KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent/kvp.conf"));
}

/* A path that opens but cannot be read (a directory: -c /etc/kvplane) was
 * read as an empty file, so the daemon ran on the defaults; it is an error
 * naming the path and the cause. */
static void unreadable_file_is_eio(void **state) {
  (void)state;
  conf_t c;
  char err[512] = "";
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  assert_int_equal(kvp__conf_load(dir, keys, NKEYS, &c, err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, dir));
  assert_non_null(strstr(err, "Is a directory"));
}

static void command_line_override(void **state) {
  (void)state;
  conf_t c = {0};
  char err[512];
  assert_int_equal(kvp__conf_override("batch.max_events=9", keys, NKEYS, &c, err, sizeof err), 0);
  assert_int_equal(c.batch, 9);
  assert_int_equal(kvp__conf_override("batch.max_events", keys, NKEYS, &c, err, sizeof err),
                   KVP_ECONFIG);
  assert_int_equal(kvp__conf_override("batch.nope=1", keys, NKEYS, &c, err, sizeof err),
                   KVP_ECONFIG);
  assert_non_null(strstr(err, "nope"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(loads_every_type),      cmocka_unit_test(errors_name_file_line_key),
    cmocka_unit_test(missing_file_is_eio),   cmocka_unit_test(unreadable_file_is_eio),
    cmocka_unit_test(command_line_override),
};

KVP_TEST_MAIN("config", tests)
