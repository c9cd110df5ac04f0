# Install: library, public headers, the .proto, CMake package and pkg-config;
# the systemd units, their system user, the advisor's configuration and the
# relay's environment file. (The programs are installed by tools/, the plugins
# by plugins/.)
include(CMakePackageConfigHelpers)

install(TARGETS kvplane kvplane_static
  EXPORT kvplaneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kvplane DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES src/wire/kvplane.proto DESTINATION ${CMAKE_INSTALL_DATADIR}/kvplane/proto/kvplane/v1)

# The library's dependencies, as its targets link them: PkgConfig::<P>
# targets (whose module names cmake/KvpDeps.cmake recorded) and plain system
# libraries. Both the CMake package and kvplane.pc are written from this list.
get_target_property(kvp_link kvplane INTERFACE_LINK_LIBRARIES)
set(KVP_FIND_DEPS "")
set(kvp_pc_requires "")
set(kvp_pc_libs "")
foreach(lib ${kvp_link})
  if(lib MATCHES "^PkgConfig::(.+)$")
    get_property(mod GLOBAL PROPERTY KVP_PKG_MODULE_${CMAKE_MATCH_1})
    if(NOT mod)
      message(FATAL_ERROR "${lib}: not defined with kvp_require_pkg (cmake/KvpDeps.cmake), "
                          "so the installed package cannot name it")
    endif()
    string(APPEND KVP_FIND_DEPS
      "pkg_check_modules(${CMAKE_MATCH_1} REQUIRED IMPORTED_TARGET GLOBAL ${mod})\n")
    list(APPEND kvp_pc_requires ${mod})
  elseif(lib STREQUAL "Threads::Threads")
    list(APPEND kvp_pc_libs -pthread)
  elseif(NOT lib MATCHES "::")
    list(APPEND kvp_pc_libs -l${lib})
  else()
    message(FATAL_ERROR "${lib}: a dependency of kvplane that cmake/KvpInstall.cmake cannot "
                        "write into kvplaneConfig.cmake and kvplane.pc")
  endif()
endforeach()
list(JOIN kvp_pc_requires " " KVP_PC_REQUIRES_PRIVATE)
list(JOIN kvp_pc_libs " " KVP_PC_LIBS_PRIVATE)

install(EXPORT kvplaneTargets NAMESPACE kvplane::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvplane)
configure_package_config_file(cmake/kvplaneConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kvplaneConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvplane)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kvplaneConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvplaneConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/kvplaneConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvplane)

file(RELATIVE_PATH KVP_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(cmake/kvplane.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kvplane.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvplane.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python binding, only when asked for: cmake --install BUILD --component
# python. The package goes to KVP_PYTHON_INSTALL_DIR (relative: under the
# prefix) with _install.py naming the installed library, so `import kvplane`
# finds it without KVPLANE_LIB (python/kvplane/_lib.py, candidates()).
set(KVP_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
  "Python package directory for --component python, relative to the prefix or absolute")
install(DIRECTORY python/kvplane DESTINATION ${KVP_PYTHON_INSTALL_DIR}
  COMPONENT python EXCLUDE_FROM_ALL FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(CODE "
  foreach(d PY LIB)
    if(d STREQUAL PY)
      set(rel \"${KVP_PYTHON_INSTALL_DIR}/kvplane\")
    else()
      set(rel \"${CMAKE_INSTALL_LIBDIR}\")
    endif()
    if(IS_ABSOLUTE \"\${rel}\")
      set(kvp_\${d} \"\${rel}\")
    else()
      set(kvp_\${d} \"\${CMAKE_INSTALL_PREFIX}/\${rel}\")
    endif()
  endforeach()
  file(WRITE \"\$ENV{DESTDIR}\${kvp_PY}/_install.py\"
    \"# Written by cmake --install: where this tree's libkvplane is.\\nLIBDIR = '\${kvp_LIB}'\\nSOVERSION = ${PROJECT_VERSION_MAJOR}\\n\")
  message(STATUS \"Installing: \$ENV{DESTDIR}\${kvp_PY}/_install.py\")
" COMPONENT python EXCLUDE_FROM_ALL)

# systemd. Units go to lib/systemd/system under the prefix (searched by
# systemd for /usr and /usr/local; multiarch LIBDIR is not), the user to
# lib/sysusers.d. Distribution packages may pass absolute directories.
set(KVP_SYSTEMD_UNIT_DIR lib/systemd/system CACHE STRING
  "systemd system unit directory, relative to the install prefix or absolute")
set(KVP_SYSUSERS_DIR lib/sysusers.d CACHE STRING
  "sysusers.d directory, relative to the install prefix or absolute")
install(FILES etc/systemd/kvplane.sysusers.conf DESTINATION ${KVP_SYSUSERS_DIR} RENAME kvplane.conf)
# Configuration is the operator's once installed: a reinstall or an upgrade
# writes only the .example beside it (cmake/KvpInstallConf.cmake).
install(CODE "
  set(KVP_CONF_FILES \"${PROJECT_SOURCE_DIR}/etc/kvplane-advisor.conf;${PROJECT_SOURCE_DIR}/etc/kvplane-relay.env\")
  set(KVP_CONF_DIR \"${CMAKE_INSTALL_SYSCONFDIR}/kvplane\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/KvpInstallConf.cmake\")
")
# The units name the programs and configuration by absolute path, so they are
# written at install time, for the prefix actually installed to
# (cmake --install --prefix DIR included), by cmake/KvpInstallUnits.cmake.
install(CODE "
  set(KVP_UNITS_SRC \"${PROJECT_SOURCE_DIR}/etc/systemd\")
  set(KVP_UNITS_OUT \"${CMAKE_CURRENT_BINARY_DIR}/units\")
  set(KVP_UNITS \"kvplane-advisor.service;kvplane-relay.service\")
  set(KVP_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(KVP_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
  set(KVP_UNIT_DIR \"${KVP_SYSTEMD_UNIT_DIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/KvpInstallUnits.cmake\")
")
