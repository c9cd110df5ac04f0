/* kvp-bench: benchmark suites that print their figures.
 *
 * A suite is a function registered with KVP_BENCH_SUITE in its own
 * bench_<name>.c file. Each figure is printed on one line with the in-run
 * baseline beside it and the ratio value / baseline, because the machines are
 * noisy and only in-run comparisons are stable:
 *
 *   <suite>.<figure>  <value> <unit>  baseline <label> <value> <unit>  ratio <r>
 */
#ifndef KVP_BENCH_H
#define KVP_BENCH_H

#include <stddef.h>
#include <stdint.h>

typedef int (*kvp_bench_fn)(int argc, char **argv);

void kvp_bench_register(const char *name, const char *desc, kvp_bench_fn fn);

#define KVP_BENCH_SUITE(name, desc)                                                                \
  static int bench_suite_##name(int argc, char **argv);                                            \
  __attribute__((constructor)) static void bench_register_##name(void) {                           \
    kvp_bench_register(#name, desc, bench_suite_##name);                                           \
  }                                                                                                \
  static int bench_suite_##name(int argc, char **argv)

/* Prints one figure. baseline_label NULL (or baseline <= 0) prints the figure
 * alone, for figures that have no meaningful baseline (counts, rates). */
void kvp_bench_report(const char *figure, double value, const char *unit,
                      const char *baseline_label, double baseline);

/* Monotonic nanoseconds. */
uint64_t kvp_bench_now_ns(void);

/* Resident set size of this process in bytes (from /proc/self/statm). */
size_t kvp_bench_rss_bytes(void);

/* Keeps the compiler from discarding a computed value. */
void kvp_bench_sink(uint64_t v);

/* Path of the bundled trace (data/conversation_trace.jsonl.gz), or the
 * KVP_TRACE environment variable when set. */
const char *kvp_bench_trace_path(void);

#endif
