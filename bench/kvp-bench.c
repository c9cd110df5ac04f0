/* kvp-bench driver: "kvp-bench <suite> [args]", "kvp-bench all", "kvp-bench --list". */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SUITES 32

static struct {
  const char *name, *desc;
  kvp_bench_fn fn;
} suites[MAX_SUITES];
static int nsuites;
static volatile uint64_t sink_value;

void kvp_bench_register(const char *name, const char *desc, kvp_bench_fn fn) {
  if (nsuites < MAX_SUITES)
    suites[nsuites++] = (typeof(suites[0])){name, desc, fn};
}

void kvp_bench_report(const char *figure, double value, const char *unit,
                      const char *baseline_label, double baseline) {
  if (baseline_label && baseline > 0)
    printf("%-34s %14.3f %-12s baseline %-22s %14.3f %-12s ratio %.3f\n", figure, value, unit,
           baseline_label, baseline, unit, value / baseline);
  else
    printf("%-34s %14.3f %s\n", figure, value, unit);
  fflush(stdout);
}

uint64_t kvp_bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t kvp_bench_rss_bytes(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return (size_t)rss * 4096u;
}

void kvp_bench_sink(uint64_t v) {
  sink_value ^= v;
}

const char *kvp_bench_trace_path(void) {
  const char *p = getenv("KVP_TRACE");
  return p && p[0] ? p : KVP_SOURCE_DIR "/data/conversation_trace.jsonl.gz";
}

static void usage(FILE *out) {
  fprintf(out, "usage: kvp-bench <suite> [args...] | all | --list\n\nsuites:\n");
  for (int i = 0; i < nsuites; i++)
    fprintf(out, "  %-10s %s\n", suites[i].name, suites[i].desc);
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < nsuites; i++)
      printf("%s\n", suites[i].name);
    return 0;
  }
  int rc = 0, found = 0;
  for (int i = 0; i < nsuites; i++) {
    if (strcmp(argv[1], "all") == 0 || strcmp(argv[1], suites[i].name) == 0) {
      found = 1;
      printf("# %s: %s\n", suites[i].name, suites[i].desc);
      if (suites[i].fn(argc - 1, argv + 1) != 0) {
        fprintf(stderr, "kvp-bench: suite %s failed\n", suites[i].name);
        rc = 1;
      }
    }
  }
  if (!found) {
    fprintf(stderr, "kvp-bench: unknown suite '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  return rc;
}
