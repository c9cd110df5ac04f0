/* The posix plugin's packed layout opened by several real processes at once
 * (plugins/posix/pack.c, "Several processes"): writers putting, replacing,
 * deleting and reading each other's objects, a deleter deleting what the
 * writers finished (as the advisor does), a compactor compacting all the
 * while; kill -9 of a writer, of the compactor (again and again, so some
 * kills land mid-compaction) and of the deleter. Afterwards, in a fresh
 * open, then again after compacting everything and reopening: every object
 * whose put was acknowledged and that was not deleted reads back byte-exact,
 * no deleted or never-written object is there, and the usage counts exactly
 * the objects that are. An operation a kill interrupted may have happened or
 * not, but the same way in both checks.
 *
 * Every process logs each operation before it starts (BEGIN) and once it
 * was acknowledged (ACK) with one write(2) to a log of its own, which a
 * SIGKILL cannot tear. Children check what they read and exit non-zero on
 * a wrong byte or a missing object. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/volume.h"

#define NS "procs"
#define WRITERS 3
#define KEYS 900 /* per writer */
#define OP_PUT0 1
#define OP_PUT1 2
#define OP_DEL 3
#define OP_DONE 4 /* the writer will not touch the key again */
#define SCRATCH 4 /* keys of the deleter's own, under writer id WRITERS */
#define BEGIN 0
#define ACK 1

typedef struct logrec_s {
  uint8_t op, phase;
  uint16_t writer;
  uint32_t key;
} logrec_t;

static char g_dir[256], g_root[300];

static uint64_t key_hash(unsigned w, unsigned i) {
  return ((uint64_t)(w + 1) << 40) | i;
}

/* Object (w, i) of generation gen: its size and bytes. */
static size_t body(unsigned w, unsigned i, int gen, uint8_t *b) {
  uint64_t h = key_hash(w, i) * 0x9e3779b97f4a7c15ull + (uint64_t)gen * 0xbf58476d1ce4e5b9ull;
  size_t size = 100 + (size_t)((h >> 20) % 3000);
  for (size_t k = 0; k < size; k++)
    b[k] = (uint8_t)((h >> (k % 56)) + k * 7 + (unsigned)gen);
  return size;
}

static int open_vol(kvp_volume_t **v) {
  char err[512];
  kvp_volume_param_t p[] = {{"path", g_root},
                            {"fsync", "off"},
                            {"layout", "packed"},
                            {"pack_max", "4K"},
                            {"segment_size", "32K"}};
  int rc = kvp_volume_open(KVP_BUILD_PLUGIN_DIR, "posix", "g3-shared", p, 5, v, err, sizeof err);
  if (rc != 0)
    fprintf(stderr, "open: %s\n", err);
  return rc;
}

static void log_path(const char *who, int n, char *out, size_t len) {
  snprintf(out, len, "%s/%s%d.log", g_dir, who, n);
}

static void log_op(int fd, unsigned w, unsigned i, int op, int phase) {
  logrec_t r = {(uint8_t)op, (uint8_t)phase, (uint16_t)w, i};
  if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
    _exit(9);
}

static int do_put(kvp_volume_t *v, unsigned w, unsigned i, int gen) {
  uint8_t b[4096];
  char err[512];
  kvp_frame_t m = {.hash = key_hash(w, i), .payload_len = body(w, i, gen, b)};
  int rc = kvp_volume_put_block(v, NS, &m, b, err, sizeof err);
  if (rc != 0)
    fprintf(stderr, "put %u/%u: %s\n", w, i, err);
  return rc;
}

/* 0 and the generation in *gen, KVP_ENOENT, or another code (wrong bytes:
 * KVP_ECORRUPT). */
static int do_get(kvp_volume_t *v, unsigned w, unsigned i, int *gen) {
  uint8_t b[4096], want[4096];
  char err[512];
  kvp_frame_t m;
  int rc = kvp_volume_get_block(v, NS, key_hash(w, i), &m, b, sizeof b, err, sizeof err);
  if (rc != 0)
    return rc;
  for (int g = 0; g < 2; g++) {
    size_t n = body(w, i, g, want);
    if (n == m.payload_len && memcmp(b, want, n) == 0) {
      *gen = g;
      return 0;
    }
  }
  return KVP_ECORRUPT;
}

