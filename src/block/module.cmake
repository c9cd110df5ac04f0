list(APPEND KVP_LIB_SOURCES block/layout.c block/map.c block/lru.c block/pool.c block/blockmgr.c block/seq.c block/tiers.c block/events.c)
