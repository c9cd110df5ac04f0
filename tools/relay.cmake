add_executable(kvplane-relay kvplane-relay.c)
target_link_libraries(kvplane-relay PRIVATE kvplane_relay)
install(TARGETS kvplane-relay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
