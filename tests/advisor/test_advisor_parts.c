/* The advisor's parts below the wiring: the inbox (the queue from NATS
 * threads to the loop thread) and the write-behind's ack state machine
 * (writebehind.h has its table). The ack machine is checked with counting
 * fakes in place of JetStream messages: it is pure logic, and the daemon
 * and kill tests run it against a real server. */
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <uv.h>

#include "advisor/freshness.h"
#include "advisor/inbox.h"
#include "advisor/writebehind.h"
#include "harness.h"
#include "kvplane/status.h"

/* --- ack state machine ----------------------------------------------------- */

typedef struct fake_s {
  int id, acked, released;
} fake_t;

static void fake_ack(void *m) {
  ((fake_t *)m)->acked++;
}

static void fake_release(void *m) {
  ((fake_t *)m)->released++;
}

static void acks_follow_the_table(void **state) {
  (void)state;
  kvp__adv_acks_t a;
  fake_t m[6] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}, {.id = 4}, {.id = 5}};

  kvp__adv_acks_init(&a, fake_ack, fake_release);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_IDLE);
  /* IDLE -applied-> APPLIED; a newer applied message replaces (releases)
   * the older, which its ack covers. */
  kvp__adv_acks_applied(&a, &m[0]);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_APPLIED);
  kvp__adv_acks_applied(&a, &m[1]);
  assert_int_equal(m[0].released, 1);
  assert_int_equal(m[0].acked, 0);
  /* APPLIED -started-> WRITING -committed-> IDLE, acking the message. */
  kvp__adv_acks_flush_started(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_WRITING);
  assert_int_equal(m[1].acked, 0);
  kvp__adv_acks_flush_committed(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_IDLE);
  assert_int_equal(m[1].acked, 1);
  assert_int_equal(m[1].released, 0);
  /* WRITING -failed-> APPLIED: the message waits for the next flush. */
  kvp__adv_acks_applied(&a, &m[2]);
  kvp__adv_acks_flush_started(&a);
  kvp__adv_acks_flush_failed(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_APPLIED);
  assert_int_equal(m[2].acked + m[2].released, 0);
  /* WRITING -applied-> WRITING_APPLIED -committed-> APPLIED: only the
   * written one is acked; the newer one waits. */
  kvp__adv_acks_flush_started(&a);
  kvp__adv_acks_applied(&a, &m[3]);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_WRITING_APPLIED);
  kvp__adv_acks_flush_committed(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_APPLIED);
  assert_int_equal(m[2].acked, 1);
  assert_int_equal(m[3].acked, 0);
  /* WRITING_APPLIED -failed-> APPLIED: the written one is released, never
   * acked (its changes are not committed); the newer one will ack both. */
  kvp__adv_acks_flush_started(&a);
  kvp__adv_acks_applied(&a, &m[4]);
  kvp__adv_acks_flush_failed(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_APPLIED);
  assert_int_equal(m[3].acked, 0);
  assert_int_equal(m[3].released, 1);
  /* APPLIED -sync committed-> IDLE (the last flush at stop). */
  kvp__adv_acks_sync_committed(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_IDLE);
  assert_int_equal(m[4].acked, 1);
  /* A flush with nothing pending acks nothing. */
  kvp__adv_acks_flush_started(&a);
  assert_int_equal(kvp__adv_acks_state(&a), KVP__ACK_IDLE);
  kvp__adv_acks_flush_committed(&a);
  kvp__adv_acks_flush_failed(&a);
  /* Destroy releases what was never acked. */
  kvp__adv_acks_applied(&a, &m[5]);
  kvp__adv_acks_destroy(&a);
  assert_int_equal(m[5].released, 1);
  assert_int_equal(m[5].acked, 0);
  /* Every message was acked or released exactly once, except m[1..2]
   * which were acked, never released. */
  for (int i = 0; i < 6; i++)
    assert_int_equal(m[i].acked + m[i].released, 1);
  assert_string_equal(kvp__adv_ack_state_name(KVP__ACK_WRITING_APPLIED), "writing+applied");
}

