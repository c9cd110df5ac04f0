/* Storage volumes: the library's framed, verified access to G3 (local or
 * pooled SSD) and G4 (remote) block stores, and the loader of their plugins
 * (DESIGN.md, "Storage volumes"). The plugin ABI itself, what a storage
 * vendor implements, is kvplane/volume_plugin.h.
 *
 * Plugins store opaque objects under (namespace, sequence hash). The
 * library (kvp_volume_put_block / _get_block) stores each block as a frame:
 * a 64-byte header (magic, format version, payload length, sequence hash,
 * parent hash, layout, XXH3-64 of the payload, a checksum of the header)
 * then the payload. A get verifies all of it: a wrong magic, version or
 * length, a checksum mismatch or another block's hash is KVP_ECORRUPT and
 * the bytes are never returned. */
#ifndef KVPLANE_VOLUME_H
#define KVPLANE_VOLUME_H

#include <stddef.h>
#include <stdint.h>

#include "kvplane/layout.h"
#include "kvplane/volume_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- the block frame ------------------------------------------------------- */

#define KVP_FRAME_HEADER 64
#define KVP_FRAME_VERSION 1

typedef struct kvp_frame_s {
  uint64_t hash;   /* sequence hash */
  uint64_t parent; /* parent's sequence hash, when has_parent */
  int has_parent;
  kvp_layout_t layout; /* of the payload; zeros when not a block manager block */
  uint64_t payload_len;
  uint64_t checksum; /* XXH3-64 of the payload */
} kvp_frame_t;

/* Writes the 64-byte header for f (computing f->checksum from payload) to
 * out. */
void kvp_frame_encode(kvp_frame_t *f, const void *payload, uint8_t out[KVP_FRAME_HEADER]);

/* Checks a header and its payload (len bytes) as the block hash. Returns 0
 * with *f filled, or KVP_ECORRUPT with err saying which check failed (magic,
 * version, header checksum, length, hash, payload checksum). */
int kvp_frame_verify(const uint8_t *header, const void *payload, size_t len, uint64_t hash,
                     kvp_frame_t *f, char *err, size_t errlen);

/* --- volumes ------------------------------------------------------------- */

typedef struct kvp_volume_s kvp_volume_t;

/* The directory plugins are loaded from when none is given: the
 * KVPLANE_PLUGIN_DIR environment variable; else, when this code runs from an
 * installed tree (libkvplane.so in its library directory, or a program
 * linked with libkvplane.a in its program directory) that has a plugin
 * directory, that one, wherever the tree was installed or moved to; else the
 * configured install prefix's lib/kvplane/plugins (KVP_PLUGIN_INSTALL_DIR). */
const char *kvp_volume_plugin_dir(void);

/* Loads plugin (file kvplane-volume-<plugin>.so in plugin_dir, NULL for the
 * default) and opens the volume called name with params. Returns 0,
 * KVP_ENOENT (no such plugin file), KVP_ENOTSUP (no entry point, an ABI
 * version outside 1..KVP_VOLUME_ABI_VERSION, a missing operation, a flag
 * the version does not have or without its operation), or the plugin's open
 * error; err names the file or volume and the cause. */
int kvp_volume_open(const char *plugin_dir, const char *plugin, const char *name,
                    const kvp_volume_param_t *params, size_t nparams, kvp_volume_t **out, char *err,
                    size_t errlen);

/* kvp_volume_open for namespace ns: when the plugin has
 * KVP_VOLUME_KNOWS_NAMESPACE, the parameter namespace=ns is added (the
 * plugin records it in a new volume's identity and refuses a volume of
 * another namespace); other plugins get params as they are. ns NULL or "":
 * kvp_volume_open. A namespace among params that differs from ns is
 * KVP_ECONFIG. The advisor's tiering engine and `kvplane-advisor
 * --check-volumes` open their volumes this way; a worker should too. */
int kvp_volume_open_ns(const char *plugin_dir, const char *plugin, const char *name, const char *ns,
                       const kvp_volume_param_t *params, size_t nparams, kvp_volume_t **out,
                       char *err, size_t errlen);

/* Closes the volume and unloads the plugin; NULL is accepted. */
void kvp_volume_close(kvp_volume_t *v);

const char *kvp_volume_name(const kvp_volume_t *v);
/* The volume's operations: the library's full-size copy of the plugin's
 * table, abi_version the plugin's, operations of later versions NULL. */
const kvp_volume_ops_t *kvp_volume_ops(const kvp_volume_t *v);
/* The plugin's own handle, for calling kvp_volume_ops(v) directly: raw
 * objects, without the frame (tools and tests). */
void *kvp_volume_handle(const kvp_volume_t *v);

/* Stores a block as a frame (header + payload, no copy of the payload). */
int kvp_volume_put_block(kvp_volume_t *v, const char *ns, const kvp_frame_t *meta,
                         const void *payload, char *err, size_t errlen);

/* Reads and verifies block hash into payload (cap bytes). Returns 0 with
 * *meta filled (payload_len is its length), KVP_ENOENT, KVP_ECORRUPT (the
 * payload buffer's contents are then unspecified and must not be used),
 * KVP_ETOOBIG (meta->payload_len says the size), or a plugin error. */
int kvp_volume_get_block(kvp_volume_t *v, const char *ns, uint64_t hash, kvp_frame_t *meta,
                         void *payload, size_t cap, char *err, size_t errlen);

/* The plugin's delete, exists (1/0/negative), stat and iterate. */
int kvp_volume_delete(kvp_volume_t *v, const char *ns, uint64_t hash, char *err, size_t errlen);
int kvp_volume_exists(kvp_volume_t *v, const char *ns, uint64_t hash);
int kvp_volume_stat(kvp_volume_t *v, kvp_volume_stat_t *st, char *err, size_t errlen);
int kvp_volume_iterate(kvp_volume_t *v, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen);
/* The plugin's garbage (dead and total bytes) and one step of its compact
 * (1: reclaimed some, more may remain; 0: nothing left; or negative).
 * KVP_ENOTSUP when the plugin cannot compact or (garbage) is of ABI
 * version 1. */
int kvp_volume_garbage(kvp_volume_t *v, uint64_t *dead, uint64_t *total, char *err, size_t errlen);
int kvp_volume_compact(kvp_volume_t *v, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_VOLUME_H */
