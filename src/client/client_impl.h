/* The advisor client's reply decoding, apart from the request, so that the
 * fuzz target (tests/fuzz/fuzz_match_reply.c) reaches it: a match reply
 * comes from whoever answers on the subject. Threads: any. */
#ifndef KVP_ADVISOR_CLIENT_IMPL_H
#define KVP_ADVISOR_CLIENT_IMPL_H

#include <stddef.h>

#include "kvplane/client.h"

/* Decodes a match reply (JSON: {"matches": [{"worker", "dp_rank", "tier",
 * "length"}, ...]} or {"error": "..."}) into out (up to cap rows; the
 * total count in *nmatches). Returns 0, or KVP_EPROTO with err saying what
 * is wrong (nothing counted). */
int kvp__client_match_parse(const void *data, size_t len, kvp_match_t *out, size_t cap,
                            size_t *nmatches, char *err, size_t errlen);

/* Reads one row of a reply's matches array (a json_t *) into m. Returns 0
 * or KVP_EPROTO. */
int kvp__client_match_row(void *row, kvp_match_t *m);

/* The client's connection and namespace, for gather.c. */
struct kvp_client_s;
void *kvp__client_conn(kvp_client_t *c);
const char *kvp__client_ns(const kvp_client_t *c);
uint32_t kvp__client_grace_ms(const kvp_client_t *c);

/* The partition count the client's last gather found (0: unpartitioned or
 * none yet): while it is set, replies of unpartitioned advisors alone do
 * not end a gather (gather.c). Any thread. */
uint32_t kvp__client_parts_seen(kvp_client_t *c);
void kvp__client_parts_saw(kvp_client_t *c, uint32_t count);

/* The client's long-lived reply subscription (a natsSubscription * in
 * *sub) and a fresh reply subject under it for one request; returns 1, and
 * the caller gives it back with kvp__client_reply_give. Returns 0 (nothing
 * to give back) when another call holds it or it cannot be made: the
 * caller then subscribes on its own inbox. */
int kvp__client_reply_take(kvp_client_t *c, void **sub, char *subject, size_t len);
void kvp__client_reply_give(kvp_client_t *c);

/* The merge of kvp_client_tier_all (tierctl.c): all is
 * kvp_client_request_all's object ({"partitions", "missing", "replies"},
 * the replies as the advisors sent them: outside bytes, any shape).
 * Returns a new merged object (json_t *), or NULL when out of memory;
 * timeout_ms only words the error of a missing partition. */
struct json_t;
struct json_t *kvp__client_tier_merge(struct json_t *all, uint32_t timeout_ms);

#endif
