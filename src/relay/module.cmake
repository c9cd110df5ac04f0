# Engine adapters: the kvplane-relay library parts (decoder, tier table and
# hash map, ZMQ relay loop).
list(APPEND KVP_LIB_SOURCES relay/mpread.c relay/decode.c relay/map.c relay/apply.c relay/recover.c relay/relay.c relay/metrics.c relay/cli.c relay/serve.c)
list(APPEND KVP_LIB_LIBS PkgConfig::ZMQ PkgConfig::MSGPACK)
