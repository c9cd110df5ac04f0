# The CLI's commands: database views, report pictures, top/replay/bench.
kvp_daemon_lib(cli SOURCES cli/inspect.c cli/report.c cli/live.c
  LIBS kvplane_sim kvplane_config PkgConfig::SQLITE3)
