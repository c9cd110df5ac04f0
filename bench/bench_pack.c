/* kvp-bench pack: the posix plugin's packed layout (layout=packed: small
 * blocks as records in segment files) against its default one file per
 * block, in the same run, and the cost of a compaction.
 *
 *   kvp-bench pack [--dir PATH] [--total MIB] [--fsync on|off]
 *
 * For 16 KiB and 64 KiB blocks (--total MiB of each, default 16), through
 * kvp_volume_put_block / get_block (framed, verified): puts into a files
 * volume and a packed volume alternately (A B B A, each half the blocks,
 * fsync as given, default on: a G3 volume's setting), then warm gets of
 * every block from each. Figures: put and get MB/s packed, with files as
 * the baseline. Then half the packed blocks are deleted (every other one,
 * so every segment is half dead) and the volume compacted to the end:
 * the seconds it took, MB/s of live bytes rewritten, and the bytes on disk
 * before and after (the dead bytes' share reclaimed, as a ratio to the
 * dead bytes reported before). Then the same puts and gets from two
 * processes at once into one volume of each layout (each process puts a
 * quarter of the blocks per round, A B B A, and reads the blocks the other
 * one put): the packed layout's segments of one writer each against files.
 * Default directory: a temporary one under /tmp, removed at the end and on
 * SIGINT or SIGTERM; give --dir on the device to measure. */
#include <dirent.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

static int open_vol(const char *root, int packed, const char *fsync_mode, kvp_volume_t **v) {
  char err[512];
  /* 4 MiB segments, so that a run holds several and compaction's figures
   * are of whole segments. */
  kvp_volume_param_t p[] = {
      {"path", root}, {"fsync", fsync_mode}, {"layout", "packed"}, {"segment_size", "4M"}};
  int rc = kvp_volume_open(KVP_BINARY_DIR "/plugins", "posix", packed ? "packed" : "files", p,
                           packed ? 4 : 2, v, err, sizeof err);
  if (rc != 0)
    fprintf(stderr, "kvp-bench pack: %s\n", err);
  return rc;
}

/* Puts blocks [first, first + n) of size bytes; seconds. */
static double put_range(kvp_volume_t *v, const uint8_t *buf, size_t size, size_t first, size_t n) {
  char err[512];
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t i = first; i < first + n; i++) {
    kvp_frame_t m = {.hash = 0x9e3779b97f4a7c15ull * (i + 1), .payload_len = size};
    if (kvp_volume_put_block(v, "bench", &m, buf, err, sizeof err) != 0) {
      fprintf(stderr, "kvp-bench pack: put: %s\n", err);
      return -1;
    }
  }
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

/* Gets blocks first, first + step, ... below n; seconds, or -1. */
static double get_range(kvp_volume_t *v, uint8_t *buf, size_t size, size_t first, size_t n,
                        size_t step) {
  char err[512];
  kvp_frame_t m;
  uint64_t t0 = kvp_bench_now_ns();
  for (size_t i = first; i < n; i += step) {
    if (kvp_volume_get_block(v, "bench", 0x9e3779b97f4a7c15ull * (i + 1), &m, buf, size, err,
                             sizeof err) != 0) {
      fprintf(stderr, "kvp-bench pack: get: %s\n", err);
      return -1;
    }
  }
  return (double)(kvp_bench_now_ns() - t0) / 1e9;
}

/* Bytes of the regular files under path (recursively). */
static uint64_t du(const char *path) {
  DIR *d = opendir(path);
  struct dirent *de;
  uint64_t n = 0;
  if (d == NULL)
    return 0;
  while ((de = readdir(d)) != NULL) {
    char p[2048];
    struct stat sb;
    if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || de->d_name[1] == '.'))
      continue;
    snprintf(p, sizeof p, "%s/%s", path, de->d_name);
    if (lstat(p, &sb) != 0)
      continue;
    if (S_ISDIR(sb.st_mode))
      n += du(p);
    else if (S_ISREG(sb.st_mode))
      n += (uint64_t)sb.st_blocks * 512;
  }
  closedir(d);
  return n;
}

