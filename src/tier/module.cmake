list(APPEND KVP_LIB_SOURCES tier/policy.c tier/policy_lru.c tier/journal.c tier/engine.c tier/engine_job.c tier/engine_open.c)
