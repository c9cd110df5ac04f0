/* Attaching to the tests' radosgw cluster (see rgw.h). */
#include "rgw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int installed(const char *prog) {
  const char *path = getenv("PATH");
  char buf[4096], full[4200];
  snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(full, sizeof full, "%s/%s", d, prog);
    if (access(full, X_OK) == 0)
      return 1;
  }
  /* Debian keeps them in /usr/bin; PATH may be a test's own. */
  snprintf(full, sizeof full, "/usr/bin/%s", prog);
  return access(full, X_OK) == 0;
}

static void set(char *dst, size_t len, const char *v) {
  snprintf(dst, len, "%s", v);
}

int kvp_rgw_attach(kvp_rgw_t *r) {
  static const char *progs[] = {"radosgw", "ceph-mon", "ceph-osd"};
  char path[4096], line[4096];
  const char *env = getenv("KVP_RGW_ENV"), *bin = getenv("KVP_TEST_BINDIR");

  memset(r, 0, sizeof *r);
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++)
    if (!installed(progs[i])) {
      printf("SKIP: %s is not installed (Debian packages radosgw ceph-mon ceph-osd; "
             "scripts/setup.sh installs them)\n",
             progs[i]);
      fflush(stdout);
      exit(77);
    }
  if (env != NULL)
    snprintf(path, sizeof path, "%s", env);
  else
    snprintf(path, sizeof path, "%s/rgw-cluster/env", bin ? bin : ".");
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr,
            "rgw: no cluster: %s is missing (the fixture test rgw_cluster.start, "
            "tests/tools/rgw_cluster.sh, says why it did not start)\n",
            path);
    return -1;
  }
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    char *eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    const char *k = line, *v = eq + 1;
    if (strcmp(k, "KVP_RGW_ENDPOINT") == 0)
      set(r->endpoint, sizeof r->endpoint, v);
    else if (strcmp(k, "KVP_RGW_HOST_ENDPOINT") == 0)
      set(r->host_endpoint, sizeof r->host_endpoint, v);
    else if (strcmp(k, "KVP_RGW_BUCKET") == 0)
      set(r->bucket, sizeof r->bucket, v);
    else if (strcmp(k, "KVP_RGW_REGION") == 0)
      set(r->region, sizeof r->region, v);
    else if (strcmp(k, "KVP_RGW_ACCESS") == 0)
      set(r->access, sizeof r->access, v);
    else if (strcmp(k, "KVP_RGW_SECRET") == 0)
      set(r->secret, sizeof r->secret, v);
    else if (strcmp(k, "KVP_RGW_SESSION_ACCESS") == 0)
      set(r->session_access, sizeof r->session_access, v);
    else if (strcmp(k, "KVP_RGW_SESSION_SECRET") == 0)
      set(r->session_secret, sizeof r->session_secret, v);
    else if (strcmp(k, "KVP_RGW_SESSION_TOKEN") == 0)
      set(r->session_token, sizeof r->session_token, v);
  }
  fclose(f);
  if (!r->endpoint[0] || !r->bucket[0] || !r->access[0] || !r->secret[0]) {
    fprintf(stderr, "rgw: %s lacks the endpoint, bucket or keys\n", path);
    return -1;
  }
  return 0;
}

void kvp_rgw_prefix(const char *name, char *out, size_t len) {
  snprintf(out, len, "%ld-%s/", (long)getpid(), name);
}
