# Engine adapters: kvplane-relay's msgpack reader and decoder, tier table and
# hash map, recovery, the ZMQ relay loop, its metrics and its command line.
kvp_daemon_lib(relay
  SOURCES relay/mpread.c relay/decode.c relay/scan.c relay/map.c relay/apply.c relay/recover.c relay/persist.c relay/relay.c
          relay/metrics.c relay/cli.c relay/serve.c relay/vllmenc.c relay/vllmout.c relay/vllmout_cli.c
  LIBS kvplane_metrics kvplane_config PkgConfig::ZMQ PkgConfig::MSGPACK)
