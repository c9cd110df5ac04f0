kvp_add_test(sim sim/test_sim.c LABELS nats)
