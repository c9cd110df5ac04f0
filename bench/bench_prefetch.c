/* kvp-bench prefetch: what a random cache line costs on this machine when
 * prefetched one per step of work, against the same prefetches issued in
 * bursts the way the block manager's passes over a sequence's hashes issue
 * them (kvp__burst_due, pool.h).
 *
 * A loop does, per step, a fixed amount of register-only work (7
 * instructions per unit, work= units, 60 by default: ~420 instructions,
 * about a block manager step) and one load of a random line of a table of
 * mb= MiB (256 by default, huge-page hinted like the manager's tables
 * unless huge=0). Variants:
 *   per_step: at each step, a prefetch of the line ahead= steps on (32 by
 *             default, the middle of the burst window below);
 *   burst:    whenever fewer than KVP__BURST / 2 steps ahead are
 *             prefetched, the lines of the next KVP__BURST steps not yet
 *             prefetched, back to back (16 to 48 steps ahead).
 * The baseline of each is the same loop over a 1 MiB table (in cache): the
 * ratio is what the random lines add. Best of 3 rounds of 2^21 steps.
 * Single-threaded; pin it (taskset -c 1 kvp-bench prefetch). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "block/pool.h"

#define STEPS ((size_t)1 << 21)

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

/* ns per step of one variant over t, loading line[i] at step i: burst, or
 * a prefetch `ahead` steps on at each step. */
static double run(const table_t *t, const uint32_t *line, int units, int burst, size_t ahead) {
  double best = 1e30;
  uint64_t sum = 0;

  for (int r = 0; r < 3; r++) {
    uint64_t acc = 1, t0 = kvp_bench_now_ns();
    size_t pf = 0, k;
    for (size_t i = 0; i < STEPS; i++) {
      if (!burst) {
        if (i + ahead < STEPS)
          __builtin_prefetch(t->p + (size_t)line[i + ahead] * 64);
      } else if (kvp__burst_due(STEPS, i, &pf, &k)) {
        for (; k < pf; k++)
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

/* Whether arg is key followed by a decimal integer in [lo, hi] (*v). */
static int opt(const char *arg, const char *key, long lo, long hi, long *v) {
  size_t n = strlen(key);
  char *end;

  if (strncmp(arg, key, n) != 0)
    return 0;
  errno = 0;
  *v = strtol(arg + n, &end, 10);
  return end != arg + n && *end == '\0' && errno == 0 && *v >= lo && *v <= hi;
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
  long mib = 256, units = 60, ahead = 32, huge = 1;
  table_t big = {0}, small = {0};
  uint32_t *line_big = NULL, *line_small = NULL;
  int rc = 1;

  for (int i = 1; i < argc; i++) {
    if (!opt(argv[i], "mb=", 2, 65536, &mib) && !opt(argv[i], "work=", 0, 100000, &units) &&
        !opt(argv[i], "ahead=", 1, 4096, &ahead) && !opt(argv[i], "huge=", 0, 1, &huge)) {
      fprintf(stderr,
              "bench prefetch: bad option '%s' (mb=2..65536 MiB, work=0..100000 units, "
              "ahead=1..4096 steps, huge=0|1)\n",
              argv[i]);
      return 1;
    }
  }
  if (table_open(&big, (size_t)mib, (int)huge) != 0 || table_open(&small, 1, (int)huge) != 0 ||
      (line_big = malloc(STEPS * sizeof *line_big)) == NULL ||
      (line_small = malloc(STEPS * sizeof *line_small)) == NULL) {
    fprintf(stderr, "bench prefetch: out of memory for a %ld MiB table\n", mib);
    goto out;
  }
  lines_of(line_big, big.bytes / 64, 88172645463325252ull);
  lines_of(line_small, small.bytes / 64, 88172645463325252ull);
  printf("# prefetch: %ld MiB table vs 1 MiB%s, %ld work units (~%ld instructions) per step, "
         "one prefetch %ld steps ahead vs bursts of %d, 2^21 steps, best of 3\n",
         mib, huge ? "" : " (no huge-page hint)", units, units * 7, ahead, KVP__BURST);

  double cached_step = run(&small, line_small, (int)units, 0, (size_t)ahead);
  double cached_burst = run(&small, line_small, (int)units, 1, 0);
  double step = run(&big, line_big, (int)units, 0, (size_t)ahead);
  double burst = run(&big, line_big, (int)units, 1, 0);
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