static unsigned rnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

/* A writer: for each of its keys a put, for some a replacement, for some
 * a delete of its own; reads back its own latest and others' objects. */
static int writer(unsigned w) {
  char path[400];
  kvp_volume_t *v;
  unsigned seed = 77 + w;
  log_path("writer", (int)w, path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0 || open_vol(&v) != 0)
    return 2;
  for (unsigned i = 0; i < KEYS; i++) {
    int gen = -1;
    log_op(fd, w, i, OP_PUT0, BEGIN);
    if (do_put(v, w, i, 0) != 0)
      return 3;
    log_op(fd, w, i, OP_PUT0, ACK);
    if (i % 4 == 1) {
      log_op(fd, w, i, OP_PUT1, BEGIN);
      if (do_put(v, w, i, 1) != 0)
        return 3;
      log_op(fd, w, i, OP_PUT1, ACK);
    }
    if (do_get(v, w, i, &gen) != 0 || gen != (i % 4 == 1)) {
      fprintf(stderr, "writer %u: own %u not read back\n", w, i);
      return 4;
    }
    if (i % 7 == 3) {
      char err[512];
      log_op(fd, w, i, OP_DEL, BEGIN);
      if (kvp_volume_delete(v, NS, key_hash(w, i), err, sizeof err) != 0) {
        fprintf(stderr, "writer %u: delete %u: %s\n", w, i, err);
        return 5;
      }
      log_op(fd, w, i, OP_DEL, ACK);
      if (do_get(v, w, i, &gen) != KVP_ENOENT) {
        fprintf(stderr, "writer %u: deleted %u still there\n", w, i);
        return 6;
      }
    }
    log_op(fd, w, i, OP_DONE, ACK);
    /* Another writer's object: absent, or exactly one of its generations. */
    unsigned ow = rnd(&seed) % WRITERS, oi = rnd(&seed) % KEYS;
    int rc = do_get(v, ow, oi, &gen);
    if (rc != 0 && rc != KVP_ENOENT) {
      fprintf(stderr, "writer %u: %u/%u read wrong (%d)\n", w, ow, oi, rc);
      return 7;
    }
    /* Its own earlier keys that nobody deletes are there. */
    if (ow == w && oi < i && oi % 3 != 0 && oi % 7 != 3 && rc == KVP_ENOENT) {
      fprintf(stderr, "writer %u: own %u, done, not there\n", w, oi);
      return 8;
    }
  }
  kvp_volume_close(v);
  close(fd);
  return 0;
}

/* The deleter: deletes the keys i % 3 == 0 a writer is done with (and did
 * not delete itself), as the advisor deletes what workers wrote. Each such
 * key must be there when it comes to it. */
