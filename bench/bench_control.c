/* kvp-bench control: what an operator's prefix delete costs the advisor's
 * loop thread (kvp__tier_engine_drop: finding the prefix's continuations,
 * src/tier/continuations.c, walks every G3/G4 block up its parents once,
 * then queues the evictions), beside the in-run baseline of a tiering
 * round over the same index with nothing to move (its candidates built
 * from every G3/G4 location and planned): the ratio says how many idle
 * rounds one delete is worth.
 *
 *   kvp-bench control [--blocks N]     (default 262144)
 *
 * The index holds N blocks in G3: chains of 28 blocks below a shared
 * prefix of 4 (a system prompt). Each delete is of one chain's first 8
 * blocks (4 shared, 4 its own), so it has 24 continuations; between
 * deletes an untimed round carries the evictions out (mem volumes: no
 * files), so the next delete finds a fresh chain. Best of 5 each,
 * alternating. The journal's SQLite file is in a temporary directory,
 * removed at the end and on SIGINT or SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "bench.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/volume.h"
#include "store/store.h"
#include "tier/engine.h"

#define SHARED 4
#define CHAIN 28
#define REPS 5

static char g_tmp[512];

static void on_signal(int sig) {
  if (g_tmp[0])
    kvp_test_rmtree(g_tmp);
  signal(sig, SIG_DFL);
  raise(sig);
}

static uint64_t root_hash(int k) {
  return 0x5a5a000000000000ull + (uint64_t)k + 1;
}

static uint64_t chain_hash(size_t c, int j) {
  return ((uint64_t)(c + 1) << 16) | (uint64_t)(j + 1);
}

static void round_and_wait(uv_loop_t *loop, kvp__tier_engine_t *e) {
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(loop, UV_RUN_ONCE);
}

KVP_BENCH_SUITE(control, "an operator's prefix delete on the loop thread vs an idle round") {
  size_t n = 262144;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
      n = (size_t)strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: kvp-bench control [--blocks N]\n");
      return 2;
    }
  }
  size_t chains = n > SHARED + CHAIN ? (n - SHARED) / CHAIN : 1;
  char dir[256], db[300], store3[320], store4[320], err[512];
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  kvp__tier_engine_t *e = NULL;
  kvp_advisor_config_t cfg;
  kvp__tier_opts_t topts;
  uv_loop_t loop;
  uint16_t w, v3;
  int rc = 1;

  if (kvp_test_tmpdir(dir, sizeof dir) == NULL)
    return 1;
  snprintf(g_tmp, sizeof g_tmp, "%s", dir);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  snprintf(db, sizeof db, "%s/a.db", dir);
  snprintf(store3, sizeof store3, "bench-control-%d-g3", (int)getpid());
  snprintf(store4, sizeof store4, "bench-control-%d-g4", (int)getpid());
  uv_loop_init(&loop);
  if (kvp__index_create(SHARED + chains * CHAIN, 3600, &ix) != 0 ||
      kvp__store_open(db, &st, err, sizeof err) != 0 || kvp__index_worker(ix, "w", 0, &w) != 0 ||
      kvp__index_volume(ix, "g3", &v3) != 0)
    goto out;
  for (int k = 0; k < SHARED; k++)
    kvp__index_store(ix, root_hash(k), k > 0, k ? root_hash(k - 1) : 0, w, 3, v3, 16, 4096,
                     1600000000000ull);
  for (size_t c = 0; c < chains; c++)
    for (int j = 0; j < CHAIN; j++)
      kvp__index_store(ix, chain_hash(c, j), 1, j ? chain_hash(c, j - 1) : root_hash(SHARED - 1), w,
                       3, v3, 16, 4096, 1600000000000ull + c);

  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.ns, sizeof cfg.ns, "b");
  snprintf(cfg.db_path, sizeof cfg.db_path, "%s", db);
  snprintf(cfg.plugin_dir, sizeof cfg.plugin_dir, "%s", KVP_BINARY_DIR "/plugins");
  cfg.nats.servers[0] = '\0';
  cfg.tiering = 1;
  cfg.tier_scrub_ms = 0;
  cfg.nvolumes = 2;
  for (int v = 0; v < 2; v++) {
    kvp_advisor_volume_t *a = &cfg.volumes[v];
    snprintf(a->name, sizeof a->name, v ? "g4" : "g3");
    a->tier = v ? 4 : 3;
    snprintf(a->plugin, sizeof a->plugin, "mem");
    a->capacity = (int64_t)(4 * (SHARED + chains * CHAIN)) * 4096; /* nothing to demote */
    snprintf(a->params, sizeof a->params, "store=%s\n", v ? store4 : store3);
  }
  if (kvp__tier_engine_open(kvp__adv_tier_opts(&cfg, &topts), &loop, ix, &e, err, sizeof err) !=
      0) {
    fprintf(stderr, "bench control: %s\n", err);
    goto out;
  }
  printf("# control: %zu blocks in G3 (%zu chains of %d below a prefix of %d)\n",
         SHARED + chains * CHAIN, chains, CHAIN, SHARED);
  double best_drop = 1e30, best_round = 1e30;
  size_t continued = 0;
  for (int r = 0; r < REPS && (size_t)r < chains; r++) {
    uint64_t req[SHARED + 4];
    kvp__tier_ctl_counts_t cn;
    for (int k = 0; k < SHARED; k++)
      req[k] = root_hash(k);
    for (int j = 0; j < 4; j++)
      req[SHARED + j] = chain_hash((size_t)r, j);
    uint64_t t0 = kvp_bench_now_ns();
    kvp__tier_engine_round(e); /* idle: nothing queued, nothing to move */
    double tr = (double)(kvp_bench_now_ns() - t0) / 1e6;
    t0 = kvp_bench_now_ns();
    if (kvp__tier_engine_drop(e, req, SHARED + 4, 0, &cn, err, sizeof err) != 0) {
      fprintf(stderr, "bench control: %s\n", err);
      goto out;
    }
    double td = (double)(kvp_bench_now_ns() - t0) / 1e6;
    continued = cn.continuations;
    round_and_wait(&loop, e); /* the evictions, untimed */
    best_round = tr < best_round ? tr : best_round;
    best_drop = td < best_drop ? td : best_drop;
  }
  printf("# each delete: %zu continuations\n", continued);
  kvp_bench_report("control.delete_prefix.ms", best_drop, "ms", "idle-round", best_round);
  kvp_bench_report("control.delete_prefix.ns_per_block",
                   best_drop * 1e6 / (double)(SHARED + chains * CHAIN), "ns", "idle-round",
                   best_round * 1e6 / (double)(SHARED + chains * CHAIN));
  rc = 0;
out:
  if (e != NULL) {
    kvp__tier_engine_stop(e, NULL, NULL);
    kvp__tier_engine_close(e);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp_test_rmtree(dir);
  g_tmp[0] = '\0';
  return rc;
}