static int run_size(const char *dir, size_t size, size_t total, const char *fsync_mode) {
  char rf[1100], rp[1100], fig[128], err[512];
  size_t n = total / size, half = n / 2;
  uint8_t *buf = malloc(size);
  kvp_volume_t *vf = NULL, *vp = NULL;
  int rc = -1;

  if (buf == NULL)
    return -1;
  for (size_t i = 0; i < size; i++)
    buf[i] = (uint8_t)(i * 131 + (i >> 9));
  snprintf(rf, sizeof rf, "%s/files-%zu", dir, size);
  snprintf(rp, sizeof rp, "%s/packed-%zu", dir, size);
  if (open_vol(rf, 0, fsync_mode, &vf) != 0 || open_vol(rp, 1, fsync_mode, &vp) != 0)
    goto out;
  double tf = put_range(vf, buf, size, 0, half), tp = put_range(vp, buf, size, 0, half);
  double tp2 = put_range(vp, buf, size, half, n - half),
         tf2 = put_range(vf, buf, size, half, n - half);
  if (tf < 0 || tp < 0 || tp2 < 0 || tf2 < 0)
    goto out;
  double mb = (double)(n * size) / 1e6;
  const char *kib = size == 16384 ? "16k" : "64k";
  snprintf(fig, sizeof fig, "pack.%s.put_mb_per_s", kib);
  kvp_bench_report(fig, mb / (tp + tp2), "MB/s", "files", mb / (tf + tf2));
  double gf = get_range(vf, buf, size, 0, n, 1), gp = get_range(vp, buf, size, 0, n, 1);
  double gp2 = get_range(vp, buf, size, 0, n, 1), gf2 = get_range(vf, buf, size, 0, n, 1);
  if (gf < 0 || gp < 0 || gp2 < 0 || gf2 < 0)
    goto out;
  snprintf(fig, sizeof fig, "pack.%s.get_mb_per_s", kib);
  kvp_bench_report(fig, 2 * mb / (gp + gp2), "MB/s", "files", 2 * mb / (gf + gf2));
  snprintf(fig, sizeof fig, "pack.%s.disk_bytes_per_block", kib);
  kvp_bench_report(fig, (double)du(rp) / (double)n, "B", "files", (double)du(rf) / (double)n);

  /* Half dead, then compacted to the end. */
  for (size_t i = 0; i < n; i += 2)
    if (kvp_volume_delete(vp, "bench", 0x9e3779b97f4a7c15ull * (i + 1), err, sizeof err) != 0) {
      fprintf(stderr, "kvp-bench pack: delete: %s\n", err);
      goto out;
    }
  uint64_t dead0, total0, dead1, total1, disk0 = du(rp);
  if (kvp_volume_garbage(vp, &dead0, &total0, err, sizeof err) != 0)
    goto out;
  uint64_t t0 = kvp_bench_now_ns();
  int steps = 0, r;
  while ((r = kvp_volume_compact(vp, err, sizeof err)) == 1)
    steps++;
  double secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  if (r != 0 || kvp_volume_garbage(vp, &dead1, &total1, err, sizeof err) != 0) {
    fprintf(stderr, "kvp-bench pack: compact: %s\n", err);
    goto out;
  }
  uint64_t disk1 = du(rp);
  snprintf(fig, sizeof fig, "pack.%s.compact_s", kib);
  kvp_bench_report(fig, secs, "s", NULL, 0);
  snprintf(fig, sizeof fig, "pack.%s.compact_live_mb_per_s", kib);
  kvp_bench_report(fig, (double)(total0 - dead0) / 1e6 / secs, "MB/s", NULL, 0);
  snprintf(fig, sizeof fig, "pack.%s.compact_reclaimed_bytes", kib);
  kvp_bench_report(fig, (double)(disk0 > disk1 ? disk0 - disk1 : 0), "B", "dead before",
                   (double)dead0);
  printf("# pack %s: %zu blocks, %d segments compacted in %.3f s; disk %.1f -> %.1f MB; "
         "dead %.1f -> %.1f MB\n",
         kib, n, steps, secs, (double)disk0 / 1e6, (double)disk1 / 1e6, (double)dead0 / 1e6,
         (double)dead1 / 1e6);
  if (get_range(vp, buf, size, 1, n, 2) < 0) /* the survivors read back verified */
    goto out;
  rc = 0;
out:
  kvp_volume_close(vf);
  kvp_volume_close(vp);
  free(buf);
  return rc;
}

/* Two processes at once: each opens root, waits for the go byte on a
 * pipe, then puts its share of [first, first + n) (even or odd blocks) or,
 * with get set, reads the other one's share. Seconds from the go to both
 * done, or -1. */
static double two_procs(const char *root, int packed, const char *fsync_mode, size_t size,
                        size_t first, size_t n, int get) {
  int go[2], ready[2];
  pid_t pid[2];
  if (pipe(go) != 0 || pipe(ready) != 0)
    return -1;
  for (int c = 0; c < 2; c++) {
    pid_t parent = getpid();
    if ((pid[c] = fork()) == 0) {
      kvp_volume_t *v;
      uint8_t *buf = malloc(size);
      char b;
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent || buf == NULL || open_vol(root, packed, fsync_mode, &v) != 0)
        _exit(2);
      for (size_t i = 0; i < size; i++)
        buf[i] = (uint8_t)(i * 131 + (i >> 9));
      if (write(ready[1], "r", 1) != 1 || read(go[0], &b, 1) != 1)
        _exit(3);
      int bad = 0;
      /* Process c puts blocks of parity c and reads those of the other. */
      size_t from = first + (size_t)(get ? 1 - c : c);
      if (get)
        bad = get_range(v, buf, size, from, first + n, 2) < 0;
      else
        for (size_t i = from; i < first + n && !bad; i += 2)
          bad = put_range(v, buf, size, i, 1) < 0;
      kvp_volume_close(v);
      _exit(bad ? 4 : 0);
    }
  }
  char b;
  int ok = 1;
  for (int c = 0; c < 2; c++)
    ok &= read(ready[0], &b, 1) == 1;
  uint64_t t0 = kvp_bench_now_ns();
  ok &= write(go[1], "gg", 2) == 2;
  for (int c = 0; c < 2; c++) {
    int st = 0;
    ok &= waitpid(pid[c], &st, 0) == pid[c] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  double secs = (double)(kvp_bench_now_ns() - t0) / 1e9;
  close(go[0]);
  close(go[1]);
  close(ready[0]);
  close(ready[1]);
  return ok ? secs : -1;
}

