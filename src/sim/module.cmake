# Trace replay: the trace reader (gzip'd JSON lines) and simulated workers.
kvp_daemon_lib(sim SOURCES sim/trace.c sim/sim.c LIBS PkgConfig::ZLIB)
