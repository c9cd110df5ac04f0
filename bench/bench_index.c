/* kvp-bench match, mixed, load: the block index at fleet scale (issue 27).
 *
 *   match  [--locations 1M] [--holders 8] [--copies 2]
 *          builds an index of N block locations (chains of 64 blocks; each
 *          block held by `copies` holders: G1 of the chain's holder, G2 of
 *          the next, then alternating; a fractional part gives the extra
 *          copy to that share of each chain's leading blocks), then reports
 *          resident bytes per location (RSS over the index alone), p50/p99
 *          of a 64-block match against 64 plain hash-table lookups, and the
 *          p50 of a single-block lookup (kvp__index_get: one block, its
 *          holders) against one plain lookup.
 *   mixed  Mooncake trace replay, events and lookups together, on one core
 *          (bench_mixed.c).
 *   load   [--locations 1M]: the store's rows into an empty index (bench_load.c).
 *
 * The 128M runs are by hand (`kvp-bench match --locations 128M`, ~9 GiB
 * with the baseline table); tests never run them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "bench_index.h"
#include "index/index.h"
#include "kvplane/hash.h"
#include "kvplane/status.h"

#define CHAIN 64

uint64_t kvp_bi_rnd(void) {
  static uint64_t x = 0x2545f4914f6cdd1dull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

static size_t gcd(size_t a, size_t b) {
  while (b) {
    size_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

size_t kvp_bi_size_arg(int argc, char **argv, const char *flag, size_t dflt) {
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], flag) != 0)
      continue;
    char *end;
    double v = strtod(argv[i + 1], &end);
    if (*end == 'M' || *end == 'm')
      v *= 1 << 20;
    else if (*end == 'k' || *end == 'K')
      v *= 1 << 10;
    else if (*end == 'G' || *end == 'g')
      v *= 1 << 30;
    return (size_t)v;
  }
  return dflt;
}

double kvp_bi_double_arg(int argc, char **argv, const char *flag, double dflt) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], flag) == 0)
      return strtod(argv[i + 1], NULL);
  return dflt;
}

/* --- a plain u64 -> u32 open-addressing table: the baseline ------------- */

typedef struct plain_s {
  uint64_t *k; /* 0 = empty */
  uint32_t *v;
  size_t mask;
} plain_t;

static void plain_init(plain_t *p, size_t n) {
  size_t cap = 16;
  while (cap < n * 2)
    cap *= 2;
  p->k = calloc(cap, sizeof *p->k);
  p->v = calloc(cap, sizeof *p->v);
  p->mask = cap - 1;
}

static void plain_put(plain_t *p, uint64_t h, uint32_t v) {
  size_t i = (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & p->mask;
  while (p->k[i] != 0 && p->k[i] != h)
    i = (i + 1) & p->mask;
  p->k[i] = h;
  p->v[i] = v;
}

static inline uint32_t plain_get(const plain_t *p, uint64_t h) {
  for (size_t i = (size_t)((h * 0x9e3779b97f4a7c15ull) >> 32) & p->mask;; i = (i + 1) & p->mask) {
    if (p->k[i] == h)
      return p->v[i];
    if (p->k[i] == 0)
      return 0;
  }
}

static void plain_free(plain_t *p) {
  free(p->k);
  free(p->v);
}

/* --- match ------------------------------------------------------------- */

/* The first number after key in a /proc file ("AnonHugePages:", "MemAvailable:"
 * in kB; "thp_collapse_alloc" a count), or 0. */
static uint64_t proc_field(const char *path, const char *key) {
  char line[256];
  uint64_t v = 0;
  size_t kl = strlen(key);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, kl) == 0) {
      v = strtoull(line + kl, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

static uint64_t minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt : 0;
}

/* Times the scheduler took the core away (other processes wanted it). */
static uint64_t preemptions(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_nivcsw : 0;
}

static double load_average(void) {
  double l = 0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1)
      l = 0;
    fclose(f);
  }
  return l;
}

/* Samples over 5 us: stalls (a fault, a huge-page collapse, the host). */
static size_t stalls(const uint64_t *lat, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    k += lat[i] > 5000;
  return k;
}

void kvp_bi_label(char *out, size_t len, size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0)
    snprintf(out, len, "%zuM", n >> 20);
  else
    snprintf(out, len, "%.3gM", (double)n / (1 << 20));
}

