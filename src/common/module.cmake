list(APPEND KVP_LIB_SOURCES common/status.c common/log.c common/clock.c common/array.c
     common/map64.c common/flock.c)
