# Scale-out (issue 26): partitions, scatter-gather, the 3-node cluster.
kvp_add_test(scale scale/test_scale.c LABELS scale nats)
# The 3-node cluster with advisor processes: slow (each case starts a
# cluster and two or three advisors), run by the README's test command,
# not under the sanitizers.
kvp_add_test(scale_cluster scale/test_scale_cluster.c advisor/testworker.c
  LABELS scale nats slow TIMEOUT 300)
# Startup at size: a database of 1.25M locations and a stream backlog.
kvp_add_test(scale_startup scale/test_scale_startup.c advisor/testworker.c
  LABELS scale nats slow TIMEOUT 300)
# The tools (status, top, sim, replay, the reverse relay) against one
# nats-server with the partition mapping and partitioned advisor processes.
kvp_add_test(scale_tools scale/test_scale_tools.c LABELS scale nats TIMEOUT 180)
# Tiering across partitions: two advisors, one shared G4, one nats-server.
kvp_add_test(scale_tier scale/test_scale_tier.c LABELS scale nats tier TIMEOUT 120)
target_compile_definitions(test_scale_tier PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
# A live partition move at size (1.25M locations): queries answered all
# along the drop and the add; kill -9 in the middle of a drop.
kvp_add_test(scale_move scale/test_scale_move.c LABELS scale nats rebalance TIMEOUT 300)
# Switching tiering from unpartitioned to partitioned: the objects left
# under the namespace's key namespace are deleted by the holder of the
# namespace's lease, never while an unpartitioned tiering advisor holds it.
kvp_add_test(scale_tier_legacy scale/test_scale_tier_legacy.c LABELS scale nats tier TIMEOUT 120)
target_compile_definitions(test_scale_tier_legacy PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
# Layouts and faults the tests above do not use (another engineer's
# checks): a [partitions] count that disagrees with the servers' mapping;
# 8 partitions over uneven advisors and a standby, kill -9 of an advisor
# and of the server, a garbage responder, frozen advisors, status's sums.
kvp_add_test(scale_chaos scale/test_scale_chaos.c advisor/testworker.c
  LABELS scale nats TIMEOUT 180)
