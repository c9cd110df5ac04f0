/* Storage volumes: the plugin ABI for G3 (local or pooled SSD) and G4
 * (remote) block stores, and the library's framed, verified access to them
 * (DESIGN.md, "Storage volumes").
 *
 * A plugin is a shared object exporting one function, KVP_VOLUME_ENTRY,
 * that returns its table of operations. Storage vendors write plugins
 * against this header: it is a public contract, like the .proto and the
 * SQL schema, versioned by KVP_VOLUME_ABI_VERSION. docs/volumes.md tells how
 * to write one.
 *
 * Plugins store opaque objects under (namespace, sequence hash). The
 * library (kvp_volume_put_block / _get_block) stores each block as a frame:
 * a 64-byte header (magic, format version, payload length, sequence hash,
 * parent hash, layout, XXH3-64 of the payload, a checksum of the header)
 * then the payload. A get verifies all of it: a wrong magic, version or
 * length, a checksum mismatch or another block's hash is KVP_ECORRUPT and
 * the bytes are never returned.
 *
 * Threads: every operation of a plugin may be called from several threads at
 * once on the same volume handle (a migration engine runs several copies);
 * open and close are called once, with no other call in flight. */
#ifndef KVPLANE_VOLUME_H
#define KVPLANE_VOLUME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvplane/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_VOLUME_ABI_VERSION 1

/* The name of the one function a plugin exports, of type kvp_volume_entry_fn. */
#define KVP_VOLUME_ENTRY "kvp_volume_plugin_v1"

typedef struct kvp_volume_param_s {
  const char *key, *value;
} kvp_volume_param_t;

typedef struct kvp_volume_stat_s {
  uint64_t capacity; /* bytes; 0 when the store has no bound of its own or configured */
  uint64_t used;     /* bytes of the objects it holds */
  uint64_t blocks;   /* objects it holds */
} kvp_volume_stat_t;

/* Called once per stored object by iterate; a non-zero return stops the
 * iteration and is returned by it. */
typedef int (*kvp_volume_key_fn)(void *ctx, const char *ns, uint64_t hash, uint64_t bytes);

/* Optional operations a plugin implements; the others are NULL, never faked. */
enum {
  KVP_VOLUME_CAN_COPY = 1u << 0,    /* copy within the store, without the bytes passing here */
  KVP_VOLUME_CAN_COMPACT = 1u << 1, /* reclaim space */
};

/* Every operation returns 0 or a negative KVP_E* code (kvplane/status.h)
 * and, where it takes err, writes a message naming the object and the cause:
 *   KVP_ENOENT   no such object (get, del) or no such store (open);
 *   KVP_ENOSPC   the configured capacity or the device is full; an object
 *                being replaced is left as it was;
 *   KVP_EAUTH    credentials refused;  KVP_ECONN  the store is unreachable;
 *   KVP_ETIMEDOUT, KVP_EAGAIN (throttled: retry later), KVP_EIO (anything
 *   else the store reported), KVP_ECONFIG (bad parameters, at open),
 *   KVP_ETOOBIG (get: the object is larger than the buffers). */
typedef struct kvp_volume_ops_s {
  uint32_t abi_version; /* KVP_VOLUME_ABI_VERSION */
  const char *name;     /* the plugin's name, e.g. "posix" */
  uint32_t flags;       /* KVP_VOLUME_CAN_* */
  /* Registers a volume from its parameters; *vol is the plugin's handle. A
   * crash of an earlier process mid-put leaves at most temporary objects,
   * which open removes. */
  int (*open)(const kvp_volume_param_t *params, size_t nparams, void **vol, char *err,
              size_t errlen);
  void (*close)(void *vol); /* unregisters; NULL is accepted */
  /* Stores the concatenation of iov[0..iovcnt) under (ns, hash), replacing
   * an object there atomically: a reader sees the old bytes or the new,
   * never a mix, and a failed put leaves the old object. */
  int (*put)(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
             char *err, size_t errlen);
  /* Reads the object into iov[0..iovcnt) in order, sets *len to its size.
   * KVP_ETOOBIG (with *len set) when it does not fit. */
  int (*get)(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
             size_t *len, char *err, size_t errlen);
  int (*del)(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen);
  /* 1 when the object exists, 0 when not, or a negative code. *len (may be
   * NULL) gets its size. */
  int (*exists)(void *vol, const char *ns, uint64_t hash, size_t *len);
  int (*stat)(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen);
  /* Calls fn for every object (order unspecified). Objects put or deleted
   * during the iteration may or may not be seen. */
  int (*iterate)(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen);
  /* Optional (KVP_VOLUME_CAN_COPY): copies (ns, hash) from src to dst, two
   * volumes of this plugin. */
  int (*copy)(void *src, void *dst, const char *ns, uint64_t hash, char *err, size_t errlen);
  /* Optional (KVP_VOLUME_CAN_COMPACT). */
  int (*compact)(void *vol, char *err, size_t errlen);
} kvp_volume_ops_t;

typedef const kvp_volume_ops_t *(*kvp_volume_entry_fn)(void);

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
 * KVP_ENOENT (no such plugin file), KVP_ENOTSUP (no entry point, another ABI
 * version, a missing operation), or the plugin's open error; err names the
 * file or volume and the cause. */
int kvp_volume_open(const char *plugin_dir, const char *plugin, const char *name,
                    const kvp_volume_param_t *params, size_t nparams, kvp_volume_t **out, char *err,
                    size_t errlen);

/* Closes the volume and unloads the plugin; NULL is accepted. */
void kvp_volume_close(kvp_volume_t *v);

const char *kvp_volume_name(const kvp_volume_t *v);
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

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_VOLUME_H */
