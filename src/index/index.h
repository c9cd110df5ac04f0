/* Advisor block index (DESIGN.md, "Advisor"): where every block lives.
 *
 * A map (open addressing, linear probing, 4-byte tagged slots filled to at
 * most 0.7, any number of slots) from sequence hash to a 30-byte block
 * record in a dense pool of two arrays by record id: what a lookup reads
 * (hash and locations, 16 bytes) and the rest (last access, hits, decayed
 * hit frequency, an interned size ("shape"), flags). The parent (the
 * prefix-tree link) is a flag when it is the block of the record before, as
 * in a chain stored in one event, else in a side table. A location is one (worker, tier, volume)
 * copy of a block in a u32; a record holds two inline, more go to a chunk of a shared slab. No
 * malloc per block or location.
 *
 * Workers and volumes are interned as u16 ids. A "worker" here is one
 * (worker id, dp rank) pair: every data-parallel rank has its own caches.
 *
 * Recency is the block's last access (second resolution): a tier's LRU
 * order is its locations' blocks by last access; within one second, in
 * record order (creation order until freed records are reused, then
 * arbitrary). The LRU walk is a pass over the records (kvp__index_lru).
 *
 * Every change marks the block dirty (once) so the store can write it behind;
 * kvp__index_changes_take() hands the changes over.
 *
 * In parts: index.c (the map, the records and the updates), locs.c
 * (location lists, shapes), query.c (match, lookups, LRU walks), evict.c
 * (the memory cap), intern.c and names.c (names), changelog.c (the change
 * log); index_impl.h is what they share.
 *
 * Not thread-safe: the advisor's loop thread owns it. */
#ifndef KVP_INDEX_INDEX_H
#define KVP_INDEX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "index/changelog.h"

#define KVP__INDEX_MAX_WORKERS 8191u
#define KVP__INDEX_MAX_VOLUMES 65535u
#define KVP__INDEX_MAX_BLOCKS ((1u << 28) - 2) /* record ids share a u32 slot with a tag */
#define KVP__INDEX_NO_VOLUME 0xffffu           /* "any volume" in kvp__index_remove */
/* In-memory last access is kept in seconds since this Unix time (2020-01-01)
 * to keep the node small; the store writes it back as Unix milliseconds. */
#define KVP__INDEX_EPOCH_S 1577836800u

typedef struct kvp__index_s kvp__index_t;

/* A block as the store and the queries see it. */
typedef struct kvp__index_block_s {
  uint64_t hash;
  uint64_t parent; /* equal to hash when the block has no parent */
  uint32_t tokens;
  uint64_t bytes;
  uint64_t last_access_ms;
  uint32_t hits; /* saturates at 2^27 - 1 in the index */
  double freq;   /* decayed hit frequency at last access */
} kvp__index_block_t;

typedef struct kvp__index_loc_s {
  uint16_t worker;
  uint16_t volume; /* 0 = none (G1/G2) */
  uint8_t tier;
} kvp__index_loc_t;

/* One row of a match answer: worker, tier and the number of leading hashes
 * of the query that this (worker, tier) holds, consecutively from the first. */
typedef struct kvp__index_match_s {
  uint16_t worker;
  uint8_t tier;
  uint64_t length; /* up to the query's length (a size_t) */
} kvp__index_match_t;

/* Creates an empty index sized for about cap_hint blocks; half_life_s is the
 * half-life of the decayed hit frequency. Returns 0 or KVP_ENOMEM. */
int kvp__index_create(size_t cap_hint, double half_life_s, kvp__index_t **out);

/* Makes room for blocks blocks without growing the map or the record pool
 * (a load from the store knows its count). Returns 0, KVP_ENOSPC past
 * KVP__INDEX_MAX_BLOCKS or KVP_ENOMEM. */
int kvp__index_reserve(kvp__index_t *ix, size_t blocks);

/* Frees everything; NULL is accepted. */
void kvp__index_destroy(kvp__index_t *ix);

/* Interns a (worker id, dp rank) pair. Returns 0, KVP_EINVAL for a bad id or
 * KVP_ENOSPC past KVP__INDEX_MAX_WORKERS. */
