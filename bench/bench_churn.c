/* kvp-bench churn [--blocks 1M] [--rounds 20]: the index's memory after a
 * long life of blocks freed and stored again, against the same index just
 * filled (issue 27: "router memory grows without bound").
 *
 * Fill: --blocks blocks in chains of 64, each chain stored in order in one
 * go by one of 8 holders (G1), as a worker's stored event gives them; one
 * chain in four goes on from a block of an earlier one (a shared prefix,
 * so its first block's parent is not the record before). Churn: the oldest
 * chain leaves (its blocks removed leaf first, as an engine evicts a
 * request's tail before its head, or, every other chain, root first) and a
 * new one is stored, until --rounds times --blocks blocks were stored
 * again. The free records are reused, and the parents that are not the
 * record before go to a side table (DESIGN.md, "The index's bytes"): this
 * prints what the index holds at the end against the start (the in-run
 * baseline): churn.bytes_per_location (the index's own count of its
 * allocations, kvp__index_stats) and churn.side_parent_share (blocks whose
 * parent is in the side table). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_index.h"
#include "index/index.h"

#define CHAIN 64
#define NOW 1800000000000ull

typedef struct churn_s {
  kvp__index_t *ix;
  uint64_t *h;    /* CHAIN hashes per chain slot */
  uint64_t *root; /* the parent of each chain's first block (its own hash: none) */
  size_t nchains, oldest, stored;
  uint16_t w[8];
  uint64_t x;
} churn_t;

static uint64_t rnd(churn_t *c) {
  c->x ^= c->x << 13;
  c->x ^= c->x >> 7;
  c->x ^= c->x << 17;
  return c->x;
}

/* A new chain in slot s, going on from a block of another live chain one
 * time in four. */
static int store_chain(churn_t *c, size_t s, int share) {
  uint64_t *h = &c->h[s * CHAIN], parent = 0;
  int has = 0;
  if (share && c->stored > 0 && rnd(c) % 4 == 0) {
    size_t o = (size_t)(rnd(c) % c->nchains);
    if (o != s) {
      parent = c->h[o * CHAIN + rnd(c) % CHAIN];
      has = 1;
    }
  }
  uint16_t w = c->w[rnd(c) % 8];
  for (size_t i = 0; i < CHAIN; i++) {
    h[i] = rnd(c) | 1;
    int rc = kvp__index_store(c->ix, h[i], i > 0 || has, i ? h[i - 1] : parent, w, 1, 0, 16,
                              1 << 20, NOW);
    if (rc != 0)
      return rc;
  }
  c->stored += CHAIN;
  return 0;
}

/* The chain in slot s leaves: every copy of its blocks removed. */
static void drop_chain(churn_t *c, size_t s, int leaf_first) {
  for (size_t k = 0; k < CHAIN; k++) {
    uint64_t h = c->h[s * CHAIN + (leaf_first ? CHAIN - 1 - k : k)];
    kvp__index_block_t b;
    kvp__index_loc_t loc[8];
    size_t n = 0;
    if (kvp__index_get(c->ix, h, &b, loc, 8, &n) != 0)
      continue;
    for (size_t i = 0; i < n && i < 8; i++)
      (void)kvp__index_remove(c->ix, h, loc[i].worker, loc[i].tier, loc[i].volume);
  }
}

static void report_state(const char *when, kvp__index_t *ix, kvp__index_stats_t *st) {
  kvp__index_stats(ix, st);
  printf("# %s: %zu blocks, %zu locations, %zu B allocated (%.2f B per location), %zu parents "
         "in the side table (%.1f%%)\n",
         when, st->blocks, st->locations, st->memory_bytes,
         (double)st->memory_bytes / (double)st->locations, st->parents_side,
         100.0 * (double)st->parents_side / (double)st->blocks);
}

KVP_BENCH_SUITE(churn, "index: memory per location after --rounds 20 x --blocks 1M blocks freed "
                       "and stored again, against the same index just filled") {
  churn_t c;
  memset(&c, 0, sizeof c);
  size_t blocks = kvp_bi_size_arg(argc, argv, "--blocks", 1u << 20);
  size_t rounds = kvp_bi_size_arg(argc, argv, "--rounds", 20);
  c.nchains = (blocks + CHAIN - 1) / CHAIN;
  c.x = 0x9e3779b97f4a7c15ull;
  c.h = malloc(c.nchains * CHAIN * sizeof *c.h);
  if (c.h == NULL || kvp__index_create(c.nchains * CHAIN, 3600, &c.ix) != 0)
    return 1;
  kvp__index_track_dirty(c.ix, 0);
  for (int i = 0; i < 8; i++) {
    char name[16];
    snprintf(name, sizeof name, "worker%d", i);
    kvp__index_worker(c.ix, name, 0, &c.w[i]);
  }
  int rc = 0;
  for (size_t s = 0; s < c.nchains && rc == 0; s++)
    rc = store_chain(&c, s, 1);
  kvp__index_stats_t s0, s1;
  report_state("filled", c.ix, &s0);
  uint64_t t0 = kvp_bench_now_ns();
  size_t goal = c.stored + rounds * c.nchains * CHAIN, steps = 0;
  while (rc == 0 && c.stored < goal) {
    size_t s = c.oldest;
    drop_chain(&c, s, steps % 2 == 0);
    rc = store_chain(&c, s, 1);
    c.oldest = (c.oldest + 1) % c.nchains;
    steps++;
  }
  double secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  report_state("after the churn", c.ix, &s1);
  printf("# churn: %zu chains of %d left and came back, %.1f s (%zu blocks stored in all)\n", steps,
         CHAIN, secs, c.stored);
  kvp_bench_report("churn.bytes_per_location", (double)s1.memory_bytes / (double)s1.locations, "B",
                   "just-filled", (double)s0.memory_bytes / (double)s0.locations);
  kvp_bench_report("churn.side_parent_share", (double)s1.parents_side / (double)s1.blocks, "",
                   "just-filled", (double)s0.parents_side / (double)s0.blocks);
  kvp__index_destroy(c.ix);
  free(c.h);
  return rc == 0 && s1.blocks == s0.blocks ? 0 : 1;
}
