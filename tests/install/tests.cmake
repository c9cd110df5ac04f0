# The install test: cmake --install into a temporary prefix, examples/ built
# against it (find_package and pkg-config), the installed advisor run with the
# installed configuration, the systemd units checked. A shell script: what it
# tests is the installed tree, from outside, as a user would use it.
set(kvp_install_cflags "")
if(KVP_SANITIZE)
  # The installed library is instrumented; what links it must be too.
  set(kvp_install_cflags "-fsanitize=${KVP_SANITIZE}")
endif()
add_test(NAME install.tree
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install/test_install.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(install.tree PROPERTIES TIMEOUT 300 LABELS "install"
  SKIP_RETURN_CODE 77
  ENVIRONMENT "${KVP_TEST_ENV};KVP_INSTALL_LIBDIR=${CMAKE_INSTALL_LIBDIR};KVP_INSTALL_BINDIR=${CMAKE_INSTALL_BINDIR};KVP_INSTALL_SYSCONFDIR=${CMAKE_INSTALL_SYSCONFDIR};KVP_INSTALL_PYDIR=${KVP_PYTHON_INSTALL_DIR};KVP_INSTALL_CC=${CMAKE_C_COMPILER};KVP_INSTALL_CFLAGS=${kvp_install_cflags}")
