add_executable(kvplane-cli kvplane.c)
set_target_properties(kvplane-cli PROPERTIES OUTPUT_NAME kvplane)
target_link_libraries(kvplane-cli PRIVATE kvplane_cli)
install(TARGETS kvplane-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
