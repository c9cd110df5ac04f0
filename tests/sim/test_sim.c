/* Simulated cache and trace reader: events replayed into sets equal the
 * cache's registered sets; malformed trace lines name the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "sim/simcache.h"
#include "sim/trace.h"

/* A recording sink: per tier, a flat array used as a set (small sizes). */
typedef struct {
  uint64_t set[3][4096];
  size_t n[3];
  int bad; /* a Removed of a block not stored, or a Stored of one present */
} rec_t;

static ssize_t find(rec_t *r, int tier, uint64_t h) {
  for (size_t i = 0; i < r->n[tier]; i++)
    if (r->set[tier][i] == h)
      return (ssize_t)i;
  return -1;
}

static int rec_emit(void *ctx, const kvp_event_t *ev) {
  rec_t *r = ctx;
  for (size_t i = 0; i < ev->nhashes; i++) {
    ssize_t at = find(r, ev->tier, ev->hashes[i]);
    if (ev->type == KVP_EV_STORED) {
      if (at >= 0)
        r->bad = 1;
      else
        r->set[ev->tier][r->n[ev->tier]++] = ev->hashes[i];
    } else if (ev->type == KVP_EV_REMOVED) {
      if (at < 0)
        r->bad = 1;
      else
        r->set[ev->tier][at] = r->set[ev->tier][--r->n[ev->tier]];
    }
  }
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void events_replay_to_registered_sets(void **state) {
  (void)state;
  static rec_t r;
  kvp_simcache_t *c;
  uint64_t seq[64];
  uint32_t x = 12345;

  memset(&r, 0, sizeof r);
  assert_int_equal(kvp_simcache_create(&c, 16, 64, 16, 4096, (kvp_event_sink_t){rec_emit, &r}), 0);
  for (int req = 0; req < 3000; req++) {
    x = x * 1664525u + 1013904223u;
    size_t n = 1 + (x >> 8) % 40;
    uint64_t root = (x >> 20) % 7; /* a few shared prefixes */
    for (size_t i = 0; i < n; i++) {
      x = x * 1664525u + 1013904223u;
      seq[i] = i < 5 ? root * 100 + i + 1 : ((uint64_t)x << 20) | i;
    }
    assert_int_equal(kvp_simcache_request(c, seq, n), 0);
  }
  assert_false(r.bad);
  for (int tier = 1; tier <= 2; tier++) {
    uint64_t *h, *p;
    size_t n;
    assert_int_equal(kvp_simcache_snapshot(c, tier, &h, &p, &n), 0);
    assert_int_equal(n, r.n[tier]);
    assert_int_equal(n, tier == 1 ? 16 : 64);
    qsort(h, n, sizeof *h, cmp_u64);
    qsort(r.set[tier], n, sizeof *h, cmp_u64);
    assert_memory_equal(h, r.set[tier], n * sizeof *h);
    free(h);
    free(p);
  }
  uint64_t *h, *p;
  size_t n;
  assert_int_equal(kvp_simcache_snapshot(c, 3, &h, &p, &n), KVP_ETIER);
  kvp_simcache_destroy(c);
}

static void trace_reads_bundled_file(void **state) {
  (void)state;
  char path[512], err[256];
  kvp_trace_t *t;
  kvp_trace_req_t req;
  size_t count = 0, refs = 0;
  int rc;

  snprintf(path, sizeof path, "%s/../data/conversation_trace.jsonl.gz", kvp_test_srcdir());
  assert_int_equal(kvp_trace_open(&t, path, err, sizeof err), 0);
  while ((rc = kvp_trace_next(t, &req, err, sizeof err)) == 1) {
    count++;
    refs += req.nhash_ids;
  }
  assert_int_equal(rc, 0);
  /* The figures of data/README.md. */
  assert_int_equal(count, 12031);
  assert_int_equal(refs, 288500);
  kvp_trace_close(t);
}

static void trace_errors_name_the_line(void **state) {
  (void)state;
  char path[256], err[256];
  kvp_trace_t *t;
  kvp_trace_req_t req;

  snprintf(path, sizeof path, "%s/kvp-trace-%d.jsonl", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  FILE *f = fopen(path, "w");
  fputs("{\"timestamp\": 1, \"hash_ids\": [1, 2]}\n\n{\"timestamp\": 2, \"hash_ids\": [1, \"x\"]}\n"
        "not json\n{\"hash_ids\": []}\n",
        f);
  fclose(f);
  assert_int_equal(kvp_trace_open(&t, path, err, sizeof err), 0);
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), 1);
  assert_int_equal(req.nhash_ids, 2);
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 3: hash_ids[1]"));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 4: bad JSON"));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "line 5: \"timestamp\""));
  assert_int_equal(kvp_trace_next(t, &req, err, sizeof err), 0);
  kvp_trace_close(t);
  remove(path);
  assert_int_equal(kvp_trace_open(&t, "/nonexistent/trace.jsonl", err, sizeof err), KVP_EIO);
  assert_non_null(strstr(err, "/nonexistent/trace.jsonl"));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(events_replay_to_registered_sets),
    cmocka_unit_test(trace_reads_bundled_file),
    cmocka_unit_test(trace_errors_name_the_line),
};

KVP_TEST_MAIN("sim", tests)
