/* What was built: the version, the git revision, the build type and the
 * volume plugin ABI, for every program's --version and the daemons'
 * kvplane_build_info gauge. The revision is `git describe --always --dirty`
 * of the source tree when CMake configured it, or "unknown" (no git, or not a
 * checkout); it is not refreshed by later commits until CMake runs again. */
#ifndef KVP_METRICS_BUILD_INFO_H
#define KVP_METRICS_BUILD_INFO_H

#include <stdio.h>

#include "metrics/prom.h"

const char *kvp__build_version(void);  /* "0.1.0", the project's VERSION */
const char *kvp__build_revision(void); /* "9865957-dirty" or "unknown" */
const char *kvp__build_type(void);     /* "RelWithDebInfo", or "none" */
int kvp__build_plugin_abi(void);       /* KVP_VOLUME_ABI_VERSION */

/* One line on f: "PROG VERSION (revision R, build TYPE, volume plugin ABI N)". */
void kvp__build_print_version(FILE *f, const char *prog);

/* The gauge kvplane_build_info, 1, with the labels version, revision,
 * build_type and plugin_abi. */
void kvp__build_info_metric(kvp__prom_t *p);

#endif
