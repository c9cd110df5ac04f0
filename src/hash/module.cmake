list(APPEND KVP_LIB_SOURCES hash/hash.c)
