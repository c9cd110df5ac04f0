/* The publisher's event queue (src/publish/queue.h): the drop policy, and
 * the timed wait snapshot chunks use instead of being dropped. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "harness.h"
#include "kvplane/event.h"
#include "kvplane/status.h"
#include "publish/queue.h"

static kvp_event_t one_event(uint64_t *hash) {
  kvp_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.type = KVP_EV_REMOVED;
  ev.tier = KVP_TIER_G1;
  ev.hashes = hash;
  ev.nhashes = 1;
  return ev;
}

static void full_drop_queue_counts_drops_only_for_events(void **state) {
  (void)state;
  kvp__pubq_t q;
  uint64_t h = 7;
  kvp_event_t ev = one_event(&h);
  size_t before;

  assert_int_equal(kvp__pubq_init(&q, 2, 1), 0);
  assert_int_equal(kvp__pubq_push(&q, &ev, &before), 0);
  assert_int_equal(kvp__pubq_push(&q, &ev, &before), 0);
  assert_int_equal(kvp__pubq_push(&q, &ev, &before), KVP_EOVERFLOW);
  assert_int_equal(q.dropped_total, 1);

  /* Waiting with nobody consuming: refused at the deadline, not sooner,
   * and not counted as a dropped event. */
  uint64_t t0 = kvp__now_ns();
  assert_int_equal(kvp__pubq_push_wait(&q, &ev, &before, t0 + 30000000u), KVP_EOVERFLOW);
  assert_true(kvp__now_ns() - t0 >= 30000000u);
  assert_int_equal(q.dropped_total, 1);
  assert_int_equal(kvp__pubq_head(&q), 2);
  kvp__pubq_destroy(&q);
}

typedef struct {
  kvp__pubq_t *q;
  int delay_ms;
} consumer_t;

static void *consume_later(void *arg) {
  consumer_t *c = arg;
  struct timespec ts = {0, (long)c->delay_ms * 1000000L};
  uint64_t first;
  size_t n;
  nanosleep(&ts, NULL);
  kvp__pubq_peek(c->q, &first, &n);
  kvp__pubq_release(c->q, first + n);
  return NULL;
}

static void full_queue_wait_gets_room_from_the_consumer(void **state) {
  (void)state;
  kvp__pubq_t q;
  uint64_t h = 9;
  kvp_event_t ev = one_event(&h);
  size_t before;
  pthread_t th;
  consumer_t c = {&q, 20};

  assert_int_equal(kvp__pubq_init(&q, 2, 1), 0);
  assert_int_equal(kvp__pubq_push(&q, &ev, &before), 0);
  assert_int_equal(kvp__pubq_push(&q, &ev, &before), 0);
  assert_int_equal(pthread_create(&th, NULL, consume_later, &c), 0);
  /* Full now; the consumer frees room after 20 ms, well before 10 s. */
  assert_int_equal(kvp__pubq_push_wait(&q, &ev, &before, kvp__now_ns() + 10000000000ull), 0);
  pthread_join(th, NULL);
  assert_int_equal(q.dropped_total, 0);
  assert_int_equal(kvp__pubq_head(&q), 3);
  kvp__pubq_destroy(&q);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(full_drop_queue_counts_drops_only_for_events),
    cmocka_unit_test(full_queue_wait_gets_room_from_the_consumer),
};

int main(int argc, char **argv) {
  return kvp_test_run("publish_queue", tests, sizeof tests / sizeof tests[0], argc, argv);
}