int kvp__index_worker(kvp__index_t *ix, const char *name, uint32_t dp_rank, uint16_t *id);
/* Name and dp rank of an interned worker; NULL for an unknown id. */
const char *kvp__index_worker_name(const kvp__index_t *ix, uint16_t id, uint32_t *dp_rank);
size_t kvp__index_worker_count(const kvp__index_t *ix);
/* Marks the events of worker's epoch as applied at their source: the
 * tiering engine of this process stores and removes its worker's
 * locations in the index as it announces them, so the advisor's ingest
 * skips those events when NATS brings them back (applied again later, a
 * store, a removal or a snapshot would undo what the engine did since:
 * advisor/ingest.c). epoch 0 clears the mark. Returns 0 or KVP_ENOMEM. */
int kvp__index_set_source(kvp__index_t *ix, uint16_t worker, uint64_t epoch);
/* The epoch kvp__index_set_source marked for worker; 0 when none. */
uint64_t kvp__index_source(const kvp__index_t *ix, uint16_t worker);

/* Interns a volume name; NULL or "" is volume 0. Returns 0, KVP_EINVAL for a
 * name over 255 bytes, or KVP_ENOSPC. */
int kvp__index_volume(kvp__index_t *ix, const char *name, uint16_t *id);
/* Name of a volume id ("" for 0); NULL for an unknown id. */
const char *kvp__index_volume_name(const kvp__index_t *ix, uint16_t id);
size_t kvp__index_volume_count(const kvp__index_t *ix);

/* Records that worker holds block hash in tier (and volume). Creates the
 * block if it is new (has_parent 0: no parent); refreshes size and last
 * access (which moves it to the warm end of every LRU it is on). Returns 0,
 * KVP_ETIER for a tier outside 1..4, KVP_ENOSPC past KVP__INDEX_MAX_BLOCKS
 * blocks or 65,536 different (tokens, bytes) sizes, or KVP_ENOMEM. */
int kvp__index_store(kvp__index_t *ix, uint64_t hash, int has_parent, uint64_t parent,
                     uint16_t worker, int tier, uint16_t volume, uint32_t tokens, uint64_t bytes,
                     uint64_t now_ms);

/* Removes worker's location of hash in tier (volume KVP__INDEX_NO_VOLUME: any
 * volume). A block with no location left is deleted. Returns 0, or KVP_ENOENT
 * when there was no such location (not an error for event streams). */
int kvp__index_remove(kvp__index_t *ix, uint64_t hash, uint16_t worker, int tier, uint16_t volume);

/* Counts hits on a block: hit counter (saturating at 2^27 - 1), decayed
 * frequency and last access
 * (the LRU position of all its locations; tier is accepted for the callers'
 * sake and no longer narrows it). KVP_ENOENT when the block is unknown. */
int kvp__index_access(kvp__index_t *ix, uint64_t hash, int tier, uint32_t hits, uint64_t now_ms);

/* Drops every location of worker in the tiers of tier_mask (bit t for tier
 * t). Returns the number of locations dropped. */
size_t kvp__index_drop(kvp__index_t *ix, uint16_t worker, unsigned tier_mask);
/* A location of a worker (kvp__index_held). */
typedef struct kvp__index_held_s {
  uint64_t hash;
  uint16_t volume;
} kvp__index_held_t;

/* The locations worker holds in tier, in record order: a linear pass over
 * the records (a snapshot's commit, a resync's answer: rare). *out is
 * malloc'd, NULL when *n is 0. Returns 0 or KVP_ENOMEM. */
int kvp__index_held(const kvp__index_t *ix, uint16_t worker, int tier, kvp__index_held_t **out,
                    size_t *n);

/* kvp__index_drop of several workers (workers[w] != 0, for w < nworkers)
 * in slices, so a caller on a loop can answer between them: goes over at
 * most max_records records from *next (0 at the first call), advances
 * *next and adds the locations dropped to *dropped. Returns 1 once past
 * the last record (done), else 0. The records may change between calls:
 * a location of those workers added in a part already gone over stays. */
int kvp__index_drop_some(kvp__index_t *ix, const uint8_t *workers, size_t nworkers,
                         unsigned tier_mask, size_t *next, size_t max_records, size_t *dropped);

/* Hints that hashes are about to be stored, removed or accessed: issues
 * the memory loads of their map slots and nodes in parallel. */
void kvp__index_prefetch(const kvp__index_t *ix, const uint64_t *hashes, size_t n);

/* Longest consecutive cached prefix of hashes[0..n) per (worker, tier).
 * Writes up to cap rows to out and their number to *nrows. Returns 0, or
 * KVP_ENOSPC when more than cap (worker, tier) pairs matched (*nrows is then
 * cap, and out holds the first cap pairs with their lengths so far). Rows
 * with length 0 are not reported. */
