/* A real 3-node nats-server cluster for tests: JetStream on every node,
 * client and route ports free on 127.0.0.1, one store directory per node,
 * optionally the kvplane partition mapping (kvp_partition_mapping_conf) in
 * every node's configuration. Started with a bound on the time until the
 * JetStream meta group has a leader; each node dies with the test process
 * (PR_SET_PDEATHSIG). A node can be killed and restarted on its ports and
 * store, so that a test loses one server mid-run. */
#ifndef KVP_TEST_NATSCLUSTER_H
#define KVP_TEST_NATSCLUSTER_H

#include <sys/types.h>

#define KVP_CLUSTER_NODES 3

typedef struct kvp_cluster_s {
  char dir[256];
  int partitions; /* 0: no mapping */
  struct {
    pid_t pid;
    int port, route_port;
    char conf[320], log[320];
    char url[64];
  } node[KVP_CLUSTER_NODES];
  char urls[256]; /* every node's URL, comma-separated: a client's servers */
} kvp_cluster_t;

/* Starts the nodes (with the mapping of partitions partitions when > 0)
 * and waits up to 30 s until a JetStream request is answered. Returns 0, or
 * -1 with nothing left running (the cause on stderr). */
int kvp_cluster_start(kvp_cluster_t *c, int partitions);

/* kill -9 of node i (its store stays). */
void kvp_cluster_kill(kvp_cluster_t *c, int i);

/* Starts node i again on its ports and store and waits until its client port
 * answers (at most 20 s). Returns 0 or -1. */
int kvp_cluster_restart(kvp_cluster_t *c, int i);

/* Waits up to timeout_ms until stream answers an info request with a
 * leader and every replica current. Returns 0 or -1. */
int kvp_cluster_wait_stream(kvp_cluster_t *c, const char *stream, int timeout_ms);

/* Stops every node and removes the directory. Safe on a failed start. */
void kvp_cluster_stop(kvp_cluster_t *c);

#endif
