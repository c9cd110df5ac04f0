# Prometheus exposition and its HTTP server (libmicrohttpd).
kvp_daemon_lib(metrics SOURCES metrics/prom.c metrics/server.c LIBS PkgConfig::MHD)
