/* Adopting a plugin's operations table of any ABI version from 1 up to
 * KVP_VOLUME_ABI_VERSION (kvplane/volume_plugin.h, "Versions"). */
#ifndef KVP_VOLUME_ABI_H
#define KVP_VOLUME_ABI_H

#include <stddef.h>

#include "kvplane/volume_plugin.h"

/* Copies the table a plugin's entry returned (table, of the plugin's ABI
 * version and so possibly shorter than kvp_volume_ops_t) into out, the
 * library's full-size table: the fields the plugin's version has are
 * copied, those of later versions are zeroed, and nothing past the end of
 * the plugin's version's table is read. Returns 0, or KVP_ENOTSUP with err
 * naming path and the cause: version 0 or newer than this kvplane (both
 * versions named), a required operation missing, a flag the version does
 * not have (KVP_VOLUME_CAN_DEVICE is reserved) or a flag without its
 * operation. out is zeroed on failure. */
int kvp__volume_adopt_ops(const kvp_volume_ops_t *table, kvp_volume_ops_t *out, const char *path,
                          char *err, size_t errlen);

#endif
