list(APPEND KVP_LIB_SOURCES sim/trace.c sim/sim.c)
