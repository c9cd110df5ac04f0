list(APPEND KVP_LIB_SOURCES publish/options.c publish/queue.c publish/batch.c publish/transport.c
  publish/loop.c publish/wake.c publish/publisher.c)
