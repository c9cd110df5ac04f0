/* Simulated workers replaying a request trace (the library behind
 * tools/kvplane-sim, usable in-process by tests and benchmarks).
 *
 * Each worker is a thread that embeds what a real worker embeds: a block
 * manager (include/kvplane/blockmgr.h) with G1 and G2 pools, and a publisher
 * fed by the block manager's event sink. Requests are routed to workers
 * round robin. A request's prompt is input_length tokens, the deterministic
 * tokens behind its trace hash ids (kvp_trace_block_tokens), so requests
 * that share leading ids share chained sequence hashes and prefix-cache
 * hits; then output_length decoded tokens are appended. A worker keeps up to
 * opts.batch sequences running at once, freeing the oldest when it needs
 * room. The "engine" writes each new block's sequence hash into its KV bytes
 * and checks it on every prefix hit, so a wrong onboard copy is counted.
 *
 * Threads: kvp__sim_create, kvp__sim_run, the stats and expect calls and
 * kvp__sim_destroy are called from one thread; kvp__sim_run starts one
 * thread per worker and joins them before it returns. */
#ifndef KVP_SIM_SIM_H
#define KVP_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>

#define KVP_SIM_BLOCK_TOKENS 512
#define KVP_SIM_MAX_BATCH 256
#define KVP_SIM_MAX_WORKERS 256

typedef struct kvp__sim_opts_s {
  const char *servers; /* NATS URL(s), comma-separated */
  const char *ns;
  const char *trace; /* Mooncake JSONL, plain or gzip */
  int workers;       /* 1..KVP_SIM_MAX_WORKERS, named sim-0, sim-1, ... */
  int mode;          /* KVP_PUB_CORE or KVP_PUB_JETSTREAM */
  int decode;        /* append the output tokens */
  size_t g1_blocks, g2_blocks;
  size_t limit; /* replay only the first requests; 0: all */
  size_t batch; /* sequences running at once per worker, 1..KVP_SIM_MAX_BATCH */
  uint32_t layers, inner_dim;
  double speedup; /* pace at this multiple of trace time; 0: flat out */
  /* With volume_dir: each worker offloads G2 victims to its own G3 posix
   * volume g3-<worker> in volume_dir/g3/<worker> (g3_capacity bytes, 0
   * unbounded) and reads G4 from the shared posix volume g4-shared in
   * volume_dir/g4. Scratch volumes: fsync off. Plugins from plugin_dir
   * (NULL: kvp_volume_plugin_dir()). */
  const char *volume_dir;
  uint64_t g3_capacity;
  const char *plugin_dir;
  /* The servers map the event subjects to this many partitions (kvplane
   * nats-config): in JetStream mode each worker's publisher looks up (and
   * makes) its partition's stream, not the unpartitioned one. 0: none. */
  uint32_t partitions;
} kvp__sim_opts_t;

/* Defaults: 4 workers, core mode, 2,048 G1 and 8,192 G2 blocks of 512
 * tokens, 2 layers x 8 fp16 elements (16 KiB blocks), batch 8, decode on. */
void kvp__sim_opts_init(kvp__sim_opts_t *o);

typedef struct kvp__sim_s kvp__sim_t;

/* What one worker did (block manager and publisher figures). */
typedef struct kvp__sim_worker_stats_s {
  size_t requests;
  uint64_t skipped;      /* larger than G1 with nothing else running */
  uint64_t decode_stops; /* decoding stopped for lack of G1 */
  uint64_t corrupt;      /* reused blocks whose KV bytes were wrong */
  uint64_t lookups, hits_g1, hits_g2;
  uint64_t g1_cached, g2_cached; /* registered blocks at the end */
  uint64_t g1_evictions, offloads, onboards;
  uint64_t events_sent;   /* distinct events published */
  uint64_t events_resent; /* JetStream resends of them */
  uint64_t events_dropped;
  uint64_t blocks_sent;                              /* block hashes in the distinct events */
  uint64_t g3_cached, offloads_g3, offloads_g3_lost; /* lost: failed or dropped */
  uint64_t hits_g3, hits_g4;
  int rc; /* 0 or the worker's first error */
} kvp__sim_worker_stats_t;

/* Loads the trace and opens each worker's publisher and block manager.
 * Returns 0, KVP_EINVAL (bad options), KVP_EIO/KVP_EPROTO (trace), KVP_ENOMEM,
 * or a publisher/block manager error; err names the object and the cause. */
int kvp__sim_create(const kvp__sim_opts_t *o, kvp__sim_t **out, char *err, size_t errlen);

/* Replays every loaded request, then flushes each publisher (60 s bound).
 * Returns 0 or the first worker's error (per worker in the stats). */
int kvp__sim_run(kvp__sim_t *s);

size_t kvp__sim_requests(const kvp__sim_t *s);
/* Requests replayed so far by the running kvp__sim_run: callable from any
 * thread while it runs (a progress bar). */
size_t kvp__sim_progress(kvp__sim_t *s);
size_t kvp__sim_block_refs(const kvp__sim_t *s);
double kvp__sim_seconds(const kvp__sim_t *s); /* wall time of the last run */

void kvp__sim_worker_stats(kvp__sim_t *s, int worker, kvp__sim_worker_stats_t *out);

/* Writes every worker's registered G1, G2 (and G3) blocks as CSV lines
 * "worker,tier,hash" (hash as signed 64-bit, as SQLite shows it). Returns 0
 * or KVP_EIO (err names the path). */
int kvp__sim_write_expect(kvp__sim_t *s, const char *path, char *err, size_t errlen);

/* Closes the publishers (flushing what is left) and frees everything; NULL is
 * a no-op. */
void kvp__sim_destroy(kvp__sim_t *s);

#endif
