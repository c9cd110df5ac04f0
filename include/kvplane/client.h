/* Advisor client: the queries an engine, a router or a binding sends to a
 * running kvplane-advisor over NATS request/reply (DESIGN.md, "Subjects":
 * kvplane.api.<ns>.match and kvplane.api.<ns>.stats).
 *
 * Query formats (request/reply, replies are JSON objects):
 *   match request:  {"hashes": ["<hex u64>", ...]} (hex with or without 0x;
 *                   JSON integers are accepted too and read as the same
 *                   64 bits), or binary: the 4 bytes "KVPM" followed by
 *                   little-endian u64 sequence hashes.
 *   match reply:    {"hashes": N, "matches": [{"worker": "w0", "dp_rank": 0,
 *                   "tier": "G1", "length": 12}, ...]} longest first; length
 *                   is the number of leading hashes the (worker, tier) holds
 *                   consecutively; and "partitions" and "advisor" (see
 *                   scatter-gather below), "ready" and "ready_ms". Errors:
 *                   {"error": "<cause>"}; an advisor still catching up with
 *                   its stream at start answers {"error": "not ready: ...",
 *                   "ready": false, "behind": N}, never a stale answer.
 *   stats request:  anything; reply: {"blocks":..., "locations":...,
 *                   "tiers": {...}, "ingest": {...}, "store": {...}, ...};
 *                   docs/stats.md documents every field.
 * Resync request payload (published, no reply expected):
 *   {"worker": "w0", "dp_rank": 0, "epoch": 17, "reason": "gap"}.
 *
 * A client owns one NATS connection (reconnecting on its own). Its calls
 * block the calling thread for at most their timeout and may be made from
 * several threads at once (nats.c's connection is thread-safe). */
#ifndef KVPLANE_CLIENT_H
#define KVPLANE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/nats.h"
#include "kvplane/subjects.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The binary match request: these 4 bytes, then the hashes. */
#define KVP_MATCH_MAGIC "KVPM"
/* Most hashes in one match request. */
#define KVP_MATCH_MAX 65536

typedef struct kvp_client_s kvp_client_t;

/* One row of a match reply: worker (with its dp rank) holds the first
 * length hashes of the request consecutively in tier. */
typedef struct kvp_match_s {
  char worker[KVP_SUBJECT_TOKEN_MAX + 1];
  uint32_t dp_rank;
  int tier;        /* kvp_tier_t */
  uint64_t length; /* leading hashes held */
} kvp_match_t;

/* Connects to NATS with nats (checked with kvp_nats_opts_check) for the
 * advisor of namespace ns (NULL: "default"). Returns 0 with *out set, or
 * with *out NULL: KVP_EINVAL (ns is not a valid token), KVP_ECONFIG,
 * KVP_EAUTH, KVP_ECONN (no server answered within connect_timeout_ms) or
 * KVP_ENOMEM; err (may be NULL) receives a one-line message. */
int kvp_client_open(const kvp_nats_opts_t *nats, const char *ns, kvp_client_t **out, char *err,
                    size_t errlen);

/* Asks the advisor which (worker, tier) pairs hold the leading hashes of
 * hashes[0..n) (sequence hashes, 1..65536 of them). Writes up to cap rows
 * to out, longest first, and sets *nmatches to the number of rows in the
 * reply (which may exceed cap; 0 when nothing matches). Returns 0, or:
 *   KVP_EINVAL     n is 0 or over 65536, or out is NULL with cap > 0;
 *   KVP_ENOENT     no advisor listens on the namespace's match subject;
 *   KVP_ETIMEDOUT  no reply within timeout_ms;
 *   KVP_EPROTO     the advisor answered with an error, or with a reply
 *                  that is not a match reply; err gives its text;
 *   KVP_ECONN, KVP_ENOMEM.
 * err (may be NULL) receives a one-line message on failure. */
int kvp_client_match(kvp_client_t *c, const uint64_t *hashes, size_t n, uint32_t timeout_ms,
                     kvp_match_t *out, size_t cap, size_t *nmatches, char *err, size_t errlen);

/* Sends body (NULL: "{}") to kvplane.api.<ns>.<call> (call: a token such as
 * KVP_API_STATS) and sets *reply to the reply, a malloc'd NUL-terminated
 * JSON text the caller frees with kvp_client_reply_free. Same returns as
 * kvp_client_match, without the match-specific checks: an {"error": ...}
 * reply is returned as it is, with 0. */
int kvp_client_request(kvp_client_t *c, const char *call, const char *body, uint32_t timeout_ms,
                       char **reply, char *err, size_t errlen);

/* Frees a reply of kvp_client_request; NULL is accepted. */
void kvp_client_reply_free(char *reply);

