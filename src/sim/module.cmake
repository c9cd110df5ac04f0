list(APPEND KVP_LIB_SOURCES sim/simcache.c sim/trace.c)
