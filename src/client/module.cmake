# The advisor's query client (kvplane/client.h): part of libkvplane.
list(APPEND KVP_LIB_SOURCES client/client.c client/gather.c client/tierctl.c)
