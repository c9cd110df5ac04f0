# Dependencies, all from Debian packages. A missing one stops the configure
# step with the name of the package that provides it.
find_package(PkgConfig)
if(NOT PkgConfig_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config")
endif()

# kvp_require_pkg(<prefix> <pkg-config module> <Debian package>)
# Defines the imported target PkgConfig::<prefix> and records the module's
# name in the global property KVP_PKG_MODULE_<prefix>, from which the
# installed kvplane.pc and kvplaneConfig.cmake list the library's
# dependencies (cmake/KvpInstall.cmake), so they cannot drift from the build.
function(kvp_require_pkg prefix module debpkg)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR "${module} not found (pkg-config): apt-get install ${debpkg}")
  endif()
  set_property(GLOBAL PROPERTY KVP_PKG_MODULE_${prefix} ${module})
endfunction()

# kvp_require_program(<var> <program> <Debian package>)
function(kvp_require_program var prog debpkg)
  find_program(${var} ${prog})
  if(NOT ${var})
    message(FATAL_ERROR "${prog} not found: apt-get install ${debpkg}")
  endif()
endfunction()

kvp_require_pkg(UV libuv libuv1-dev)
kvp_require_pkg(NATS libnats libnats-dev)
kvp_require_pkg(PROTOBUFC libprotobuf-c libprotobuf-c-dev)
kvp_require_pkg(XXHASH libxxhash libxxhash-dev)
kvp_require_pkg(SQLITE3 sqlite3 libsqlite3-dev)
kvp_require_pkg(INIH inih libinih-dev)
kvp_require_pkg(ZLIB zlib zlib1g-dev)          # gzip'd trace files
kvp_require_pkg(JANSSON jansson libjansson-dev) # JSON: trace lines, API replies
kvp_require_pkg(ZMQ libzmq libzmq3-dev)             # kvplane-relay: engine KV events
kvp_require_pkg(MSGPACK msgpack libmsgpack-dev)      # kvplane-relay: engine payloads
kvp_require_pkg(MHD libmicrohttpd libmicrohttpd-dev) # /metrics, /healthz, /readyz
kvp_require_program(PROTOC_C protoc-c protobuf-c-compiler)
find_package(Threads REQUIRED)

if(KVP_TESTS)
  kvp_require_pkg(CMOCKA cmocka libcmocka-dev)
  kvp_require_program(NATS_SERVER nats-server nats-server)
  kvp_require_program(PROTOC protoc protobuf-compiler)
  kvp_require_program(CURL curl curl)                  # the metrics scrape tests
endif()
