# The advisor's database: schema, load, write-behind flush and the
# migrations journal. All of kvplane's SQL that writes lives here.
kvp_daemon_lib(store
  SOURCES store/store_schema.c store/store_sqlite.c store/store_load.c store/store_rows.c store/store_write.c store/store_partition.c
          store/store_snapshot.c store/store_snapshot_read.c store/store_pipe.c
          store/journal.c
  LIBS kvplane_index PkgConfig::SQLITE3 PkgConfig::XXHASH)
