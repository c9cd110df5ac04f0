/* The posix plugin's packed layout (plugins/posix/pack.c) on a real
 * filesystem: dead bytes counted and reclaimed by compaction with every
 * object intact, tombstones that keep a deleted object deleted across
 * compactions and reopens, torn writes and a crash mid-compaction
 * survived, an object that changes form (record or file) kept once, a
 * packed volume refused under layout=files, and two opens sharing one
 * (also past another's write in flight); a segment cut short on disk, a
 * write failed at a segment's end, more segments than the open-files limit.
 * The contract every plugin
 * keeps is the conformance suite's (conformance_posix_packed.*).
 * Why this file is long: every case, damage and limits included, uses one
 * fixture (a packed volume of tiny segments, objects whose bytes follow from
 * their number) and its checks; split, each file would repeat them. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

#define NS "packtest"

typedef struct fx_s {
  char dir[256], root[300], segs[340];
  kvp_volume_t *v;
  const kvp_volume_ops_t *o;
  void *h;
} fx_t;

/* Opens the volume with the packed layout: 8 KiB segments, objects of up
 * to 2 KiB packed. */
static int reopen(fx_t *f, const char *layout) {
  char err[512];
  kvp_volume_param_t p[] = {{"path", f->root},
                            {"fsync", "off"},
                            {"layout", layout},
                            {"pack_max", "2K"},
                            {"segment_size", "8K"}};
  if (f->v)
    kvp_volume_close(f->v);
  f->v = NULL;
  int rc = kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-packed", p,
                           strcmp(layout, "packed") == 0 ? 5 : 3, &f->v, err, sizeof err);
  if (rc != 0) {
    print_message("open: %s\n", err);
    return rc;
  }
  f->o = kvp_volume_ops(f->v);
  f->h = kvp_volume_handle(f->v);
  return 0;
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  *state = f;
  if (kvp_test_tmpdir(f->dir, sizeof f->dir) == NULL)
    return -1;
  snprintf(f->root, sizeof f->root, "%s/vol", f->dir);
  snprintf(f->segs, sizeof f->segs, "%s/.packed", f->root);
  return reopen(f, "packed");
}

static int teardown(void **state) {
  fx_t *f = *state;
  kvp_volume_close(f->v);
  kvp_test_rmtree(f->dir);
  free(f);
  return 0;
}

/* Object i's bytes: size and contents follow from (i, gen). */
static size_t body(uint64_t i, int gen, uint8_t *b, size_t size) {
  for (size_t k = 0; k < size; k++)
    b[k] = (uint8_t)(i * 31 + (uint64_t)gen * 7 + k);
  return size;
}

static void put(fx_t *f, uint64_t i, int gen, size_t size) {
  uint8_t b[8192];
  char err[512] = "";
  struct iovec iov = {b, body(i, gen, b, size)};
  int rc = f->o->put(f->h, NS, i, &iov, 1, err, sizeof err);
  if (rc != 0)
    print_message("put %" PRIu64 ": %s\n", i, err);
  assert_int_equal(rc, 0);
}

/* Object i is there with the bytes of generation gen and that size. */
static void expect(fx_t *f, uint64_t i, int gen, size_t size) {
  uint8_t b[8192], want[8192];
  char err[512] = "";
  size_t len = 0;
  struct iovec iov = {b, sizeof b};
  int rc = f->o->get(f->h, NS, i, &iov, 1, &len, err, sizeof err);
  if (rc != 0)
    print_message("get %" PRIu64 ": %s\n", i, err);
  assert_int_equal(rc, 0);
  assert_int_equal(len, size);
  body(i, gen, want, size);
  assert_memory_equal(b, want, size);
}

static void expect_gone(fx_t *f, uint64_t i) {
  uint8_t b[64];
  char err[512];
  size_t len;
  struct iovec iov = {b, sizeof b};
  assert_int_equal(f->o->get(f->h, NS, i, &iov, 1, &len, err, sizeof err), KVP_ENOENT);
  assert_int_equal(f->o->exists(f->h, NS, i, NULL), 0);
}

static void del(fx_t *f, uint64_t i) {
  char err[512] = "";
  assert_int_equal(f->o->del(f->h, NS, i, err, sizeof err), 0);
}

