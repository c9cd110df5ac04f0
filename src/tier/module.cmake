# Tiering: the policy, the engine that moves blocks between G3 and G4.
kvp_daemon_lib(tier
  SOURCES tier/policy.c tier/policy_lru.c tier/engine.c tier/engine_job.c tier/engine_open.c
          tier/locations.c tier/scrub.c tier/compact.c tier/control.c
  LIBS kvplane_index kvplane_store)
