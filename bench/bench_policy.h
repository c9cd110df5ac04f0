/* What the two files of kvp-bench policy share: the stream of a worker's
 * lower-tier events (bench_policy.c records it from the block manager's
 * events) and Belady's MIN over it (bench_policy_min.c). */
#ifndef KVP_BENCH_POLICY_H
#define KVP_BENCH_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* One event of the stream: a block the worker offloaded to G3 (the G3
 * could keep it), or a block a lookup read from G3 or G4 (a reference: a
 * G3 hit when G3 holds it). */
#define STREAM_INSERT 0
#define STREAM_REF 1

typedef struct stream_ev_s {
  uint64_t hash;
  uint8_t kind;
} stream_ev_t;

typedef struct min_result_s {
  uint64_t refs, hits;
  uint64_t written;  /* inserts: every offload is written once (to G3 or, bypassed, to G4) */
  uint64_t demoted;  /* kept blocks that left G3 and are referenced again later */
  uint64_t promoted; /* blocks kept in G3 after a reference missed it */
  /* The most blocks ever written and still to be read again at once: MIN
   * hits every reference when capacity is at least this. */
  uint64_t live_max;
} min_result_t;

/* Belady's MIN with a G3 of capacity blocks: at each insert or missed
 * reference the block is kept when its next reference comes sooner than
 * that of some kept block, which then leaves (the one referenced furthest
 * in the future). It evicts exactly, at every event, and it does not keep
 * prefixes whole (a parent may leave before its child): the optimum of a
 * G3 without that rule, so at least the optimum with it, a limit no policy
 * of ours can pass. (Bypassing an insert whose block is read furthest away
 * hits as often as keeping it and evicting it at once: only the bytes
 * differ.) Returns 0 or -1 (out of memory). */
int bench_policy_min(const stream_ev_t *ev, size_t n, size_t capacity, min_result_t *out);

#endif
