list(APPEND KVP_LIB_SOURCES nats/opts.c nats/conn.c nats/subjects.c nats/partition.c)
