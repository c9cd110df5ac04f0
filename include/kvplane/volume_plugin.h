/* The volume plugin ABI: what a storage plugin for G3 (local or pooled SSD)
 * and G4 (remote) volumes implements (DESIGN.md, "Storage volumes";
 * docs/volumes.md tells how to write one and how to run the conformance
 * suite on it). The frame and the loader are in kvplane/volume.h.
 *
 * A plugin is a shared object exporting one function, named
 * KVP_VOLUME_ENTRY, that returns its table of operations. It needs this
 * header and kvplane/status.h only: it links no kvplane library. This is a
 * public contract, like the .proto and the SQL schema.
 *
 * Versions. The table begins with abi_version, the KVP_VOLUME_ABI_VERSION
 * the plugin was built against. The ABI grows only by appending operations
 * at the end of kvp_volume_ops_t (and by giving meaning to reserved flags);
 * nothing is ever removed, moved or retyped. A kvplane loads a plugin of any
 * version from 1 up to its own: it copies as much of the plugin's table as
 * that version has into a full-size table of its own and leaves the
 * operations of later versions NULL, so an old plugin's table is never read
 * past its end, and an operation is used only when the plugin's version has
 * it (and the plugin set it). A plugin of version 0 or of a version newer
 * than the kvplane is refused, with both versions named (KVP_ENOTSUP). The
 * entry's name stays "kvp_volume_plugin_v1" in every version: the "v1" is
 * the name of the entry convention, the table says its version.
 *
 * Threads: every operation of a plugin may be called from several threads at
 * once on the same volume handle (a migration engine runs several copies);
 * open and close are called once, with no other call in flight. */
#ifndef KVPLANE_VOLUME_PLUGIN_H
#define KVPLANE_VOLUME_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. Version 1: the operations up to
 * compact. Version 2: the flag KVP_VOLUME_KNOWS_NAMESPACE and the
 * operation garbage. */
#define KVP_VOLUME_ABI_VERSION 2

/* The name of the one function a plugin exports, of type
 * kvp_volume_entry_fn; the same in every ABI version. */
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

/* Optional operations a plugin implements; the others are NULL, never
 * faked. The loader refuses a plugin that sets a flag its version gives no
 * meaning to, or a flag without its operation. */
enum {
  KVP_VOLUME_CAN_COPY = 1u << 0,    /* copy within the store, without the bytes passing here */
  KVP_VOLUME_CAN_COMPACT = 1u << 1, /* reclaim space */
  /* Reserved for the device-memory path: reads and writes of GPU memory
   * straight between the store and the device (GPUDirect Storage, cuFile),
   * without a bounce through host memory. The ABI version that adds the
   * device operations (a put and a get taking device buffers, with the
   * device they live on) gives it its meaning; until then no plugin may set
   * it, and the loader refuses one that does. */
  KVP_VOLUME_CAN_DEVICE = 1u << 2,
  /* Version 2: open accepts the parameter "namespace", the kvplane
   * namespace the caller serves, which kvp_volume_open_ns adds (a plugin
   * without the flag never receives it, so a version-1 plugin, which
   * refuses unknown parameters, keeps loading). A plugin with an identity
   * marker records it there when it creates the volume and refuses, at
   * open, a volume whose marker names another namespace (KVP_ECONFIG,
   * naming both). */
  KVP_VOLUME_KNOWS_NAMESPACE = 1u << 3,
};

/* Every operation returns 0 or a negative KVP_E* code (kvplane/status.h)
 * and, where it takes err, writes a message naming the object and the cause:
 *   KVP_ENOENT   no such object (get, del) or no such store (open);
 *   KVP_ENOSPC   the configured capacity or the device is full; an object
 *                being replaced is left as it was;
 *   KVP_EAUTH    credentials refused;  KVP_ECONN  the store is unreachable;
 *   KVP_ETIMEDOUT, KVP_EAGAIN (throttled: retry later), KVP_EIO (anything
 *   else the store reported), KVP_ECONFIG (bad parameters, at open),
 *   KVP_ETOOBIG (get: the object is larger than the buffers),
 *   KVP_EOFFLINE (the store at the configured place is not this volume: its
 *                identity is gone, e.g. a dropped mount or a deleted
 *                directory; nothing was written or deleted, and a miss
 *                seen meanwhile is this, not KVP_ENOENT). */
typedef struct kvp_volume_ops_s {
  uint32_t abi_version; /* KVP_VOLUME_ABI_VERSION; first in every version */
  const char *name;     /* the plugin's name, e.g. "posix" */
  uint32_t flags;       /* KVP_VOLUME_CAN_* */
  /* Registers a volume from its parameters; *vol is the plugin's handle. A
   * crash of an earlier process mid-put leaves at most temporary objects,
   * which open removes. An unknown parameter is KVP_ECONFIG, never
   * ignored. */
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
  /* Optional (KVP_VOLUME_CAN_COMPACT): reclaims the space of dead bytes
   * (see garbage) one bounded step at a time, e.g. one segment rewritten,
   * so that the caller paces it. Returns 1 when it reclaimed something and
   * more may remain, 0 when nothing is left to reclaim, or a negative code.
   * Objects are readable and writable throughout, and a crash at any point
   * loses no object and resurrects no deleted one. */
  int (*compact)(void *vol, char *err, size_t errlen);
  /* --- version 2 --- */
  /* Optional, read by the tiering engine to decide when to call compact:
   * *dead gets the bytes the store holds that no object owns any more
   * (deleted or replaced objects not yet reclaimed, record overheads),
   * *total the bytes it holds in all, live and dead. A plugin of version 1,
   * or one that sets no garbage, is never compacted by the engine. */
  int (*garbage)(void *vol, uint64_t *dead, uint64_t *total, char *err, size_t errlen);
  /* Operations of later ABI versions are appended here. */
} kvp_volume_ops_t;

typedef const kvp_volume_ops_t *(*kvp_volume_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_VOLUME_PLUGIN_H */
