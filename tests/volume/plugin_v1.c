/* A test plugin built against version 1 of the volume ABI (abi_v1.h, a
 * frozen copy), as a vendor's plugin from kvplane's first release is: the
 * loader of every later version must load it. It stores nothing; its
 * operations answer so that a test can tell they are this plugin's (stat
 * reports capacity 0x7631, "v1"). It also exports the size of its table,
 * which only a test plugin does, so that the ABI test can place the table
 * against an unreadable page. */
#include <stdio.h>
#include <stdlib.h>

#include "abi_v1.h"
#include "kvplane/status.h"

static int v1_open(const kvp_volume_param_t *params, size_t n, void **vol, char *err,
                   size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    snprintf(err, errlen, "unknown parameter '%s' (the v1 test plugin takes none)", params[i].key);
    return KVP_ECONFIG;
  }
  *vol = malloc(1);
  return *vol ? 0 : KVP_ENOMEM;
}

static void v1_close(void *vol) {
  free(vol);
}

static int v1_put(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  char *err, size_t errlen) {
  (void)vol, (void)iov, (void)iovcnt;
  snprintf(err, errlen, "%s/%016llx: the v1 test plugin stores nothing", ns,
           (unsigned long long)hash);
  return KVP_ENOSPC;
}

static int v1_get(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  size_t *len, char *err, size_t errlen) {
  (void)vol, (void)iov, (void)iovcnt, (void)len;
  snprintf(err, errlen, "%s/%016llx: no such object", ns, (unsigned long long)hash);
  return KVP_ENOENT;
}

static int v1_del(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen) {
  (void)vol;
  snprintf(err, errlen, "%s/%016llx: no such object", ns, (unsigned long long)hash);
  return KVP_ENOENT;
}

static int v1_exists(void *vol, const char *ns, uint64_t hash, size_t *len) {
  (void)vol, (void)ns, (void)hash, (void)len;
  return 0;
}

static int v1_stat(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen) {
  (void)vol, (void)err, (void)errlen;
  *st = (kvp_volume_stat_t){.capacity = 0x7631};
  return 0;
}

static int v1_iterate(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  (void)vol, (void)fn, (void)ctx, (void)err, (void)errlen;
  return 0;
}

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION,
    .name = "v1",
    .open = v1_open,
    .close = v1_close,
    .put = v1_put,
    .get = v1_get,
    .del = v1_del,
    .exists = v1_exists,
    .stat = v1_stat,
    .iterate = v1_iterate,
};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}

__attribute__((visibility("default"))) const size_t kvp_test_v1_table_size = sizeof ops;
