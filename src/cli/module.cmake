list(APPEND KVP_LIB_SOURCES cli/inspect.c cli/report.c cli/live.c)
