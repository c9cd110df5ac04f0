/* Tiering leases (docs/SCALE.md, "Tiering and standbys"): one advisor at a
 * time tiers a partition, the one holding the partition's lease.
 *
 * A lease is a key p<P> of the JetStream key-value bucket
 * kvplane-leases-<ns> whose max_age is the lease's TTL ([tiering]
 * lease_ms); an unpartitioned advisor's is one key, "all", for the whole
 * namespace (its "partition" 0 below), so that of two unpartitioned
 * advisors tiering the same volumes (a standby pair) one tiers at a time. Its value names the
 * holder (lease_value). An advisor that wants to tier P creates the key (kvStore_Create: only if
 * absent); while another holds it, it waits and tries again every TTL/3, and says once who holds
 * it; once it holds it, it renews it every TTL/3 by an update on the last revision. A renewal that
 * finds another revision (or no key) loses the lease; one that gets no answer keeps it only as long
 * as it is valid. A lease is valid for 2/3 of the TTL after the last successful create or renewal
 * was sent: the server keeps the key at least a TTL after it, so a move started while valid and
 * lasting less than TTL/3 ends before any other advisor can take the lease. Released (deleted, only
 * if still at its revision) when the advisor no longer wants it and at a clean stop; a killed
 * advisor's lease expires after the TTL.
 *
 * A partitioned advisor has the namespace's key "all" too, beside its
 * p<P> keys (KVP__ADV_LEASE_NS below): the advisor that holds it deletes
 * what an unpartitioned deployment left under the key namespace <ns> in
 * the volumes (tier/legacy.c), and while it holds it no unpartitioned
 * tiering advisor of the same namespace tiers (its rounds wait for "all"),
 * so those deletes never race one. It is wanted by every partitioned
 * advisor that holds a partition's lease (advisor/rebalance.c); one holds
 * it at a time and hands it on once its scrub swept its volumes, so that
 * the advisors take turns, each in its own volumes. It is not counted in
 * kvp__adv_lease_count.
 *
 * Threads: the key-value calls of nats.c are synchronous: they run on the
 * lease's own thread, never on the loop. The loop says what it wants
 * (kvp__adv_lease_want) and reads what is held (kvp__adv_lease_held, one
 * atomic load, also the tiering job's gate on its threads). */
#ifndef KVP_ADVISOR_LEASE_H
#define KVP_ADVISOR_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "advisor/advisor.h"

typedef struct kvp__adv_lease_s kvp__adv_lease_t;

/* The "partition" of the namespace's lease (key "all") in the calls
 * below; the same value as the tiering engine's KVP__TIER_NAMESPACE, so
 * kvp__adv_lease_gate answers the engine's question for it. Unpartitioned,
 * it is partition 0. */
#define KVP__ADV_LEASE_NS UINT32_MAX

/* The bucket of namespace ns's leases: kvplane-leases-<ns>, a character a
 * bucket name does not take written as '_'. */
void kvp__adv_lease_bucket(const char *ns, char *buf, size_t len);

/* Creates (or binds to) the bucket on nc with TTL cfg->tier_lease_ms and
 * cfg->replicas, and starts the lease thread for partitions 0..count-1 and
 * the namespace (KVP__ADV_LEASE_NS), or with count 0 for the namespace as
 * partition 0 (key "all") (it holds nothing until wanted). me names this advisor (its consumer). A
 * bucket that exists with another TTL is used with its own (a warning says
 * so: every advisor of a namespace must use the same lease_ms). Returns 0,
 * or KVP_ECONN / KVP_ENOMEM with err. */
int kvp__adv_lease_open(const kvp_advisor_config_t *cfg, natsConnection *nc, uint32_t count,
                        const char *me, kvp__adv_lease_t **out, char *err, size_t errlen);

/* Loop: want 1, this advisor wants to tier p (the thread takes the lease
 * as soon as it is free); 0, it no longer does (a held lease is released).
 * p is a partition or KVP__ADV_LEASE_NS (the same below). */
void kvp__adv_lease_want(kvp__adv_lease_t *l, uint32_t p, int want);

/* Any thread: 1 while this advisor holds a valid lease of p. */
int kvp__adv_lease_held(const kvp__adv_lease_t *l, uint32_t p);

/* The same as a tiering engine's gate (tier/engine.h): ctx is the lease. */
int kvp__adv_lease_gate(void *ctx, uint32_t p);

/* Loop: whether p is wanted, and who holds it when this advisor does not
 * ("" when nobody is known to). */
int kvp__adv_lease_wanted(kvp__adv_lease_t *l, uint32_t p, char *holder, size_t len);

/* The TTL in use (the bucket's), ms. */
uint64_t kvp__adv_lease_ttl(const kvp__adv_lease_t *l);

/* How many leases this advisor holds now: partitions' (unpartitioned: the
 * namespace's), not a partitioned advisor's "all". */
int kvp__adv_lease_count(const kvp__adv_lease_t *l);

/* Stops the thread, releases the leases held (a clean stop: a standby may
 * take them at once) and frees. NULL is a no-op. */
void kvp__adv_lease_close(kvp__adv_lease_t *l);

/* A lease's value, bytes from the bucket: {"advisor": name, "host": h,
 * "pid": n, "started_ms": t, "lease_ms": ttl, "partitions": c} (c 0 or
 * absent: an unpartitioned advisor). Writes "advisor name (host h, pid
 * n)", followed by ", partitioned" when c > 0, into out and returns 0, or
 * KVP_EINVAL with out saying it is not a lease's value. */
int kvp__adv_lease_holder(const void *data, size_t len, char *out, size_t outlen);

/* Room for what kvp__adv_lease_holder writes (and kvp__adv_lease_wanted
 * copies): "advisor <64> (host <64>, pid <20>), partitioned" and its NUL. */
#define KVP__ADV_LEASE_HOLDER_MAX 192

#endif