static int deleter(int n) {
  char path[400];
  kvp_volume_t *v;
  off_t seen[WRITERS] = {0};
  unsigned puts = 0;
  log_path("deleter", n, path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0 || open_vol(&v) != 0)
    return 2;
  for (;;) {
    int idle = 1;
    for (unsigned w = 0; w < WRITERS; w++) {
      logrec_t r;
      char wp[400];
      log_path("writer", (int)w, wp, sizeof wp);
      int wfd = open(wp, O_RDONLY);
      if (wfd < 0)
        continue;
      while (pread(wfd, &r, sizeof r, seen[w]) == (ssize_t)sizeof r) {
        seen[w] += (off_t)sizeof r;
        if (r.op != OP_DONE || r.key % 3 != 0 || r.key % 7 == 3)
          continue;
        char err[512];
        int gen;
        idle = 0;
        int rc = do_get(v, w, r.key, &gen);
        if (rc != 0) {
          fprintf(stderr, "deleter: %u/%u, done by its writer, not there (%d)\n", w, r.key, rc);
          return 4;
        }
        log_op(fd, w, r.key, OP_DEL, BEGIN);
        if (kvp_volume_delete(v, NS, key_hash(w, r.key), err, sizeof err) != 0) {
          fprintf(stderr, "deleter: delete %u/%u: %s\n", w, r.key, err);
          return 5;
        }
        log_op(fd, w, r.key, OP_DEL, ACK);
        /* A key of its own replaced: dead bytes in the deleter's segments
         * beside its tombstones, so that those are compacted early, maybe
         * before the segments with the records the tombstones shadow. */
        int g = (int)(++puts / SCRATCH) % 2;
        unsigned sk = puts % SCRATCH;
        log_op(fd, WRITERS, sk, g ? OP_PUT1 : OP_PUT0, BEGIN);
        if (do_put(v, WRITERS, sk, g) != 0)
          return 3;
        log_op(fd, WRITERS, sk, g ? OP_PUT1 : OP_PUT0, ACK);
      }
      close(wfd);
    }
    if (idle)
      usleep(2000);
  }
}

/* The compactor: compacts and reads, for ever (until killed). */
static int compactor(void) {
  kvp_volume_t *v;
  char path[400];
  unsigned seed = 4242u + (unsigned)getpid();
  log_path("compactions", 0, path, sizeof path); /* a byte per compaction */
  int cfd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (cfd < 0 || open_vol(&v) != 0)
    return 2;
  for (;;) {
    char err[512];
    int gen, rc = kvp_volume_compact(v, err, sizeof err);
    if (rc < 0) {
      fprintf(stderr, "compactor: %s\n", err);
      return 3;
    }
    if (rc == 0)
      usleep(1000);
    else if (write(cfd, "c", 1) != 1)
      return 9;
    unsigned ow = rnd(&seed) % WRITERS, oi = rnd(&seed) % KEYS;
    rc = do_get(v, ow, oi, &gen);
    if (rc != 0 && rc != KVP_ENOENT) {
      fprintf(stderr, "compactor: %u/%u read wrong (%d)\n", ow, oi, rc);
      return 7;
    }
  }
}

static pid_t g_pids[16];

/* A child running fn(arg), killed with the test process if that dies. */
static pid_t spawn(int (*fn)(int), int arg) {
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    _exit(fn(arg));
  }
  for (int i = 0; i < 16; i++)
    if (g_pids[i] <= 0) {
      g_pids[i] = pid;
      break;
    }
  return pid;
}

static int run_writer(int w) {
  return writer((unsigned)w);
}
static int run_compactor(int unused) {
  (void)unused;
  return compactor();
}

/* The state a key may be in: 0 absent; 1, 2 generation 0, 1; a second
 * allowed state when a kill interrupted its last operation. */
typedef struct want_s {
  int8_t state, alt; /* alt -1: none */
} want_t;

static void apply_log(const char *path, want_t (*want)[KEYS]) {
  FILE *f = fopen(path, "rb");
  logrec_t r;
  if (f == NULL)
    return;
  int8_t pending = -1;
  unsigned pw = 0, pi = 0;
  while (fread(&r, sizeof r, 1, f) == 1) {
    int8_t to = r.op == OP_PUT0 ? 1 : r.op == OP_PUT1 ? 2 : 0;
    if (r.op == OP_DONE)
      continue;
    if (r.phase == BEGIN) {
      pending = to;
      pw = r.writer;
      pi = r.key;
    } else {
      want[r.writer][r.key].state = to;
      want[r.writer][r.key].alt = -1;
      pending = -1;
    }
  }
  fclose(f);
  if (pending >= 0) /* the last operation began and was not acknowledged */
    want[pw][pi].alt = pending;
}

/* Every record header of key (w, i) in the segments, as found at 8-byte
 * boundaries (checksums not checked: torn ones show too), for the message
 * of a failed check: pack.c's record header is magic "KVPR" u32, kind u8,
 * ns length u8, 0 u16, payload length u32, copy u32, version u64, hash u64. */
