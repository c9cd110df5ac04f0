/* The relay's restart state (src/relay/persist.c): the state file and the
 * map file written atomically and read back; a file of another endpoint, a
 * torn or foreign file is refused, never half-loaded. And when the relay
 * writes them (kvp__relay_save): a map skipped for its cost is written at
 * the stop, also when the state was written before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "natsd.h"
#include "kvplane/status.h"
#include "relay/relay.h"
#include "relay/state.h"

static void state_round_trip(void **state) {
  (void)state;
  char dir[256], path[512];
  kvp__relay_saved_t in = {.seq = 41, .epoch = 1764158400123456789ull, .next_event_id = 1209};
  kvp__relay_saved_t out;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  assert_int_equal(kvp__relay_state_path(path, sizeof path, dir, "eng0", "state"), 0);
  assert_int_equal(kvp__relay_state_read(path, "tcp://h:1", &out), KVP_ENOENT);
  assert_int_equal(kvp__relay_state_write(path, "tcp://h:1", &in), 0);
  assert_int_equal(kvp__relay_state_read(path, "tcp://h:1", &out), 0);
  assert_true(out.seq == 41 && out.epoch == in.epoch && out.next_event_id == 1209);
  assert_int_equal(kvp__relay_state_read(path, "tcp://h:2", &out), KVP_ECONFIG);
  FILE *f = fopen(path, "w"); /* torn: as no rename leaves it, but a hand edit can */
  assert_non_null(f);
  fputs("kvplane-relay-state 1\nendpoint tcp://h:1\nseq 4", f);
  fclose(f);
  assert_int_equal(kvp__relay_state_read(path, "tcp://h:1", &out), KVP_EPROTO);
  kvp_test_rmtree(dir);
}

static void map_round_trip(void **state) {
  (void)state;
  char dir[256], path[512];
  kvp_relay_map_t *m, *m2;
  uint64_t v = 0;
  int64_t seq = -1;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  assert_int_equal(kvp__relay_state_path(path, sizeof path, dir, "eng0", "map"), 0);
  assert_int_equal(kvp__relay_map_create(4, &m), 0);
  assert_int_equal(kvp__relay_map_create(4, &m2), 0);
  kvp__relay_map_put(m, 1, 100, 1, 0);
  kvp__relay_map_put(m, 1, 100, 2, 0);
  kvp__relay_map_put(m, 2, 2, 3, 1);
  kvp__relay_map_put(m, 3, 300, 1, 0);
  kvp__relay_map_get(m, 1, &v); /* 1 most recent: 2 is the oldest */
  assert_int_equal(kvp__relay_map_write(path, 17, m), 0);
  assert_int_equal(kvp__relay_map_read(path, &seq, m2), 0);
  assert_int_equal(seq, 17);
  assert_int_equal(kvp__relay_map_size(m2), 3);
  assert_int_equal(kvp__relay_map_get(m2, 2, &v), 2); /* native kept */
  assert_int_equal(kvp__relay_map_drop(m2, 1, 1, -1, &v), 0);
  assert_true(v == 100);
  assert_int_equal(kvp__relay_map_get(m2, 1, &v), 1); /* its G2 copy came along */
  /* The LRU order came along: 3 is now the oldest, evicted first. */
  kvp__relay_map_put(m2, 4, 400, 1, 0);
  kvp__relay_map_put(m2, 5, 500, 1, 0);
  assert_int_equal(kvp__relay_map_get(m2, 3, &v), 0);
  /* A truncated file is refused and leaves the map as it was. */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), 30), 0);
  fclose(f);
  size_t before = kvp__relay_map_size(m2);
  assert_int_equal(kvp__relay_map_read(path, &seq, m2), KVP_EPROTO);
  assert_int_equal(kvp__relay_map_size(m2), before);
  kvp__relay_map_destroy(m);
  kvp__relay_map_destroy(m2);
  kvp_test_rmtree(dir);
}

/* Parents survive a map file (the relay's resync answer rebuilds the
 * advisor's prefix tree from them), and a map file of the format before
 * parents ("KVPRMAP1", 32-byte records) is still read. */
static void map_parents_and_v1_files(void **state) {
  (void)state;
  char dir[256], path[512];
  kvp_relay_map_t *m, *m2;
  uint64_t h[4], p[4], v;
  int64_t seq = -1;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  assert_int_equal(kvp__relay_state_path(path, sizeof path, dir, "eng0", "map"), 0);
  assert_int_equal(kvp__relay_map_create(8, &m), 0);
  assert_int_equal(kvp__relay_map_create(8, &m2), 0);
  kvp__relay_map_put_child(m, 1, 100, 1, 0, 0, 0);
  kvp__relay_map_put_child(m, 2, 200, 1, 0, 1, 100);
  kvp__relay_map_put_child(m, 2, 200, 2, 0, -1, 0); /* a copy keeps its parent */
  assert_int_equal(kvp__relay_map_write(path, 5, m), 0);
  assert_int_equal(kvp__relay_map_read(path, &seq, m2), 0);
  assert_int_equal(kvp__relay_map_tier(m2, 1, h, p), 2);
  for (int i = 0; i < 2; i++)
    assert_true(h[i] == 100 ? p[i] == 100 : (h[i] == 200 && p[i] == 100));
  assert_int_equal(kvp__relay_map_tier(m2, 2, h, p), 1);
  assert_true(h[0] == 200 && p[0] == 100);
  /* The old format: header "KVPRMAP1", records without the parent. */
  struct {
    char magic[8];
    int64_t seq;
    uint64_t n;
  } hdr = {.magic = "KVPRMAP", .seq = 9, .n = 1};
  hdr.magic[7] = '1';
  uint8_t rec[32] = {0};
  uint64_t eng = 7, kvp = 700, native = 1;
  uint16_t copies[4] = {1, 0, 0, 0};
  memcpy(rec, &eng, 8), memcpy(rec + 8, &kvp, 8), memcpy(rec + 16, copies, 8);
  memcpy(rec + 24, &native, 8);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(&hdr, sizeof hdr, 1, f), 1);
  assert_int_equal(fwrite(rec, sizeof rec, 1, f), 1);
  fclose(f);
  assert_int_equal(kvp__relay_map_read(path, &seq, m2), 0);
  assert_int_equal(seq, 9);
  assert_int_equal(kvp__relay_map_get(m2, 7, &v), 2); /* native */
  assert_int_equal(kvp__relay_map_tier(m2, 1, h, p), 1);
  assert_true(h[0] == 700 && p[0] == 700); /* no parent */
  kvp__relay_map_destroy(m);
  kvp__relay_map_destroy(m2);
  kvp_test_rmtree(dir);
}

