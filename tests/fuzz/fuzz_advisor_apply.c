/* libFuzzer target: the advisor's apply path (decode + ingest + index) over
 * outside bytes. The input is a sequence of messages, each framed as a
 * little-endian u16 length and that many bytes (a short tail is one more
 * message), applied in order to one fresh in-memory index, so gaps, epochs,
 * snapshots and removals interact across batches. Anything must be applied
 * or rejected with an error code, never crash, leak or break the index:
 * afterwards a match, the LRU walk and the change list must still work and
 * the counts must agree. */
#include <stdint.h>
#include <stdlib.h>

#include "index/index.h"
#include "advisor/ingest.h"
#include "common/log.h"
#include "kvplane/event.h"
#include "kvplane/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void no_resync(void *ctx, const char *w, uint32_t dp, uint64_t epoch, const char *why) {
  (void)w;
  (void)dp;
  (void)epoch;
  (void)why;
  ++*(int *)ctx;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvp_wire_limits_t lim = {.max_bytes = 1 << 20, .max_events = 4096, .max_blocks = 1 << 16};
  kvp__index_t *ix = NULL;
  kvp__adv_ingest_t *ing = NULL;
  int resyncs = 0;
  kvp__adv_ingest_opts_t o = {
      .heartbeat_timeout_ms = 1000, .resync = no_resync, .resync_ctx = &resyncs};
  uint64_t now = 1800000000000ull;
  static int quiet;

  if (!quiet++)
    kvp__log_setup(KVP_LOG_ERROR, "fuzz"); /* bad input is logged: keep the fuzzer fast */

  if (kvp__index_create(16, 60, &ix) != 0 || kvp__adv_ingest_create(ix, &o, &ing) != 0)
    abort();
  while (size > 0) {
    size_t n = size;
    if (size >= 2) {
      size_t framed = (size_t)data[0] | (size_t)data[1] << 8;
      if (framed <= size - 2) {
        data += 2;
        size -= 2;
        n = framed;
      }
    }
    kvp__adv_ingest_message(ing, data, n, &lim, now);
    kvp__adv_ingest_tick(ing, now);
    now += 400;
    data += n;
    size -= n;
  }
  uint64_t probe[4], lru[8];
  kvp__index_match_t rows[64];
  size_t got = kvp__index_lru(ix, KVP_TIER_G1, probe, 4);
  size_t nrows = 0;
  if (got && kvp__index_match(ix, probe, got, rows, 64, &nrows) != 0 &&
      kvp__index_worker_count(ix) * 4 <= 64)
    abort();
  for (int t = 1; t <= KVP_TIER_MAX; t++)
    kvp__index_lru(ix, t, lru, 8);
  kvp__index_stats_t st;
  kvp__index_stats(ix, &st);
  size_t per_tier = 0;
  for (int t = 1; t <= KVP_TIER_MAX; t++)
    per_tier += st.tier_locations[t];
  if (per_tier != st.locations || (st.blocks == 0) != (st.locations == 0))
    abort();
  kvp__index_changes_t ch;
  if (kvp__index_changes_take(ix, &ch) == 0)
    kvp__index_changes_free(&ch);
  kvp__adv_ingest_destroy(ing);
  kvp__index_destroy(ix);
  return 0;
}
