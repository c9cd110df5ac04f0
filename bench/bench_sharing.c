/* kvp-bench sharing: the index's memory per holder-block under the sharing
 * mix a peer published its figure on (issue 27's "beat 26.9 B"), so that
 * the comparison is on the same workload and not on `match`'s uniform
 * copies.
 *
 *   sharing [--family-blocks 10M] [--holders 256]
 *
 * The workload is SGLang SMG's pinned radix-tree benchmark as its source
 * describes it (smg-project/smg, crates/radix_tree/tests/pinned_bench.rs,
 * profile "pinned"; regenerated here with our own generator, not its
 * code): families of chains whose holder-blocks split 50% / 35% / 15%
 * over sharing factors 1, 8 and 64 (a family's holders are base + 7k mod
 * holders), shared depth log-uniform in 8..512, then per holder a
 * divergent tail of 4..64 blocks of its own, and in 20% of the instances
 * one interior block removed. --family-blocks is the families' budget of
 * holder-blocks (SMG: 10M, which with the tails makes its 12.8M).
 *
 * Figures: resident bytes per holder-block (RSS over the index alone,
 * after the fill) and per distinct block, against a plain table of the
 * (block, holder) pairs, 16-byte entries at fill 0.5 or less (what one
 * location costs without sharing anything), built in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_index.h"
#include "index/index.h"
#include "kvplane/hash.h"

#define MAX_DEPTH 512
#define MAX_TAIL 64
#define MAX_SHARING 64

typedef struct rng_s {
  uint64_t x;
} rng_t;

static uint64_t rng_next(rng_t *r) {
  r->x ^= r->x << 13;
  r->x ^= r->x >> 7;
  r->x ^= r->x << 17;
  return r->x;
}

static double rng_unit(rng_t *r) {
  return (double)(rng_next(r) >> 11) / (double)(1ull << 53);
}

/* One pass over the workload: counts (ix NULL) or stores it. Both passes
 * draw the same numbers, so the counts are those of what is stored. */
typedef struct totals_s {
  size_t families, instances, holder_blocks, blocks, removed;
} totals_t;

static int pass(kvp__index_t *ix, const uint16_t *w, size_t holders, size_t budget_total,
                totals_t *t) {
  static const size_t share[3][2] = {{1, 50}, {8, 35}, {64, 15}};
  uint64_t chain[MAX_DEPTH + MAX_TAIL];
  rng_t r = {0x9e3779b97f4a7c15ull};
  memset(t, 0, sizeof *t);
  for (int s = 0; s < 3; s++) {
    size_t h = share[s][0], budget = budget_total * share[s][1] / 100, used = 0;
    while (used < budget) {
      double lo = log(8.0), hi = log((double)MAX_DEPTH);
      size_t depth = (size_t)llround(exp(lo + rng_unit(&r) * (hi - lo)));
      uint64_t prev = rng_next(&r) | 1;
      for (size_t i = 0; i < depth; i++)
        chain[i] = prev = i ? kvp_hash_chain(prev, rng_next(&r), KVP_HASH_SEED) : prev;
      size_t base = rng_next(&r) % holders, members[MAX_SHARING], nm = 0;
      for (size_t k = 0; k < h; k++) {
        size_t m = (base + k * 7) % holders, dup = 0;
        for (size_t j = 0; j < nm; j++)
          dup |= members[j] == m;
        if (!dup)
          members[nm++] = m;
      }
      used += depth * nm;
      t->families++;
      t->blocks += depth;
      for (size_t j = 0; j < nm; j++) {
        size_t tail = 4 + rng_next(&r) % (MAX_TAIL - 4 + 1);
        uint64_t p = chain[depth - 1];
        for (size_t i = 0; i < tail; i++)
          chain[depth + i] = p = kvp_hash_chain(p, rng_next(&r) ^ members[j], KVP_HASH_SEED);
        size_t gap = depth > 2 && rng_next(&r) % 100 < 20 ? 1 + rng_next(&r) % (depth - 2) : 0;
        t->instances++;
        t->holder_blocks += depth + tail - (gap != 0);
        t->blocks += tail;
        t->removed += gap != 0;
        if (ix == NULL)
          continue;
        for (size_t i = 0; i < depth + tail; i++) {
          int rc = kvp__index_store(ix, chain[i], i > 0, i ? chain[i - 1] : 0, w[members[j]], 1, 0,
                                    16, 1 << 20, NOW_MS);
          if (rc != 0) {
            fprintf(stderr, "bench sharing: store: %d\n", rc);
            return 1;
          }
        }
        if (gap && kvp__index_remove(ix, chain[gap], w[members[j]], 1, 0) != 0) {
          fprintf(stderr, "bench sharing: remove: not found\n");
          return 1;
        }
      }
    }
  }
  return 0;
}

