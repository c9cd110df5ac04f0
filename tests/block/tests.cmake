# Block manager tests (include/kvplane/blockmgr.h). Sources are relative to tests/.
kvp_add_test(block block/test_blockmgr.c block/blockfix.c LABELS block)
kvp_add_test(block_seq block/test_blockmgr_seq.c block/blockfix.c LABELS block)
kvp_add_test(block_tiers block/test_blockmgr_tiers.c block/blockfix.c LABELS block)
kvp_add_test(block_random block/test_blockmgr_random.c block/blockfix.c LABELS block)
kvp_add_test(block_volumes block/test_blockmgr_volumes.c LABELS block volume)
target_compile_definitions(test_block_volumes PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_block_volumes kvplane-volume-posix)
