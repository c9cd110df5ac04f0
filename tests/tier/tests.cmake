# Tiering (src/tier). Sources are relative to tests/.
kvp_add_test(tier_policy tier/test_tier_policy.c LABELS tier)
kvp_add_test(tier_engine tier/test_tier_engine.c LABELS tier volume nats)
target_compile_definitions(test_tier_engine PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_tier_engine kvplane-volume-posix)
