# The CLI's commands: help texts, advisor queries, database commands and
# views, report pictures, top/replay/bench.
kvp_daemon_lib(cli SOURCES cli/usage.c cli/query.c cli/gathered.c cli/control.c cli/partitions.c cli/database.c cli/inspect.c cli/report.c
  cli/live.c
  LIBS kvplane_advisor kvplane_sim kvplane_config PkgConfig::SQLITE3)
