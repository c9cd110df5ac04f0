/* A test plugin of the current ABI version that sets the reserved
 * KVP_VOLUME_CAN_DEVICE flag: the loader must refuse it, for that flag and
 * before anything else, while no version has the device operations. */
#include "kvplane/volume_plugin.h"

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION, .name = "baddevice", .flags = KVP_VOLUME_CAN_DEVICE};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}