/* Puts and gets from two processes at once, packed against files. */
static int run_two(const char *dir, size_t size, size_t total, const char *fsync_mode) {
  char rf[1100], rp[1100], fig[128];
  size_t n = total / size, half = n / 2;
  kvp_volume_t *v;
  const char *kib = size == 16384 ? "16k" : "64k";

  snprintf(rf, sizeof rf, "%s/files2-%zu", dir, size);
  snprintf(rp, sizeof rp, "%s/packed2-%zu", dir, size);
  /* Created here, so that the two processes only open them. */
  if (open_vol(rf, 0, fsync_mode, &v) != 0)
    return -1;
  kvp_volume_close(v);
  if (open_vol(rp, 1, fsync_mode, &v) != 0)
    return -1;
  kvp_volume_close(v);
  double tf = two_procs(rf, 0, fsync_mode, size, 0, half, 0);
  double tp = two_procs(rp, 1, fsync_mode, size, 0, half, 0);
  double tp2 = two_procs(rp, 1, fsync_mode, size, half, n - half, 0);
  double tf2 = two_procs(rf, 0, fsync_mode, size, half, n - half, 0);
  if (tf < 0 || tp < 0 || tp2 < 0 || tf2 < 0) {
    fprintf(stderr, "kvp-bench pack: a put process failed\n");
    return -1;
  }
  double mb = (double)(n * size) / 1e6;
  snprintf(fig, sizeof fig, "pack.%s.put_2procs_mb_per_s", kib);
  kvp_bench_report(fig, mb / (tp + tp2), "MB/s", "files", mb / (tf + tf2));
  double gf = two_procs(rf, 0, fsync_mode, size, 0, n, 1);
  double gp = two_procs(rp, 1, fsync_mode, size, 0, n, 1);
  double gp2 = two_procs(rp, 1, fsync_mode, size, 0, n, 1);
  double gf2 = two_procs(rf, 0, fsync_mode, size, 0, n, 1);
  if (gf < 0 || gp < 0 || gp2 < 0 || gf2 < 0) {
    fprintf(stderr, "kvp-bench pack: a get process failed\n");
    return -1;
  }
  snprintf(fig, sizeof fig, "pack.%s.get_2procs_mb_per_s", kib);
  kvp_bench_report(fig, 2 * mb / (gp + gp2), "MB/s", "files", 2 * mb / (gf + gf2));
  return 0;
}

static char g_tmp[512];

/* An interrupted run leaves nothing behind. */
static void on_signal(int sig) {
  if (g_tmp[0])
    kvp_test_rmtree(g_tmp);
  signal(sig, SIG_DFL);
  raise(sig);
}

KVP_BENCH_SUITE(pack, "posix packed layout vs one file per block (16/64 KiB), and compaction") {
  char tmp[512] = "", dir[512];
  const char *fsync_mode = "on";
  size_t total = 16u << 20;

  dir[0] = '\0';
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
      snprintf(dir, sizeof dir, "%s", argv[++i]);
    else if (strcmp(argv[i], "--total") == 0 && i + 1 < argc)
      total = (size_t)strtoull(argv[++i], NULL, 10) << 20;
    else if (strcmp(argv[i], "--fsync") == 0 && i + 1 < argc)
      fsync_mode = argv[++i];
    else {
      fprintf(stderr, "usage: kvp-bench pack [--dir PATH] [--total MIB] [--fsync on|off]\n");
      return 2;
    }
  }
  if (dir[0] == '\0') {
    if (kvp_test_tmpdir(tmp, sizeof tmp) == NULL)
      return -1;
    snprintf(dir, sizeof dir, "%s", tmp);
    snprintf(g_tmp, sizeof g_tmp, "%s", tmp);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
  }
  printf("# pack: %zu MiB per size in %s, fsync %s\n", total >> 20, dir, fsync_mode);
  int rc = run_size(dir, 16384, total, fsync_mode);
  if (rc == 0)
    rc = run_size(dir, 65536, total, fsync_mode);
  if (rc == 0)
    rc = run_two(dir, 16384, total, fsync_mode);
  if (rc == 0)
    rc = run_two(dir, 65536, total, fsync_mode);
  if (tmp[0])
    kvp_test_rmtree(tmp);
  g_tmp[0] = '\0';
  return rc;
}
