/* Trace reader: the bundled trace reads whole; malformed trace lines name
 * the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "sim/trace.h"

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
    cmocka_unit_test(trace_reads_bundled_file),
    cmocka_unit_test(trace_errors_name_the_line),
};

KVP_TEST_MAIN("sim", tests)
