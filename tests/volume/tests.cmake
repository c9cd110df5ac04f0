# Volumes (src/volume, plugins/). Sources are relative to tests/.
# Test plugins, in their own directory: three broken ones for the loader's
# errors, and one built against the frozen version-1 header (abi_v1.h, in
# this directory, found before include/).
foreach(tp bad_abi no_entry bad_device plugin_v1)
  string(REGEX REPLACE "^plugin_" "" tpname ${tp})
  string(REPLACE "_" "" tpname ${tpname})
  add_library(kvplane-volume-${tpname} MODULE volume/${tp}.c)
  set_target_properties(kvplane-volume-${tpname} PROPERTIES PREFIX ""
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-plugins C_VISIBILITY_PRESET hidden)
  target_include_directories(kvplane-volume-${tpname} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/volume
    ${PROJECT_SOURCE_DIR}/include)
endforeach()
kvp_add_test(volume volume/test_volume.c LABELS volume TIMEOUT 300)
target_compile_definitions(test_volume PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins"
  KVP_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
add_dependencies(test_volume kvplane-volume-posix kvplane-volume-badabi kvplane-volume-noentry
  kvplane-volume-baddevice kvplane-volume-v1)

# The ABI's next version, written the way it will be: the public header with
# one operation (test_next_op) appended where later versions append theirs
# and KVP_VOLUME_ABI_VERSION raised by one. test_volume_abi and the loader's
# table adoption (src/volume/abi.c, compiled again under another name) are
# built against it and load the version-1 test plugin.
set(abi_h_src ${PROJECT_SOURCE_DIR}/include/kvplane/volume_plugin.h)
file(READ ${abi_h_src} abi_h)
if(NOT abi_h MATCHES "#define KVP_VOLUME_ABI_VERSION ([0-9]+)")
  message(FATAL_ERROR "${abi_h_src}: no '#define KVP_VOLUME_ABI_VERSION <n>' for the ABI test")
endif()
set(abi_now ${CMAKE_MATCH_1})
math(EXPR abi_next "${abi_now} + 1")
set(abi_marker "  /* Operations of later ABI versions are appended here. */")
string(FIND "${abi_h}" "${abi_marker}" abi_at)
if(abi_at LESS 0)
  message(FATAL_ERROR "${abi_h_src}: the line '${abi_marker}' the ABI test appends at is gone")
endif()
string(REPLACE "#define KVP_VOLUME_ABI_VERSION ${abi_now}"
  "#define KVP_VOLUME_ABI_VERSION ${abi_next}" abi_h "${abi_h}")
string(REPLACE "${abi_marker}"
  "  int (*test_next_op)(void *vol, char *err, size_t errlen);\n${abi_marker}" abi_h "${abi_h}")
file(WRITE ${CMAKE_BINARY_DIR}/abi-next/volume_plugin.h.new "${abi_h}")
configure_file(${CMAKE_BINARY_DIR}/abi-next/volume_plugin.h.new
  ${CMAKE_BINARY_DIR}/abi-next/kvplane/volume_plugin.h COPYONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${abi_h_src})
kvp_add_test(volume_abi volume/test_volume_abi.c ${PROJECT_SOURCE_DIR}/src/volume/abi.c
  LABELS volume)
target_include_directories(test_volume_abi BEFORE PRIVATE ${CMAKE_BINARY_DIR}/abi-next)
target_compile_definitions(test_volume_abi PRIVATE
  kvp__volume_adopt_ops=kvp__volume_adopt_ops_next
  KVP_TEST_PLUGIN_DIR="${CMAKE_BINARY_DIR}/test-plugins")
target_link_libraries(test_volume_abi PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(test_volume_abi kvplane-volume-v1)
# s3: against s3rver (npm, scripts/setup.sh) and the botocore SigV4 checker.
kvp_add_test(volume_s3 volume/test_volume_s3.c LABELS volume s3 TIMEOUT 300)
target_compile_definitions(test_volume_s3 PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_s3 kvplane-volume-s3)