/* The baseline: every (block, holder) pair in a plain open-addressing
 * table of 16-byte entries, at fill 0.5 or less. */
static size_t plain_pairs_bytes(size_t pairs, uint64_t seed) {
  size_t cap = 16;
  while (cap < pairs * 2)
    cap *= 2;
  size_t rss0 = kvp_bench_rss_bytes();
  uint64_t(*e)[2] = calloc(cap, sizeof *e);
  if (e == NULL)
    return 0;
  rng_t r = {seed};
  for (size_t i = 0; i < pairs; i++) {
    uint64_t k = rng_next(&r) | 1, holder = i % 256;
    size_t s = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
    while (e[s][0] != 0)
      s = (s + 1) & (cap - 1);
    e[s][0] = k;
    e[s][1] = holder;
  }
  size_t bytes = kvp_bench_rss_bytes() - rss0;
  free(e);
  return bytes;
}

KVP_BENCH_SUITE(sharing, "index: bytes per holder-block under SGLang SMG's published sharing mix "
                         "[--family-blocks 10M] [--holders 256]") {
  const size_t budget = kvp_bi_size_arg(argc, argv, "--family-blocks", 10000000);
  const size_t holders = kvp_bi_size_arg(argc, argv, "--holders", 256);
  uint16_t *w = calloc(holders ? holders : 1, sizeof *w);
  kvp__index_t *ix = NULL;
  totals_t t, t2;
  char fig[96];

  if (holders < 64 || holders > 4096 || budget < 1000 || w == NULL) {
    fprintf(stderr, "bench sharing: --holders 64..4096, --family-blocks 1000 or more\n");
    return 1;
  }
  if (pass(NULL, NULL, holders, budget, &t) != 0)
    return 1;
  size_t rss0 = kvp_bench_rss_bytes();
  uint64_t t0 = kvp_bench_now_ns();
  if (kvp__index_create(t.blocks, 3600, &ix) != 0)
    return 1;
  kvp__index_track_dirty(ix, 0); /* as after a flush */
  for (size_t i = 0; i < holders; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%zu", i);
    kvp__index_worker(ix, name, 0, &w[i]);
  }
  if (pass(ix, w, holders, budget, &t2) != 0)
    return 1;
  double build_s = (double)(kvp_bench_now_ns() - t0) / 1e9;
  size_t rss1 = kvp_bench_rss_bytes();
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  if (st.locations != t.holder_blocks) {
    fprintf(stderr, "bench sharing: the index holds %zu locations, the workload %zu\n",
            st.locations, t.holder_blocks);
    return 1;
  }
  size_t plain = plain_pairs_bytes(t.holder_blocks, 0x2545f4914f6cdd1dull);
  double per_loc = (double)(rss1 - rss0) / (double)st.locations;
  char label[32];
  kvp_bi_label(label, sizeof label, st.locations);
  printf(
      "# %zu families, %zu holder instances over %zu holders: %zu holder-blocks of %zu "
      "distinct blocks (%.2f holders per block), %zu interior blocks removed; stored in %.1f s\n",
      t.families, t.instances, holders, t.holder_blocks, st.blocks,
      (double)t.holder_blocks / (double)st.blocks, t.removed, build_s);
  printf("# the peer's figure on this mix (published, not measured here): SMG RadixTree 26.9 B "
         "per holder-block at 12.8M holder-blocks over 256 holders\n");
  snprintf(fig, sizeof fig, "sharing.%s.bytes_per_location", label);
  kvp_bench_report(fig, per_loc, "B", "plain-pair-table", (double)plain / (double)t.holder_blocks);
  snprintf(fig, sizeof fig, "sharing.%s.bytes_per_block", label);
  kvp_bench_report(fig, (double)(rss1 - rss0) / (double)st.blocks, "B", NULL, 0);
  snprintf(fig, sizeof fig, "sharing.%s.index_bytes_per_location", label);
  kvp_bench_report(fig, (double)st.memory_bytes / (double)st.locations, "B", NULL, 0);
  kvp__index_destroy(ix);
  free(w);
  return 0;
}
