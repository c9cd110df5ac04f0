/* kvp-bench prefetch: what a random cache line costs on this machine when
 * prefetched one per step of work, against the same prefetches issued in
 * bursts (the block manager's table passes and evictions, pool.h
 * KVP__BURST).
 *
 * A loop does, per step, a fixed amount of register-only work (7
 * instructions per unit, work= units, 60 by default: ~420 instructions,
 * about a block manager step) and one load of a random line of a table of mb= MiB
 * (256 by default, huge-page hinted like the manager's tables unless
 * huge=0). Variants:
 *   per_step: a prefetch of the line 16 steps ahead at each step;
 *   burst:    the lines of the next 32 steps prefetched back to back, every
 *             32 steps.
 * The baseline of each is the same loop over a 1 MiB table (in cache): the
 * ratio is what the random lines add. Best of 3 rounds of 2^21 steps.
 * Single-threaded; pin it (taskset -c 1 kvp-bench prefetch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

#define STEPS ((size_t)1 << 21)
#define AHEAD 16
#define BURST 32

typedef struct table_s {
  unsigned char *p;
  size_t bytes;
} table_t;

static int table_open(table_t *t, size_t mib, int huge) {
  t->bytes = mib << 20;
  if (posix_memalign((void **)&t->p, (size_t)2 << 20, t->bytes) != 0)
    return -1;
  if (huge)
    madvise(t->p, t->bytes, MADV_HUGEPAGE);
  memset(t->p, 1, t->bytes);
  return 0;
}

/* Register-only work, no memory access: units of four additions and xors
 * over four accumulators, kept opaque to the compiler. */
static inline uint64_t work(uint64_t acc, int units) {
  uint64_t a0 = acc, a1 = acc + 1, a2 = acc + 2, a3 = acc + 3;
  for (int k = 0; k < units; k++) {
    a0 += (uint64_t)k;
    a1 ^= (uint64_t)k;
    a2 += a0;
    a3 ^= a1;
    __asm__ volatile("" : "+r"(a0), "+r"(a1), "+r"(a2), "+r"(a3));
  }
  return a0 ^ a1 ^ a2 ^ a3;
}

/* ns per step of one variant (burst or not) over t, loading line[i] at step i. */
static double run(const table_t *t, const uint32_t *line, int units, int burst) {
  double best = 1e30;
  uint64_t sum = 0;

  for (int r = 0; r < 3; r++) {
    uint64_t acc = 1, t0 = kvp_bench_now_ns();
    for (size_t i = 0; i < STEPS; i++) {
      if (!burst) {
        if (i + AHEAD < STEPS)
          __builtin_prefetch(t->p + (size_t)line[i + AHEAD] * 64);
      } else if (i % BURST == 0) {
        for (size_t k = i + BURST; k < i + 2 * BURST && k < STEPS; k++)
          __builtin_prefetch(t->p + (size_t)line[k] * 64);
      }
      acc += work(acc, units);
      sum += t->p[(size_t)line[i] * 64];
    }
    double ns = (double)(kvp_bench_now_ns() - t0) / STEPS;
    if (ns < best)
      best = ns;
    sum += acc;
  }
  kvp_bench_sink(sum);
  return best;
}

static void lines_of(uint32_t *line, size_t nlines, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < STEPS; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    line[i] = (uint32_t)(x % nlines);
  }
}

KVP_BENCH_SUITE(prefetch, "random-line prefetches: one per step vs in bursts") {
  size_t mib = 256;
  int units = 60, huge = 1;
  table_t big = {0}, small = {0};
  uint32_t *line_big = NULL, *line_small = NULL;
  int rc = 1;

  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "mb=", 3) == 0 && atoi(argv[i] + 3) >= 2)
      mib = (size_t)atoi(argv[i] + 3);
    else if (strncmp(argv[i], "work=", 5) == 0 && atoi(argv[i] + 5) >= 0)
      units = atoi(argv[i] + 5);
    else if (strcmp(argv[i], "huge=0") == 0 || strcmp(argv[i], "huge=1") == 0)
      huge = argv[i][5] == '1';
    else {
      fprintf(stderr, "bench prefetch: unknown option '%s' (mb=MiB >= 2, work=units, huge=0|1)\n",
              argv[i]);
      return 1;
    }
  }
  if (table_open(&big, mib, huge) != 0 || table_open(&small, 1, huge) != 0 ||
      (line_big = malloc(STEPS * sizeof *line_big)) == NULL ||
      (line_small = malloc(STEPS * sizeof *line_small)) == NULL) {
    fprintf(stderr, "bench prefetch: out of memory for a %zu MiB table\n", mib);
    goto out;
  }
  lines_of(line_big, big.bytes / 64, 88172645463325252ull);
  lines_of(line_small, small.bytes / 64, 88172645463325252ull);
  printf("# prefetch: %zu MiB table vs 1 MiB%s, %d work units (~%d instructions) per step, "
         "2^21 steps, best of 3\n",
         mib, huge ? "" : " (no huge-page hint)", units, units * 7);

  double cached_step = run(&small, line_small, units, 0);
  double cached_burst = run(&small, line_small, units, 1);
  double step = run(&big, line_big, units, 0);
  double burst = run(&big, line_big, units, 1);
  kvp_bench_report("prefetch.per_step_ns", step, "ns", "in cache", cached_step);
  kvp_bench_report("prefetch.burst_ns", burst, "ns", "in cache", cached_burst);
  kvp_bench_report("prefetch.burst_vs_per_step", burst, "ns", "per step", step);
  rc = 0;
out:
  free(line_big);
  free(line_small);
  free(big.p);
  free(small.p);
  return rc;
}