static int nsegs(fx_t *f) {
  DIR *d = opendir(f->segs);
  struct dirent *de;
  int n = 0;
  if (d == NULL)
    return -1;
  while ((de = readdir(d)) != NULL)
    n += strstr(de->d_name, ".seg") != NULL;
  closedir(d);
  return n;
}

static void garbage(fx_t *f, uint64_t *dead, uint64_t *total) {
  char err[512];
  assert_int_equal(kvp_volume_garbage(f->v, dead, total, err, sizeof err), 0);
}

static void compact_all(fx_t *f) {
  char err[512] = "";
  int rc, steps = 0;
  while ((rc = kvp_volume_compact(f->v, err, sizeof err)) == 1)
    assert_true(++steps < 1000);
  if (rc != 0)
    print_message("compact: %s\n", err);
  assert_int_equal(rc, 0);
}

static void stat_is(fx_t *f, uint64_t blocks, uint64_t used) {
  kvp_volume_stat_t st;
  char err[512];
  assert_int_equal(kvp_volume_stat(f->v, &st, err, sizeof err), 0);
  assert_int_equal(st.blocks, blocks);
  assert_int_equal(st.used, used);
}

/* Deletes and replacements leave dead bytes; compaction removes the
 * segments that held them, every live object intact, also after a reopen. */
static void compaction_reclaims_dead_bytes(void **state) {
  fx_t *f = *state;
  uint64_t dead, total;

  for (uint64_t i = 0; i < 64; i++)
    put(f, i, 0, 1000);
  garbage(f, &dead, &total);
  assert_int_equal(dead, 0);
  int before = nsegs(f);
  assert_true(before >= 8); /* 64 records of ~1 KiB in 8 KiB segments */
  for (uint64_t i = 0; i < 64; i += 2)
    del(f, i);
  for (uint64_t i = 1; i < 64; i += 4)
    put(f, i, 1, 1000); /* replaced: the old record dies */
  garbage(f, &dead, &total);
  assert_true(dead >= 48 * 1000);
  stat_is(f, 32, 32 * 1000);
  compact_all(f);
  garbage(f, &dead, &total);
  /* What is left dead: tombstones still shadowing records in older
   * segments, and the active segment's. */
  assert_true(dead < 8192);
  assert_true(nsegs(f) < before);
  stat_is(f, 32, 32 * 1000);
  for (uint64_t i = 0; i < 64; i++) {
    if (i % 2 == 0)
      expect_gone(f, i);
    else
      expect(f, i, i % 4 == 1 ? 1 : 0, 1000);
  }
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 32, 32 * 1000);
  for (uint64_t i = 0; i < 64; i++) {
    if (i % 2 == 0)
      expect_gone(f, i);
    else
      expect(f, i, i % 4 == 1 ? 1 : 0, 1000);
  }
}

/* A deleted object stays deleted when the segment with its tombstone is
 * compacted before the segment with its record (the tombstone is carried
 * forward), and after every compaction and reopen. Records of 1,056 bytes:
 * 7 to an 8 KiB segment. */
static void tombstones_keep_deletes_deleted(void **state) {
  fx_t *f = *state;
  char seg1[512], seg2[512], err[512] = "";

  for (uint64_t i = 1; i < 8; i++)
    put(f, i, 0, 1000); /* segment 1 */
  for (uint64_t i = 200; i < 207; i++)
    put(f, i, 0, 1000); /* segment 2 */
  del(f, 1);            /* its tombstone: the end of segment 2 */
  for (uint64_t i = 207; i < 214; i++)
    put(f, i, 0, 1000); /* segment 3 */
  for (uint64_t i = 200; i < 206; i++)
    del(f, i); /* segment 2 mostly dead: compacted first */
  assert_int_equal(kvp_volume_compact(f->v, err, sizeof err), 1);
  snprintf(seg1, sizeof seg1, "%s/%016x.seg", f->segs, 1);
  snprintf(seg2, sizeof seg2, "%s/%016x.seg", f->segs, 2);
  assert_int_equal(access(seg1, F_OK), 0);
  assert_int_not_equal(access(seg2, F_OK), 0);
  assert_int_equal(reopen(f, "packed"), 0);
  expect_gone(f, 1); /* its record is still in segment 1 */
  compact_all(f);
  assert_int_equal(reopen(f, "packed"), 0);
  expect_gone(f, 1);
  for (uint64_t i = 200; i < 206; i++)
    expect_gone(f, i);
  for (uint64_t i = 2; i < 8; i++)
    expect(f, i, 0, 1000);
  for (uint64_t i = 206; i < 214; i++)
    expect(f, i, 0, 1000);
  stat_is(f, 14, 14 * 1000);
}

