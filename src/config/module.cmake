# The INI configuration reader of the daemons (libinih).
kvp_daemon_lib(config SOURCES config/config.c LIBS PkgConfig::INIH)
