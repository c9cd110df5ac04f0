# Tiering (src/tier). Sources are relative to tests/.
kvp_add_test(tier_policy tier/test_tier_policy.c LABELS tier)
kvp_add_test(tier_policies tier/test_tier_policies.c LABELS tier)
kvp_add_test(tier_engine tier/test_tier_engine.c LABELS tier volume nats s3 TIMEOUT 180)
target_compile_definitions(test_tier_engine PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_engine kvplane-volume-posix kvplane-volume-s3)
kvp_add_test(tier_scrub tier/test_tier_scrub.c LABELS tier volume TIMEOUT 120)
target_compile_definitions(test_tier_scrub PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_scrub kvplane-volume-posix)
# kill -9 of the advisor during migrations: 3 kills in the normal run, 20 in
# the slow-labelled one.
kvp_add_test(tier_kill tier/test_tier_kill.c LABELS tier nats TIMEOUT 180)
kvp_add_test(tier_kill_slow tier/test_tier_kill.c LABELS tier nats slow TIMEOUT 600)
foreach(t test_tier_kill test_tier_kill_slow)
  target_compile_definitions(${t} PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
  add_dependencies(${t} kvplane-volume-posix kvplane-advisor)
endforeach()
target_compile_definitions(test_tier_kill_slow PRIVATE TIER_KILLS=20)
# Storage faults on real mounts (tmpfs, bind mounts) under the real
# advisor: root only, else skipped (exit 77).
kvp_add_test(tier_faults tier/test_tier_faults.c LABELS tier nats mounts TIMEOUT 120)
target_compile_definitions(test_tier_faults PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_faults kvplane-volume-posix kvplane-advisor)
# The engine with [tiering] policy, on mem volumes.
kvp_add_test(tier_engine_policy tier/test_tier_engine_policy.c LABELS tier volume)
target_compile_definitions(test_tier_engine_policy PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_engine_policy kvplane-volume-mem)
# Compaction of packed posix volumes by the engine (src/tier/compact.c).
kvp_add_test(tier_compact tier/test_tier_compact.c LABELS tier volume)
target_compile_definitions(test_tier_compact PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_compact kvplane-volume-posix)
# The operator's pins, moves and deletes (src/tier/control.c,
# src/advisor/control.c).
kvp_add_test(tier_control tier/test_tier_control.c LABELS tier volume)
target_compile_definitions(test_tier_control PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_control kvplane-volume-posix)
# Resyncs asked of the tiering advisor's worker (src/tier/parts.c).
kvp_add_test(tier_resync tier/test_tier_resync.c LABELS tier nats TIMEOUT 120)
target_compile_definitions(test_tier_resync PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_resync kvplane-volume-posix)
