/* Volumes: the plugin loader and framed, verified block access
 * (include/kvplane/volume.h). */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abi.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

/* The build defines all three (src/CMakeLists.txt); these keep the file
 * compilable alone. */
#ifndef KVP_PLUGIN_DIR
#define KVP_PLUGIN_DIR "/usr/local/lib/kvplane/plugins"
#endif
#ifndef KVP_PLUGIN_DIR_FROM_LIBDIR
#define KVP_PLUGIN_DIR_FROM_LIBDIR ""
#endif
#ifndef KVP_PLUGIN_DIR_FROM_BINDIR
#define KVP_PLUGIN_DIR_FROM_BINDIR ""
#endif

struct kvp_volume_s {
  void *dl;
  /* The plugin's table, copied to the full size of this version's: the
   * operations of versions after the plugin's are NULL. */
  kvp_volume_ops_t ops;
  void *vol;
  char name[64];
};

/* The plugin directory of the installed tree this code was loaded from, or
 * "" when there is none; found once. */
static char g_reloc_dir[PATH_MAX];
static pthread_once_t g_reloc_once = PTHREAD_ONCE_INIT;

/* An installed tree may not be at the configured prefix (cmake --install
 * --prefix DIR, or moved): its plugins are then found from where this code
 * is, libkvplane.so in the library directory or, linked statically, the
 * program in the program directory. A build tree has no such directory
 * beside it, and the configured one applies. */
