# The kvplane CLI (tools/kvplane.c over src/cli). Sources are relative to tests/.
kvp_add_test(cli cli/test_cli.c advisor/advfix.c advisor/testworker.c LABELS nats TIMEOUT 120)
# The advisor's configuration errors, from outside: each bad [volume] section
# exits 1 naming file:line and the key, with --print-config and at start.
add_test(NAME cli.advisor_conf
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_advisor_conf.sh ${CMAKE_BINARY_DIR})
set_tests_properties(cli.advisor_conf PROPERTIES TIMEOUT 120 LABELS "cli" ENVIRONMENT "${KVP_TEST_ENV}")
