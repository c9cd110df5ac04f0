/* The block manager plugged into the publisher, against a real nats-server:
 * a subscriber that rebuilds the worker's registered sets from the events
 * ends with exactly the block manager's sets, in JetStream mode from the
 * events alone, and in core mode with a tiny dropping queue through the gap
 * marker and the resync snapshot the manager provides. The example worker
 * runs against a real server too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kvplane/blockmgr.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "natsd.h"
#include "pubfix.h"

static kvp_blockmgr_t *make_bm(void) {
  kvp_blockmgr_opts_t o;
  kvp_blockmgr_t *bm;
  kvp_blockmgr_opts_init(&o);
  o.layout = (kvp_layout_t){.num_layers = 1, .page_size = 4, .inner_dim = 4, .elem_size = 2};
  o.g1_blocks = 48;
  o.g2_blocks = 96;
  assert_int_equal(kvp_blockmgr_create(&o, &bm), 0);
  return bm;
}

/* A deterministic workload: prompts from a few shared prefixes, a few
 * sequences running at once, decode appends, the publisher polled after each
 * request as a scheduler loop would. Returns how many polls queued a resync
 * snapshot. */
static int workload(kvp_blockmgr_t *bm, kvp_publisher_t *pub, int nreq) {
  kvp_seq_t *live[4] = {0};
  uint32_t x = 7, toks[64];
  int snaps = 0;

  for (int r = 0; r < nreq; r++) {
    x = x * 1664525u + 1013904223u;
    size_t n = 4 + (x >> 8) % 56;
    uint32_t root = (x >> 20) % 5;
    for (size_t i = 0; i < n; i++)
      toks[i] = i < 16 ? root * 100 + (uint32_t)i : (uint32_t)r * 1000 + (uint32_t)i;
    kvp_seq_t *s;
    assert_int_equal(kvp_seq_create(bm, toks, n, NULL, 0, &s), 0);
    kvp_seq_free(live[r % 4]);
    live[r % 4] = NULL;
    int rc = kvp_seq_allocate(s);
    if (rc == KVP_ENOSPC) {
      kvp_seq_free(s);
      continue;
    }
    assert_int_equal(rc, 0);
    for (int t = 0; t < (int)(x % 9); t++)
      if (kvp_seq_append(s, 900000 + (uint32_t)t) != 0)
        break;
    live[r % 4] = s;
    int prc = kvp_publisher_poll(pub);
    assert_true(prc == 0 || prc == 1 || prc == KVP_EOVERFLOW); /* a snapshot can overflow too */
    snaps += prc == 1;
  }
  for (int i = 0; i < 4; i++)
    kvp_seq_free(live[i]);
  return snaps;
}

static void expect_sets_equal(kvp_blockmgr_t *bm, pf_sub_t *s) {
  for (int tier = KVP_TIER_G1; tier <= KVP_TIER_G2; tier++) {
    uint64_t *h, *p;
    size_t n;
    pf_set_t want = {0};
    assert_int_equal(kvp_blockmgr_snapshot(bm, tier, &h, &p, &n), 0);
    for (size_t i = 0; i < n; i++)
      pf_set_add(&want, h[i]);
    if (!pf_set_equal(&want, &s->tier[tier]))
      fail_msg("tier G%d: block manager has %zu blocks, the subscriber %zu", tier, want.n,
               s->tier[tier].n);
    pf_set_free(&want);
    free(h);
    free(p);
  }
}

static void opts_for(kvp_publisher_opts_t *o, const kvp_natsd_t *d, const char *worker,
                     kvp_blockmgr_t *bm) {
  kvp_publisher_opts_init(o);
  snprintf(o->nats.servers, sizeof o->nats.servers, "%s", d->url);
  o->ns = "bm";
  o->worker_id = worker;
  o->snapshot = kvp_blockmgr_snapshot_fn;
  o->snapshot_ctx = bm;
  o->snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2);
}

static void jetstream_events_rebuild_registered_sets(void **state) {
  kvp_natsd_t *d = *state;
  kvp_blockmgr_t *bm = make_bm();
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub;
  pf_sub_t s;
  char err[256];

  opts_for(&o, d, "w-js", bm);
  o.mode = KVP_PUB_JETSTREAM;
  o.stream_create = 1;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  kvp_blockmgr_set_sink(bm, kvp_publisher_sink(pub));
  workload(bm, pub, 3000);
  assert_int_equal(kvp_publisher_flush(pub, 20000), 0);
  kvp_blockmgr_stats_t st;
  kvp_blockmgr_stats(bm, &st);
  assert_true(st.offloads > 0 && st.onboards > 0 && st.g1.evictions > 0);
  assert_int_equal(st.event_errors, 0);

  assert_int_equal(pf_sub_open(&s, d->url, "bm", 1, NULL, NULL), 0);
  pf_sub_drain(&s, 500, 20000);
  assert_int_equal(s.decode_errors, 0);
  assert_int_equal(s.id_errors, 0);
  assert_int_equal(s.dropped_total, 0);
  expect_sets_equal(bm, &s);
  pf_sub_close(&s);
  kvp_publisher_close(pub);
  kvp_blockmgr_destroy(bm);
}