/* --- scatter-gather (DESIGN.md, "Scale beyond one machine") -----------------
 * In a partitioned deployment every advisor answers a request for the
 * partitions it owns; its replies carry
 *   "partitions": {"count": C, "owned": [p, ...], "positions": [seq, ...]}
 * (count 0: not partitioned; owned [0] and the one stream's position) and
 * "advisor", its consumer name. A gathering client sends the request once,
 * takes the replies until every partition is covered or the deadline
 * passes, and merges them: for each partition the reply with the highest
 * position for it (the freshest of a partition's standbys) gives the rows
 * of the workers in that partition (kvp_partition_of). A partition no
 * reply covered is reported, never hidden. */

/* What a gathered answer is made of. */
#define KVP_GATHER_MISSING_MAX 64
typedef struct kvp_gather_info_s {
  uint32_t partitions; /* the deployment's count; 0: not partitioned */
  uint32_t replies;    /* replies received (errors included) */
  uint32_t used;       /* replies that gave rows to the answer */
  uint32_t errors;     /* {"error": ...} replies, and replies that are not match replies */
  uint32_t nmissing;   /* partitions no reply covered (1 for an unanswered unpartitioned) */
  uint32_t missing[KVP_GATHER_MISSING_MAX]; /* the first of them */
  uint64_t elapsed_us;                      /* from the request to the last reply used */
} kvp_gather_info_t;

/* The merge: reads the match replies replies[0..n) (lens[i] bytes each)
 * and writes the merged rows, longest first, up to cap into out, the total
 * into *nmatches, and the coverage into *info. Replies that disagree on the
 * partition count, or malformed rows in a reply the merge takes rows from,
 * are KVP_EPROTO; {"error"} replies and replies that are not match replies
 * (not JSON included) are counted in errors and skipped. Returns 0, KVP_EPROTO or KVP_ENOMEM;
 * err (may be NULL) says why. Used by kvp_client_match_all, the kvplane
 * CLI and the Python binding, so they merge alike. */
int kvp_match_merge(const char *const *replies, const size_t *lens, size_t n, kvp_match_t *out,
                    size_t cap, size_t *nmatches, kvp_gather_info_t *info, char *err,
                    size_t errlen);

/* kvp_client_match gathered from every advisor: the request goes out once,
 * replies are taken until every partition is covered by one or timeout_ms
 * passes, then merged by kvp_match_merge. Returns 0 (with info->nmissing
 * partitions uncovered, maybe all: a partition whose advisors are down is
 * in info->missing, not an error), or KVP_EINVAL, KVP_EPROTO, KVP_ECONN,
 * KVP_ENOMEM. */
int kvp_client_match_all(kvp_client_t *c, const uint64_t *hashes, size_t n, uint32_t timeout_ms,
                         kvp_match_t *out, size_t cap, size_t *nmatches, kvp_gather_info_t *info,
                         char *err, size_t errlen);

/* How long a gathering call goes on taking replies once every partition is
 * covered (default 0: only the replies already received), so that a
 * slower but fresher standby can still be preferred; always within the
 * call's timeout. */
void kvp_client_set_grace(kvp_client_t *c, uint32_t grace_ms);

/* Sends body (NULL: "{}") to kvplane.api.<ns>.<call> once and gathers the
 * replies as kvp_client_match_all does (until every partition is covered
 * or timeout_ms). *reply gets a malloc'd JSON text (free it with
 * kvp_client_reply_free): {"partitions": C, "missing": [p, ...],
 * "replies": [<each reply as it came>, ...]}. Returns 0 or KVP_EINVAL,
 * KVP_ECONN, KVP_ENOMEM. */
int kvp_client_request_all(kvp_client_t *c, const char *call, const char *body, uint32_t timeout_ms,
                           char **reply, char *err, size_t errlen);

/* The operator's tiering controls (pin, unpin, move, delete: body is the
 * request src/advisor/control.c describes) sent once to every advisor and
 * gathered as kvp_client_request_all does: in a partitioned deployment
 * each partition's tiering advisor acts on its own partitions' blocks, and
 * the call waits for all of them (or timeout_ms). *reply gets one merged
 * JSON object (free it with kvp_client_reply_free): the replies' "op" and
 * "blocks", the sums of "changed", "queued", "pinned_blocks",
 * "continuations" (a delete's blocks below the prefix) and "in_flight"
 * (blocks a running round moves: decided after it), the largest
 * "pins", the smallest "skipped", "advisors" (the names that acted),
 * "partitions", "missing", and "error" when an advisor refused (every
 * refusal, by advisor, in "errors"), a partition's advisor did not
 * answer, or none tiers ("not_tiering": the advisors with tiering off).
 * Returns 0 (also with "error" in the reply), KVP_ETIMEDOUT when no
 * advisor answered, or KVP_EINVAL, KVP_ECONN, KVP_ENOMEM. */
int kvp_client_tier_all(kvp_client_t *c, const char *body, uint32_t timeout_ms, char **reply,
                        char *err, size_t errlen);

/* Closes the connection and frees c; NULL is accepted. */
void kvp_client_close(kvp_client_t *c);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_CLIENT_H */