static void copy_file(const char *from, const char *to) {
  char buf[65536];
  int a = open(from, O_RDONLY), b = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ssize_t n;
  assert_true(a >= 0 && b >= 0);
  while ((n = read(a, buf, sizeof buf)) > 0)
    assert_int_equal(write(b, buf, (size_t)n), n);
  close(a);
  close(b);
}

/* A crash mid-compaction leaves the segment and (some of) its copies: the
 * reopened volume has each object once, with the usage counted once. */
static void a_crash_mid_compaction_keeps_each_object_once(void **state) {
  fx_t *f = *state;
  char first[512], keep[560], err[512] = "";

  for (uint64_t i = 0; i < 24; i++)
    put(f, i, 0, 1000);
  for (uint64_t i = 0; i < 8; i += 2)
    del(f, i); /* the first segment: half dead */
  snprintf(first, sizeof first, "%s/%016x.seg", f->segs, 1);
  snprintf(keep, sizeof keep, "%s.keep", f->dir);
  copy_file(first, keep);
  assert_int_equal(kvp_volume_compact(f->v, err, sizeof err), 1);
  assert_int_not_equal(access(first, F_OK), 0);
  kvp_volume_close(f->v);
  f->v = NULL;
  rename(keep, first); /* as if the crash came before the unlink */
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 20, 20 * 1000);
  for (uint64_t i = 0; i < 24; i++) {
    if (i < 8 && i % 2 == 0)
      expect_gone(f, i);
    else
      expect(f, i, 0, 1000);
  }
  compact_all(f);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 20, 20 * 1000);
}

/* Torn writes (a crash mid-append, or a reserved place never written): the
 * records around them load, the torn one is dead, the tail is cut. */
static void torn_records_cost_only_their_bytes(void **state) {
  fx_t *f = *state;
  char seg[512];
  struct stat sb;

  for (uint64_t i = 0; i < 5; i++)
    put(f, i, 0, 1000);
  kvp_volume_close(f->v);
  f->v = NULL;
  snprintf(seg, sizeof seg, "%s/%016x.seg", f->segs, 1);
  int fd = open(seg, O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(fstat(fd, &sb), 0);
  /* Record 2 (at about 2 KiB) gets a zeroed stretch, and half a record is
   * appended at the end. */
  char z[300] = {0}, junk[700];
  memset(junk, 0x4b, sizeof junk);
  assert_int_equal(pwrite(fd, z, sizeof z, 2 * 1056 + 100), (ssize_t)sizeof z);
  assert_int_equal(pwrite(fd, junk, sizeof junk, sb.st_size), (ssize_t)sizeof junk);
  close(fd);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 4, 4 * 1000);
  expect_gone(f, 2);
  for (uint64_t i = 0; i < 5; i++)
    if (i != 2)
      expect(f, i, 0, 1000);
  assert_int_equal(stat(seg, &sb), 0);
  put(f, 9, 0, 1000); /* into a new segment: a reopen never appends to an old one */
  assert_int_equal(reopen(f, "packed"), 0);
  expect(f, 9, 0, 1000);
  stat_is(f, 5, 5 * 1000);
}

/* An object that grows past pack_max becomes a file and its record goes;
 * one that shrinks becomes a record and its file goes: one object always. */
static void an_object_changing_form_is_one_object(void **state) {
  fx_t *f = *state;

  put(f, 7, 0, 1000);
  put(f, 7, 1, 4000); /* a file now */
  stat_is(f, 1, 4000);
  expect(f, 7, 1, 4000);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 1, 4000);
  expect(f, 7, 1, 4000);
  put(f, 7, 2, 500); /* a record again */
  stat_is(f, 1, 500);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 1, 500);
  expect(f, 7, 2, 500);
  del(f, 7);
  expect_gone(f, 7);
  stat_is(f, 0, 0);
}

