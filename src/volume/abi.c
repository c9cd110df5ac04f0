/* Adopting a plugin's operations table of any ABI version (abi.h).
 *
 * The ABI's test (tests/volume/test_volume_abi.c) compiles this file a
 * second time against the public header with one operation appended and
 * the version raised, the way the next version will be written, and loads a
 * plugin built against version 1 with it: so this file holds everything the
 * next version must change here, and nothing else. */
#include <stdio.h>
#include <string.h>

#include "abi.h"
#include "kvplane/status.h"

/* The end of field f: a table of the version whose last operation is f has
 * this many bytes. */
#define END_OF(f) (offsetof(kvp_volume_ops_t, f) + sizeof(((kvp_volume_ops_t *)0)->f))

/* The size of a table of each version. The current version's is the whole
 * struct; each older version's ends with its own last operation. A version
 * N+1 that appends operations adds "#if KVP_VOLUME_ABI_VERSION > N" with
 * [N] = END_OF(version N's last operation) below. */
static const size_t table_size[KVP_VOLUME_ABI_VERSION + 1] = {
    [KVP_VOLUME_ABI_VERSION] = sizeof(kvp_volume_ops_t),
#if KVP_VOLUME_ABI_VERSION > 1
    [1] = END_OF(compact),
#endif
#if KVP_VOLUME_ABI_VERSION > 2
    [2] = END_OF(garbage),
#endif
};

/* The flags a version gives a meaning to: copy and compact in every one.
 * KVP_VOLUME_KNOWS_NAMESPACE from version 2.
 * KVP_VOLUME_CAN_DEVICE in none yet: the version N that adds the device
 * operations adds "| (version >= N ? KVP_VOLUME_CAN_DEVICE : 0)". */
static uint32_t known_flags(uint32_t version) {
  return KVP_VOLUME_CAN_COPY | KVP_VOLUME_CAN_COMPACT |
         (version >= 2 ? KVP_VOLUME_KNOWS_NAMESPACE : 0);
}

/* The operations every plugin must have, NULL when all are there, else the
 * first missing one's name. */
static const char *missing_op(const kvp_volume_ops_t *o) {
  if (!o->open)
    return "open";
  if (!o->close)
    return "close";
  if (!o->put)
    return "put";
  if (!o->get)
    return "get";
  if (!o->del)
    return "del";
  if (!o->exists)
    return "exists";
  if (!o->stat)
    return "stat";
  if (!o->iterate)
    return "iterate";
  if ((o->flags & KVP_VOLUME_CAN_COPY) && !o->copy)
    return "copy (flagged)";
  if ((o->flags & KVP_VOLUME_CAN_COMPACT) && !o->compact)
    return "compact (flagged)";
  return NULL;
}

int kvp__volume_adopt_ops(const kvp_volume_ops_t *table, kvp_volume_ops_t *out, const char *path,
                          char *err, size_t errlen) {
  uint32_t version;
  const char *miss;

  memset(out, 0, sizeof *out);
  /* abi_version is first in every version: the only field read before the
   * version is known. */
  memcpy(&version, table, sizeof version);
  if (version < 1 || version > KVP_VOLUME_ABI_VERSION) {
    snprintf(err, errlen, "%s is built for volume ABI %u, this kvplane loads versions 1 to %u%s",
             path, (unsigned)version, (unsigned)KVP_VOLUME_ABI_VERSION,
             version > KVP_VOLUME_ABI_VERSION ? ": it needs a newer kvplane" : "");
    return KVP_ENOTSUP;
  }
  if (table_size[version] == 0 || table_size[version] > sizeof *out) {
    snprintf(err, errlen, "%s: volume ABI %u has no table size in this kvplane (a build bug)", path,
             (unsigned)version);
    return KVP_ENOTSUP;
  }
  memcpy(out, table, table_size[version]);
  if (out->flags & ~known_flags(version)) {
    snprintf(err, errlen, "%s sets flags 0x%x that volume ABI %u does not have%s", path,
             (unsigned)(out->flags & ~known_flags(version)), (unsigned)version,
             (out->flags & KVP_VOLUME_CAN_DEVICE)
                 ? " (KVP_VOLUME_CAN_DEVICE is reserved: no version has the device operations yet)"
                 : "");
    memset(out, 0, sizeof *out);
    return KVP_ENOTSUP;
  }
  if ((miss = missing_op(out)) != NULL) {
    snprintf(err, errlen, "%s has no '%s' operation", path, miss);
    memset(out, 0, sizeof *out);
    return KVP_ENOTSUP;
  }
  return 0;
}