/* --- inbox -------------------------------------------------------------------- */

static natsMsg *msg(const char *text) {
  natsMsg *m = NULL;
  assert_int_equal(natsMsg_Create(&m, "kvp.test", NULL, text, (int)strlen(text)), NATS_OK);
  return m;
}

static void on_async(uv_async_t *h) {
  (void)h;
}

static void inbox_keeps_order_and_counts_drops(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_async_t wake;
  kvp__adv_inbox_t in;

  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(uv_async_init(&loop, &wake, on_async), 0);
  assert_int_equal(kvp__adv_inbox_init(&in, 2, &wake), 0);
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_EVENT, msg("a"), 0, 1), 0);
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_JS_EVENT, msg("b"), 7, 1), 0);
  /* Full: a droppable push is refused and counted; an API request is not. */
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_EVENT, msg("c"), 0, 1), KVP_EOVERFLOW);
  assert_int_equal(kvp__adv_inbox_dropped(&in), 1);
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_TIER, msg("d"), 0, 0), 0);
  kvp__adv_in_t *it = kvp__adv_inbox_take_all(&in);
  const char *want[] = {"a", "b", "d"};
  int kinds[] = {KVP__IN_EVENT, KVP__IN_JS_EVENT, KVP__IN_TIER};
  for (int i = 0; i < 3; i++) {
    assert_non_null(it);
    assert_int_equal(it->kind, kinds[i]);
    assert_memory_equal(natsMsg_GetData(it->msg), want[i], 1);
    kvp__adv_in_t *next = it->next;
    kvp__adv_in_free(it);
    it = next;
  }
  assert_null(it);
  assert_null(kvp__adv_inbox_take_all(&in));
  /* Messages left queued are freed by destroy (LeakSanitizer checks). */
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_TIER, msg("e"), 0, 0), 0);
  kvp__adv_inbox_close_wake(&in);
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_TIER, msg("f"), 0, 0), 0);
  kvp__adv_inbox_destroy(&in);
  uv_close((uv_handle_t *)&wake, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

typedef struct waiter_s {
  kvp__adv_inbox_t *in;
  atomic_int *stopping;
  atomic_int done;
  int rc;
} waiter_t;

static void *wait_main(void *arg) {
  waiter_t *w = arg;
  w->rc = kvp__adv_inbox_wait_room(w->in, w->stopping);
  atomic_store(&w->done, 1);
  return NULL;
}

static void inbox_wait_room_wakes_on_take_and_on_stop(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_async_t wake;
  kvp__adv_inbox_t in;
  atomic_int stopping = 0;
  pthread_t t;

  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(uv_async_init(&loop, &wake, on_async), 0);
  assert_int_equal(kvp__adv_inbox_init(&in, 1, &wake), 0);
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_JS_EVENT, msg("a"), 1, 0), 0);
  /* Full: the waiter blocks until the loop takes the messages. */
  waiter_t w = {.in = &in, .stopping = &stopping};
  atomic_init(&w.done, 0);
  assert_int_equal(pthread_create(&t, NULL, wait_main, &w), 0);
  uv_sleep(150);
  assert_int_equal(atomic_load(&w.done), 0);
  kvp__adv_in_t *it = kvp__adv_inbox_take_all(&in);
  pthread_join(t, NULL);
  assert_int_equal(w.rc, 0);
  kvp__adv_in_free(it);
  /* Full again: a stop releases the waiter with KVP_ECLOSED. */
  assert_int_equal(kvp__adv_inbox_push(&in, KVP__IN_JS_EVENT, msg("b"), 2, 0), 0);
  atomic_init(&w.done, 0);
  assert_int_equal(pthread_create(&t, NULL, wait_main, &w), 0);
  uv_sleep(50);
  atomic_store(&stopping, 1);
  kvp__adv_inbox_close_wake(&in);
  pthread_join(t, NULL);
  assert_int_equal(w.rc, KVP_ECLOSED);
  kvp__adv_inbox_destroy(&in);
  uv_close((uv_handle_t *)&wake, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

typedef struct seen_s {
  uint64_t applied, committed_mark, committed_ms;
} seen_t;

static void seen_applied(void *ctx, uint64_t n, uint64_t batch_ms, uint64_t now_ms,
                         uint64_t blocks) {
  (void)batch_ms;
  (void)now_ms;
  (void)blocks;
  ((seen_t *)ctx)->applied = n;
}

static void seen_committed(void *ctx, uint64_t mark, uint64_t now_ms) {
  ((seen_t *)ctx)->committed_mark = mark;
  ((seen_t *)ctx)->committed_ms = now_ms;
}

/* Apply lag per batch, flush lag from the oldest batch of a flush, a failed
 * flush's batches pending again, a clock ahead counted as 0, marks. */
static void freshness_measures_apply_and_flush(void **state) {
  (void)state;
  seen_t seen = {0};
  kvp__adv_fresh_t f = {.obs = {seen_applied, seen_committed, &seen}};

  kvp__adv_fresh_applied(&f, 1000, 1010, 5);
  kvp__adv_fresh_applied(&f, 1005, 1030, 5);
  assert_int_equal(f.apply_lag_ms, 25);
  assert_int_equal(f.apply_lag_max_ms, 25);
  assert_int_equal(seen.applied, 2);
  assert_int_equal(kvp__adv_fresh_pending_ms(&f, 1100), 100); /* from 1000 */
  kvp__adv_fresh_flush_started(&f);
  kvp__adv_fresh_applied(&f, 1200, 1201, 1); /* after the flush took its changes */
  kvp__adv_fresh_flush_failed(&f);
  assert_int_equal(kvp__adv_fresh_pending_ms(&f, 1300), 300); /* 1000 is pending again */
  kvp__adv_fresh_flush_started(&f);
  assert_int_equal(kvp__adv_fresh_pending_ms(&f, 1300), 300); /* being written */
  kvp__adv_fresh_flush_committed(&f, 1400);
  assert_int_equal(f.flush_lag_ms, 400);
  assert_int_equal(f.flush_lag_max_ms, 400);
  assert_int_equal(seen.committed_mark, 3);
  assert_int_equal(kvp__adv_fresh_pending_ms(&f, 1500), 0);
  kvp__adv_fresh_applied(&f, 2000, 1990, 1); /* the worker's clock is ahead */
  assert_int_equal(f.apply_lag_ms, 0);
  kvp__adv_fresh_flush_started(&f);
  kvp__adv_fresh_flush_committed(&f, 2010);
  assert_int_equal(f.flush_lag_ms, 20); /* counted from its arrival */
  assert_int_equal(f.flush_lag_max_ms, 400);
  assert_int_equal(seen.committed_mark, 4);
  kvp__adv_fresh_flush_started(&f); /* an empty flush leaves the lag alone */
  kvp__adv_fresh_flush_committed(&f, 3000);
  assert_int_equal(f.flush_lag_ms, 20);
  kvp__adv_fresh_applied(&f, 0, 5000, 1); /* no timestamp: not measured */
  assert_int_equal(f.apply_lag_ms, 0);
  assert_int_equal(kvp__adv_fresh_pending_ms(&f, 5000), 0);
  assert_int_equal(seen.applied, 5);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(acks_follow_the_table),
    cmocka_unit_test(freshness_measures_apply_and_flush),
    cmocka_unit_test(inbox_keeps_order_and_counts_drops),
    cmocka_unit_test(inbox_wait_room_wakes_on_take_and_on_stop),
};

int main(int argc, char **argv) {
  /* natsMsg needs the library's state (its garbage collector) up. */
  if (nats_Open(-1) != NATS_OK)
    return 1;
  int rc = kvp_test_run("advisor_parts", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