/* layout=files on a packed volume would hide its records: refused. */
static void a_packed_volume_is_refused_as_files(void **state) {
  fx_t *f = *state;
  char err[512] = "";
  kvp_volume_t *v = NULL;
  kvp_volume_param_t p[] = {{"path", f->root}, {"fsync", "off"}};

  put(f, 1, 0, 100);
  kvp_volume_close(f->v);
  f->v = NULL;
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-files", p, 2, &v, err, sizeof err),
      KVP_ECONFIG);
  assert_non_null(strstr(err, "layout=packed"));
  assert_non_null(strstr(err, f->root));
  assert_int_equal(reopen(f, "packed"), 0);
  expect(f, 1, 0, 100);
}

/* A second open (here in the same process: flock treats two opens like two
 * processes) shares the volume: each sees what the other put, deleted and
 * compacted, with the usage of the whole volume. Before several processes
 * could open a packed volume this test was a_second_open_is_refused
 * (KVP_EBUSY); what is refused now is an earlier one-process opener (below). */
static void a_second_open_shares_the_volume(void **state) {
  fx_t *f = *state;
  fx_t g = *f;

  g.v = NULL;
  assert_int_equal(reopen(&g, "packed"), 0);
  for (uint64_t i = 0; i < 24; i++)
    put(f, i, 0, 1000); /* three sealed segments and an active one, f's */
  for (uint64_t i = 0; i < 24; i++)
    expect(&g, i, 0, 1000);
  stat_is(&g, 24, 24 * 1000);
  for (uint64_t i = 0; i < 24; i += 2)
    del(&g, i); /* tombstones in g's segment */
  for (uint64_t i = 100; i < 110; i++)
    put(&g, i, 1, 900);
  for (uint64_t i = 0; i < 24; i++) {
    if (i % 2 == 0)
      expect_gone(f, i);
    else
      expect(f, i, 0, 1000);
  }
  for (uint64_t i = 100; i < 110; i++)
    expect(f, i, 1, 900);
  stat_is(f, 22, 12 * 1000 + 10 * 900);
  /* g compacts f's sealed segments; f reads on, from the copies. */
  compact_all(&g);
  uint64_t dead, total;
  garbage(&g, &dead, &total);
  for (uint64_t i = 1; i < 24; i += 2)
    expect(f, i, 0, 1000);
  put(f, 5, 2, 700);
  expect(&g, 5, 2, 700);
  stat_is(f, 22, 11 * 1000 + 700 + 10 * 900);
  stat_is(&g, 22, 11 * 1000 + 700 + 10 * 900);
  compact_all(f);
  kvp_volume_close(g.v);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 22, 11 * 1000 + 700 + 10 * 900);
  for (uint64_t i = 0; i < 24; i++) {
    if (i % 2 == 0)
      expect_gone(f, i);
    else
      expect(f, i, i == 5 ? 2 : 0, i == 5 ? 700 : 1000);
  }
}

/* A writer's threads append in parallel: each reserves its place under
 * the lock and writes outside it, so record 4 may be written and its put
 * acknowledged while record 3, before it in the segment, is still in
 * flight. Another opener's lookup of 4 finds it then (before pack.c read
 * past a write in flight it got KVP_ENOENT until 3 was done); once 3 is
 * done both are there, counted once. The write in flight is made by hand:
 * record 3's header zeroed in the segment f still holds, then put back. */
