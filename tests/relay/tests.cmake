kvp_add_test(relay_decode relay/test_relay_decode.c)
kvp_add_test(relay_e2e relay/test_relay_e2e.c advisor/advfix.c advisor/testworker.c
  LABELS relay nats TIMEOUT 120)
target_include_directories(test_relay_e2e PRIVATE advisor)
kvp_add_test(relay_cli relay/test_relay_cli.c LABELS relay)
kvp_add_test(relay_persist relay/test_relay_persist.c LABELS relay)
# kvplane-relay --reverse in-process, read by a C ZMQ subscriber (the
# sanitizer builds' test of it; tests/python/test_vllm_events.py is the
# subscriber written from the vLLM format).
kvp_add_test(relay_reverse relay/test_relay_reverse.c LABELS relay nats TIMEOUT 60)
