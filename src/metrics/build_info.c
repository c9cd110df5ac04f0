/* What was built; see build_info.h. KVP_BUILD_VERSION, KVP_BUILD_REVISION
 * and KVP_BUILD_TYPE are defined for this file by src/metrics/module.cmake. */
#include "metrics/build_info.h"

#include "kvplane/volume_plugin.h"

#define STR_(x) #x
#define STR(x) STR_(x)

const char *kvp__build_version(void) {
  return KVP_BUILD_VERSION;
}

const char *kvp__build_revision(void) {
  return KVP_BUILD_REVISION;
}

const char *kvp__build_type(void) {
  return KVP_BUILD_TYPE[0] ? KVP_BUILD_TYPE : "none";
}

int kvp__build_plugin_abi(void) {
  return KVP_VOLUME_ABI_VERSION;
}

void kvp__build_print_version(FILE *f, const char *prog) {
  fprintf(f, "%s %s (revision %s, build %s, volume plugin ABI %d)\n", prog, kvp__build_version(),
          kvp__build_revision(), kvp__build_type(), kvp__build_plugin_abi());
}

void kvp__build_info_metric(kvp__prom_t *p) {
  kvp__prom_family(p, "kvplane_build_info", "gauge",
                   "Always 1; the labels say what was built (version, git revision, build type, "
                   "volume plugin ABI version).");
  kvp__prom_sample(p, "kvplane_build_info",
                   (const char *[]){"version", kvp__build_version(), "revision",
                                    kvp__build_revision(), "build_type", kvp__build_type(),
                                    "plugin_abi", STR(KVP_VOLUME_ABI_VERSION), NULL},
                   1);
}
