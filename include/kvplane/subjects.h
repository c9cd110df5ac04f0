/* NATS subjects: a public contract (DESIGN.md, "Subjects"). Every kvplane
 * part builds and reads subjects through these functions; no other code
 * spells them.
 *
 *   kvplane.ev.<ns>.<worker>           event batches of a worker
 *   kvplane.ctl.<ns>.<worker>.resync   resync request to a worker
 *   kvplane.api.<ns>.<call>            advisor requests (match, stats)
 *   kvplane.pev.<ns>.<p>.<worker>      a worker's events in partition p, made
 *                                      from kvplane.ev.<ns>.<worker> by the
 *                                      servers' subject mapping (partitioned
 *                                      deployments, DESIGN.md "Scale beyond
 *                                      one machine")
 *
 * <ns> and <worker> are tokens: 1..64 characters of [A-Za-z0-9_-]. The
 * builders write a NUL-terminated subject into buf and return 0, KVP_EINVAL
 * when a token is invalid, or KVP_ETOOBIG when buf is too small; a subject
 * of valid tokens always fits KVP_SUBJECT_MAX bytes. */
#ifndef KVPLANE_SUBJECTS_H
#define KVPLANE_SUBJECTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_SUBJECT_MAX 256
#define KVP_SUBJECT_TOKEN_MAX 64

/* Every event subject of every namespace: the JetStream stream's subjects. */
#define KVP_SUBJECT_EVENTS_ALL "kvplane.ev.>"

/* The advisor's request calls. */
#define KVP_API_MATCH "match"
#define KVP_API_STATS "stats"
#define KVP_API_TIER "tier" /* the operator's pins, moves and deletes (kvplane pin, ...) */
/* Live rebalancing, addressed to one advisor (kvp_subject_api_advisor;
 * kvplane partitions): add or drop partitions on a running advisor. */
#define KVP_API_PARTITIONS "partitions"

/* True when s is a valid token (namespace or worker id): 1..64 characters
 * of [A-Za-z0-9_-]. */
int kvp_subject_token_valid(const char *s);

/* kvplane.ev.<ns>.<worker> */
int kvp_subject_events(char *buf, size_t len, const char *ns, const char *worker);

/* kvplane.ev.<ns>.> : every worker's events in one namespace. */
int kvp_subject_events_ns(char *buf, size_t len, const char *ns);

/* kvplane.ctl.<ns>.<worker>.resync */
int kvp_subject_resync(char *buf, size_t len, const char *ns, const char *worker);

/* kvplane.api.<ns>.<call>; call is a token too (KVP_API_MATCH, ...). */
int kvp_subject_api(char *buf, size_t len, const char *ns, const char *call);

/* kvplane.api.<ns>.<call>.<advisor>: a call addressed to one advisor,
 * advisor its [jetstream] consumer name (a token). */
int kvp_subject_api_advisor(char *buf, size_t len, const char *ns, const char *call,
                            const char *advisor);

/* Reads kvplane.ev.<ns>.<worker>: copies the tokens into ns and worker
 * (each KVP_SUBJECT_TOKEN_MAX + 1 bytes) and returns 0, or KVP_EPROTO when
 * subject is anything else (another prefix, a missing or extra token, an
 * invalid token). */
int kvp_subject_parse_events(const char *subject, char ns[KVP_SUBJECT_TOKEN_MAX + 1],
                             char worker[KVP_SUBJECT_TOKEN_MAX + 1]);

/* --- partitions -------------------------------------------------------------
 * A partitioned deployment maps every event subject to a partition on the
 * NATS servers themselves (subject mapping, kvp_partition_mapping_conf), so
 * publishers stay unchanged. The partition of a worker is nats-server's
 * partition(n, worker) function: FNV-1a 32 of the worker token, mod n. */

/* Most partitions a deployment may have. */
#define KVP_PARTITIONS_MAX 1024

/* The partition of worker among count (1..KVP_PARTITIONS_MAX) partitions:
 * FNV-1a 32 of the token's bytes mod count, the value nats-server's
 * {{partition(count,2)}} mapping gives kvplane.ev.<ns>.<worker>. */
uint32_t kvp_partition_of(const char *worker, uint32_t count);

/* Partitioned tiering (docs/SCALE.md, "Tiering across partitions"): the
 * objects of partition p's blocks are kept, in every volume, under the key
 * namespace <ns>-p<p> (at most KVP_PARTITION_NS_MAX bytes, a volume
 * namespace's limit), so that advisors of different partitions sharing a
 * G4 volume never touch each other's objects. A worker of such a
 * deployment uses it as its volume namespace (kvp_blockmgr_opts_t
 * volume_ns). Returns 0, KVP_EINVAL (p out of range) or KVP_ETOOBIG. */
#define KVP_PARTITION_NS_MAX 64
int kvp_partition_volume_ns(char *buf, size_t len, const char *ns, uint32_t p);

/* The worker name under which the advisor tiering partition p of count
 * announces its moves: "_advisor-p<p>-<k>" with the smallest k whose
 * kvp_partition_of is p, so its events land in partition p's stream and
 * whoever consumes p (the owner, its standby, a new owner after a move)
 * learns the G3/G4 locations of p's blocks. Returns 0, KVP_EINVAL,
 * KVP_ETOOBIG (len too small) or KVP_ENOENT (no such name: not seen). */
int kvp_partition_advisor_worker(char *buf, size_t len, uint32_t p, uint32_t count);

/* The worker an unpartitioned tiering advisor announces its moves as. */
#define KVP_ADVISOR_WORKER "_advisor"

/* 1 when name is a tiering advisor's worker: an unpartitioned advisor's
 * "_advisor", or a partition's "_advisor-p<p>-<k>" (above), else 0. */
int kvp_worker_is_advisor(const char *name);

/* kvplane.pev.<ns>.<p>.* : partition p of one namespace (a consumer's
 * filter). */
int kvp_subject_pevents(char *buf, size_t len, const char *ns, uint32_t p);

/* kvplane.pev.<ns>.*.* : every partition of one namespace (what a
 * subscriber to kvplane.ev.<ns>.* sees once the servers partition). */
int kvp_subject_pevents_ns(char *buf, size_t len, const char *ns);

/* kvplane.pev.*.<p>.* : partition p of every namespace (its stream's
 * subject). */
int kvp_subject_pevents_all(char *buf, size_t len, uint32_t p);

/* Reads kvplane.ev.<ns>.<worker> (*partition = UINT32_MAX) or
 * kvplane.pev.<ns>.<p>.<worker> (*partition = p, below
 * KVP_PARTITIONS_MAX). Returns 0 or KVP_EPROTO like
 * kvp_subject_parse_events. */
int kvp_subject_parse_any_events(const char *subject, char ns[KVP_SUBJECT_TOKEN_MAX + 1],
                                 char worker[KVP_SUBJECT_TOKEN_MAX + 1], uint32_t *partition);

/* Writes the nats-server configuration block that partitions every
 * namespace's event subjects into count partitions:
 *   mappings = {
 *     "kvplane.ev.*.*": "kvplane.pev.{{wildcard(1)}}.{{partition(count,2)}}.{{wildcard(2)}}"
 *   }
 * Every server of the cluster carries the same block (it applies to the
 * account a publisher uses; inside an accounts {} block, put it in that
 * account). Returns 0, KVP_EINVAL (count out of range) or KVP_ETOOBIG. */
int kvp_partition_mapping_conf(char *buf, size_t len, uint32_t count);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_SUBJECTS_H */
