/* Ceph's radosgw for tests: a real S3 server that verifies every SigV4
 * signature, on a one-node RADOS cluster on loopback
 * (tests/tools/rgw_cluster.sh). One cluster serves a whole ctest run: the
 * fixture test rgw_cluster.start starts it and writes its env file, the
 * tests labelled "rgw" attach to it, rgw_cluster.stop removes it. Tests
 * share its bucket, so each works under a prefix of its own
 * (kvp_rgw_prefix). */
#ifndef KVP_TEST_RGW_H
#define KVP_TEST_RGW_H

#include <stddef.h>

typedef struct kvp_rgw_s {
  char endpoint[64];      /* http://127.0.0.1:<port> (path-style) */
  char host_endpoint[64]; /* http://localhost:<port>: virtual-hosted kvb.localhost */
  char bucket[32];
  char region[32];
  char access[64], secret[128];
  /* An STS AssumeRole credential (valid an hour from the cluster's start). */
  char session_access[128], session_secret[128], session_token[2048];
} kvp_rgw_t;

/* Reads the running cluster's env file (KVP_RGW_ENV, set by ctest; else
 * $KVP_TEST_BINDIR/rgw-cluster/env) into r. Returns 0, or -1 with a line on
 * stderr when radosgw is installed but no cluster is running (its start
 * failed: the fixture's output says why). When radosgw or ceph-mon/ceph-osd
 * are not installed, prints "SKIP: ..." and exits 77 (ctest: skipped). */
int kvp_rgw_attach(kvp_rgw_t *r);

/* A prefix no other test process uses: "<pid>-<name>/", into out. */
void kvp_rgw_prefix(const char *name, char *out, size_t len);

#endif
