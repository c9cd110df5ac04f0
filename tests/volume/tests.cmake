# Volumes (src/volume, plugins/). Sources are relative to tests/.
# Two broken plugins for the loader's errors, in their own directory.
foreach(bad bad_abi no_entry)
  string(REPLACE "_" "" badname ${bad})
  add_library(kvplane-volume-${badname} MODULE volume/${bad}.c)
  set_target_properties(kvplane-volume-${badname} PROPERTIES PREFIX ""
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins C_VISIBILITY_PRESET hidden)
  target_include_directories(kvplane-volume-${badname} PRIVATE ${PROJECT_SOURCE_DIR}/include)
endforeach()
kvp_add_test(volume volume/test_volume.c LABELS volume TIMEOUT 300)
target_compile_definitions(test_volume PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins"
  KVP_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
add_dependencies(test_volume kvplane-volume-posix kvplane-volume-badabi kvplane-volume-noentry)
# s3: against s3rver (npm, scripts/setup.sh) and the botocore SigV4 checker.
kvp_add_test(volume_s3 volume/test_volume_s3.c LABELS volume s3 TIMEOUT 300)
target_compile_definitions(test_volume_s3 PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_s3 kvplane-volume-s3)
