list(APPEND KVP_LIB_SOURCES tier/policy.c tier/policy_lru.c tier/journal.c tier/engine.c)