static void a_put_acknowledged_past_a_write_in_flight_is_seen(void **state) {
  fx_t *f = *state;
  fx_t g = *f;
  char seg[512];
  unsigned char hdr[48], zero[48] = {0};

  g.v = NULL;
  assert_int_equal(reopen(&g, "packed"), 0);
  for (uint64_t i = 0; i < 3; i++)
    put(f, i, 0, 1000); /* 1056-byte records: 0, 1056, 2112 */
  for (uint64_t i = 0; i < 3; i++)
    expect(&g, i, 0, 1000);
  put(f, 3, 0, 1000);
  put(f, 4, 0, 1000);
  snprintf(seg, sizeof seg, "%s/%016x.seg", f->segs, 1);
  int fd = open(seg, O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, hdr, sizeof hdr, 3 * 1056), (ssize_t)sizeof hdr);
  assert_int_equal(pwrite(fd, zero, sizeof zero, 3 * 1056), (ssize_t)sizeof zero);
  expect(&g, 4, 0, 1000);
  expect_gone(&g, 3); /* in flight: not yet */
  stat_is(&g, 4, 4 * 1000);
  put(f, 5, 0, 1000);
  expect(&g, 5, 0, 1000);
  stat_is(&g, 5, 5 * 1000);
  assert_int_equal(pwrite(fd, hdr, sizeof hdr, 3 * 1056), (ssize_t)sizeof hdr); /* done */
  close(fd);
  for (uint64_t i = 0; i < 6; i++)
    expect(&g, i, 0, 1000);
  stat_is(&g, 6, 6 * 1000);
  uint64_t dead, total;
  garbage(&g, &dead, &total);
  assert_int_equal(dead, 0); /* 4 and 5, read twice, counted once */
  kvp_volume_close(g.v);
}

/* A process of the earlier one-process layout held .packed/LOCK
 * exclusively: while one does, open is refused naming the volume. */
