/* The persistence change log of the advisor's index: which blocks changed
 * and which locations went away since the write-behind store last took the
 * changes (store.h).
 *
 * The log knows hashes only. The index marks a block once per flush period
 * (its node carries the "already listed" flag) and, at take time, tells the
 * log through a callback what became of each listed block. The log never
 * calls into the index otherwise, so the index depends on the log and not
 * the other way round.
 *
 * Thread: the advisor's loop thread (the index owner's). The changes a take
 * hands over belong to the caller, which may pass them to another thread. */
#ifndef KVP_INDEX_CHANGELOG_H
#define KVP_INDEX_CHANGELOG_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/status.h"

enum { KVP__INDEX_CH_BLOCK = 1, KVP__INDEX_CH_LOCS = 2 };

typedef struct kvp__index_change_s {
  uint64_t hash;
  uint32_t what; /* 0: the block is gone; else KVP__INDEX_CH_BLOCK, plus
                    KVP__INDEX_CH_LOCS when locations were added */
} kvp__index_change_t;

/* One removed location. */
typedef struct kvp__index_gone_s {
  uint64_t hash;
  uint16_t worker, volume;
  uint8_t tier;
} kvp__index_gone_t;

/* Changes handed over by a take. */
typedef struct kvp__index_changes_s {
  kvp__index_change_t *blocks; /* each changed or deleted block once */
  size_t nblocks;
  kvp__index_gone_t *gone; /* removed locations, in order */
  size_t ngone;
} kvp__index_changes_t;

void kvp__index_changes_free(kvp__index_changes_t *ch);

typedef struct kvp__index_changelog_s {
  uint64_t *dirty; /* listed blocks, in order of their first change */
  size_t ndirty, dirty_cap;
  kvp__index_gone_t *gone; /* locations removed since the last take */
  size_t ngone, gone_cap;
} kvp__index_changelog_t;

/* Frees the lists; the log is then empty and usable. */
void kvp__index_changelog_free(kvp__index_changelog_t *cl);

/* Makes room for one more listed block (1.5x growth: the lists' slack is
 * part of the index's memory figure). Returns 0 or KVP_ENOMEM. */
int kvp__index_changelog_grow(kvp__index_changelog_t *cl);

/* Lists a changed block. Returns 0 or KVP_ENOMEM (not listed). Inline: it
 * runs on the first change of every block, in the ingest loop. */
static inline int kvp__index_changelog_mark(kvp__index_changelog_t *cl, uint64_t hash) {
  if (cl->ndirty == cl->dirty_cap && kvp__index_changelog_grow(cl) != 0)
    return KVP_ENOMEM;
  cl->dirty[cl->ndirty++] = hash;
  return 0;
}

/* Records a removed location. Returns 0 or KVP_ENOMEM (not recorded: the
 * row stays in the store until its block is deleted). */
int kvp__index_changelog_gone(kvp__index_changelog_t *cl, const kvp__index_gone_t *g);

/* What became of a listed block, asked once per listing at take time:
 * returns its KVP__INDEX_CH_* bits (0: deleted) and clears its marks, or
 * KVP__INDEX_CH_SKIP when this listing is stale (the block was deleted, then
 * created again and listed a second time). */
#define KVP__INDEX_CH_SKIP UINT32_MAX
typedef uint32_t (*kvp__index_settle_fn)(void *ctx, uint64_t hash);

/* Hands the listed blocks (settled by settle) and the removed locations
 * over to ch and empties the log. Returns 0 or KVP_ENOMEM (nothing taken,
 * nothing settled). */
int kvp__index_changelog_take(kvp__index_changelog_t *cl, kvp__index_settle_fn settle, void *ctx,
                              kvp__index_changes_t *ch);

/* Number of listed blocks. */
size_t kvp__index_changelog_count(const kvp__index_changelog_t *cl);

/* Bytes the lists have allocated, for the index's memory figure. */
size_t kvp__index_changelog_memory(const kvp__index_changelog_t *cl);

#endif
