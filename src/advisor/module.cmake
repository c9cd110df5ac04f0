list(APPEND KVP_LIB_SOURCES advisor/index.c advisor/ingest.c advisor/store_sqlite.c advisor/api.c
  advisor/conf.c advisor/inbox.c advisor/consumer.c advisor/writebehind.c advisor/freshness.c advisor/advisor.c)
