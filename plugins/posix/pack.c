/* The posix plugin's packed layout (pack.h; docs/volumes.md, "posix").
 *
 * Why this file is long: the record format, the scanner (with its resync
 * over torn writes), the in-memory index, the sharing between processes,
 * put/get/delete and compaction share one set of invariants about versions,
 * copies, dead bytes and segment ownership; split, each part would have to
 * restate them.
 *
 * On disk: <root>/.packed/<16 hex digits>.seg, numbered from a counter the
 * openers share. A segment is a run of records, each 8-byte aligned:
 *
 *   magic "KVPR" u32 | kind u8 (1 put, 2 tombstone) | ns length u8 | 0 u16
 *   | payload length u32 | copy u32 | version u64 | hash u64 | time_ns u64
 *   | XXH3-64 of the record with this field zero, u64 | ns | payload | pad
 *
 * in the host's byte order (a packed volume is not moved between machines
 * of different endianness). Every record carries a version from one counter
 * per volume; of a key's records the one with the highest (version, copy)
 * is the key's (a tombstone: none). Compaction copies a record keeping its
 * version and raising copy by one, so a copy outranks its original and a
 * crash at any point of a compaction leaves each object once.
 *
 * Several processes (workers' block managers, the advisor) open a packed
 * volume at once. What they share:
 *
 * - .packed/STATE, a page every opener maps (MAP_SHARED): the next version,
 *   the next segment number, and two change counters (records written,
 *   segments created or removed). Open raises the first two past what it
 *   loaded, so a page lost with a power cut is rebuilt from the segments.
 *   And a slot per open (taken free, or from a process that is gone): the
 *   lowest version it may still be writing (its floor), lowered before a
 *   version is taken and raised once the write landed.
 * - Segments have one writer each: an opener appends only to segments it
 *   created. It creates one under a temporary name, takes an exclusive
 *   flock on it, then links it to its final name: a segment that can be
 *   seen is locked until its writer seals it (rolls to the next one with no
 *   write in flight, or after a failed write) or dies. Nobody appends to a
 *   segment after a reopen; a new open starts its own.
 * - Each opener's index holds the newest record of every key on disk,
 *   tombstones included (a tombstone's entry shadows older records seen
 *   later). Its own writes enter when written; other openers' records enter
 *   by a refresh before every lookup, stat, iterate, garbage and compaction
 *   (one atomic load of the change counters when nothing changed). A
 *   refresh lists the directory when segments came or went (and lists
 *   again until no segment came or went while it listed and read), then
 *   reads only the bytes appended since its last look at each unsealed
 *   segment (records are self-delimiting and checked). In a segment whose
 *   writer holds its lock it stops at the first record that does not check
 *   (a write in flight) and looks again there next time, after reading the
 *   whole records past it (a writer's threads append in parallel: a later
 *   record may be acknowledged while an earlier one is in flight); in a
 *   sealed one it resyncs past torn bytes at the next 8-byte boundary (a
 *   crashed writer's) and marks the segment done. A segment that left the
 *   listing was compacted: its live records were copied before it went,
 *   and the refresh has read the copies.
 * - A delete appends a tombstone to the deleter's own segment.
 * - Compaction: one opener at a time (an exclusive flock on .packed/COMPACT)
 *   rewrites a segment it holds an exclusive flock on (so a sealed one: no
 *   writer can hold it). It refreshes first, reads the victim to its end,
 *   copies the live records into its own segment, makes them durable, then
 *   unlinks the victim. Readers need no lock: an opener keeps a descriptor
 *   on every segment it knows, and an unlinked segment's bytes stay readable
 *   through it until the refresh that sees it gone closes it.
 * - A tombstone is carried forward by compaction while an older record of
 *   any key may still be somewhere: it is dropped only when no other
 *   segment holds a dead put older than it (each segment's lowest dead put
 *   version is kept), no refresh stopped at a write in flight, and it is
 *   below the version counter and every live slot's floor as loaded (in
 *   that order) before the compaction's refresh: a put takes its version
 *   before its bytes are written, and one older than the tombstone that is
 *   in no segment yet must not land after the tombstone went.
 * - .packed/LOCK is held shared by every opener: a process of the earlier
 *   one-process layout (which took it exclusively) and this one exclude each
 *   other.
 *
 * A crash of any opener at any moment leaves at worst: a torn record
 * (dead, skipped), a segment with copies of records of a victim that was
 * not unlinked (the copies outrank the originals), a temporary segment
 * named with its creator's pid (removed by an open once that process is
 * gone). A put is acknowledged after its record is
 * written (and fdatasync'ed with fsync=on), a delete after its tombstone
 * is. Concurrent puts and deletes of one key from two processes end as the
 * higher version says.
 *
 * Dead bytes: records replaced, deleted, shadowed or torn. Tombstones that
 * are their key's newest record count apart (tomb) and towards choosing a
 * segment for compaction only when they could be dropped.
 *
 * Segment lifetimes: a get pins the segment it reads (refs) and reads
 * outside the lock; a segment that went is closed when its last reader is
 * done. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "kvplane/status.h"
#include "plugin_util.h"

#include "pack.h"

#define REC_MAGIC 0x5250564bu /* "KVPR" as little-endian bytes */
#define REC_PUT 1
#define REC_DEL 2
#define MAX_NS 4096 /* namespaces one packed volume knows */
#define NONE UINT64_MAX
#define STATE_SIZE 4096
#define REFRESH_ROUNDS 1000 /* listings a refresh makes while segments keep changing */
#define SLOTS 240           /* openers with writes tracked in STATE at once */

typedef struct rec_s {
  uint32_t magic;
  uint8_t kind, nslen;
  uint16_t zero;
  uint32_t len, copy; /* copy: 0 as written, +1 each time compaction copies it */
  uint64_t version, hash, time_ns, sum;
} rec_t;
_Static_assert(sizeof(rec_t) == 48, "the record header is 48 bytes");

/* An opener's writes in flight: owner is its pid (high 32 bits) and a
 * number of its process's opens (low 32 bits), 0 when free; floor is at
 * most the lowest version it may still be writing, NONE when it writes
 * nothing. */
typedef struct slot_s {
  _Atomic uint64_t owner, floor;
} slot_t;

/* .packed/STATE, mapped shared by every opener. */
typedef struct shared_s {
  _Atomic uint64_t version;  /* the next record version */
  _Atomic uint64_t segno;    /* the next segment number */
  _Atomic uint64_t records;  /* raised after every record written */
  _Atomic uint64_t segments; /* raised when a segment is created or removed */
  slot_t slot[SLOTS];        /* one per opener (zero in a STATE of before them: free) */
} shared_t;
_Static_assert(sizeof(shared_t) <= STATE_SIZE, "STATE is one page");

typedef struct seg_s {
  uint64_t no;
  int fd;
  uint64_t size;     /* own: bytes appended or reserved; others': bytes read */
  uint64_t dead;     /* bytes of records no key owns (replaced, deleted, torn) */
  uint64_t tomb;     /* bytes of tombstones that are their key's newest */
  uint64_t dead_min; /* the lowest version of a dead put in it (NONE: none) */
  uint64_t tomb_max; /* the highest version of a tombstone in it */
  uint64_t live;     /* index entries pointing into it */
  int refs;          /* the list's, readers', a compaction's */
  int writers;       /* own: writes in flight */
  uint8_t own;       /* created by this open: appended to only by it */
  uint8_t locked;    /* own: this open holds its exclusive flock (not sealed) */
  uint8_t done;      /* another's: sealed and read to its end */
  uint8_t retired;   /* out of the list: closed and freed when refs drops to 0 */
  uint8_t listed;    /* seen by the last listing */
  uint64_t *ahead;   /* another's: records past size already read, by offset */
  size_t nahead, ahead_cap;
} seg_t;