KVP_BENCH_SUITE(
    match, "index: 64-block match and single lookups at N locations "
           "[--locations 1M|16M|128M] [--holders 8] [--copies 2] [--scattered]; bytes/location") {
  const size_t want = kvp_bi_size_arg(argc, argv, "--locations", 1u << 20);
  const size_t holders = kvp_bi_size_arg(argc, argv, "--holders", 8);
  const double copies = kvp_bi_double_arg(argc, argv, "--copies", 2.0);
  const size_t nq = 200000;
  int scattered = 0;
  for (int a = 1; a < argc; a++)
    scattered |= strcmp(argv[a], "--scattered") == 0;
  if (holders < 2 || holders > 4096 || copies < 1 || copies > 64) {
    fprintf(stderr, "bench match: --holders 2..4096, --copies 1..64\n");
    return 1;
  }
  size_t full = (size_t)copies, extra = (size_t)((copies - (double)full) * CHAIN + 0.5);
  size_t per_chain = full * CHAIN + extra;
  size_t nchains = (want + per_chain - 1) / per_chain, nblocks = nchains * CHAIN;
  uint64_t *chains = malloc(nblocks * sizeof *chains);
  uint64_t *lat = malloc(nq * sizeof *lat), *blat = malloc(nq * sizeof *blat);
  uint64_t *slat = malloc(nq * sizeof *slat), *sblat = malloc(nq * sizeof *sblat);
  kvp__index_match_t rows[256];
  kvp__index_loc_t locs[64];
  kvp__index_t *ix = NULL;
  uint16_t *w = calloc(holders, sizeof *w);
  char label[32], fig[96];

  if (chains == NULL || lat == NULL || blat == NULL || slat == NULL || sblat == NULL || !w)
    return 1;
  /* Faulted in now, not between the timed lookups (not 0: malloc and a
   * zeroing memset may become a calloc that touches nothing). */
  memset(lat, 0xff, nq * sizeof *lat);
  memset(blat, 0xff, nq * sizeof *blat);
  memset(slat, 0xff, nq * sizeof *slat);
  memset(sblat, 0xff, nq * sizeof *sblat);
  kvp_bi_label(label, sizeof label, want);
  for (size_t c = 0; c < nchains; c++) {
    uint64_t prev = kvp_bi_rnd();
    for (size_t i = 0; i < CHAIN; i++)
      chains[c * CHAIN + i] = prev = kvp_hash_chain(prev, kvp_bi_rnd(), KVP_HASH_SEED);
  }
  size_t rss0 = kvp_bench_rss_bytes();
  uint64_t t0 = kvp_bench_now_ns();
  kvp__index_create(nblocks, 3600, &ix);
  /* As after a flush: the write-behind lists are empty between flushes. */
  kvp__index_track_dirty(ix, 0);
  for (size_t i = 0; i < holders; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%zu", i);
    kvp__index_worker(ix, name, 0, &w[i]);
  }
  /* --scattered: the blocks stored in an order unrelated to their chains
   * (as a load from the rows, in hash order, leaves them), so that no
   * chain's records are consecutive; else chain after chain, as events
   * bring them. */
  size_t step = 1;
  if (scattered) {
    step = (size_t)(0x9e3779b97f4a7c15ull % nblocks) | 1;
    while (gcd(step, nblocks) != 1)
      step += 2;
  }
  for (size_t j = 0; j < nblocks; j++) {
    size_t at = (size_t)(((unsigned __int128)j * step) % nblocks), c = at / CHAIN, i = at % CHAIN;
    uint64_t h = chains[c * CHAIN + i], p = i ? chains[c * CHAIN + i - 1] : 0;
    size_t n = full + (i < extra ? 1 : 0);
    for (size_t k = 0; k < n; k++) {
      int rc = kvp__index_store(ix, h, i > 0, p, w[(c + k) % holders], k % 2 ? 2 : 1, 0, 16,
                                1 << 20, NOW_MS);
      if (rc != 0) {
        fprintf(stderr, "bench match: store: %d\n", rc);
        return 1;
      }
    }
  }
  double build_s = (double)(kvp_bench_now_ns() - t0) / 1e9;
  size_t rss1 = kvp_bench_rss_bytes();
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);

  plain_t plain;
  plain_init(&plain, nblocks);
  for (size_t i = 0; i < nblocks; i++)
    plain_put(&plain, chains[i], (uint32_t)i + 1);

  /* What the run's tails depend on: how much of the process is on huge
   * pages, the memory left, and faults or collapses during the queries. */
  uint64_t huge_kb = proc_field("/proc/self/smaps_rollup", "AnonHugePages:");
  uint64_t avail_kb = proc_field("/proc/meminfo", "MemAvailable:");
  uint64_t flt0 = minor_faults(), coll0 = proc_field("/proc/vmstat", "thp_collapse_alloc ");
  uint64_t sw0 = preemptions();
  uint64_t q0 = kvp_bench_now_ns();
  for (size_t q = 0; q < nq; q++) {
    const uint64_t *h = &chains[(kvp_bi_rnd() % nchains) * CHAIN];
    size_t n = 0;
    t0 = kvp_bench_now_ns();
    int mrc = kvp__index_match(ix, h, CHAIN, rows, 256, &n);
    lat[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink((uint64_t)n + (uint64_t)mrc + rows[0].length);
    h = &chains[(kvp_bi_rnd() % nchains) * CHAIN];
    uint64_t acc = 0;
    t0 = kvp_bench_now_ns();
    for (int i = 0; i < CHAIN; i++)
      acc += plain_get(&plain, h[i]);
    blat[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink(acc);
  }
  /* A single block: where does it live. Its own loop, so that neither
   * side's misses warm or cool the other's caches. */
  for (size_t q = 0; q < nq; q++) {
    uint64_t one = chains[kvp_bi_rnd() % nblocks];
    size_t n = 0;
    t0 = kvp_bench_now_ns();
    int grc = kvp__index_get(ix, one, NULL, locs, 64, &n);
    slat[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink((uint64_t)grc + n + locs[0].worker);
    one = chains[kvp_bi_rnd() % nblocks];
    t0 = kvp_bench_now_ns();
    uint64_t acc = plain_get(&plain, one);
    sblat[q] = kvp_bench_now_ns() - t0;
    kvp_bench_sink(acc);
  }
  uint64_t flt = minor_faults() - flt0,
           coll = proc_field("/proc/vmstat", "thp_collapse_alloc ") - coll0;
  double qs = (double)(kvp_bench_now_ns() - q0) / 1e9;
  printf("# load: %.1f (1-minute load average, 2 cores here), %llu preemptions in the"
         " %.1f s of queries\n",
         load_average(), (unsigned long long)(preemptions() - sw0), qs);
  printf("# conditions: rss %.2f GiB, %.2f GiB on huge pages, %.2f GiB available before the"
         " queries; during them %llu page faults, %llu huge-page collapses (system-wide);"
         " samples over 5 us: match %zu plain %zu, single %zu plain %zu (of %zu each)\n",
         (double)kvp_bench_rss_bytes() / (1 << 30), (double)huge_kb / (1 << 20),
         (double)avail_kb / (1 << 20), (unsigned long long)flt, (unsigned long long)coll,
         stalls(lat, nq), stalls(blat, nq), stalls(slat, nq), stalls(sblat, nq), nq);
  qsort(lat, nq, sizeof *lat, cmp_u64);
  qsort(blat, nq, sizeof *blat, cmp_u64);
  qsort(slat, nq, sizeof *slat, cmp_u64);
  qsort(sblat, nq, sizeof *sblat, cmp_u64);
  printf("# %zu blocks, %zu locations (%.2f per block) over %zu holders, built in %.1f s"
         " (%.2fM stores/s); %zu random 64-block queries and single lookups\n",
         st.blocks, st.locations, (double)st.locations / (double)st.blocks, holders, build_s,
         (double)st.locations / build_s / 1e6, nq);
  snprintf(fig, sizeof fig, "match.%s.bytes_per_location", label);
  kvp_bench_report(fig, (double)(rss1 - rss0) / (double)st.locations, "B", NULL, 0);
  snprintf(fig, sizeof fig, "match.%s.bytes_per_block", label);
  kvp_bench_report(fig, (double)(rss1 - rss0) / (double)st.blocks, "B", NULL, 0);
  snprintf(fig, sizeof fig, "match.%s.index_bytes_per_location", label);
  kvp_bench_report(fig, (double)st.memory_bytes / (double)st.locations, "B", NULL, 0);
  snprintf(fig, sizeof fig, "match.%s.p50_us", label);
  kvp_bench_report(fig, (double)lat[nq / 2] / 1e3, "us", "64-plain-lookups",
                   (double)blat[nq / 2] / 1e3);
  snprintf(fig, sizeof fig, "match.%s.p99_us", label);
  kvp_bench_report(fig, (double)lat[nq * 99 / 100] / 1e3, "us", "64-plain-lookups",
                   (double)blat[nq * 99 / 100] / 1e3);
  snprintf(fig, sizeof fig, "match.%s.single_p50_ns", label);
  kvp_bench_report(fig, (double)slat[nq / 2], "ns", "1-plain-lookup", (double)sblat[nq / 2]);
  snprintf(fig, sizeof fig, "match.%s.single_p99_ns", label);
  kvp_bench_report(fig, (double)slat[nq * 99 / 100], "ns", "1-plain-lookup",
                   (double)sblat[nq * 99 / 100]);
  /* The LRU walk (a pass over the records: what the tiering engine's
   * rounds and the cap's eviction pay): the 1024 coldest G2 locations. */
  t0 = kvp_bench_now_ns();
  size_t got = kvp__index_lru(ix, 2, slat, 1024);
  double walk_ms = (double)(kvp_bench_now_ns() - t0) / 1e6;
  snprintf(fig, sizeof fig, "match.%s.lru_walk_ms", label);
  kvp_bench_report(fig, walk_ms, "ms", NULL, 0);
  kvp_bench_sink(got);
  plain_free(&plain);
  kvp__index_destroy(ix);
  free(chains);
  free(lat);
  free(blat);
  free(slat);
  free(sblat);
  free(w);
  return 0;
}
