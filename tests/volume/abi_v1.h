/* The volume plugin ABI as version 1 of kvplane/volume_plugin.h had it,
 * frozen: what a storage vendor's plugin built against kvplane's first
 * release was compiled with. tests/volume/plugin_v1.c is built against this
 * copy, never against the current header, so that it stays a version-1
 * plugin whatever the current version is. Do not edit it to follow the
 * current header: that is the point. */
#ifndef KVP_TEST_ABI_V1_H
#define KVP_TEST_ABI_V1_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define KVP_VOLUME_ABI_VERSION 1
#define KVP_VOLUME_ENTRY "kvp_volume_plugin_v1"

typedef struct kvp_volume_param_s {
  const char *key, *value;
} kvp_volume_param_t;

typedef struct kvp_volume_stat_s {
  uint64_t capacity;
  uint64_t used;
  uint64_t blocks;
} kvp_volume_stat_t;

typedef int (*kvp_volume_key_fn)(void *ctx, const char *ns, uint64_t hash, uint64_t bytes);

enum {
  KVP_VOLUME_CAN_COPY = 1u << 0,
  KVP_VOLUME_CAN_COMPACT = 1u << 1,
};

typedef struct kvp_volume_ops_s {
  uint32_t abi_version;
  const char *name;
  uint32_t flags;
  int (*open)(const kvp_volume_param_t *params, size_t nparams, void **vol, char *err,
              size_t errlen);
  void (*close)(void *vol);
  int (*put)(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
             char *err, size_t errlen);
  int (*get)(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
             size_t *len, char *err, size_t errlen);
  int (*del)(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen);
  int (*exists)(void *vol, const char *ns, uint64_t hash, size_t *len);
  int (*stat)(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen);
  int (*iterate)(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen);
  int (*copy)(void *src, void *dst, const char *ns, uint64_t hash, char *err, size_t errlen);
  int (*compact)(void *vol, char *err, size_t errlen);
} kvp_volume_ops_t;

typedef const kvp_volume_ops_t *(*kvp_volume_entry_fn)(void);

#endif