typedef struct ent_s {
  uint64_t hash, version, off, time_ns;
  seg_t *seg; /* NULL: an empty slot */
  uint32_t len, copy;
  uint16_t ns;
  uint8_t kind; /* REC_PUT, or REC_DEL: the key's newest record is a tombstone */
} ent_t;

struct pack_s {
  char dir[3300];
  uint64_t seg_max;
  seg_t **segs; /* by number */
  size_t nsegs, segs_cap;
  seg_t *active; /* the own segment appended to; NULL until a write needs one */
  ent_t *tab;    /* open addressing, linear probing, power-of-two size */
  size_t tab_cap, tab_n;
  char *nss[MAX_NS];
  size_t nns;
  uint64_t top_version; /* the highest version read */
  shared_t *sh;
  slot_t *slot;     /* this open's, in sh */
  uint64_t owner;   /* its owner value */
  uint64_t *flying; /* versions of this open's writes in flight (under p->mu) */
  size_t nflying, flying_cap;
  int state_fd, lock_fd, compact_fd;
  uint64_t seen_records, seen_segments; /* the counters the last refresh saw */
  int blocked;                          /* the last refresh stopped at a write in flight */
  pthread_mutex_t refreshing;           /* one refresh at a time; before p->mu */
  pthread_mutex_t compacting;           /* one compaction at a time; before refreshing */
};

