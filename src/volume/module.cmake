list(APPEND KVP_LIB_SOURCES volume/frame.c volume/volume.c)
