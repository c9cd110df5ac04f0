# Engine adapters: kvplane-relay's decoder, tier table and hash map, ZMQ
# relay loop and its metrics.
kvp_daemon_lib(relay
  SOURCES relay/decode.c relay/map.c relay/relay.c relay/metrics.c
  LIBS kvplane_metrics PkgConfig::ZMQ PkgConfig::MSGPACK)