int kvp__index_match(const kvp__index_t *ix, const uint64_t *hashes, size_t n,
                     kvp__index_match_t *out, size_t cap, size_t *nrows);

/* Looks a block up. Returns 0 or KVP_ENOENT. locs (cap entries) receives
 * its locations; *nlocs their total count (may exceed cap). */
int kvp__index_get(const kvp__index_t *ix, uint64_t hash, kvp__index_block_t *b,
                   kvp__index_loc_t *locs, size_t cap, size_t *nlocs);

/* A load of many blocks in an order unrelated to their chains (the store's
 * rows come in hash order). Between begin and end the parents are kept
 * aside; end renumbers the records so that each chain's blocks are
 * consecutive again (a block right after its parent where it can be),
 * which the record's parent flag and the match's chain path rely on, and
 * sets the parents. Both return 0 or KVP_ENOMEM; after a failed end the
 * index holds every block and parent, in the order they were loaded. For
 * loads into an index nothing else changes meanwhile. */
int kvp__index_bulk_begin(kvp__index_t *ix);
int kvp__index_bulk_end(kvp__index_t *ix);

/* Loads a block row (from the store) without marking it dirty. */
int kvp__index_load_block(kvp__index_t *ix, const kvp__index_block_t *b);
/* Loads a location row; the block must have been loaded. KVP_ENOENT if not. */
int kvp__index_load_loc(kvp__index_t *ix, uint64_t hash, const kvp__index_loc_t *loc);

/* Least recently used locations of tier, coldest first: up to cap hashes
 * (a block appears once per location in the tier). One pass over the
 * records: O(blocks + locations x log cap). */
size_t kvp__index_lru(const kvp__index_t *ix, int tier, uint64_t *hashes, size_t cap);

/* The same walk over the tiers of tier_mask, as keys: last access << 32 |
 * record id, coldest first (sorted). Up to cap keys. */
size_t kvp__index_lru_keys(const kvp__index_t *ix, unsigned tier_mask, uint64_t *keys, size_t cap);

/* --- the memory cap (evict.c) --- */

/* Bytes the index's live content needs: its records, its map at the
 * highest fill, the slab chunks in use, names, shapes and the change log.
 * What a memory cap is held to (allocated capacity does not shrink). */
size_t kvp__index_memory_used(const kvp__index_t *ix);

/* Blocks (of one or two locations) that bytes of memory hold. */
size_t kvp__index_blocks_for(size_t bytes);

/* Called for each location kvp__index_evict drops, before it goes. */
typedef void (*kvp__index_evict_fn)(void *ctx, uint64_t hash, uint16_t worker, int tier);

/* Drops about n of the coldest locations in the tiers of tier_mask: the
 * n coldest are picked by one LRU walk and every location of their blocks
 * in those tiers goes (so a block is never half-dropped from them). The
 * drops reach the store as removals. Returns the number dropped (0 when
 * there was no memory for the walk). */
size_t kvp__index_evict(kvp__index_t *ix, unsigned tier_mask, size_t n, kvp__index_evict_fn fn,
                        void *ctx);

/* Figures. */
typedef struct kvp__index_stats_s {
  size_t blocks;
  size_t locations;
  size_t tier_locations[5]; /* by tier; [0] unused */
  uint64_t tier_bytes[5];
  size_t memory_bytes; /* allocated by the index (map, pools, names) */
  size_t parents_side; /* blocks whose parent is in the side table, not the record before */
} kvp__index_stats_t;
void kvp__index_stats(const kvp__index_t *ix, kvp__index_stats_t *st);

/* Turns dirty tracking on (default) or off (benchmarks, fuzzing). */
void kvp__index_track_dirty(kvp__index_t *ix, int on);

/* Changes since the last take, for the write-behind store (the types are
 * in changelog.h). */
/* Hands the changes over and clears the marks. Write the removed locations
 * first, then the blocks. Returns 0 or KVP_ENOMEM (nothing taken). Free ch
 * with kvp__index_changes_free(). */
int kvp__index_changes_take(kvp__index_t *ix, kvp__index_changes_t *ch);

/* Gives the changes of a failed write back (conservatively: every block's
 * locations are written again). */
void kvp__index_changes_restore(kvp__index_t *ix, const kvp__index_changes_t *ch);

/* Number of changed blocks pending. */
size_t kvp__index_dirty_count(const kvp__index_t *ix);

#endif
