/* kvp-bench scrub: what the tiering engine's scrub costs per TiB scanned.
 * A posix volume of N blocks (in the page cache: the scrub's own cost, not
 * the device's) gets one scrub pass listing it and one verifying it (every
 * object read back through the frame's checks), unlimited (scrub_files_per_s
 * and scrub_bytes_per_s 0), each beside an in-run baseline over the same
 * tree: a plain walk (opendir/readdir/fstatat of every file) for the
 * listing, and a plain read() of every file for the verifying pass.
 *
 *   kvp-bench scrub [--blocks N]
 *
 * Prints objects/s and MB/s, then the arithmetic: seconds per TiB of
 * blocks of that size = (2^40 / block bytes) objects / (objects/s). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "advisor/advisor.h"
#include "bench.h"
#include "harness.h"
#include "index/index.h"
#include "kvplane/volume.h"
#include "store/store.h"
#include "tier/engine.h"

/* The plain walk of root/<ns>/<hh>/<file>: stat each file, and read it
 * when buf is not NULL. Returns the files seen. */
static size_t walk(const char *root, uint8_t *buf, size_t cap, uint64_t *bytes) {
  char d1[1024], d2[1300];
  size_t n = 0;
  DIR *a = opendir(root);
  for (struct dirent *x; a && (x = readdir(a)) != NULL;) {
    if (x->d_name[0] == '.')
      continue;
    snprintf(d1, sizeof d1, "%s/%s", root, x->d_name);
    DIR *b = opendir(d1);
    for (struct dirent *y; b && (y = readdir(b)) != NULL;) {
      if (y->d_name[0] == '.')
        continue;
      snprintf(d2, sizeof d2, "%s/%s", d1, y->d_name);
      DIR *c = opendir(d2);
      for (struct dirent *z; c && (z = readdir(c)) != NULL;) {
        struct stat sb;
        if (z->d_name[0] == '.' || fstatat(dirfd(c), z->d_name, &sb, 0) != 0)
          continue;
        n++;
        if (buf != NULL) {
          int fd = openat(dirfd(c), z->d_name, O_RDONLY);
          ssize_t r = fd >= 0 ? read(fd, buf, cap) : -1;
          if (fd >= 0)
            close(fd);
          *bytes += r > 0 ? (uint64_t)r : 0;
        }
      }
      if (c)
        closedir(c);
    }
    if (b)
      closedir(b);
  }
  if (a)
    closedir(a);
  return n;
}

/* One pass of the engine's scrub over the volume (verify or not); its
 * seconds. */
static double pass(kvp_advisor_config_t *cfg, uv_loop_t *loop, kvp__index_t *ix, int verify,
                   kvp__tier_stats_t *out) {
  kvp__tier_opts_t topts;
  kvp__tier_engine_t *e = NULL;
  char err[512];
  cfg->tier_scrub_verify = verify;
  if (kvp__tier_engine_open(kvp__adv_tier_opts(cfg, &topts), loop, ix, &e, err, sizeof err) != 0) {
    fprintf(stderr, "bench scrub: %s\n", err);
    exit(1);
  }
  usleep(2000);
  uint64_t t0 = kvp_bench_now_ns();
  kvp__tier_engine_round(e);
  while (kvp__tier_engine_busy(e))
    uv_run(loop, UV_RUN_ONCE);
  double t = (double)(kvp_bench_now_ns() - t0) / 1e9;
  kvp__tier_engine_stats(e, out);
  kvp__tier_engine_stop(e, NULL, NULL);
  kvp__tier_engine_close(e);
  uv_run(loop, UV_RUN_DEFAULT);
  return t;
}

