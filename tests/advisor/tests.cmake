# Advisor tests (issue 6). Sources are relative to tests/.
kvp_add_test(advisor_index advisor/test_advisor_index.c LABELS advisor)
kvp_add_test(advisor_index_cap advisor/test_advisor_index_cap.c LABELS advisor)
kvp_add_test(advisor_ingest advisor/test_advisor_ingest.c LABELS advisor)
kvp_add_test(advisor_store advisor/test_advisor_store.c LABELS advisor)
kvp_add_test(advisor_parts advisor/test_advisor_parts.c LABELS advisor)
kvp_add_test(advisor_lease advisor/test_advisor_lease.c LABELS advisor nats TIMEOUT 60)
kvp_add_test(advisor_trust advisor/test_advisor_trust.c advisor/advfix.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 120)
# The permissions example's advisor tiers over a posix G4 volume.
target_compile_definitions(test_advisor_trust PRIVATE
  KVP_BUILD_PLUGIN_DIR="${CMAKE_BINARY_DIR}/plugins")
add_dependencies(test_advisor_trust kvplane-volume-posix)
kvp_add_test(advisor_daemon advisor/test_advisor_daemon.c advisor/advfix.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 120)
kvp_add_test(advisor_kill advisor/test_advisor_kill.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 180)
# The index snapshot: read only while current, and never after a kill -9
# that followed later flushes.
kvp_add_test(advisor_snapshot advisor/test_advisor_snapshot.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 120)
kvp_add_test(advisor_fresh advisor/test_advisor_fresh.c advisor/advfix.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 120)
kvp_add_test(advisor_client advisor/test_advisor_client.c advisor/advfix.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 60)
# docs/config.md is the output of kvplane-advisor --config-reference: it
# cannot drift from the key table (regenerate it with that command).
add_test(NAME advisor_config_reference_is_current
  COMMAND sh -c "\"$1\" --config-reference | diff -u \"$2\" -" sh
    $<TARGET_FILE:kvplane-advisor> ${PROJECT_SOURCE_DIR}/docs/config.md)
set_tests_properties(advisor_config_reference_is_current PROPERTIES LABELS "advisor;docs")
# The routers' indexer API over HTTP from a raw HTTP/1.1 client, beside the
# NATS match reply (the Python client's test does not run under sanitizers).
kvp_add_test(advisor_http advisor/test_advisor_http.c advisor/advfix.c advisor/testworker.c
  LABELS advisor nats TIMEOUT 120)
# Slow and greedy clients of both HTTP servers: request_timeout, the
# per-client limit, others served meanwhile (src/metrics/httpguard.c).
kvp_add_test(advisor_http_slow advisor/test_advisor_http_slow.c advisor/advfix.c
  advisor/testworker.c LABELS advisor nats TIMEOUT 60)