static size_t rec_size(size_t nslen, size_t len) {
  return (sizeof(rec_t) + nslen + len + 7) & ~(size_t)7;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void raise_to(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load(a);
  while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
    ;
}

/* --- the index ---------------------------------------------------------------- */

static size_t slot_of(uint64_t hash, uint16_t ns, size_t cap) {
  uint64_t h = (hash ^ ((uint64_t)ns * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  return (size_t)(h >> 17) & (cap - 1);
}

static ent_t *find(pack_t *k, uint16_t ns, uint64_t hash) {
  if (k->tab_cap == 0)
    return NULL;
  for (size_t i = slot_of(hash, ns, k->tab_cap);; i = (i + 1) & (k->tab_cap - 1)) {
    ent_t *e = &k->tab[i];
    if (e->seg == NULL)
      return NULL;
    if (e->hash == hash && e->ns == ns)
      return e;
  }
}

/* The entry of a live object (ns, hash): NULL when absent or deleted. */
static ent_t *find_put(pack_t *k, const char *ns, uint64_t hash);

static int grow(pack_t *k) {
  size_t cap = k->tab_cap ? k->tab_cap * 2 : 1024;
  ent_t *t = calloc(cap, sizeof *t);
  if (t == NULL)
    return KVP_ENOMEM;
  for (size_t i = 0; i < k->tab_cap; i++) {
    if (k->tab[i].seg == NULL)
      continue;
    size_t j = slot_of(k->tab[i].hash, k->tab[i].ns, cap);
    while (t[j].seg != NULL)
      j = (j + 1) & (cap - 1);
    t[j] = k->tab[i];
  }
  free(k->tab);
  k->tab = t;
  k->tab_cap = cap;
  return 0;
}

/* A new empty entry for (ns, hash), which is not in the table (seg NULL:
 * the caller fills it). NULL when out of memory. */
static ent_t *slot_new(pack_t *k, uint16_t ns, uint64_t hash) {
  if ((k->tab_n + 1) * 10 > k->tab_cap * 7 && grow(k) != 0)
    return NULL;
  size_t i = slot_of(hash, ns, k->tab_cap);
  while (k->tab[i].seg != NULL)
    i = (i + 1) & (k->tab_cap - 1);
  k->tab_n++;
  k->tab[i] = (ent_t){.hash = hash, .ns = ns};
  return &k->tab[i];
}

/* Removes e, shifting back the entries of its probe run. */
static void erase(pack_t *k, ent_t *e) {
  size_t i = (size_t)(e - k->tab), m = k->tab_cap - 1;
  e->seg->live--;
  k->tab[i].seg = NULL;
  k->tab_n--;
  for (size_t j = (i + 1) & m; k->tab[j].seg != NULL; j = (j + 1) & m) {
    size_t home = slot_of(k->tab[j].hash, k->tab[j].ns, k->tab_cap);
    /* Moves j into the hole i unless its home lies cyclically in (i, j]. */
    if (((j - home) & m) >= ((j - i) & m)) {
      k->tab[i] = k->tab[j];
      k->tab[j].seg = NULL;
      i = j;
    }
  }
}

/* The id of namespace ns, interned when add is set; -1 when unknown (or
 * the table is full, or out of memory). */
static int ns_id(pack_t *k, const char *ns, int add) {
  for (size_t i = 0; i < k->nns; i++)
    if (strcmp(k->nss[i], ns) == 0)
      return (int)i;
  if (!add || k->nns >= MAX_NS || (k->nss[k->nns] = strdup(ns)) == NULL)
    return -1;
  return (int)k->nns++;
}

static ent_t *find_put(pack_t *k, const char *ns, uint64_t hash) {
  int id = ns_id(k, ns, 0);
  ent_t *e = id < 0 ? NULL : find(k, (uint16_t)id, hash);
  return e != NULL && e->kind == REC_PUT ? e : NULL;
}

static uint64_t ent_size(const pack_t *k, const ent_t *e) {
  return rec_size(strlen(k->nss[e->ns]), e->len);
}

/* A put record of version at s died (replaced, deleted, an older copy). */
static void put_died(seg_t *s, uint64_t size, uint64_t version) {
  s->dead += size;
  if (version < s->dead_min)
    s->dead_min = version;
}

/* Applies the record at (s, off), header h, namespace id: the index keeps
 * each key's newest record (highest version, then highest copy); the other
 * one's bytes die, and the usage follows. Under p->mu. */
static void apply(posix_t *p, seg_t *s, uint64_t off, const rec_t *h, int id) {
  pack_t *k = p->pack;
  uint64_t size = rec_size(h->nslen, h->len);
  ent_t *e = find(k, (uint16_t)id, h->hash);

  if (h->version >= k->top_version)
    k->top_version = h->version;
  if (e != NULL && (e->version > h->version || (e->version == h->version && e->copy >= h->copy))) {
    if (h->kind == REC_PUT)
      put_died(s, size, h->version);
    else
      s->dead += size; /* a tombstone shadowed by a newer record */
    return;
  }
  if (e == NULL && (e = slot_new(k, (uint16_t)id, h->hash)) == NULL) {
    s->dead += size; /* out of memory: as if lost */
    return;
  }
  if (e->seg != NULL) {
    seg_t *o = e->seg;
    uint64_t osize = ent_size(k, e);
    o->live--;
    if (e->kind == REC_PUT) {
      put_died(o, osize, e->version);
      p->used -= e->len < p->used ? e->len : p->used;
      p->blocks -= p->blocks ? 1 : 0;
    } else {
      o->tomb -= osize < o->tomb ? osize : o->tomb;
      o->dead += osize;
    }
  }
  *e = (ent_t){.hash = h->hash,
               .version = h->version,
               .off = off,
               .time_ns = h->time_ns,
               .seg = s,
               .len = h->len,
               .copy = h->copy,
               .ns = (uint16_t)id,
               .kind = h->kind};
  s->live++;
  if (h->kind == REC_PUT) {
    p->used += h->len;
    p->blocks++;
  } else {
    s->tomb += size;
    if (h->version > s->tomb_max)
      s->tomb_max = h->version;
  }
}

/* Forgets every entry still pointing into s (a segment that went). Under
 * p->mu. */
static void sweep(posix_t *p, seg_t *s) {
  pack_t *k = p->pack;
  for (size_t i = 0; s->live > 0 && i < k->tab_cap;) {
    ent_t *e = &k->tab[i];
    if (e->seg != s) {
      i++;
      continue;
    }
    if (e->kind == REC_PUT) {
      p->used -= e->len < p->used ? e->len : p->used;
      p->blocks -= p->blocks ? 1 : 0;
    }
    erase(k, e); /* a later entry may move into i: looked at again */
  }
}

/* --- segments ------------------------------------------------------------------ */

static void seg_path(const pack_t *k, uint64_t no, char *out, size_t n) {
  snprintf(out, n, "%s/%016" PRIx64 ".seg", k->dir, no);
}

static void seg_unref(seg_t *s) {
  if (--s->refs == 0 && s->retired) {
    close(s->fd); /* releases its flock, if this open held one */
    free(s->ahead);
    free(s);
  }
}

/* The place of segment no in the list (where it is or would go). */
static size_t seg_at(const pack_t *k, uint64_t no) {
  size_t lo = 0, hi = k->nsegs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (k->segs[mid]->no < no)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int seg_insert(pack_t *k, seg_t *s) {
  if (k->nsegs == k->segs_cap && KVP_PLUGIN_GROW(k->segs, k->segs_cap) != 0)
    return KVP_ENOMEM;
  size_t i = seg_at(k, s->no);
  memmove(k->segs + i + 1, k->segs + i, (k->nsegs - i) * sizeof *k->segs);
  k->segs[i] = s;
  k->nsegs++;
  return 0;
}

/* Takes s out of the list, forgets what still points into it and drops
 * the list's reference. Under p->mu. */
static void seg_retire(posix_t *p, seg_t *s) {
  pack_t *k = p->pack;
  size_t i = seg_at(k, s->no);
  if (i < k->nsegs && k->segs[i] == s) {
    memmove(k->segs + i, k->segs + i + 1, (k->nsegs - i - 1) * sizeof *k->segs);
    k->nsegs--;
  }
  sweep(p, s);
  s->retired = 1;
  seg_unref(s);
}

/* An own segment no longer appended to, with no write in flight, is
 * sealed: its writer's lock goes, so that a compaction may take it and
 * others read it to its end. Under p->mu. */
static void seg_seal(pack_t *k, seg_t *s) {
  if (s->own && s->locked && s != k->active && s->writers == 0) {
    flock(s->fd, LOCK_UN);
    s->locked = 0;
  }
}

/* Raises the process's soft limit on open files to its hard one (at most
 * 2^20), once it ran out: a packed volume keeps a descriptor on each
 * segment, more than the usual soft limit of 1024 at 64 GiB of 64M
 * segments, and the hard limit is usually far above it. 1 when raised. */
static int more_files(void) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  struct rlimit rl;
  int raised = 0;
  pthread_mutex_lock(&mu);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rlim_t want =
        rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 20) ? (1u << 20) : rl.rlim_max;
    if (rl.rlim_cur < want) {
      rl.rlim_cur = want;
      raised = setrlimit(RLIMIT_NOFILE, &rl) == 0;
    } else {
      raised = 1; /* raised meanwhile by another thread: try again */
    }
  }
  pthread_mutex_unlock(&mu);
  return raised;
}

/* open(2) of a segment, with more files when the process ran out; -1
 * with err set (saying what to raise when it is the file limit). */
static int seg_open(const pack_t *k, const char *path, int flags, char *err, size_t errlen) {
  int fd = open(path, flags, 0600);
  if (fd < 0 && errno == EMFILE && more_files())
    fd = open(path, flags, 0600);
  int e = errno;
  if (fd < 0 && e == EMFILE)
    snprintf(err, errlen,
             "%s: too many open files: a packed volume keeps a descriptor on each segment (%zu "
             "now): raise the hard limit on open files (ulimit -Hn, LimitNOFILE) or segment_size",
             path, k->nsegs);
  else if (fd < 0)
    snprintf(err, errlen, "%s: %s", path, strerror(e));
  errno = e;
  return fd;
}

/* A new own segment, locked before it has its name: the active one. Under
 * p->mu. */
static int seg_new(posix_t *p, char *err, size_t errlen) {
  pack_t *k = p->pack;
  char path[3400], tmp[3500];
  uint64_t no = 0;
  int fd = -1, e = 0;

  for (int tries = 0; tries < 64; tries++) {
    no = atomic_fetch_add(&k->sh->segno, 1);
    seg_path(k, no, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if ((fd = seg_open(k, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, err, errlen)) < 0) {
      if ((e = errno) == EEXIST)
        continue;
      return px_errno_code(e);
    }
    /* link, not rename: a number reused after a lost STATE page must not
     * replace a segment. */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || link(tmp, path) != 0) {
      e = errno;
      unlink(tmp);
      close(fd);
      fd = -1;
      if (e == EEXIST)
        continue;
      return px_fail(px_errno_code(e), err, errlen, "%s: %s", path, e);
    }
    unlink(tmp);
    break;
  }
  if (fd < 0) {
    snprintf(err, errlen, "%s: no free segment number", k->dir);
    return KVP_EIO;
  }
  seg_t *s = calloc(1, sizeof *s);
  if (s != NULL)
    *s = (seg_t){
        .no = no, .fd = fd, .dead_min = NONE, .refs = 1, .own = 1, .locked = 1, .listed = 1};
  if (s == NULL || seg_insert(k, s) != 0) {
    free(s);
    unlink(path);
    close(fd);
    snprintf(err, errlen, "%s: out of memory", k->dir);
    return KVP_ENOMEM;
  }
  seg_t *old = k->active;
  k->active = s;
  if (old != NULL)
    seg_seal(k, old);
  atomic_fetch_add(&k->sh->segments, 1);
  if (p->fsync)
    px_sync_dir(k->dir);
  return 0;
}

/* Reserves n bytes at the end of the active segment, rolling to a new one
 * when it would pass the segment size (a record larger than that gets a
 * segment of its own). Under p->mu; the caller ends with wrote(). */
static int reserve(posix_t *p, size_t n, seg_t **seg, uint64_t *off, char *err, size_t errlen) {
  pack_t *k = p->pack;
  seg_t *a = k->active;
  int rc;
  if (a == NULL || (a->size > 0 && a->size + n > k->seg_max)) {
    if ((rc = seg_new(p, err, errlen)) != 0)
      return rc;
    a = k->active;
  }
  *seg = a;
  *off = a->size;
  a->size += n;
  a->refs++;
  a->writers++;
  return 0;
}

/* The end of a write reserve() placed in s. A failed one leaves its place
 * dead and seals the segment, so that other openers read past it. Under
 * p->mu. */
static void wrote(pack_t *k, seg_t *s, size_t size, int failed) {
  s->writers--;
  if (failed) {
    s->dead += size;
    if (k->active == s)
      k->active = NULL;
  }
  seg_seal(k, s);
  seg_unref(s);
}

/* Writes a record whose header is h (sum filled here) with ns and the
 * payload iov at off in s; fdatasync when sync is set. 0 or errno. */
static int write_rec(seg_t *s, uint64_t off, rec_t *h, const char *ns, const struct iovec *iov,
                     int iovcnt, int sync) {
  static const char zeros[8];
  struct iovec v[PX_IOV_MAX];
  size_t total = rec_size(h->nslen, h->len);
  int n = 0;
  XXH3_state_t st;

  if (iovcnt > PX_IOV_MAX - 3)
    return EINVAL;
  h->sum = 0;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, h, sizeof *h);
  XXH3_64bits_update(&st, ns, h->nslen);
  for (int i = 0; i < iovcnt; i++)
    XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
  h->sum = XXH3_64bits_digest(&st);
  v[n++] = (struct iovec){h, sizeof *h};
  v[n++] = (struct iovec){(void *)ns, h->nslen};
  for (int i = 0; i < iovcnt; i++)
    v[n++] = iov[i];
  if (total > sizeof *h + h->nslen + h->len)
    v[n++] = (struct iovec){(void *)zeros, total - (sizeof *h + h->nslen + h->len)};
  int e = px_pwrite_all(s->fd, v, n, off);
  if (e != 0)
    return e;
  if (sync && fdatasync(s->fd) != 0)
    return errno;
  return 0;
}

