/* libFuzzer target: a segment file of the posix plugin's packed layout
 * (plugins/posix/pack.c; outside bytes: what a crash, a bad disk or
 * another process left on the volume), loaded by the plugin's open. Errors
 * are expected; crashes and overruns are not, and neither is a volume
 * whose objects change across a compaction and a reopen: what loads is
 * read back whole, compacted, and must load again the same (count and
 * bytes). The compaction is a second open's, as another process's would
 * be, while the first stays open: the first must see the same objects
 * after it (its refresh reads the copies and drops the removed segment). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const kvp_volume_ops_t *kvp_volume_plugin_v1(void);

static char g_root[256], g_seg[320];

/* The scratch volume goes with the process. */
static void remove_root(void) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
  if (system(cmd) != 0)
    return;
}

static void setup_once(void) {
  char tmpl[] = "/tmp/kvp-fuzz-pack-XXXXXX";
  if (g_root[0] || mkdtemp(tmpl) == NULL)
    return;
  snprintf(g_root, sizeof g_root, "%s", tmpl);
  snprintf(g_seg, sizeof g_seg, "%s/.packed/0000000000000001.seg", g_root);
  atexit(remove_root);
}

typedef struct tally_s {
  const kvp_volume_ops_t *o;
  void *vol;
  uint64_t n, bytes;
} tally_t;

/* Every object listed reads back with the size listed. */
static int visit(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  tally_t *t = ctx;
  static uint8_t buf[1 << 16];
  struct iovec iov = {buf, sizeof buf};
  char err[512];
  size_t len = 0;
  int rc = t->o->get(t->vol, ns, hash, &iov, 1, &len, err, sizeof err);
  if ((rc != 0 && rc != KVP_ETOOBIG) || len != bytes)
    abort();
  t->n++;
  t->bytes += bytes;
  return 0;
}

static int load(const kvp_volume_ops_t *o, void **vol, tally_t *t) {
  kvp_volume_param_t p[] = {{"path", g_root}, {"fsync", "off"}, {"layout", "packed"}};
  char err[512];
  if (o->open(p, 3, vol, err, sizeof err) != 0)
    return -1;
  *t = (tally_t){.o = o, .vol = *vol};
  return o->iterate(*vol, visit, t, err, sizeof err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const kvp_volume_ops_t *o = kvp_volume_plugin_v1();
  void *vol = NULL;
  tally_t a, b;
  char err[512], cmd[400];

  setup_once();
  if (!g_root[0])
    return 0;
  snprintf(cmd, sizeof cmd, "%s/.packed", g_root);
  /* A fresh volume (its marker), then the input as its only segment. */
  if (load(o, &vol, &a) != 0)
    abort();
  o->close(vol);
  FILE *f = fopen(g_seg, "wb");
  if (f == NULL)
    return 0;
  fwrite(data, 1, size, f);
  fclose(f);
  if (load(o, &vol, &a) != 0)
    abort(); /* a segment's bytes never make the open fail */
  void *other = NULL;
  if (load(o, &other, &b) != 0 || a.n != b.n || a.bytes != b.bytes)
    abort();
  while (o->compact(other, err, sizeof err) == 1)
    ;
  b = (tally_t){.o = o, .vol = vol};
  if (o->iterate(vol, visit, &b, err, sizeof err) != 0 || a.n != b.n || a.bytes != b.bytes)
    abort(); /* the first open, after the second one's compaction */
  o->close(other);
  o->close(vol);
  if (load(o, &vol, &b) != 0 || a.n != b.n || a.bytes != b.bytes)
    abort();
  o->close(vol);
  /* Empty the volume for the next input. */
  snprintf(cmd, sizeof cmd, "rm -rf '%s/.packed'", g_root);
  if (system(cmd) != 0)
    abort();
  return 0;
}
