/* Samples of tier occupancy for the tier_history table (store.h): what the
 * index places in each tier, and in each volume the tiering engine manages,
 * at one instant. Thread: the advisor's loop thread (the index's owner). */
#ifndef KVP_ADVISOR_HISTORY_H
#define KVP_ADVISOR_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"
#include "store/store.h"
#include "tier/engine.h"

/* Rows one sample can produce: the four tiers and every volume. */
#define KVP__ADV_HIST_ROWS (4 + KVP__TIER_MAX_VOLUMES)

/* Fills rows (room for KVP__ADV_HIST_ROWS) with the sample at now_ms: one
 * row per tier 1..4 (volume "", blocks = locations in the tier, bytes their
 * blocks' bytes, no capacity) and, when e is not NULL, one per volume
 * (blocks and bytes as of the engine's last round, and its capacity).
 * Returns the number of rows. */
size_t kvp__adv_history_sample(const kvp__index_t *ix, const kvp__tier_engine_t *e, uint64_t now_ms,
                               kvp__store_hist_row_t *rows);

#endif