static void dump_key(unsigned w, unsigned i) {
  char dir[400];
  struct dirent *de;
  uint64_t hash = key_hash(w, i);
  snprintf(dir, sizeof dir, "%s/.packed", g_root);
  DIR *d = opendir(dir);
  while (d != NULL && (de = readdir(d)) != NULL) {
    char path[700];
    uint8_t h[48];
    if (strstr(de->d_name, ".seg") == NULL)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    int fd = open(path, O_RDONLY);
    for (off_t off = 0; fd >= 0 && pread(fd, h, sizeof h, off) == (ssize_t)sizeof h; off += 8) {
      uint32_t magic, copy;
      uint64_t version, rh;
      memcpy(&magic, h, 4);
      memcpy(&copy, h + 12, 4);
      memcpy(&version, h + 16, 8);
      memcpy(&rh, h + 24, 8);
      if (magic == 0x5250564bu && rh == hash)
        print_message("  %s @%lld: %s version %" PRIu64 " copy %u\n", de->d_name, (long long)off,
                      h[4] == 1 ? "put" : "tombstone", version, copy);
    }
    if (fd >= 0)
      close(fd);
  }
  if (d != NULL)
    closedir(d);
}

/* Checks every key against want; got records what each key was (so that
 * the second check requires the same), or is compared with it. */
static void check_all(want_t (*want)[KEYS], int8_t (*got)[KEYS], int first) {
  kvp_volume_t *v;
  kvp_volume_stat_t st;
  char err[512];
  uint64_t present = 0, bytes = 0;
  assert_int_equal(open_vol(&v), 0);
  for (unsigned w = 0; w <= WRITERS; w++) /* WRITERS: the deleter's keys */
    for (unsigned i = 0; i < KEYS; i++) {
      int gen = -1, rc = do_get(v, w, i, &gen);
      int8_t is = rc == 0 ? (int8_t)(gen + 1) : 0;
      if (rc != 0 && rc != KVP_ENOENT)
        fail_msg("%u/%u: read failed or wrong bytes (%d)", w, i, rc);
      if (is != want[w][i].state && is != want[w][i].alt) {
        print_message("%u/%u's records:\n", w, i);
        dump_key(w, i);
        fail_msg("%u/%u: state %d, expected %d (or %d)", w, i, is, want[w][i].state,
                 want[w][i].alt);
      }
      if (first)
        got[w][i] = is;
      else if (got[w][i] != is)
        fail_msg("%u/%u: state %d after compaction and reopen, %d before", w, i, is, got[w][i]);
      if (is) {
        uint8_t b[4096];
        present++;
        bytes += body(w, i, is - 1, b) + KVP_FRAME_HEADER;
      }
    }
  assert_int_equal(kvp_volume_stat(v, &st, err, sizeof err), 0);
  print_message("%s: %" PRIu64 " objects there, %" PRIu64 " bytes\n",
                first ? "after the kills" : "after compacting and reopening", present, bytes);
  assert_int_equal(st.blocks, present);
  assert_int_equal(st.used, bytes);
  if (!first) {
    kvp_volume_close(v);
    return;
  }
  int rc, steps = 0;
  uint64_t dead, total;
  assert_int_equal(kvp_volume_garbage(v, &dead, &total, err, sizeof err), 0);
  while ((rc = kvp_volume_compact(v, err, sizeof err)) == 1)
    assert_true(++steps < 100000);
  assert_int_equal(rc, 0);
  print_message("%" PRIu64 " of %" PRIu64 " bytes dead; %d segments compacted\n", dead, total,
                steps);
  kvp_volume_close(v);
}

