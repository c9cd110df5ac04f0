/* A test plugin built for another volume ABI: the loader must refuse it. */
#include "kvplane/volume_plugin.h"

static const kvp_volume_ops_t ops = {.abi_version = KVP_VOLUME_ABI_VERSION + 98, .name = "badabi"};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}
