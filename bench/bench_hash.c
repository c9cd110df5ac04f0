/* kvp-bench hash: chained sequence hashing vs one plain XXH3 pass over the
 * same token bytes. The ratio is the cost of per-block hashing plus the
 * 16-byte chain step. */
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "bench.h"
#include "kvplane/hash.h"

static void run(size_t block_tokens, size_t ntokens, int rounds) {
  uint32_t *toks = malloc(ntokens * sizeof *toks);
  size_t nblocks = ntokens / block_tokens;
  uint64_t *out = malloc(nblocks * sizeof *out);
  uint64_t t0, seq_ns = UINT64_MAX, base_ns = UINT64_MAX;
  char name[64];

  for (size_t i = 0; i < ntokens; i++)
    toks[i] = (uint32_t)(i * 2654435761u) % 151936u;
  /* Best of rounds, each alternating the two so drift hits both alike. */
  for (int r = 0; r < rounds; r++) {
    t0 = kvp_bench_now_ns();
    kvp_hash_sequence(toks, ntokens, block_tokens, KVP_HASH_SEED, out, nblocks);
    kvp_bench_sink(out[nblocks - 1]);
    uint64_t dt = kvp_bench_now_ns() - t0;
    if (dt < seq_ns)
      seq_ns = dt;
    t0 = kvp_bench_now_ns();
    kvp_bench_sink(XXH3_64bits_withSeed(toks, ntokens * sizeof *toks, KVP_HASH_SEED));
    dt = kvp_bench_now_ns() - t0;
    if (dt < base_ns)
      base_ns = dt;
  }
  double bytes = (double)ntokens * sizeof *toks;
  snprintf(name, sizeof name, "hash.seq.%zutok.GBps", block_tokens);
  kvp_bench_report(name, bytes / (double)seq_ns, "GB/s", "xxh3-one-pass", bytes / (double)base_ns);
  snprintf(name, sizeof name, "hash.seq.%zutok.blocks_per_s", block_tokens);
  kvp_bench_report(name, (double)nblocks * 1e9 / (double)seq_ns, "blocks/s", "xxh3-one-pass",
                   (double)nblocks * 1e9 / (double)base_ns);
  free(out);
  free(toks);
}

KVP_BENCH_SUITE(hash, "sequence-hash throughput vs plain XXH3 over the same bytes") {
  (void)argc;
  (void)argv;
  run(16, 16u << 20, 7);
  run(512, 16u << 20, 7);
  return 0;
}
