list(APPEND KVP_LIB_SOURCES advisor/intern.c advisor/changelog.c advisor/index.c advisor/query.c
  advisor/ingest.c advisor/store_schema.c advisor/store_sqlite.c advisor/store_load.c
  advisor/store_write.c advisor/api.c advisor/conf.c advisor/inbox.c advisor/consumer.c
  advisor/writebehind.c advisor/freshness.c advisor/history.c advisor/metrics.c advisor/advisor.c
  advisor/client.c)
