list(APPEND KVP_LIB_SOURCES volume/abi.c volume/frame.c volume/volume.c)