static void an_exclusive_holder_of_the_old_lock_is_refused(void **state) {
  fx_t *f = *state;
  char err[512] = "", lock[400];
  kvp_volume_t *v = NULL;
  kvp_volume_param_t p[] = {{"path", f->root}, {"layout", "packed"}};

  put(f, 1, 0, 100);
  kvp_volume_close(f->v);
  f->v = NULL;
  snprintf(lock, sizeof lock, "%s/LOCK", f->segs);
  int fd = open(lock, O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
  assert_int_equal(
      kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-again", p, 2, &v, err, sizeof err),
      KVP_EBUSY);
  assert_non_null(strstr(err, f->root));
  assert_non_null(strstr(err, "earlier"));
  close(fd);
  assert_int_equal(reopen(f, "packed"), 0);
  expect(f, 1, 0, 100);
}

/* A segment cut short on disk while the volume is open (a truncate, lost
 * blocks): a record the index knows but whose bytes are gone reads as a
 * corrupt copy (KVP_ECORRUPT: the engine quarantines it, as for a block
 * file cut short), not as an I/O error of the volume (which would back off
 * every move out of it, round after round); and compacting that segment
 * neither faults on its missing pages (SIGBUS) nor keeps the lost records:
 * every object is then whole or gone, and a reopen agrees. */
static void a_segment_cut_short_reads_as_corrupt(void **state) {
  fx_t *f = *state;
  char first[512], err[512] = "";
  uint8_t b[8192];
  size_t len = 0;
  struct iovec iov = {b, sizeof b};

  for (uint64_t i = 0; i < 24; i++)
    put(f, i, 0, 1000);
  del(f, 1); /* the first segment has dead bytes: compaction picks it */
  snprintf(first, sizeof first, "%s/%016x.seg", f->segs, 1);
  assert_int_equal(truncate(first, 3000), 0); /* within object 2's record */
  expect(f, 0, 0, 1000);
  assert_int_equal(f->o->get(f->h, NS, 2, &iov, 1, &len, err, sizeof err), KVP_ECORRUPT);
  assert_int_equal(f->o->get(f->h, NS, 3, &iov, 1, &len, err, sizeof err), KVP_ECORRUPT);
  compact_all(f);
  assert_int_not_equal(access(first, F_OK), 0);
  for (int pass = 0; pass < 2; pass++) {
    uint64_t whole = 0;
    for (uint64_t i = 0; i < 24; i++) {
      int rc = f->o->get(f->h, NS, i, &iov, 1, &len, err, sizeof err);
      if (rc == 0) {
        expect(f, i, 0, 1000);
        whole++;
      } else {
        assert_int_equal(rc, KVP_ENOENT);
        assert_true(i >= 1 && i < 8); /* deleted, or in the lost part of the first segment */
      }
    }
    expect(f, 0, 0, 1000);
    expect(f, 23, 0, 1000);
    stat_is(f, whole, whole * 1000);
    assert_int_equal(reopen(f, "packed"), 0);
  }
}

/* A write that fails at a segment's end (the disk full: here the file
 * size limit) leaves the segment shorter than the place it reserved, its
 * bytes dead and the segment sealed; compacting it reads only what is on
 * disk (it faulted on the missing pages: SIGBUS), and every acknowledged
 * object stays. */
static void a_failed_write_at_a_segments_end_is_compacted(void **state) {
  fx_t *f = *state;
  char first[512], err[512] = "";
  struct stat sb;
  struct rlimit old, lim;
  uint8_t b[8192];
  struct iovec iov = {b, body(9, 0, b, 1000)};

  for (uint64_t i = 0; i < 3; i++)
    put(f, i, 0, 1000);
  snprintf(first, sizeof first, "%s/%016x.seg", f->segs, 1);
  assert_int_equal(stat(first, &sb), 0);
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = (rlim_t)sb.st_size + 300; /* the next record is cut after 300 bytes */
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = f->o->put(f->h, NS, 9, &iov, 1, err, sizeof err);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_not_equal(rc, 0);
  assert_int_equal(stat(first, &sb), 0);
  assert_true(sb.st_size < 3 * 1056 + 1056);
  compact_all(f);
  for (uint64_t i = 0; i < 3; i++)
    expect(f, i, 0, 1000);
  expect_gone(f, 9);
  assert_int_equal(reopen(f, "packed"), 0);
  for (uint64_t i = 0; i < 3; i++)
    expect(f, i, 0, 1000);
  stat_is(f, 3, 3000);
}

/* A packed volume keeps a descriptor on each of its segments: past the
 * process's soft limit on open files (1024 by default for a shell or a
 * systemd service, ~1000 segments: 64 GiB at the default 64M
 * segment_size) its puts failed with EMFILE, and a reopen could not read
 * it. The layout raises the soft limit towards the hard one when it runs
 * out, so 200 segments under a soft limit of 128 are written and read. */
static void more_segments_than_the_soft_file_limit(void **state) {
  fx_t *f = *state;
  struct rlimit old, lim;

  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < 512)
    skip();
  lim = old;
  lim.rlim_cur = 128;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
  for (uint64_t i = 0; i < 1400; i++) /* 7 records a segment: 200 segments */
    put(f, i, 0, 1000);
  assert_true(nsegs(f) >= 190);
  assert_int_equal(reopen(f, "packed"), 0);
  stat_is(f, 1400, 1400 * 1000);
  expect(f, 0, 0, 1000);
  expect(f, 1399, 0, 1000);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

/* Under a hard limit too low for the segments, a put fails saying what to
 * raise. (Lowers this process's hard limit for good: each case runs in its
 * own process.) */
static void a_hard_file_limit_is_named(void **state) {
  fx_t *f = *state;
  struct rlimit lim = {128, 128};
  char err[512] = "";
  uint8_t b[1000];
  struct iovec iov = {b, body(0, 0, b, sizeof b)};
  int rc = 0;

  assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
  for (uint64_t i = 0; i < 1400 && rc == 0; i++)
    rc = f->o->put(f->h, NS, i, &iov, 1, err, sizeof err);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err, "open files"));
  assert_non_null(strstr(err, "segment_size"));
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(compaction_reclaims_dead_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(tombstones_keep_deletes_deleted, setup, teardown),
      cmocka_unit_test_setup_teardown(a_crash_mid_compaction_keeps_each_object_once, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(torn_records_cost_only_their_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(a_segment_cut_short_reads_as_corrupt, setup, teardown),
      cmocka_unit_test_setup_teardown(a_failed_write_at_a_segments_end_is_compacted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(more_segments_than_the_soft_file_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(a_hard_file_limit_is_named, setup, teardown),
      cmocka_unit_test_setup_teardown(an_object_changing_form_is_one_object, setup, teardown),
      cmocka_unit_test_setup_teardown(a_packed_volume_is_refused_as_files, setup, teardown),
      cmocka_unit_test_setup_teardown(a_second_open_shares_the_volume, setup, teardown),
      cmocka_unit_test_setup_teardown(a_put_acknowledged_past_a_write_in_flight_is_seen, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(an_exclusive_holder_of_the_old_lock_is_refused, setup,
                                      teardown),
  };
  return kvp_test_run("volume_packed", tests, sizeof tests / sizeof tests[0], argc, argv);
}
