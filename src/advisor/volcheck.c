/* The [volume] sections checked before the advisor opens anything: the
 * plugin exists, a path's parent directory exists, and the plugin's own open
 * accepts the parameters. Errors name the file, the line and the key. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "advisor/advisor.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

/* The line of key in volume i, else of the section's first key; 0: none. */
static int line_of(const kvp_advisor_config_t *cfg, int i, const char *key) {
  const struct kvp_advisor_volume_at_s *at = &cfg->volume_at[i];
  for (int k = 0; key != NULL && k < at->nkeys; k++)
    if (strcmp(at->keys[k].key, key) == 0)
      return at->keys[k].line;
  return at->line;
}

void kvp__adv_volume_errf(const kvp_advisor_config_t *cfg, int i, const char *key, char *err,
                          size_t errlen, const char *fmt, ...) {
  int line = line_of(cfg, i, key);
  int n = 0;
  va_list ap;

  if (cfg->conf_path[0] && line > 0)
    n = snprintf(err, errlen, "%s:%d: ", cfg->conf_path, line);
  if (n < 0 || (size_t)n >= errlen)
    return;
  int m = snprintf(err + n, errlen - (size_t)n, "[volume %s] ", cfg->volumes[i].name);
  if (m < 0 || (size_t)(n + m) >= errlen)
    return;
  va_start(ap, fmt);
  vsnprintf(err + n + m, errlen - (size_t)(n + m), fmt, ap);
  va_end(ap);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/* The parameter key the plugin's message is about: one it quotes ('key') or
 * begins with (key: ..., after the loader's "volume NAME (plugin P): ");
 * NULL when none. */
static const char *key_in(const char *why, const kvp_volume_param_t *p, size_t n) {
  char q[80], c[80];
  for (size_t k = 0; k < n; k++) {
    size_t kl = strlen(p[k].key);
    snprintf(q, sizeof q, "'%s'", p[k].key);
    snprintf(c, sizeof c, "): %s:", p[k].key);
    if (strstr(why, q) != NULL || (strncmp(why, p[k].key, kl) == 0 && why[kl] == ':') ||
        strstr(why, c) != NULL)
      return p[k].key;
  }
  return NULL;
}

static int check_one(const kvp_advisor_config_t *cfg, int i, char *err, size_t errlen) {
  const kvp_advisor_volume_t *v = &cfg->volumes[i];
  const char *dir = cfg->plugin_dir[0] ? cfg->plugin_dir : kvp_volume_plugin_dir();
  char params[sizeof v->params], so[1024], scratch[600] = "", root[640], why[512];
  kvp_volume_param_t p[64];
  size_t n = 0;
  kvp_volume_t *vol = NULL;
  int rc, has_path = 0;

  snprintf(so, sizeof so, "%s/kvplane-volume-%s.so", dir, v->plugin);
  if (access(so, R_OK) != 0) {
    kvp__adv_volume_errf(cfg, i, "plugin", err, errlen, "plugin: no plugin '%s' (%s: %s)",
                         v->plugin, so, strerror(errno));
    return KVP_ECONFIG;
  }
  memcpy(params, v->params, sizeof params);
  for (char *line = params, *nl; *line && n < sizeof p / sizeof p[0]; line = nl + 1) {
    nl = strchr(line, '\n');
    if (nl == NULL)
      break;
    *nl = '\0';
    char *eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    p[n++] = (kvp_volume_param_t){line, eq + 1};
  }
  /* A path is the volume's directory: its parent must exist (the plugin
   * makes only the last component), and the plugin checks the parameters
   * against a scratch directory, so that the check writes nothing there. */
  for (size_t k = 0; k < n; k++) {
    if (strcmp(p[k].key, "path") != 0 || p[k].value[0] == '\0')
      continue; /* an empty path goes to the plugin as it is: it refuses it */
    has_path = 1;
    char copy[sizeof v->params];
    struct stat st;
    snprintf(copy, sizeof copy, "%s", p[k].value);
    const char *parent = dirname(copy);
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
      kvp__adv_volume_errf(cfg, i, "path", err, errlen,
                           "path: the parent directory %s does not exist", parent);
      return KVP_ECONFIG;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/kvp-volcheck.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(scratch) == NULL) {
      scratch[0] = '\0';
      break; /* no scratch: the plugin is not asked */
    }
    snprintf(root, sizeof root, "%s/volume", scratch);
    p[k].value = root;
  }
  if (has_path && scratch[0] == '\0')
    return 0;
  rc = kvp_volume_open_ns(cfg->plugin_dir[0] ? cfg->plugin_dir : NULL, v->plugin, v->name, cfg->ns,
                          p, n, &vol, why, sizeof why);
  kvp_volume_close(vol);
  if (scratch[0])
    nftw(scratch, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  if (rc == KVP_ECONFIG || rc == KVP_ENOTSUP || rc == KVP_ENOENT) {
    const char *key = rc == KVP_ECONFIG ? key_in(why, p, n) : "plugin";
    kvp__adv_volume_errf(cfg, i, key, err, errlen, "%s", why);
    return KVP_ECONFIG;
  }
  /* Anything else (a store that does not answer, credentials refused) is not
   * the file's fault: the advisor's own open reports it. */
  return 0;
}

int kvp_advisor_config_check_volumes(const kvp_advisor_config_t *cfg, char *err, size_t errlen) {
  for (int i = 0; i < cfg->nvolumes; i++) {
    int rc = check_one(cfg, i, err, errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}
