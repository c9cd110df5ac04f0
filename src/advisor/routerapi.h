/* The routers' standard indexer API (the Mooncake conductor indexer API,
 * Mooncake RFC #1403, which Dynamo's standalone indexer follows) over HTTP,
 * beside the NATS match request: same index, same figures (README, "The
 * routers' indexer API").
 *
 *   POST /query          token ids in; kvplane's hashes of their full blocks
 *                        (salted as the relay salts: lora_name, else lora_id
 *                        as "lora_id:<n>", else cache_salt) are matched
 *   POST /query_by_hash  rolling sequence hashes in ("seq_hashes"; the older
 *                        "block_hash" and Dynamo's "block_hashes" too)
 *   POST /register, /unregister   501: the advisor subscribes to no engine;
 *                        workers arrive on NATS (kvplane-relay for engines)
 *
 * The answer is {tenant: {instance: {"longest_matched", "GPU", "CPU",
 * "DISK", "EXTERNAL", "DP": {rank: tokens}, "rank_matches": {rank: {"gpu",
 * "cpu", "disk", "external"}}}}} in tokens (blocks times block_size).
 * Tenant is kvplane's namespace, instance a worker id, "DP" and
 * "rank_matches" its data-parallel ranks; a medium's figure is that tier's
 * own longest consecutive prefix, exactly the NATS match reply's length for
 * the tier; rank_matches are the conductor's cumulative boundaries (its PR
 * #3088; routerpath.c) and longest_matched the largest last one.
 *
 * routerapi.c: the request decoder (outside bytes: fuzz_router_api) and the
 * answer builder, both free of HTTP; routerpath.c the cumulative walk;
 * routerhttp.c serves them. */
#ifndef KVP_ADVISOR_ROUTERAPI_H
#define KVP_ADVISOR_ROUTERAPI_H

#include <stddef.h>
#include <stdint.h>

#include "index/index.h"

/* Bodies larger than this are refused (413) before they are read whole. */
#define KVP__RAPI_MAX_BODY (16u << 20)
/* The bodies of all connections together: past it a request is refused
 * (503) as it is read, so that 256 connections cannot hold 4 GiB. */
#define KVP__RAPI_MAX_BUFFERED (64u << 20)
#define KVP__RAPI_MAX_BLOCK_SIZE (1u << 20)
#define KVP__RAPI_NAME_MAX 256

typedef struct kvp__rapi_req_s {
  char tenant[KVP__RAPI_NAME_MAX];   /* "default" when absent */
  char instance[KVP__RAPI_NAME_MAX]; /* "" when absent: every worker */
  uint32_t block_size;
  uint64_t *hashes; /* malloc'd */
  size_t n;
} kvp__rapi_req_t;

/* Decodes a /query (by_hash 0) or /query_by_hash (1) body into req (free it
 * with kvp__rapi_req_free, also after an error). default_block_size is
 * taken when the body has none (0: the body must carry it). Returns 0,
 * KVP_EPROTO with err the 400 reply's message (bad JSON, a missing or
 * ill-typed field, a token id outside u32, both lora_name and lora_id),
 * KVP_ETOOBIG (413: more than KVP_MATCH_MAX blocks) or KVP_ENOMEM. Integers
 * above INT64_MAX up to UINT64_MAX are read as u64 hashes (JSON readers
 * stop at int64; routers send u64). */
int kvp__rapi_parse(int by_hash, const void *body, size_t len, uint32_t default_block_size,
                    kvp__rapi_req_t *req, char *err, size_t errlen);

void kvp__rapi_req_free(kvp__rapi_req_t *req);

/* The answer to req from the index (loop thread: the index is not
 * thread-safe), as malloc'd JSON. ns is the namespace the advisor serves:
 * a tenant other than it (or "default") is answered with an empty map for
 * the tenant (no instance of it here). Returns 0 or KVP_ENOMEM. */
int kvp__rapi_answer(const kvp__index_t *ix, const char *ns, const kvp__rapi_req_t *req,
                     char **json);

/* One (worker id, dp rank)'s cumulative boundaries over a query, in
 * blocks (routerpath.c): bound[1] after its G1 phase, bound[2] after
 * continuing in G2, bound[3] in G3, bound[4] in G4 (bound[0] unused). */
typedef struct kvp__rapi_path_s {
  uint16_t worker;
  size_t bound[5];
} kvp__rapi_path_t;

/* The paths of every worker the index knows (only those named instance
 * when it is not NULL or ""; the others are all zeros), indexed by worker
 * id: *out (malloc'd) and *npaths (the worker count). Returns 0 or
 * KVP_ENOMEM. Loop thread. */
int kvp__rapi_paths(const kvp__index_t *ix, const uint64_t *hashes, size_t n, const char *instance,
                    kvp__rapi_path_t **out, size_t *npaths);

/* {"error": msg} as malloc'd JSON, or NULL when out of memory. */
char *kvp__rapi_error_json(const char *msg);

/* A copy of the JSON text in (malloc'd, *outlen bytes, NULL without
 * memory) with every integer literal in (INT64_MAX, UINT64_MAX] rewritten
 * as the int64 of the same 64 bits, for jansson, which refuses them: u64
 * hashes as plain numbers (routerapi.c; the NATS match request, api.c). */
char *kvp__rapi_widen_u64(const char *in, size_t len, size_t *outlen);

#endif
