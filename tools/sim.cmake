add_executable(kvplane-sim kvplane-sim.c)
target_link_libraries(kvplane-sim PRIVATE kvplane_sim kvplane_metrics)
install(TARGETS kvplane-sim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
