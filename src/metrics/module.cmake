# Prometheus exposition and its HTTP server (libmicrohttpd), and what was
# built (--version, kvplane_build_info).
kvp_daemon_lib(metrics SOURCES metrics/prom.c metrics/server.c metrics/httpguard.c metrics/build_info.c
  LIBS PkgConfig::MHD)
# The git revision when CMake configures; "unknown" without git or outside a
# checkout (a source tarball): never a build failure.
set(kvp_revision unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    OUTPUT_VARIABLE kvp_git_out RESULT_VARIABLE kvp_git_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(kvp_git_rc EQUAL 0 AND NOT kvp_git_out STREQUAL "")
    set(kvp_revision "${kvp_git_out}")
  endif()
endif()
set_source_files_properties(metrics/build_info.c PROPERTIES COMPILE_DEFINITIONS
  "KVP_BUILD_VERSION=\"${PROJECT_VERSION}\";KVP_BUILD_REVISION=\"${kvp_revision}\";KVP_BUILD_TYPE=\"${CMAKE_BUILD_TYPE}\"")
