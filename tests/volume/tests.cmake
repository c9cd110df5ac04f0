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
# s3: against the verifying S3 server (tests/tools/s3_verify.py, Debian's
# python3-botocore checks every signature as S3 does).
foreach(t volume_s3 volume_s3_sigv4 volume_s3_chain)
  kvp_add_test(${t} volume/test_${t}.c LABELS volume s3 TIMEOUT 300)
  target_compile_definitions(test_${t} PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
  add_dependencies(test_${t} kvplane-volume-s3)
endforeach()

# The s3 plugin's AWS shared-file reader and plain-http check
# (plugins/s3/s3_profile.c, compiled in), and the warning through the plugin.
kvp_add_test(volume_s3_profile volume/test_volume_s3_profile.c
  ${PROJECT_SOURCE_DIR}/plugins/s3/s3_profile.c ${PROJECT_SOURCE_DIR}/plugins/s3/s3_list.c
  ${PROJECT_SOURCE_DIR}/plugins/s3/creds.c LABELS volume s3)
target_include_directories(test_volume_s3_profile PRIVATE ${PROJECT_SOURCE_DIR}/plugins/s3
  ${PROJECT_SOURCE_DIR}/plugins)
target_compile_definitions(test_volume_s3_profile PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_s3_profile kvplane-volume-s3)

# s3 against Ceph's radosgw, a real S3 server that verifies every signature
# (tests/tools/rgw_cluster.sh: a one-node RADOS cluster on loopback, started
# once per ctest run by the fixture test rgw_cluster.start, about 16 s, and
# removed by rgw_cluster.stop). Labelled slow: the README's test command and
# CI run them, the sanitizer passes (-LE slow) do not. Without radosgw they
# are skipped (77).
set(KVP_RGW_DIR ${CMAKE_BINARY_DIR}/rgw-cluster)
add_test(NAME rgw_cluster.start
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tools/rgw_cluster.sh start ${KVP_RGW_DIR} 0)
add_test(NAME rgw_cluster.stop
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tools/rgw_cluster.sh stop ${KVP_RGW_DIR})
set_tests_properties(rgw_cluster.start PROPERTIES FIXTURES_SETUP rgw TIMEOUT 150
  LABELS "rgw;s3;slow" SKIP_RETURN_CODE 77)
set_tests_properties(rgw_cluster.stop PROPERTIES FIXTURES_CLEANUP rgw TIMEOUT 60
  LABELS "rgw;s3;slow")
list(APPEND KVP_TEST_ENV "KVP_RGW_ENV=${KVP_RGW_DIR}/env")
kvp_add_test(volume_rgw volume/test_volume_rgw.c LABELS volume s3 rgw slow TIMEOUT 300)
target_compile_definitions(test_volume_rgw PRIVATE KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_rgw kvplane-volume-s3)
get_property(kvp_rgw_tests DIRECTORY PROPERTY TESTS)
foreach(t ${kvp_rgw_tests})
  if(t MATCHES "^volume_rgw\\.")
    set_tests_properties(${t} PROPERTIES FIXTURES_REQUIRED rgw)
  endif()
endforeach()

# The conformance suite (volume/conformance.c, docs/volumes.md): one program
# a vendor runs against any plugin; here one ctest per case and plugin,
# conformance_<plugin>.<case>.
add_executable(kvp-volume-conformance volume/conformance.c)
target_link_libraries(kvp-volume-conformance PRIVATE kvp_test_harness)
file(STRINGS volume/conformance.c conf_lines REGEX "cmocka_unit_test[a-z_]*\\(")
set(KVP_CONFORMANCE_CASES "")
foreach(line ${conf_lines})
  string(REGEX MATCHALL "cmocka_unit_test[a-z_]*\\([A-Za-z0-9_]+" ms "${line}")
  foreach(m ${ms})
    string(REGEX REPLACE "^cmocka_unit_test[a-z_]*\\(" "" case "${m}")
    list(APPEND KVP_CONFORMANCE_CASES ${case})
  endforeach()
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/volume/conformance.c)

