/* kvp-bench mixed: the Mooncake trace replayed as events and lookups
 * together on one core (issue 27), as a router's indexer sees them: for
 * every request, a prefix match of its hashes (the lookup before routing),
 * then the chosen worker's event batch (Accessed for the cached prefix,
 * Stored for the rest, offloads to G2 as Stored + Removed), decoded and
 * applied. Block-ops = hashes looked up + block events applied.
 *
 * Baseline: decoding the same batches only (block-events/s), the ingest
 * suite's baseline. One thread, so ops/s is per core. The trace is
 * data/conversation_trace.jsonl.gz (the Mooncake trace; KVP_TRACE). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "advisor/ingest.h"
#include "bench.h"
#include "bench_index.h"
#include "index/index.h"
#include "kvplane/wire.h"

KVP_BENCH_SUITE(mixed, "index: Mooncake trace as events + lookups together, block-ops/s per "
                       "core vs decode-only") {
  (void)argc;
  (void)argv;
  kvp_bench_msgs_t m = {.keep_queries = 1};
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  size_t reqs = kvp_bench_trace_batches(&m, 8, 16384);
  if (reqs == 0 || m.n != reqs)
    return 1;
  kvp__index_match_t rows[64];
  double best = 1e30, best_decode = 1e30;
  uint64_t matched = 0;
  for (int r = 0; r < 7; r++) {
    kvp__index_t *ix = NULL;
    kvp__adv_ingest_t *ing = NULL;
    kvp__index_create(1 << 18, 3600, &ix);
    kvp__adv_ingest_create(ix, NULL, &ing);
    /* As between flushes: the change log is taken every 200 ms in the
     * daemon; here once per round, outside the timing. */
    kvp__index_track_dirty(ix, 0);
    matched = 0;
    uint64_t t0 = kvp_bench_now_ns();
    for (size_t i = 0; i < m.n; i++) {
      size_t n = 0;
      kvp__index_match(ix, &m.q[m.qoff[i]], m.qoff[i + 1] - m.qoff[i], rows, 64, &n);
      matched += n ? rows[0].length : 0;
      kvp__adv_ingest_message(ing, m.buf[i], m.len[i], NULL, NOW_MS + i);
    }
    double dt = (double)(kvp_bench_now_ns() - t0) / 1e9;
    best = dt < best ? dt : best;
    kvp__adv_ingest_destroy(ing);
    kvp__index_destroy(ix);

    t0 = kvp_bench_now_ns();
    for (size_t i = 0; i < m.n; i++) {
      kvp_wire_batch_t *wb = NULL;
      if (kvp_wire_decode(m.buf[i], m.len[i], NULL, &wb) == 0)
        kvp_bench_sink(kvp_wire_batch_view(wb)->nevents);
      kvp_wire_batch_free(wb);
    }
    dt = (double)(kvp_bench_now_ns() - t0) / 1e9;
    best_decode = dt < best_decode ? dt : best_decode;
  }
  uint64_t ops = m.nq + m.block_events;
  printf("# %zu trace requests over 8 workers: %zu hashes looked up (%llu matched by the first "
         "row), %llu block events applied\n",
         reqs, m.nq, (unsigned long long)matched, (unsigned long long)m.block_events);
  kvp_bench_report("mixed.block_ops_per_s_per_core", (double)ops / best, "ops/s", "decode-only",
                   (double)m.block_events / best_decode);
  kvp_bench_report("mixed.lookup_share", (double)m.nq / (double)ops, "", NULL, 0);
  for (size_t i = 0; i < m.n; i++)
    free(m.buf[i]);
  free(m.buf);
  free(m.len);
  free(m.q);
  free(m.qoff);
  return 0;
}
