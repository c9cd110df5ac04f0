add_executable(kvplane-advisor kvplane-advisor.c)
target_link_libraries(kvplane-advisor PRIVATE kvplane_advisor)
install(TARGETS kvplane-advisor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
