list(APPEND KVP_LIB_SOURCES wire/codec.c wire/event.c)
