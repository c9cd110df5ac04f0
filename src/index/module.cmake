# The block index: interning and names, locations, prefix links, LRU, change
# log and queries, and the changes as plain rows for the store. Knows
# neither the store nor the tiering engine nor the advisor.
kvp_daemon_lib(index
  SOURCES index/intern.c index/names.c index/changelog.c index/locs.c index/index.c index/query.c index/evict.c index/rows.c
          index/walk.c index/parents.c)