static int run_size(size_t bytes, size_t n) {
  char dir[256], db[300], p3[300], err[512];
  kvp__index_t *ix = NULL;
  kvp__store_t *st = NULL;
  kvp_volume_t *g3 = NULL;
  uv_loop_t loop;
  uint16_t w, v3;
  kvp_advisor_config_t cfg;

  if (kvp_test_tmpdir(dir, sizeof dir) == NULL)
    return 1;
  snprintf(db, sizeof db, "%s/a.db", dir);
  snprintf(p3, sizeof p3, "%s/g3", dir);
  uv_loop_init(&loop);
  kvp__index_create(n * 2, 3600, &ix);
  if (kvp__store_open(db, &st, err, sizeof err) != 0)
    return 1;
  kvp_volume_param_t p[2] = {{"path", p3}, {"fsync", "off"}};
  if (kvp_volume_open(KVP_BINARY_DIR "/plugins", "posix", "g3", p, 2, &g3, err, sizeof err) != 0) {
    fprintf(stderr, "bench scrub: %s\n", err);
    return 1;
  }
  kvp__index_worker(ix, "w", 0, &w);
  kvp__index_volume(ix, "g3", &v3);
  uint8_t *payload = malloc(bytes + KVP_FRAME_HEADER);
  for (size_t i = 0; i < bytes; i++)
    payload[i] = (uint8_t)(i * 31);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull | 1;
    kvp_frame_t m = {.hash = h, .payload_len = bytes};
    payload[0] = (uint8_t)i;
    if (kvp_volume_put_block(g3, "b", &m, payload, err, sizeof err) != 0 ||
        kvp__index_store(ix, h, 0, 0, w, 3, v3, 16, bytes + KVP_FRAME_HEADER, 1600000000000ull) !=
            0)
      return 1;
  }
  kvp_advisor_config_defaults(&cfg);
  snprintf(cfg.ns, sizeof cfg.ns, "b");
  snprintf(cfg.db_path, sizeof cfg.db_path, "%s", db);
  snprintf(cfg.plugin_dir, sizeof cfg.plugin_dir, "%s", KVP_BINARY_DIR "/plugins");
  cfg.nats.servers[0] = '\0';
  cfg.tiering = 1;
  cfg.tier_scrub_ms = 1;
  cfg.tier_scrub_files_per_s = 0;
  cfg.tier_scrub_bytes_per_s = 0;
  cfg.nvolumes = 1;
  kvp_advisor_volume_t *a = &cfg.volumes[0];
  snprintf(a->name, sizeof a->name, "g3");
  a->tier = 3;
  snprintf(a->plugin, sizeof a->plugin, "posix");
  a->capacity = (int64_t)(4 * n * (bytes + KVP_FRAME_HEADER)); /* no move */
  snprintf(a->params, sizeof a->params, "path=%s\nfsync=off\n", p3);

  /* Baseline, engine, engine, baseline: neither gets the warm cache. */
  kvp__tier_stats_t ts;
  uint64_t rb = 0;
  double tw = 0, tl = 0, tr = 0, tv = 0;
  for (int r = 0; r < 2; r++) {
    uint64_t t0 = kvp_bench_now_ns();
    if (r == 0 && walk(p3, NULL, 0, NULL) != n)
      return 1;
    tw += r == 0 ? (double)(kvp_bench_now_ns() - t0) / 1e9 : 0;
    t0 = kvp_bench_now_ns();
    if (r == 0 && walk(p3, payload, bytes + KVP_FRAME_HEADER, &rb) != n)
      return 1;
    tr += r == 0 ? (double)(kvp_bench_now_ns() - t0) / 1e9 : 0;
    tl += pass(&cfg, &loop, ix, 0, &ts);
    if (ts.scrub_objects != n)
      return 1;
    tv += pass(&cfg, &loop, ix, 1, &ts);
    if (ts.scrub_verified != n || ts.scrub_corrupt != 0)
      return 1;
    if (r == 1) {
      t0 = kvp_bench_now_ns();
      walk(p3, NULL, 0, NULL);
      tw += (double)(kvp_bench_now_ns() - t0) / 1e9;
      t0 = kvp_bench_now_ns();
      walk(p3, payload, bytes + KVP_FRAME_HEADER, &rb);
      tr += (double)(kvp_bench_now_ns() - t0) / 1e9;
    }
  }
  double objs = 2.0 * (double)n, mb = objs * (double)(bytes + KVP_FRAME_HEADER) / 1e6;
  char label[96];
  snprintf(label, sizeof label, "scrub.%zuKiB.list.objects", bytes >> 10);
  kvp_bench_report(label, objs / tl, "objects/s", "plain-readdir-fstatat-walk", objs / tw);
  snprintf(label, sizeof label, "scrub.%zuKiB.verify.MBps", bytes >> 10);
  kvp_bench_report(label, mb / tv, "MB/s", "plain-read-every-file", mb / tr);
  double per_tib = (double)(1ull << 40) / (double)(bytes + KVP_FRAME_HEADER);
  printf("# %zu KiB blocks: 1 TiB is %.0f objects; listing it: %.0f objects / %.0f objects/s = "
         "%.1f s; verifying it: 1099511.6 MB / %.1f MB/s = %.0f s (%.2f h)\n",
         bytes >> 10, per_tib, per_tib, objs / tl, per_tib / (objs / tl), mb / tv,
         1099511.6276 / (mb / tv), 1099511.6276 / (mb / tv) / 3600);
  free(payload);
  uv_loop_close(&loop);
  kvp_volume_close(g3);
  kvp__store_close(st);
  kvp__index_destroy(ix);
  kvp_test_rmtree(dir);
  return 0;
}

KVP_BENCH_SUITE(scrub, "tiering: a scrub pass listing and verifying a posix volume vs a plain "
                       "walk and read; its cost per TiB") {
  size_t n64 = 4096;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
      n64 = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: kvp-bench scrub [--blocks N]\n");
      return 2;
    }
  }
  printf("# one posix volume in the page cache (fsync off), scrub unlimited; 2 runs each, "
         "baseline first then last\n");
  if (run_size(64u << 10, n64) != 0 || run_size(2u << 20, n64 / 16 ? n64 / 16 : 1) != 0) {
    fprintf(stderr, "bench scrub: a pass did not see every object\n");
    return 1;
  }
  return 0;
}
