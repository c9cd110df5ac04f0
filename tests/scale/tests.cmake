# Scale-out (issue 26): partitions, scatter-gather, the 3-node cluster.
kvp_add_test(scale scale/test_scale.c LABELS scale nats)