/* The record at off of a mapping of size bytes: its header into h, its
 * namespace into ns (65 bytes), and 1 when whole, its checksum right and
 * its namespace a namespace; else 0. */
static int rec_at(const unsigned char *m, uint64_t size, uint64_t off, rec_t *h, char *ns) {
  if (off + sizeof *h > size)
    return 0;
  memcpy(h, m + off, sizeof *h);
  if (h->magic != REC_MAGIC || (h->kind != REC_PUT && h->kind != REC_DEL) || h->nslen == 0 ||
      h->nslen > 64 || (h->kind == REC_DEL && h->len != 0) ||
      rec_size(h->nslen, h->len) > size - off)
    return 0;
  rec_t z = *h;
  z.sum = 0;
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &z, sizeof z);
  XXH3_64bits_update(&st, m + off + sizeof *h, (size_t)h->nslen + h->len);
  if (XXH3_64bits_digest(&st) != h->sum)
    return 0;
  memcpy(ns, m + off + sizeof *h, h->nslen);
  ns[h->nslen] = '\0';
  return kvp_plugin_ns_ok(ns);
}

/* --- reading what others wrote -------------------------------------------------- */

/* Whether the record at off of s was read past a write in flight (and
 * forgets it when it is passed now). Under refreshing. */
static int read_ahead(seg_t *s, uint64_t off, int passed) {
  for (size_t i = 0; i < s->nahead; i++)
    if (s->ahead[i] == off) {
      if (passed)
        s->ahead[i] = s->ahead[--s->nahead];
      return 1;
    }
  return 0;
}

/* Reads the records of s in [from, to) into the index. In a sealed
 * segment (resync set) it goes past bytes that do not check at the next
 * 8-byte boundary, their bytes dead. In one its writer holds, the first
 * record that does not check is a write in flight, and the offset
 * returned stops there; but the writer's threads write in parallel (each
 * reserves its place under the lock and writes outside it), so records
 * after it may be whole and acknowledged: those are read too (looking at
 * each 8-byte boundary past the one in flight) and remembered in
 * s->ahead, so that the read that resumes at the stop does not apply them
 * twice. The offset it got to, or a negative code. Under refreshing. */
static int64_t scan(posix_t *p, seg_t *s, uint64_t from, uint64_t to, int resync) {
  pack_t *k = p->pack;
  uint64_t base = from & ~(uint64_t)(sysconf(_SC_PAGESIZE) - 1), off = from, torn = 0;
  uint64_t stop = NONE; /* the first write in flight (resync not set) */
  if (to <= from)
    return (int64_t)from;
  unsigned char *m = mmap(NULL, to - base, PROT_READ, MAP_SHARED, s->fd, (off_t)base);
  if (m == MAP_FAILED)
    return px_errno_code(errno);
  rec_t h;
  char ns[65];
  while (off < to) {
    if (!rec_at(m, to - base, off - base, &h, ns)) {
      if (!resync && stop == NONE)
        stop = off;
      off += 8;
      torn += resync ? 8 : 0;
      continue;
    }
    if (read_ahead(s, off, stop == NONE)) {
      off += rec_size(h.nslen, h.len); /* applied by an earlier read */
      continue;
    }
    if (stop != NONE && s->nahead == s->ahead_cap && KVP_PLUGIN_GROW(s->ahead, s->ahead_cap) != 0)
      break; /* out of memory: read when the write in flight is done */
    pthread_mutex_lock(&p->mu);
    int id = ns_id(k, ns, 1);
    if (id >= 0)
      apply(p, s, off, &h, id);
    else
      s->dead += rec_size(h.nslen, h.len);
    s->dead += torn;
    torn = 0;
    pthread_mutex_unlock(&p->mu);
    if (stop != NONE)
      s->ahead[s->nahead++] = off;
    off += rec_size(h.nslen, h.len);
  }
  if (off > to) {
    torn -= off - to < torn ? off - to : torn;
    off = to;
  }
  if (torn) {
    pthread_mutex_lock(&p->mu);
    s->dead += torn;
    pthread_mutex_unlock(&p->mu);
  }
  munmap(m, to - base);
  return (int64_t)(stop != NONE ? stop : off);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The numbers of the segment files in dir, sorted; with clean set,
 * temporary segments no process holds are removed. */
static int list_segs(const char *dir, int clean, uint64_t **out, size_t *n, char *err,
                     size_t errlen) {
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  if (d == NULL)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", dir, errno);
  while ((de = readdir(d)) != NULL) {
    char *end;
    const char *tmp = strstr(de->d_name, ".seg.tmp.");
    if (clean && tmp != NULL) {
      /* Its creator died before naming it: a process that is gone (a live
       * one may not have taken its lock yet) and no lock on it. */
      char path[3600];
      long pid = strtol(tmp + 9, NULL, 10);
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      int fd = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH
                   ? open(path, O_RDONLY | O_CLOEXEC)
                   : -1;
      if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0)
        unlink(path);
      if (fd >= 0)
        close(fd);
      continue;
    }
    if (strlen(de->d_name) != 20 || strcmp(de->d_name + 16, ".seg") != 0)
      continue;
    uint64_t no = strtoull(de->d_name, &end, 16);
    if (end != de->d_name + 16)
      continue;
    if (*n == cap && KVP_PLUGIN_GROW(*out, cap) != 0) {
      closedir(d);
      snprintf(err, errlen, "%s: out of memory", dir);
      return KVP_ENOMEM;
    }
    (*out)[(*n)++] = no;
  }
  closedir(d);
  if (*n > 0) /* qsort's base may not be NULL, even for no element */
    qsort(*out, *n, sizeof **out, cmp_u64);
  return 0;
}