static void find_reloc_dir(void) {
  char obj[PATH_MAX], cand[2 * PATH_MAX], *slash;
  const char *rel = KVP_PLUGIN_DIR_FROM_BINDIR;
  Dl_info di;
  struct stat sb;

  if (dladdr((void *)find_reloc_dir, &di) && di.dli_fname && di.dli_fname[0] &&
      strncmp((slash = strrchr(di.dli_fname, '/')) ? slash + 1 : di.dli_fname, "libkvplane.so",
              13) == 0) {
    snprintf(obj, sizeof obj, "%s", di.dli_fname);
    rel = KVP_PLUGIN_DIR_FROM_LIBDIR;
  } else {
    ssize_t n = readlink("/proc/self/exe", obj, sizeof obj - 1);
    if (n <= 0)
      return;
    obj[n] = '\0';
  }
  if (!rel[0] || (slash = strrchr(obj, '/')) == NULL)
    return;
  *slash = '\0';
  snprintf(cand, sizeof cand, "%s/%s", obj, rel);
  if (realpath(cand, obj) != NULL && stat(obj, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(g_reloc_dir, sizeof g_reloc_dir, "%s", obj);
}

const char *kvp_volume_plugin_dir(void) {
  const char *d = getenv("KVPLANE_PLUGIN_DIR");
  if (d && d[0])
    return d;
  pthread_once(&g_reloc_once, find_reloc_dir);
  return g_reloc_dir[0] ? g_reloc_dir : KVP_PLUGIN_DIR;
}

int kvp_volume_open(const char *plugin_dir, const char *plugin, const char *name,
                    const kvp_volume_param_t *params, size_t nparams, kvp_volume_t **out, char *err,
                    size_t errlen) {
  return kvp_volume_open_ns(plugin_dir, plugin, name, NULL, params, nparams, out, err, errlen);
}

#define MAX_PARAMS 64

int kvp_volume_open_ns(const char *plugin_dir, const char *plugin, const char *name, const char *ns,
                       const kvp_volume_param_t *params, size_t nparams, kvp_volume_t **out,
                       char *err, size_t errlen) {
  char path[4096], why[512] = "";
  kvp_volume_param_t with_ns[MAX_PARAMS + 1];
  struct stat sb;
  kvp_volume_t *v;
  int rc;

  *out = NULL;
  if (plugin == NULL || name == NULL || !plugin[0] || !name[0] || strchr(plugin, '/') ||
      strlen(name) >= sizeof v->name) {
    snprintf(err, errlen,
             "volume %s: the plugin and volume names are required (a name is 1..63 "
             "characters, a plugin has no '/')",
             name ? name : "(none)");
    return KVP_EINVAL;
  }
  snprintf(path, sizeof path, "%s/kvplane-volume-%s.so",
           plugin_dir ? plugin_dir : kvp_volume_plugin_dir(), plugin);
  if (stat(path, &sb) != 0) {
    snprintf(err, errlen, "volume %s: plugin '%s' not found: %s: %s", name, plugin, path,
             strerror(errno));
    return KVP_ENOENT;
  }
  if ((v = calloc(1, sizeof *v)) == NULL)
    return KVP_ENOMEM;
  snprintf(v->name, sizeof v->name, "%s", name);
  if ((v->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
    snprintf(err, errlen, "volume %s: cannot load %s: %s", name, path, dlerror());
    rc = KVP_ENOTSUP;
    goto fail;
  }
  kvp_volume_entry_fn entry;
  const kvp_volume_ops_t *table;
  *(void **)&entry = dlsym(v->dl, KVP_VOLUME_ENTRY);
  if (entry == NULL || (table = entry()) == NULL) {
    snprintf(err, errlen, "volume %s: %s exports no %s(): not a kvplane volume plugin", name, path,
             KVP_VOLUME_ENTRY);
    rc = KVP_ENOTSUP;
    goto fail;
  }
  if ((rc = kvp__volume_adopt_ops(table, &v->ops, path, why, sizeof why)) != 0) {
    snprintf(err, errlen, "volume %s: %s", name, why);
    goto fail;
  }
  if (ns != NULL && ns[0] != '\0' && (v->ops.flags & KVP_VOLUME_KNOWS_NAMESPACE)) {
    size_t k = 0;
    for (size_t i = 0; i < nparams; i++) {
      if (strcmp(params[i].key, "namespace") == 0) {
        if (params[i].value == NULL || strcmp(params[i].value, ns) != 0) {
          snprintf(err, errlen, "volume %s: parameter namespace=%s, but it serves namespace %s",
                   name, params[i].value ? params[i].value : "", ns);
          rc = KVP_ECONFIG;
          goto fail;
        }
        continue;
      }
      if (k == MAX_PARAMS) {
        snprintf(err, errlen, "volume %s: more than %d parameters", name, MAX_PARAMS);
        rc = KVP_ECONFIG;
        goto fail;
      }
      with_ns[k++] = params[i];
    }
    with_ns[k++] = (kvp_volume_param_t){"namespace", ns};
    params = with_ns;
    nparams = k;
  }
  if ((rc = v->ops.open(params, nparams, &v->vol, why, sizeof why)) != 0) {
    snprintf(err, errlen, "volume %s (plugin %s): %s", name, plugin,
             why[0] ? why : kvp_strerror(rc));
    v->vol = NULL;
    goto fail;
  }
  *out = v;
  return 0;
fail:
  kvp_volume_close(v);
  return rc;
}

void kvp_volume_close(kvp_volume_t *v) {
  if (v == NULL)
    return;
  if (v->vol != NULL)
    v->ops.close(v->vol);
  if (v->dl != NULL)
    dlclose(v->dl);
  free(v);
}

const char *kvp_volume_name(const kvp_volume_t *v) {
  return v->name;
}

const kvp_volume_ops_t *kvp_volume_ops(const kvp_volume_t *v) {
  return &v->ops;
}

void *kvp_volume_handle(const kvp_volume_t *v) {
  return v->vol;
}

/* A plugin's message, or the code's, prefixed with the volume. */
static int named(const kvp_volume_t *v, int rc, const char *why, char *err, size_t errlen) {
  if (rc != 0 && err != NULL)
    snprintf(err, errlen, "volume %s: %s", v->name, why[0] ? why : kvp_strerror(rc));
  return rc;
}

int kvp_volume_put_block(kvp_volume_t *v, const char *ns, const kvp_frame_t *meta,
                         const void *payload, char *err, size_t errlen) {
  uint8_t header[KVP_FRAME_HEADER];
  kvp_frame_t f = *meta;
  char why[512] = "";

  kvp_frame_encode(&f, payload, header);
  struct iovec iov[2] = {{header, sizeof header}, {(void *)payload, (size_t)f.payload_len}};
  return named(v, v->ops.put(v->vol, ns, f.hash, iov, f.payload_len ? 2 : 1, why, sizeof why), why,
               err, errlen);
}

int kvp_volume_get_block(kvp_volume_t *v, const char *ns, uint64_t hash, kvp_frame_t *meta,
                         void *payload, size_t cap, char *err, size_t errlen) {
  uint8_t header[KVP_FRAME_HEADER];
  char why[512] = "";
  size_t len = 0;
  struct iovec iov[2] = {{header, sizeof header}, {payload, cap}};

  int rc = v->ops.get(v->vol, ns, hash, iov, cap ? 2 : 1, &len, why, sizeof why);
  if (rc == KVP_ETOOBIG) {
    meta->payload_len = len > KVP_FRAME_HEADER ? len - KVP_FRAME_HEADER : 0;
    return named(v, rc, why, err, errlen);
  }
  if (rc != 0)
    return named(v, rc, why, err, errlen);
  if (len < KVP_FRAME_HEADER) {
    snprintf(err, errlen,
             "volume %s: block %016llx: truncated: %zu bytes, shorter than a frame "
             "header",
             v->name, (unsigned long long)hash, len);
    return KVP_ECORRUPT;
  }
  rc = kvp_frame_verify(header, payload, len - KVP_FRAME_HEADER, hash, meta, why, sizeof why);
  return named(v, rc, why, err, errlen);
}

int kvp_volume_delete(kvp_volume_t *v, const char *ns, uint64_t hash, char *err, size_t errlen) {
  char why[512] = "";
  return named(v, v->ops.del(v->vol, ns, hash, why, sizeof why), why, err, errlen);
}

int kvp_volume_exists(kvp_volume_t *v, const char *ns, uint64_t hash) {
  return v->ops.exists(v->vol, ns, hash, NULL);
}

int kvp_volume_stat(kvp_volume_t *v, kvp_volume_stat_t *st, char *err, size_t errlen) {
  char why[512] = "";
  return named(v, v->ops.stat(v->vol, st, why, sizeof why), why, err, errlen);
}

int kvp_volume_iterate(kvp_volume_t *v, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  char why[512] = "";
  return named(v, v->ops.iterate(v->vol, fn, ctx, why, sizeof why), why, err, errlen);
}

int kvp_volume_garbage(kvp_volume_t *v, uint64_t *dead, uint64_t *total, char *err, size_t errlen) {
  char why[512] = "";
  if (v->ops.garbage == NULL || !(v->ops.flags & KVP_VOLUME_CAN_COMPACT)) {
    snprintf(err, errlen, "volume %s: plugin %s reports no garbage (not compactable)", v->name,
             v->ops.name);
    return KVP_ENOTSUP;
  }
  return named(v, v->ops.garbage(v->vol, dead, total, why, sizeof why), why, err, errlen);
}

int kvp_volume_compact(kvp_volume_t *v, char *err, size_t errlen) {
  char why[512] = "";
  if (v->ops.compact == NULL || !(v->ops.flags & KVP_VOLUME_CAN_COMPACT)) {
    snprintf(err, errlen, "volume %s: plugin %s cannot compact", v->name, v->ops.name);
    return KVP_ENOTSUP;
  }
  int rc = v->ops.compact(v->vol, why, sizeof why);
  return rc >= 0 ? rc : named(v, rc, why, err, errlen);
}
