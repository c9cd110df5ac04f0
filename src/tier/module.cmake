# Tiering: the policies, the engine that moves blocks between G3 and G4.
kvp_daemon_lib(tier
  SOURCES tier/policy.c tier/policy_registry.c tier/policy_lru.c tier/policy_s3fifo.c
          tier/policy_lfu.c tier/policy_hyperbolic.c tier/policy_density.c tier/engine.c tier/engine_job.c tier/engine_open.c
          tier/locations.c tier/scrub.c tier/legacy.c tier/compact.c tier/control.c tier/continuations.c
          tier/parts.c
  LIBS kvplane_index kvplane_store kvplane_config m)
