kvp_add_test(relay_decode relay/test_relay_decode.c)
kvp_add_test(relay_e2e relay/test_relay_e2e.c advisor/advfix.c advisor/testworker.c
  LABELS relay nats TIMEOUT 120)
target_include_directories(test_relay_e2e PRIVATE advisor)
kvp_add_test(relay_cli relay/test_relay_cli.c LABELS relay)
kvp_add_test(relay_persist relay/test_relay_persist.c LABELS relay nats)
# The README's fixed ports: skipped (77) when one is taken on the machine.
set_tests_properties(relay_e2e.dp_ranks_readme_example PROPERTIES SKIP_RETURN_CODE 77)
# kvplane-relay --reverse in-process, read by a C ZMQ subscriber (the
# sanitizer builds' test of it; tests/python/test_vllm_events.py is the
# subscriber written from the vLLM format).
kvp_add_test(relay_reverse relay/test_relay_reverse.c LABELS relay nats TIMEOUT 60)
