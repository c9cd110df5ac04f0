/* Helpers the index suites share (bench_index.c, bench_mixed.c). */
#ifndef KVP_BENCH_INDEX_H
#define KVP_BENCH_INDEX_H

#include <stddef.h>
#include <stdint.h>

#define NOW_MS 1800000000000ull

uint64_t kvp_bi_rnd(void);
/* "--flag 16M" (k, M, G: powers of two) or dflt. */
size_t kvp_bi_size_arg(int argc, char **argv, const char *flag, size_t dflt);
double kvp_bi_double_arg(int argc, char **argv, const char *flag, double dflt);
/* Encoded event batches, one per trace request (bench_advisor.c), and with
 * keep_queries each request's hashes: q[qoff[i] .. qoff[i + 1]). */
typedef struct kvp_bench_msgs_s {
  uint8_t **buf;
  size_t *len;
  size_t n, cap;
  uint64_t block_events;
  int keep_queries;
  uint64_t *q;
  size_t nq, qcap, *qoff, qoff_cap;
} kvp_bench_msgs_t;

/* Turns the trace into batches of nworkers simulated workers (G1 of g1_cap
 * blocks, FIFO offload to G2). Returns the number of requests. */
size_t kvp_bench_trace_batches(kvp_bench_msgs_t *m, int nworkers, size_t g1_cap);

/* "16M" for 16 << 20 (figure names). */
void kvp_bi_label(char *out, size_t len, size_t n);

#endif