static void core_drops_then_snapshot_converges(void **state) {
  kvp_natsd_t *d = *state;
  kvp_blockmgr_t *bm = make_bm();
  kvp_publisher_opts_t o;
  kvp_publisher_t *pub;
  pf_sub_t s;
  char err[256];

  assert_int_equal(pf_sub_open(&s, d->url, "bm", 0, NULL, NULL), 0);
  opts_for(&o, d, "w-drop", bm);
  o.queue_capacity = 4;
  o.overflow = KVP_OVERFLOW_DROP;
  assert_int_equal(kvp_publisher_open(&o, &pub, err, sizeof err), 0);
  kvp_blockmgr_set_sink(bm, kvp_publisher_sink(pub));
  int snaps = workload(bm, pub, 3000);
  kvp_blockmgr_stats_t st;
  kvp_blockmgr_stats(bm, &st);
  assert_true(st.event_errors > 0); /* the tiny queue overflowed */
  /* The embedder's loop goes on polling: the resync snapshot is taken on
   * this thread, from the block manager, once the link is up. Whether the
   * resync for the last drop was already taken by a poll inside the
   * workload depends on timing, so poll until none is due; a snapshot that
   * itself overflowed the queue makes the next one due. */
  uint64_t end = pf_now_ms() + 20000;
  int rc;
  while (pf_now_ms() < end) {
    rc = kvp_publisher_poll(pub);
    assert_true(rc == 0 || rc == 1 || rc == KVP_EOVERFLOW);
    if (rc == 1)
      snaps++;
    else if (rc == 0 && snaps > 0)
      break;
    pf_sleep_ms(1);
  }
  assert_true(snaps > 0);
  assert_int_equal(kvp_publisher_flush(pub, 10000), 0);
  end = pf_now_ms() + 20000;
  while (s.snapshots_done < 2 && pf_now_ms() < end)
    pf_sub_drain(&s, 100, 500);
  pf_sub_drain(&s, 200, 2000);
  assert_int_equal(s.decode_errors, 0);
  assert_true(s.dropped_total > 0);
  assert_true(s.snapshots_done >= 2);
  expect_sets_equal(bm, &s);
  pf_sub_close(&s);
  kvp_publisher_close(pub);
  kvp_blockmgr_destroy(bm);
}

static void example_worker_publishes(void **state) {
  kvp_natsd_t *d = *state;
  const char *bindir = getenv("KVP_TEST_BINDIR");
  char prog[512], out[512], dir[256];
  pf_sub_t s;

  if (bindir == NULL)
    skip();
  snprintf(prog, sizeof prog, "%s/examples/minimal_worker", bindir);
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(out, sizeof out, "%s/out.txt", dir);
  assert_int_equal(pf_sub_open(&s, d->url, "example", 0, NULL, NULL), 0);
  char *argv[] = {prog, d->url, "30", NULL};
  assert_int_equal(kvp_test_spawn_wait(argv, NULL, out), 0);
  pf_sub_drain(&s, 300, 5000);
  assert_int_equal(s.decode_errors, 0);
  assert_true(s.events > 30);
  assert_true(s.tier[KVP_TIER_G1].n > 0);
  FILE *f = fopen(out, "r");
  char line[256];
  int served = 0;
  assert_non_null(f);
  while (fgets(line, sizeof line, f))
    served += strstr(line, "64 served from the prefix cache") != NULL;
  fclose(f);
  assert_true(served >= 25); /* every request after the first hits the system prompt */
  pf_sub_close(&s);
  kvp_test_rmtree(dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(jetstream_events_rebuild_registered_sets, pf_setup_js,
                                    pf_teardown),
    cmocka_unit_test_setup_teardown(core_drops_then_snapshot_converges, pf_setup_core, pf_teardown),
    cmocka_unit_test_setup_teardown(example_worker_publishes, pf_setup_core, pf_teardown),
};

KVP_TEST_MAIN("publish_blockmgr", tests)
