# Prometheus exposition and its HTTP server (libmicrohttpd).
list(APPEND KVP_LIB_SOURCES metrics/prom.c metrics/server.c)
list(APPEND KVP_LIB_LIBS PkgConfig::MHD)