/* Adds the segments the directory has and the list lacks, and marks which
 * of the list's the directory still has. Under refreshing. */
static int relist(posix_t *p, int clean, char *err, size_t errlen) {
  pack_t *k = p->pack;
  uint64_t *nos;
  size_t n;
  int rc = list_segs(k->dir, clean, &nos, &n, err, errlen);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < k->nsegs; i++)
    k->segs[i]->listed = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    size_t at = seg_at(k, nos[i]);
    if (at < k->nsegs && k->segs[at]->no == nos[i]) {
      k->segs[at]->listed = 1;
      continue;
    }
    char path[3400];
    seg_path(k, nos[i], path, sizeof path);
    int fd = seg_open(k, path, O_RDWR | O_CLOEXEC, err, errlen);
    if (fd < 0) {
      if (errno == ENOENT)
        continue; /* compacted since the listing */
      rc = px_errno_code(errno);
      break;
    }
    seg_t *s = calloc(1, sizeof *s);
    if (s != NULL)
      *s = (seg_t){.no = nos[i], .fd = fd, .dead_min = NONE, .refs = 1, .listed = 1};
    if (s == NULL || seg_insert(k, s) != 0) {
      free(s);
      close(fd);
      snprintf(err, errlen, "%s: out of memory", k->dir);
      rc = KVP_ENOMEM;
      break;
    }
  }
  pthread_mutex_unlock(&p->mu);
  free(nos);
  return rc;
}

/* Reads what was appended to the segments of others since the last look;
 * *blocked is set when one stopped at a write in flight. Under refreshing. */
static int read_new(posix_t *p, int *blocked, char *err, size_t errlen) {
  pack_t *k = p->pack;
  seg_t **todo;
  size_t n = 0;
  int rc = 0;

  pthread_mutex_lock(&p->mu);
  if ((todo = malloc((k->nsegs + 1) * sizeof *todo)) == NULL) {
    pthread_mutex_unlock(&p->mu);
    return KVP_ENOMEM;
  }
  for (size_t i = 0; i < k->nsegs; i++)
    if (!k->segs[i]->own && !k->segs[i]->done && k->segs[i]->listed) {
      todo[n++] = k->segs[i];
      k->segs[i]->refs++;
    }
  pthread_mutex_unlock(&p->mu);
  for (size_t i = 0; i < n; i++) {
    seg_t *s = todo[i];
    struct stat sb;
    /* No exclusive holder: sealed (or its writer died), nothing more will
     * be appended, torn bytes are for good. */
    int sealed = flock(s->fd, LOCK_SH | LOCK_NB) == 0;
    if (rc == 0 && fstat(s->fd, &sb) != 0)
      rc = px_fail(px_errno_code(errno), err, errlen, "%s: fstat: %s", k->dir, errno);
    if (rc == 0) {
      int64_t got = scan(p, s, s->size, (uint64_t)sb.st_size, sealed);
      if (got < 0) {
        rc = (int)got;
        snprintf(err, errlen, "%s: reading segment %016" PRIx64 " failed (%d)", k->dir, s->no, rc);
      } else {
        s->size = (uint64_t)got;
        if (sealed && s->size >= (uint64_t)sb.st_size)
          s->done = 1;
        else if (!sealed && s->size < (uint64_t)sb.st_size)
          *blocked = 1;
      }
    }
    if (sealed)
      flock(s->fd, LOCK_UN);
  }
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < n; i++)
    seg_unref(todo[i]);
  pthread_mutex_unlock(&p->mu);
  free(todo);
  return rc;
}

/* Brings the index up to what the segments hold: at once when force is
 * set, else only when another opener wrote since the last look.
 *
 * A listing is complete only when no segment came or went between the
 * load of the counter before it and the load after the reads: a
 * compaction may remove a segment the listing missed or found gone at
 * open (ENOENT) after copying its records into a segment created after the
 * listing began, and then a record acknowledged before this refresh began
 * is in no segment the index read. Such a listing is listed and read
 * again before anyone looks anything up (the copies' segment is then in
 * it), and only a complete one retires the segments it lacks. */
static int refresh(posix_t *p, int force, char *err, size_t errlen) {
  pack_t *k = p->pack;
  int rc = 0, blocked = 0;

  pthread_mutex_lock(&k->refreshing);
  uint64_t recs = atomic_load(&k->sh->records), segs = atomic_load(&k->sh->segments);
  if (!force && !k->blocked && recs == k->seen_records && segs == k->seen_segments) {
    pthread_mutex_unlock(&k->refreshing);
    return 0;
  }
  int relisted = force || segs != k->seen_segments;
  for (int round = 0;; round++) {
    blocked = 0;
    if (relisted)
      rc = relist(p, k->nsegs == 0, err, errlen);
    if (rc == 0)
      rc = read_new(p, &blocked, err, errlen);
    if (rc != 0 || !relisted)
      break;
    uint64_t segs_after = atomic_load(&k->sh->segments);
    if (segs_after == segs) {
      /* A segment that left a complete listing was compacted: its live
       * records' copies were written before it went and were read now. */
      pthread_mutex_lock(&p->mu);
      for (size_t i = 0; i < k->nsegs;) {
        seg_t *s = k->segs[i];
        if (!s->listed && !(s->own && s->locked))
          seg_retire(p, s);
        else
          i++;
      }
      pthread_mutex_unlock(&p->mu);
      break;
    }
    if (round == REFRESH_ROUNDS) {
      segs = k->seen_segments; /* still changing: relisted next time */
      break;
    }
    segs = segs_after;
  }
  if (rc == 0) {
    k->seen_records = recs;
    k->seen_segments = segs;
    k->blocked = blocked;
  }
  pthread_mutex_unlock(&k->refreshing);
  return rc;
}

/* --- writes in flight ------------------------------------------------------------ */

static _Atomic uint32_t g_opens; /* numbers this process's opens, for their slots */

/* Whether the process of a slot's owner is gone (its writes in flight
 * never land: their bytes, if any, are torn). */
static int owner_gone(uint64_t owner) {
  pid_t pid = (pid_t)(owner >> 32);
  return pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
}

/* Takes a free slot, or one whose process is gone (its floor is ignored
 * from then on, and set once taken). */
static int slot_claim(pack_t *k, char *err, size_t errlen) {
  uint64_t me = (uint64_t)(uint32_t)getpid() << 32 | (uint32_t)(atomic_fetch_add(&g_opens, 1) + 1);
  for (int i = 0; i < SLOTS; i++) {
    slot_t *sl = &k->sh->slot[i];
    uint64_t cur = atomic_load(&sl->owner);
    if ((cur == 0 || owner_gone(cur)) && atomic_compare_exchange_strong(&sl->owner, &cur, me)) {
      atomic_store(&sl->floor, NONE);
      k->slot = sl;
      k->owner = me;
      return 0;
    }
  }
  snprintf(err, errlen, "%s: more than %d opens of the packed volume at once", k->dir, SLOTS);
  return KVP_EBUSY;
}

/* Takes the version of a write about to begin: the slot's floor goes down
 * to the next version before it is taken, so that a compactor that loads
 * the floors after the version counter sees every write whose version is
 * below what it loaded either landed or in flight. Under p->mu. */
