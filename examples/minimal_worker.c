/* minimal_worker: the smallest inference worker that embeds kvplane.
 *
 * A real worker (vLLM, SGLang, a Dynamo worker) has a scheduler thread that
 * decides which requests run, and a model that computes KV data into cache
 * blocks. kvplane sits beside the scheduler:
 *
 *   block manager  owns the KV-cache blocks (G1 = GPU, G2 = host memory);
 *                  every change to the set of cached blocks becomes an event;
 *   publisher      takes those events on any thread, batches them on its own
 *                  libuv thread and publishes them over NATS for the advisor.
 *
 * This program plays the scheduler: it runs a few requests that share a
 * system prompt, so the second and later ones hit the prefix cache, and it
 * decodes a few tokens for each. Run it against a nats-server:
 *
 *   nats-server -a 127.0.0.1 -p 4222 &
 *   build/examples/minimal_worker nats://127.0.0.1:4222 20
 *
 * and watch the events with the advisor (kvplane-advisor), or with
 * `nats sub 'kvplane.ev.>'` (protobuf bytes: kvplane.v1.EventBatch).
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvplane/blockmgr.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"

#define PAGE 16          /* tokens per KV block */
#define SYSTEM_PROMPT 64 /* tokens every request starts with: 4 shared blocks */

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "nats://127.0.0.1:4222";
  int nrequests = argc > 2 ? atoi(argv[2]) : 20;
  kvp_blockmgr_t *bm = NULL;
  kvp_publisher_t *pub = NULL;
  char err[256];
  int rc, status = 1;

  if (nrequests < 1 || nrequests > 100000) {
    fprintf(stderr, "usage: minimal_worker [NATS_URL] [REQUESTS 1..100000]\n");
    return 2;
  }

  /* 1. The block manager. The layout says how big a block's KV data is:
   *    here 2 layers x 16 tokens x 64 fp16 elements = 4 KiB per block. A
   *    real engine uses its model's numbers (layers, 2 * kv_heads *
   *    head_dim). G1 holds 64 blocks, G2 256; blocks evicted from G1 are
   *    copied to G2 and copied back on a later prefix hit. */
  kvp_blockmgr_opts_t bo;
  kvp_blockmgr_opts_init(&bo);
  bo.layout = (kvp_layout_t){.num_layers = 2, .page_size = PAGE, .inner_dim = 64, .elem_size = 2};
  bo.g1_blocks = 64;
  bo.g2_blocks = 256;
  if ((rc = kvp_blockmgr_create(&bo, &bm)) != 0) {
    fprintf(stderr, "minimal_worker: block manager: %s\n", kvp_strerror(rc));
    return 1;
  }

  /* 2. The publisher. worker_id names this worker on the wire
   *    (kvplane.ev.<ns>.<worker_id>). The snapshot callback lets the
   *    publisher answer resync requests with the block manager's registered
   *    set; it is only ever called from kvp_publisher_poll, on our thread. */
  kvp_publisher_opts_t po;
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", url);
  po.ns = "example";
  po.worker_id = "minimal-worker";
  po.model = "example-model";
  po.block_tokens = PAGE;
  po.block_bytes = kvp_layout_block_stride(&bo.layout);
  po.snapshot_tiers = (1u << KVP_TIER_G1) | (1u << KVP_TIER_G2);
  po.snapshot = kvp_blockmgr_snapshot_fn;
  po.snapshot_ctx = bm;
  if ((rc = kvp_publisher_open(&po, &pub, err, sizeof err)) != 0) {
    fprintf(stderr, "minimal_worker: publisher: %s\n", err);
    goto out;
  }

  /* 3. Plug the block manager's events into the publisher. */
  kvp_blockmgr_set_sink(bm, kvp_publisher_sink(pub));

  /* 4. The scheduler loop: one request at a time, for simplicity. */
  for (int r = 0; r < nrequests; r++) {
    uint32_t prompt[SYSTEM_PROMPT + 40];
    size_t n = SYSTEM_PROMPT + (size_t)(r % 40);
    kvp_seq_t *seq;

    for (size_t i = 0; i < n; i++)
      prompt[i] = i < SYSTEM_PROMPT ? (uint32_t)i : (uint32_t)(r * 1000 + i);
    /* Hashes the prompt's full blocks (Dynamo-compatible chained XXH3). */
    if ((rc = kvp_seq_create(bm, prompt, n, NULL, 0, &seq)) != 0)
      break;
    /* Finds the cached prefix and gives the sequence blocks for the rest.
     * KVP_ENOSPC means G1 is full of blocks other running requests hold: a
     * real scheduler would wait or preempt. */
    if ((rc = kvp_seq_allocate(seq)) != 0) {
      kvp_seq_free(seq);
      break;
    }
    /* The model would now compute KV for the tokens after
     * kvp_seq_cached_tokens(seq), writing into kvp_pool_block_layer(...)
     * of the blocks from kvp_seq_blocks(seq). Then it decodes: */
    for (uint32_t t = 0; t < 20 && rc == 0; t++)
      rc = kvp_seq_append(seq, 50000 + t);
    printf("request %d: %zu prompt tokens, %zu served from the prefix cache\n", r, n,
           kvp_seq_cached_tokens(seq));
    /* The request is done: its blocks stay cached for later prefix hits. */
    kvp_seq_free(seq);
    /* Answer resync requests here, on the thread that owns the manager. */
    kvp_publisher_poll(pub);
    if (rc != 0)
      break;
  }
  if (rc != 0) {
    fprintf(stderr, "minimal_worker: %s\n", kvp_strerror(rc));
    goto out;
  }

  /* 5. Make sure every event reached the server before exiting. */
  if ((rc = kvp_publisher_flush(pub, 5000)) != 0) {
    fprintf(stderr, "minimal_worker: flush: %s\n", kvp_strerror(rc));
    goto out;
  }
  kvp_blockmgr_stats_t st;
  kvp_publisher_stats_t pf;
  kvp_blockmgr_stats(bm, &st);
  kvp_publisher_stats(pub, &pf);
  printf("hit rate %.0f%%, %llu evictions from G1, %llu onboards from G2, %llu events published "
         "in %llu batches\n",
         100.0 * st.hit_rate, (unsigned long long)st.g1.evictions, (unsigned long long)st.onboards,
         (unsigned long long)pf.sent, (unsigned long long)pf.batches);
  status = 0;

out:
  /* Close the publisher first: it flushes what is queued. */
  kvp_publisher_close(pub);
  kvp_blockmgr_destroy(bm);
  return status;
}
