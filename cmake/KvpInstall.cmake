# Install: library, public headers, the .proto, CMake package and pkg-config.
include(CMakePackageConfigHelpers)

install(TARGETS kvplane kvplane_static
  EXPORT kvplaneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/kvplane DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES src/wire/kvplane.proto DESTINATION ${CMAKE_INSTALL_DATADIR}/kvplane/proto/kvplane/v1)

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

file(RELATIVE_PATH KVP_PC_TO_PREFIX "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
configure_file(cmake/kvplane.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kvplane.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvplane.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
