kvp_add_test(relay_decode relay/test_relay_decode.c)