static int flight_begin(pack_t *k, uint64_t *version) {
  if (k->nflying == k->flying_cap && KVP_PLUGIN_GROW(k->flying, k->flying_cap) != 0)
    return KVP_ENOMEM;
  if (k->nflying == 0)
    atomic_store(&k->slot->floor, atomic_load(&k->sh->version));
  *version = atomic_fetch_add(&k->sh->version, 1);
  k->flying[k->nflying++] = *version;
  return 0;
}

/* The write of version landed (or failed): the floor rises to the lowest
 * version still in flight. Under p->mu. */
static void flight_end(pack_t *k, uint64_t version) {
  uint64_t low = NONE;
  for (size_t i = 0; i < k->nflying; i++)
    if (k->flying[i] == version) {
      k->flying[i] = k->flying[--k->nflying];
      break;
    }
  for (size_t i = 0; i < k->nflying; i++)
    if (k->flying[i] < low)
      low = k->flying[i];
  atomic_store(&k->slot->floor, low);
}

/* A version below which no write of any live opener (this one's included)
 * is in flight: the version counter, then the slots' floors, loaded in
 * that order. A tombstone below it may be dropped once no older put is on
 * disk: every put with a version below it has landed, or is in flight
 * and lowers it. */
static uint64_t flight_floor(pack_t *k) {
  uint64_t low = atomic_load(&k->sh->version);
  for (int i = 0; i < SLOTS; i++) {
    uint64_t owner = atomic_load(&k->sh->slot[i].owner);
    if (owner == 0)
      continue;
    uint64_t f = atomic_load(&k->sh->slot[i].floor);
    if (f < low && !owner_gone(owner))
      low = f;
  }
  return low;
}

/* --- open and close ------------------------------------------------------------ */

static int open_file(pack_t *k, const char *name, int *fd, char *err, size_t errlen) {
  char path[3400];
  snprintf(path, sizeof path, "%s/%s", k->dir, name);
  if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", path, errno);
  return 0;
}

int pk_open(posix_t *p, uint64_t segment_size, uint64_t pack_max, char *err, size_t errlen) {
  pack_t *k = calloc(1, sizeof *k);
  struct stat sb;
  int rc;

  if (k == NULL)
    return KVP_ENOMEM;
  p->pack = k;
  k->lock_fd = k->state_fd = k->compact_fd = -1;
  p->pack_max = pack_max;
  k->seg_max = segment_size;
  pthread_mutex_init(&k->refreshing, NULL);
  pthread_mutex_init(&k->compacting, NULL);
  snprintf(k->dir, sizeof k->dir, "%s/%s", p->root, PACK_DIR);
  if (mkdir(k->dir, 0700) != 0 && errno != EEXIST)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", k->dir, errno);
  if ((rc = open_file(k, "LOCK", &k->lock_fd, err, errlen)) != 0 ||
      (rc = open_file(k, "COMPACT", &k->compact_fd, err, errlen)) != 0 ||
      (rc = open_file(k, "STATE", &k->state_fd, err, errlen)) != 0)
    return rc;
  if (flock(k->lock_fd, LOCK_SH | LOCK_NB) != 0) {
    int e = errno;
    if (e == EWOULDBLOCK) {
      snprintf(err, errlen,
               "%s: the packed volume is held by a process of an earlier kvplane, whose "
               "layout=packed allowed one process",
               p->root);
      return KVP_EBUSY;
    }
    return px_fail(px_errno_code(e), err, errlen, "%s: flock: %s", k->dir, e);
  }
  if (fstat(k->state_fd, &sb) != 0 ||
      (sb.st_size < STATE_SIZE && ftruncate(k->state_fd, STATE_SIZE) != 0))
    return px_fail(px_errno_code(errno), err, errlen, "%s/STATE: %s", k->dir, errno);
  void *m = mmap(NULL, STATE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, k->state_fd, 0);
  if (m == MAP_FAILED)
    return px_fail(px_errno_code(errno), err, errlen, "%s/STATE: mmap: %s", k->dir, errno);
  k->sh = m;
  if ((rc = slot_claim(k, err, errlen)) != 0 || (rc = refresh(p, 1, err, errlen)) != 0)
    return rc;
  /* The shared counters past everything on disk (a new STATE, or one whose
   * page a power cut lost). */
  raise_to(&k->sh->version, k->top_version + 1);
  raise_to(&k->sh->segno, k->nsegs ? k->segs[k->nsegs - 1]->no + 1 : 1);
  return 0;
}

void pk_close(posix_t *p) {
  pack_t *k = p->pack;
  if (k == NULL)
    return;
  for (size_t i = 0; i < k->nsegs; i++) {
    close(k->segs[i]->fd); /* releases the writer's lock */
    free(k->segs[i]->ahead);
    free(k->segs[i]);
  }
  for (size_t i = 0; i < k->nns; i++)
    free(k->nss[i]);
  free(k->segs);
  free(k->tab);
  if (k->slot != NULL) {
    uint64_t me = k->owner;
    atomic_store(&k->slot->floor, NONE);
    atomic_compare_exchange_strong(&k->slot->owner, &me, 0);
  }
  free(k->flying);
  if (k->sh != NULL)
    munmap(k->sh, STATE_SIZE);
  if (k->state_fd >= 0)
    close(k->state_fd);
  if (k->compact_fd >= 0)
    close(k->compact_fd);
  if (k->lock_fd >= 0)
    close(k->lock_fd);
  pthread_mutex_destroy(&k->refreshing);
  pthread_mutex_destroy(&k->compacting);
  free(k);
  p->pack = NULL;
}

int pk_refresh(posix_t *p, char *err, size_t errlen) {
  return p->pack ? refresh(p, 0, err, errlen) : 0;
}

/* --- operations ---------------------------------------------------------------- */

/* Appends a record (a put with iov, or a tombstone) to the own active
 * segment and applies it once written. */
