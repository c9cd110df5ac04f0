# The advisor daemon as a library: ingest, API, configuration, the loop's
# parts (inbox, consumer, write-behind, freshness, history, metrics), the
# figures it reports and the wiring.
kvp_daemon_lib(advisor
  SOURCES advisor/ingest.c advisor/api.c advisor/conf.c advisor/inbox.c advisor/consumer.c
          advisor/cap.c advisor/volcheck.c advisor/partset.c advisor/query.c advisor/writebehind.c
          advisor/freshness.c advisor/history.c advisor/metrics.c advisor/figures.c
          advisor/control.c advisor/routerapi.c advisor/routerpath.c
          advisor/routerhttp.c advisor/advisor.c advisor/rebalance.c advisor/rebalance_move.c
          advisor/lease.c advisor/sdnotify.c advisor/dblock.c
  LIBS kvplane_index kvplane_store kvplane_tier kvplane_metrics kvplane_config PkgConfig::MHD)
