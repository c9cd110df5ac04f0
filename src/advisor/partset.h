/* The partitions an advisor owns ([partitions] count and owned): parsed
 * from the configuration, and the slot of each owned partition, the index
 * the advisor keeps its per-partition stream positions and acks under.
 *
 * An unpartitioned advisor (count 0) has one slot, 0, for the one stream.
 * A partitioned advisor has one slot per owned partition, in increasing
 * partition order: slot i consumes stream <stream>_P<p[i]>. */
#ifndef KVP_ADVISOR_PARTSET_H
#define KVP_ADVISOR_PARTSET_H

#include <stddef.h>
#include <stdint.h>

#include "advisor/advisor.h"
#include "store/store.h"

/* Most partitions one advisor owns (one fetch thread each). */
#define KVP__ADV_MAX_OWNED 64

typedef struct kvp__adv_partset_s {
  uint32_t count; /* the deployment's partitions; 0: not partitioned */
  int n;          /* slots: owned partitions, or 1 when not partitioned */
  uint32_t p[KVP__ADV_MAX_OWNED];
} kvp__adv_partset_t;

/* Parses owned ("0,2,5-7"; empty: every partition) against count. Returns
 * 0, or KVP_ECONFIG with err "[partitions] owned: <cause>" (a partition
 * out of range, a repeated one, more than KVP__ADV_MAX_OWNED, a bad
 * token). */
int kvp__adv_partset_parse(kvp__adv_partset_t *ps, uint32_t count, const char *owned, char *err,
                           size_t errlen);

/* The partitions of owned that cfg's [tiering] partitions names ("0,2",
 * "1-3"; "none": none; empty: all of owned, and *all 1). Returns 0, or
 * KVP_ECONFIG with err "[tiering] partitions: <cause>" (bad syntax, a
 * partition not owned, set while not partitioned). */
int kvp__adv_partset_tiered(const kvp_advisor_config_t *cfg, const kvp__adv_partset_t *owned,
                            kvp__adv_partset_t *tiered, int *all, char *err, size_t errlen);

/* Checks cfg's [partitions] keys (parse, partitions need JetStream mode,
 * and with tiering the partitions' key namespaces fit) and [tiering]
 * partitions. Returns 0 or KVP_ECONFIG. */
int kvp__adv_partset_check(const kvp_advisor_config_t *cfg, char *err, size_t errlen);

/* Before the index loads (partitioned only): drops from the database the
 * rows of the workers of partitions ps does not own and the positions of
 * those partitions (a partition moved to another advisor; should it come
 * back, it is consumed again from its stream's start). The advisor's own
 * worker (_advisor) stays. Returns 0 or the store's error, err set. */
int kvp__adv_partset_prepare_db(const kvp__adv_partset_t *ps, kvp__store_t *st, char *err,
                                size_t errlen);

/* After the load: each slot's position into pos (unpartitioned: slot 0 is
 * stream_seq, the database's one position) and their sum into *sum.
 * Returns 0 or KVP_EDB. */
int kvp__adv_partset_positions(const kvp__adv_partset_t *ps, kvp__store_t *st, uint64_t stream_seq,
                               uint64_t *pos, uint64_t *sum);

/* The slot of partition p, or -1 when not owned. Not partitioned: 0. */
int kvp__adv_partset_slot(const kvp__adv_partset_t *ps, uint32_t p);

/* Writes the owned partitions as "0,2,5" (or "-" when not partitioned). */
void kvp__adv_partset_format(const kvp__adv_partset_t *ps, char *buf, size_t len);

#endif
