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
 *                   consecutively. Errors: {"error": "<cause>"}.
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

/* Closes the connection and frees c; NULL is accepted. */
void kvp_client_close(kvp_client_t *c);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_CLIENT_H */