static int append(posix_t *p, int kind, const char *ns, uint64_t hash, const struct iovec *iov,
                  int iovcnt, size_t len, char *err, size_t errlen) {
  pack_t *k = p->pack;
  size_t nslen = strlen(ns), size = rec_size(nslen, len);
  rec_t h = {.magic = REC_MAGIC,
             .kind = (uint8_t)kind,
             .nslen = (uint8_t)nslen,
             .len = (uint32_t)len,
             .hash = hash,
             .time_ns = now_ns()};
  seg_t *s;
  uint64_t off;
  int id, rc, e;

  if (len > UINT32_MAX) {
    snprintf(err, errlen, "%016" PRIx64 ": %zu bytes is more than a packed record holds", hash,
             len);
    return KVP_ETOOBIG;
  }
  pthread_mutex_lock(&p->mu);
  if ((id = ns_id(k, ns, 1)) < 0) {
    pthread_mutex_unlock(&p->mu);
    snprintf(err, errlen, "%s: namespace %s: more than %d namespaces, or out of memory", k->dir, ns,
             MAX_NS);
    return KVP_ENOMEM;
  }
  if ((rc = reserve(p, size, &s, &off, err, errlen)) != 0) {
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  if ((rc = flight_begin(k, &h.version)) != 0) {
    wrote(k, s, size, 1);
    pthread_mutex_unlock(&p->mu);
    snprintf(err, errlen, "%s: out of memory", k->dir);
    return rc;
  }
  pthread_mutex_unlock(&p->mu);
  e = write_rec(s, off, &h, ns, iov, iovcnt, p->fsync);
  pthread_mutex_lock(&p->mu);
  if (e == 0)
    apply(p, s, off, &h, id);
  wrote(k, s, size, e != 0);
  flight_end(k, h.version);
  pthread_mutex_unlock(&p->mu);
  atomic_fetch_add(&k->sh->records, 1);
  if (e != 0)
    return px_fail(px_errno_code(e), err, errlen, "%s: append: %s", k->dir, e);
  return 0;
}

int pk_put(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t len, char *err, size_t errlen) {
  return append(p, REC_PUT, ns, hash, iov, iovcnt, len, err, errlen);
}

int pk_find(posix_t *p, const char *ns, uint64_t hash, size_t *len, uint64_t *time_ns, int fresh) {
  char err[256];
  if (fresh && refresh(p, 0, err, sizeof err) != 0)
    return 0;
  pthread_mutex_lock(&p->mu);
  ent_t *e = find_put(p->pack, ns, hash);
  if (e != NULL && len)
    *len = e->len;
  if (e != NULL && time_ns)
    *time_ns = e->time_ns;
  pthread_mutex_unlock(&p->mu);
  return e != NULL;
}

int pk_get(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t *len, char *err, size_t errlen) {
  int rc = refresh(p, 0, err, errlen);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  ent_t *e = find_put(p->pack, ns, hash);
  if (e == NULL) {
    pthread_mutex_unlock(&p->mu);
    return 1;
  }
  seg_t *s = e->seg;
  uint64_t e_off = e->off, off = e_off + sizeof(rec_t) + strlen(ns);
  size_t want = e->len, room = 0;
  s->refs++;
  pthread_mutex_unlock(&p->mu);

  *len = want;
  for (int i = 0; i < iovcnt; i++)
    room += iov[i].iov_len;
  if (want > room) {
    snprintf(err, errlen, "%s/%016" PRIx64 ": %zu bytes, more than the %zu-byte buffer", ns, hash,
             want, room);
    rc = KVP_ETOOBIG;
  }
  for (int i = 0; rc == 0 && i < iovcnt && want > 0; i++) {
    size_t n = iov[i].iov_len < want ? iov[i].iov_len : want, got = 0;
    while (got < n) {
      ssize_t r = pread(s->fd, (char *)iov[i].iov_base + got, n - got, (off_t)off);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0) {
        rc = px_fail(KVP_EIO, err, errlen, "%s: packed read: %s", p->pack->dir, errno);
        break;
      }
      if (r == 0) {
        /* The segment ends inside a record the index read whole: cut short
         * on disk. The copy is bad, not the volume (as a block file cut
         * short fails its frame check): quarantined, not retried. */
        snprintf(err, errlen,
                 "%s/%016" PRIx64 ".seg: %s/%016" PRIx64 ": the segment ends %" PRIu64
                 " bytes into the record's payload (cut short on disk)",
                 p->pack->dir, s->no, ns, hash, off - (e_off + sizeof(rec_t) + strlen(ns)));
        rc = KVP_ECORRUPT;
        break;
      }
      got += (size_t)r;
      off += (uint64_t)r;
    }
    want -= n;
  }
  pthread_mutex_lock(&p->mu);
  seg_unref(s);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

int pk_del(posix_t *p, const char *ns, uint64_t hash, char *err, size_t errlen) {
  if (!pk_find(p, ns, hash, NULL, NULL, 1))
    return 1;
  return append(p, REC_DEL, ns, hash, NULL, 0, 0, err, errlen);
}

void pk_forget(posix_t *p, const char *ns, uint64_t hash) {
  pthread_mutex_lock(&p->mu);
  ent_t *e = find_put(p->pack, ns, hash);
  if (e != NULL) {
    put_died(e->seg, ent_size(p->pack, e), e->version);
    p->used -= e->len < p->used ? e->len : p->used;
    p->blocks -= p->blocks ? 1 : 0;
    erase(p->pack, e);
  }
  pthread_mutex_unlock(&p->mu);
}

int pk_iterate(posix_t *p, px_visit_fn fn, void *ctx) {
  typedef struct {
    uint64_t hash, len;
    uint16_t ns;
  } item_t;
  pack_t *k = p->pack;
  item_t *items;
  size_t n = 0;
  char err[256];
  int rc = refresh(p, 0, err, sizeof err);

  if (rc != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  if ((items = malloc((k->tab_n + 1) * sizeof *items)) == NULL) {
    pthread_mutex_unlock(&p->mu);
    return KVP_ENOMEM;
  }
  for (size_t i = 0; i < k->tab_cap; i++)
    if (k->tab[i].seg != NULL && k->tab[i].kind == REC_PUT)
      items[n++] = (item_t){k->tab[i].hash, k->tab[i].len, k->tab[i].ns};
  pthread_mutex_unlock(&p->mu);
  /* Namespace strings live until close: safe to read unlocked. */
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = fn(ctx, k->nss[items[i].ns], items[i].hash, items[i].len);
  free(items);
  return rc;
}

int pk_garbage(posix_t *p, uint64_t *dead, uint64_t *total, char *err, size_t errlen) {
  int rc = refresh(p, 0, err, errlen);
  *dead = *total = 0;
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->pack->nsegs; i++) {
    *dead += p->pack->segs[i]->dead + p->pack->segs[i]->tomb;
    *total += p->pack->segs[i]->size;
  }
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* --- compaction ---------------------------------------------------------------- */

typedef struct carry_s {
  seg_t *v;               /* the victim, locked exclusively */
  const unsigned char *m; /* its bytes */
  uint64_t oldest_dead;   /* the lowest version of a dead put outside v */
  uint64_t flight;        /* no write of a version below it in flight (flight_floor) */
  int blocked;            /* a refresh stopped at a write in flight */
  seg_t *to;              /* the own segment copied into last (referenced) */
} carry_t;

/* The sealed segment with the largest share of reclaimable bytes whose
 * exclusive flock this open gets (a writer's segment, or one another
 * process reads while testing its seal, is passed over); referenced.
 * Tombstones count only when compaction would drop them all. Under
 * refreshing. */
static seg_t *pick(posix_t *p, uint64_t flight) {
  typedef struct {
    seg_t *s;
    double share;
  } cand_t;
  pack_t *k = p->pack;
  seg_t *v = NULL, *arg = NULL;
  uint64_t min1 = NONE, min2 = NONE;
  size_t n = 0;

  pthread_mutex_lock(&p->mu);
  cand_t *c = malloc((k->nsegs + 1) * sizeof *c);
  if (c == NULL) {
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  for (size_t i = 0; i < k->nsegs; i++) {
    seg_t *s = k->segs[i];
    if (s->dead_min < min1) {
      min2 = min1;
      min1 = s->dead_min;
      arg = s;
    } else if (s->dead_min < min2) {
      min2 = s->dead_min;
    }
  }
  for (size_t i = 0; i < k->nsegs; i++) {
    seg_t *s = k->segs[i];
    if (s == k->active || (s->own && s->locked) || s->size == 0)
      continue;
    uint64_t others = s == arg ? min2 : min1;
    uint64_t gone =
        s->dead + (!k->blocked && s->tomb_max < others && s->tomb_max < flight ? s->tomb : 0);
    if (gone > 0)
      c[n++] = (cand_t){s, (double)gone / (double)s->size};
  }
  /* Largest share first: a few candidates, a simple sort. */
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && c[j].share > c[j - 1].share; j--) {
      cand_t t = c[j];
      c[j] = c[j - 1];
      c[j - 1] = t;
    }
  for (size_t i = 0; i < n && v == NULL; i++)
    if (flock(c[i].s->fd, LOCK_EX | LOCK_NB) == 0) {
      v = c[i].s;
      v->refs++;
    }
  pthread_mutex_unlock(&p->mu);
  free(c);
  return v;
}

/* Copies the record at off of the victim (header h) into the own active
 * segment when it is its key's newest: a put, or a tombstone that may
 * still shadow an older record somewhere. The copy keeps the version and
 * raises copy, so it outranks the original. */
static int carry(posix_t *p, carry_t *c, uint64_t off, const rec_t *h, const char *ns, char *err,
                 size_t errlen) {
  pack_t *k = p->pack;
  size_t size = rec_size(h->nslen, h->len);
  seg_t *s, *prev = NULL;
  uint64_t to;
  int rc;

  pthread_mutex_lock(&p->mu);
  int id = ns_id(k, ns, 0);
  ent_t *e = id < 0 ? NULL : find(k, (uint16_t)id, h->hash);
  if (e == NULL || e->seg != c->v || e->off != off) {
    pthread_mutex_unlock(&p->mu);
    return 0; /* not its key's newest: dead */
  }
  if (h->kind == REC_DEL && !c->blocked && c->oldest_dead > h->version && c->flight > h->version) {
    erase(k, e); /* no older put is left anywhere, nor in flight: the tombstone goes */
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  if ((rc = reserve(p, size, &s, &to, err, errlen)) != 0) {
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  if (c->to != s) {
    prev = c->to;
    c->to = s;
    s->refs++;
  }
  pthread_mutex_unlock(&p->mu);
  if (prev != NULL) { /* rolled: the last segment's copies made durable */
    int e2 = p->fsync && fdatasync(prev->fd) != 0 ? errno : 0;
    pthread_mutex_lock(&p->mu);
    seg_unref(prev);
    pthread_mutex_unlock(&p->mu);
    if (e2 != 0) {
      pthread_mutex_lock(&p->mu);
      wrote(k, s, size, 1);
      pthread_mutex_unlock(&p->mu);
      return px_fail(px_errno_code(e2), err, errlen, "%s: fdatasync: %s", k->dir, e2);
    }
  }
  rec_t cp = *h;
  cp.copy = h->copy + 1;
  struct iovec pl = {(void *)(c->m + off + sizeof *h + h->nslen), h->len};
  int werr = write_rec(s, to, &cp, ns, &pl, h->len ? 1 : 0, 0);
  pthread_mutex_lock(&p->mu);
  if (werr == 0)
    apply(p, s, to, &cp, id);
  wrote(k, s, size, werr != 0);
  pthread_mutex_unlock(&p->mu);
  return werr ? px_fail(px_errno_code(werr), err, errlen, "%s: compaction: %s", k->dir, werr) : 0;
}

int pk_compact(posix_t *p, char *err, size_t errlen) {
  pack_t *k = p->pack;
  carry_t c = {.oldest_dead = NONE};
  uint64_t size = 0;
  char path[3400];
  int rc;

  if (k == NULL)
    return 0;
  pthread_mutex_lock(&k->compacting);
  if (flock(k->compact_fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    pthread_mutex_unlock(&k->compacting);
    if (e == EWOULDBLOCK)
      return 0; /* another opener is compacting: nothing for this one */
    return px_fail(px_errno_code(e), err, errlen, "%s/COMPACT: flock: %s", k->dir, e);
  }
  /* Before the refresh: a put below it that lands later was in flight now. */
  c.flight = flight_floor(k);
  if ((rc = refresh(p, 1, err, errlen)) != 0)
    goto out;
  pthread_mutex_lock(&k->refreshing);
  if ((c.v = pick(p, c.flight)) != NULL) {
    struct stat sb;
    /* Sealed now that this open holds it: read to its end. */
    if (!c.v->own && !c.v->done && fstat(c.v->fd, &sb) == 0) {
      int64_t got = scan(p, c.v, c.v->size, (uint64_t)sb.st_size, 1);
      if (got >= 0)
        c.v->size = (uint64_t)got;
    }
    c.v->done = 1;
    size = c.v->size;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < k->nsegs; i++)
      if (k->segs[i] != c.v && k->segs[i]->dead_min < c.oldest_dead)
        c.oldest_dead = k->segs[i]->dead_min;
    c.blocked = k->blocked;
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&k->refreshing);
  if (c.v == NULL)
    goto out;
  /* A victim cut short on disk: its pages past the end would fault
   * (SIGBUS); the records that were there are lost, and go with it. */
  struct stat vb;
  if (fstat(c.v->fd, &vb) == 0 && (uint64_t)vb.st_size < size)
    size = (uint64_t)vb.st_size;

  unsigned char *m = size ? mmap(NULL, size, PROT_READ, MAP_SHARED, c.v->fd, 0) : NULL;
  if (size && m == MAP_FAILED) {
    rc = px_fail(px_errno_code(errno), err, errlen, "%s: mmap: %s", k->dir, errno);
    m = NULL;
  }
  c.m = m;
  rec_t h;
  char ns[65];
  for (uint64_t off = 0; rc == 0 && off < size;) {
    if (!rec_at(m, size, off, &h, ns)) {
      off += 8;
      continue;
    }
    rc = carry(p, &c, off, &h, ns, err, errlen);
    off += rec_size(h.nslen, h.len);
  }
  if (m != NULL)
    munmap(m, size);
  /* The copies are durable before the victim goes. */
  if (c.to != NULL) {
    if (rc == 0 && p->fsync && fdatasync(c.to->fd) != 0)
      rc = px_fail(px_errno_code(errno), err, errlen, "%s: fdatasync: %s", k->dir, errno);
    pthread_mutex_lock(&p->mu);
    seg_unref(c.to);
    pthread_mutex_unlock(&p->mu);
    atomic_fetch_add(&k->sh->records, 1);
  }
  if (rc == 0) {
    pthread_mutex_lock(&k->refreshing);
    seg_path(k, c.v->no, path, sizeof path);
    if (unlink(path) != 0) {
      rc = px_fail(px_errno_code(errno), err, errlen, "%s: %s", path, errno);
    } else {
      pthread_mutex_lock(&p->mu);
      seg_retire(p, c.v);
      pthread_mutex_unlock(&p->mu);
      atomic_fetch_add(&k->sh->segments, 1);
    }
    pthread_mutex_unlock(&k->refreshing);
    if (rc == 0 && p->fsync)
      px_sync_dir(k->dir);
  }
  pthread_mutex_lock(&p->mu);
  if (rc != 0)
    flock(c.v->fd, LOCK_UN);
  seg_unref(c.v);
  pthread_mutex_unlock(&p->mu);
out:
  flock(k->compact_fd, LOCK_UN);
  pthread_mutex_unlock(&k->compacting);
  return rc != 0 ? rc : c.v != NULL;
}