static void reap(pid_t pid, int want_clean) {
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  for (int i = 0; i < 16; i++)
    if (g_pids[i] == pid)
      g_pids[i] = 0;
  if (want_clean) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail_msg("child %d ended with status 0x%x", (int)pid, status);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    fail_msg("child %d failed with exit code %d before it was killed", (int)pid,
             WEXITSTATUS(status));
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Three writers, a deleter, a compactor; writer 0, the compactor (ten
 * times) and the deleter killed with SIGKILL; every object checked. */
static void processes_share_a_packed_volume_through_kills(void **state) {
  (void)state;
  static want_t want[WRITERS + 1][KEYS];
  static int8_t got[WRITERS + 1][KEYS];
  pid_t w[WRITERS], comp, del;
  char path[400];

  memset(want, 0, sizeof want);
  for (unsigned a = 0; a <= WRITERS; a++)
    for (unsigned i = 0; i < KEYS; i++)
      want[a][i].alt = -1;
  assert_non_null(kvp_test_tmpdir(g_dir, sizeof g_dir));
  snprintf(g_root, sizeof g_root, "%s/vol", g_dir);
  kvp_volume_t *v; /* created here: the children open it, none creates it */
  assert_int_equal(open_vol(&v), 0);
  kvp_volume_close(v);
  for (int a = 0; a < WRITERS; a++)
    w[a] = spawn(run_writer, a);
  comp = spawn(run_compactor, 0);
  del = spawn(deleter, 0);
  /* Writer 0 killed a third of the way through its keys. */
  struct stat sb;
  log_path("writer", 0, path, sizeof path);
  for (int t = 0; t < 30000; t++) {
    if (stat(path, &sb) == 0 && sb.st_size >= (off_t)(KEYS / 3 * 3 * sizeof(logrec_t)))
      break;
    sleep_ms(1);
  }
  kill(w[0], SIGKILL);
  reap(w[0], 0);
  /* The compactor killed and restarted: some kills land mid-compaction. */
  unsigned seed = (unsigned)time(NULL);
  for (int k = 0; k < 10; k++) {
    sleep_ms(30 + (long)(rnd(&seed) % 90));
    kill(comp, SIGKILL);
    reap(comp, 0);
    comp = spawn(run_compactor, 0);
  }
  for (int a = 1; a < WRITERS; a++)
    reap(w[a], 1);
  sleep_ms(300); /* the deleter catches up on most keys */
  kill(del, SIGKILL);
  reap(del, 0);
  kill(comp, SIGKILL);
  reap(comp, 0);

  for (int a = 0; a < WRITERS; a++) {
    log_path("writer", a, path, sizeof path);
    apply_log(path, want);
  }
  log_path("deleter", 0, path, sizeof path);
  apply_log(path, want);
  /* Writer 0 was killed before its last keys: they must be absent. */
  unsigned absent = 0;
  for (unsigned i = 0; i < KEYS; i++)
    absent += want[0][i].state == 0 && want[0][i].alt == -1 && i % 7 != 3 && i % 3 != 0;
  unsigned deleted = 0, open_ops = 0;
  for (unsigned a = 0; a < WRITERS; a++)
    for (unsigned i = 0; i < KEYS; i++) {
      deleted += want[a][i].state == 0 && (i % 7 == 3 || i % 3 == 0);
      open_ops += want[a][i].alt != -1;
    }
  struct stat cs;
  log_path("compactions", 0, path, sizeof path);
  print_message("writer 0 killed with %u keys never written; %u deleted; %u operations "
                "interrupted by a kill; %lld segments compacted meanwhile\n",
                absent, deleted, open_ops, stat(path, &cs) == 0 ? (long long)cs.st_size : -1LL);
  assert_true(absent > 0);
  check_all(want, got, 1);
  check_all(want, got, 0);
}

/* The children still running after a failure are killed, and the
 * directory goes. */
static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < 16; i++)
    if (g_pids[i] > 0) {
      kill(g_pids[i], SIGKILL);
      waitpid(g_pids[i], NULL, 0);
      g_pids[i] = 0;
    }
  if (g_dir[0])
    kvp_test_rmtree(g_dir);
  return 0;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(processes_share_a_packed_volume_through_kills, teardown),
  };
  return kvp_test_run("volume_packed_procs", tests, sizeof tests / sizeof tests[0], argc, argv);
}
