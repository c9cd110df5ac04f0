/* The metrics server closes its listening socket once: libmicrohttpd's
 * MHD_stop_daemon closes the socket it was given (it is not quiesced), so
 * a second close by kvp__metrics_server_stop would close whatever
 * descriptor another thread had just been given the same number (TSan
 * found that race in the router API's server, commit 77b63f5).
 *
 * This binary is linked with -Wl,--wrap=close: every close() of kvplane's
 * code (not libmicrohttpd's) goes through the wrapper below, which counts
 * the closes of a descriptor that is not open. With one thread nothing can
 * reuse the number in between, so a double close shows there every time. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "metrics/server.h"

int __real_close(int fd);
int __wrap_close(int fd);

static atomic_int closed_twice;

int __wrap_close(int fd) {
  if (fd >= 0 && fcntl(fd, F_GETFD) == -1 && errno == EBADF)
    atomic_fetch_add(&closed_twice, 1);
  return __real_close(fd);
}

static int collect(void *ctx, kvp__prom_t *out) {
  (void)ctx;
  (void)out;
  return 0;
}

static int ready(void *ctx, const char *partition, char *why, size_t len) {
  (void)ctx;
  (void)partition;
  (void)why;
  (void)len;
  return 1;
}

static void stop_closes_the_listening_socket_once(void **state) {
  (void)state;
  char err[256];
  for (int i = 0; i < 3; i++) {
    kvp__metrics_server_t *s = NULL;
    assert_int_equal(kvp__metrics_server_start("--metrics", "127.0.0.1:0", NULL, collect, ready,
                                               NULL, &s, err, sizeof err),
                     0);
    kvp__metrics_server_stop(s);
  }
  assert_int_equal(atomic_load(&closed_twice), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(stop_closes_the_listening_socket_once),
};

KVP_TEST_MAIN("metrics_close", tests)