# kvp_add_conformance(<plugin> [S3RVER|S3V|RGW] [AS <name>] PARAMS <key=value>...
#                     [LABELS <labels>...])
function(kvp_add_conformance plugin)
  cmake_parse_arguments(C "S3RVER;S3V;RGW" "AS" "PARAMS;LABELS" ${ARGN})
  set(opts "")
  if(C_S3RVER)
    set(opts --s3rver)
  elseif(C_S3V)
    set(opts --s3v)
  elseif(C_RGW)
    set(opts --rgw)
  endif()
  set(as ${plugin})
  if(C_AS)
    set(as ${C_AS})
  endif()
  foreach(case ${KVP_CONFORMANCE_CASES})
    add_test(NAME conformance_${as}.${case}
      COMMAND kvp-volume-conformance ${opts} --case ${case}
        $<TARGET_FILE:kvplane-volume-${plugin}> ${C_PARAMS})
    set_tests_properties(conformance_${as}.${case} PROPERTIES TIMEOUT 300
      LABELS "conformance;volume;${C_LABELS}" ENVIRONMENT "${KVP_TEST_ENV}")
    if(C_RGW)
      set_tests_properties(conformance_${as}.${case} PROPERTIES FIXTURES_REQUIRED rgw)
    endif()
  endforeach()
  add_dependencies(kvp-volume-conformance kvplane-volume-${plugin})
endfunction()

kvp_add_conformance(posix PARAMS path={tmpdir}/vol)
# mem: the temporary directory's name is a fresh store's name.
kvp_add_conformance(mem PARAMS store={tmpdir})
# The packed layout, with small segments and a small pack_max so that the
# cases cross segments and see both packed records and files.
kvp_add_conformance(posix AS posix_packed PARAMS path={tmpdir}/vol layout=packed pack_max=4K
  segment_size=64K)
# s3 against the verifying server (every signature checked as S3 does), with a
# prefix that needs URI encoding.
kvp_add_conformance(s3 S3V LABELS s3 PARAMS endpoint={s3v} bucket=kvb access_key=KVPTESTKEY
  secret_key=kvp/test+secret=1 "prefix=conf (ørm)+=&/" stall_timeout_ms=5000 retries=3)
# The posix plugin's packed layout (plugins/posix/pack.c): compaction,
# tombstones, torn writes, crashes mid-compaction.
kvp_add_test(volume_packed volume/test_volume_packed.c LABELS volume)
target_compile_definitions(test_volume_packed PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_packed kvplane-volume-posix)
# Interleavings held at a sync point: this program's pwritev (exported, so
# that the plugin's calls come to it first) holds a write in flight.
kvp_add_test(volume_packed_race volume/test_volume_packed_race.c LABELS volume)
target_compile_definitions(test_volume_packed_race PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
set_target_properties(test_volume_packed_race PROPERTIES ENABLE_EXPORTS ON)
target_link_libraries(test_volume_packed_race PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
add_dependencies(test_volume_packed_race kvplane-volume-posix)
# The packed layout opened by several processes at once, with kill -9s.
kvp_add_test(volume_packed_procs volume/test_volume_packed_procs.c LABELS volume TIMEOUT 120)
target_compile_definitions(test_volume_packed_procs PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_volume_packed_procs kvplane-volume-posix)
# s3 against radosgw (the cluster of the rgw fixture above): {rgw} is its
# endpoint, {unique} a prefix part no other test process uses.
kvp_add_conformance(s3 RGW AS s3_rgw LABELS s3 rgw slow PARAMS endpoint={rgw} bucket=kvb
  access_key=KVPRGWKEY secret_key=kvp/rgw+secret=1 "prefix=conf {unique} (ørm)+=&/"
  stall_timeout_ms=10000 retries=3)
