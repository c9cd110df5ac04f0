/* Prints the layout of the public structs the Python binding mirrors
 * (python/kvplane/_lib.py), as the C compiler lays them out, one line each:
 *   <struct> <sizeof>
 *   <struct>.<field> <offsetof>
 * test_binding.py compares these with ctypes' layout. */
#include <stddef.h>
#include <stdio.h>

#include "kvplane/client.h"
#include "kvplane/nats.h"
#include "kvplane/publisher.h"

#define S(t) printf("%s %zu\n", #t, sizeof(t))
#define F(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f))

int main(void) {
  S(kvp_nats_opts_t);
  F(kvp_nats_opts_t, servers);
  F(kvp_nats_opts_t, user);
  F(kvp_nats_opts_t, password);
  F(kvp_nats_opts_t, token);
  F(kvp_nats_opts_t, creds);
  F(kvp_nats_opts_t, tls_ca);
  F(kvp_nats_opts_t, tls_cert);
  F(kvp_nats_opts_t, tls_key);
  F(kvp_nats_opts_t, connect_timeout_ms);

  S(kvp_publisher_opts_t);
  F(kvp_publisher_opts_t, nats);
  F(kvp_publisher_opts_t, ns);
  F(kvp_publisher_opts_t, worker_id);
  F(kvp_publisher_opts_t, dp_rank);
  F(kvp_publisher_opts_t, model);
  F(kvp_publisher_opts_t, mode);
  F(kvp_publisher_opts_t, stream);
  F(kvp_publisher_opts_t, stream_create);
  F(kvp_publisher_opts_t, batch_max_events);
  F(kvp_publisher_opts_t, batch_max_blocks);
  F(kvp_publisher_opts_t, batch_max_bytes);
  F(kvp_publisher_opts_t, max_delay_ms);
  F(kvp_publisher_opts_t, queue_capacity);
  F(kvp_publisher_opts_t, overflow);
  F(kvp_publisher_opts_t, coalesce);
  F(kvp_publisher_opts_t, heartbeat_ms);
  F(kvp_publisher_opts_t, ack_wait_ms);
  F(kvp_publisher_opts_t, close_timeout_ms);
  F(kvp_publisher_opts_t, js_max_inflight);
  F(kvp_publisher_opts_t, snapshot_tiers);
  F(kvp_publisher_opts_t, snapshot_volumes);
  F(kvp_publisher_opts_t, block_tokens);
  F(kvp_publisher_opts_t, block_bytes);
  F(kvp_publisher_opts_t, snapshot);
  F(kvp_publisher_opts_t, snapshot_ctx);
  F(kvp_publisher_opts_t, epoch);
  F(kvp_publisher_opts_t, first_event_id);
  F(kvp_publisher_opts_t, partitions);
  F(kvp_publisher_opts_t, stream_replicas);
  F(kvp_publisher_opts_t, snapshot_runs);

  S(kvp_publisher_stats_t);
  F(kvp_publisher_stats_t, queued);
  F(kvp_publisher_stats_t, sent);
  F(kvp_publisher_stats_t, acked);
  F(kvp_publisher_stats_t, dropped);
  F(kvp_publisher_stats_t, batches);
  F(kvp_publisher_stats_t, bytes);
  F(kvp_publisher_stats_t, reconnects);
  F(kvp_publisher_stats_t, resyncs);
  F(kvp_publisher_stats_t, blocks);
  F(kvp_publisher_stats_t, retries);
  F(kvp_publisher_stats_t, resent);

  S(kvp_match_t);
  F(kvp_match_t, worker);
  F(kvp_match_t, dp_rank);
  F(kvp_match_t, tier);
  F(kvp_match_t, length);

  S(kvp_gather_info_t);
  F(kvp_gather_info_t, partitions);
  F(kvp_gather_info_t, replies);
  F(kvp_gather_info_t, used);
  F(kvp_gather_info_t, errors);
  F(kvp_gather_info_t, nmissing);
  F(kvp_gather_info_t, missing);
  F(kvp_gather_info_t, elapsed_us);
  return 0;
}