/* The state is saved at sequence 5 while the map's write is put off (a
 * large map is written at most 5% of the time); nothing more comes: the
 * stop writes the map as of 5, and a restart needs no replay. */
static void a_map_put_off_is_written_at_the_stop(void **state) {
  (void)state;
  char dir[256], err[256];
  kvp_natsd_t d;
  kvp__relay_ep_t *ep = calloc(1, sizeof *ep);
  kvp_publisher_opts_t po;
  kvp__relay_saved_t sv;
  int64_t seq = -1;
  assert_non_null(ep);
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", d.url);
  po.worker_id = "eng0";
  assert_int_equal(kvp_publisher_open(&po, &ep->pub, err, sizeof err), 0);
  assert_int_equal(kvp__relay_map_create(16, &ep->map), 0);
  assert_int_equal(kvp__relay_map_put(ep->map, 1001, 77, 1, 0), 0);
  snprintf(ep->endpoint, sizeof ep->endpoint, "tcp://127.0.0.1:1");
  snprintf(ep->state_path, sizeof ep->state_path, "%s/eng0.state", dir);
  snprintf(ep->map_path, sizeof ep->map_path, "%s/eng0.map", dir);
  ep->saved_seq = ep->map_seq = ep->map_file_seq = ep->resume_seq = -1;
  ep->first_event_id = 1;
  ep->last_seq = 5;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* the relay's clock */
  ep->map_saved_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
  ep->map_cost_ms = 60000; /* the last write took a minute: put off */
  kvp__relay_save(ep, 0);
  assert_int_equal(kvp__relay_state_read(ep->state_path, ep->endpoint, &sv), 0);
  assert_int_equal(sv.seq, 5);
  assert_int_equal(access(ep->map_path, F_OK), -1);
  kvp__relay_save(ep, 0); /* nothing new: still put off */
  assert_int_equal(access(ep->map_path, F_OK), -1);
  kvp__relay_save(ep, 1); /* the stop */
  kvp_relay_map_t *m = NULL;
  assert_int_equal(kvp__relay_map_create(16, &m), 0);
  assert_int_equal(kvp__relay_map_read(ep->map_path, &seq, m), 0);
  assert_int_equal(seq, 5);
  assert_int_equal(kvp__relay_map_size(m), 1);
  kvp__relay_map_destroy(m);
  kvp_publisher_close(ep->pub);
  kvp__relay_map_destroy(ep->map);
  free(ep);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

/* One relay per worker and state directory: a second kvplane-relay for
 * worker eng0 with the same --state-dir is refused (KVP_EBUSY, naming the
 * directory, the worker and the lock file) before it publishes anything;
 * once the first closes, it opens. Another worker in the same directory is
 * not held up. Before, both ran: each published eng0 under an epoch of its
 * own and overwrote the other's restart state. */
static void one_relay_per_worker_and_state_dir(void **state) {
  (void)state;
  char dir[256], err[512];
  kvp_natsd_t d;
  kvp_relay_t *a = NULL, *b = NULL, *c = NULL;
  kvp_relay_opts_t o;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  assert_int_equal(kvp_natsd_start(&d, NULL), 0);
  kvp_relay_opts_init(&o);
  snprintf(o.pub.nats.servers, sizeof o.pub.nats.servers, "%s", d.url);
  o.pub.ns = "t";
  o.state_dir = dir;
  o.endpoints[0] = (kvp_relay_endpoint_t){.endpoint = "tcp://127.0.0.1:1", .worker_id = "eng0"};
  o.nendpoints = 1;
  if (kvp_relay_open(&o, &a, err, sizeof err) != 0)
    fail_msg("the first relay: %s", err);
  assert_int_equal(kvp_relay_open(&o, &b, err, sizeof err), KVP_EBUSY);
  assert_null(b);
  print_message("the second: %s\n", err);
  assert_non_null(strstr(err, "worker eng0 is relayed by another kvplane-relay"));
  assert_non_null(strstr(err, "eng0.lock"));
  o.endpoints[0].worker_id = "eng1";
  if (kvp_relay_open(&o, &c, err, sizeof err) != 0)
    fail_msg("another worker in the same directory: %s", err);
  kvp_relay_close(c);
  kvp_relay_close(a);
  o.endpoints[0].worker_id = "eng0";
  if (kvp_relay_open(&o, &b, err, sizeof err) != 0)
    fail_msg("after the first closed: %s", err);
  kvp_relay_close(b);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_map_put_off_is_written_at_the_stop),
    cmocka_unit_test(one_relay_per_worker_and_state_dir),
    cmocka_unit_test(state_round_trip),
    cmocka_unit_test(map_round_trip),
    cmocka_unit_test(map_parents_and_v1_files),
};

KVP_TEST_MAIN("relay_persist", tests)
