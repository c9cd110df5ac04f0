/* The posix plugin's packed layout (pack.h; docs/volumes.md, "posix").
 *
 * Why this file is long: the segment format, its loader (with the resync
 * over torn writes), the in-memory index, put/get/delete and compaction
 * share one set of invariants about versions, dead bytes and segment
 * lifetimes; split, each half would have to restate them.
 *
 * On disk: <root>/.packed/<16 hex digits>.seg, numbered in creation order.
 * A segment is a run of records, each 8-byte aligned:
 *
 *   magic "KVPR" u32 | kind u8 (1 put, 2 tombstone) | ns length u8 | 0 u16
 *   | payload length u32 | 0 u32 | version u64 | hash u64 | time_ns u64
 *   | XXH3-64 of the record with this field zero, u64 | ns | payload | pad
 *
 * in the host's byte order (a packed volume is not moved between machines
 * of different endianness). Every record carries a version, one counter
 * per volume: of an object's records the one with the highest version is
 * the object (a tombstone: none), whatever segment it sits in. So a
 * compaction copies records forward keeping their versions, and a crash
 * at any point of it leaves at worst two copies of a record, the same.
 *
 * Writes reserve their place at the end of the active segment under the
 * lock, then write outside it, so puts run in parallel; a crash or an I/O
 * error can leave a reserved place unwritten or half written. The loader
 * therefore checks every record's XXH3 and, past a bad one, looks for the
 * next magic at the next 8-byte boundary: a torn record costs its own
 * bytes only. A put is acknowledged after its record is written (and
 * fdatasync'ed with fsync=on), and enters the index only then.
 *
 * Dead bytes: a record replaced, deleted or torn. Tombstones own nothing
 * but shadow older records: one is dropped when it is compacted out of
 * the oldest segment (no older record it could shadow is left) or when a
 * newer record of its key exists; otherwise compaction carries it forward.
 * So a segment's tombstones count towards choosing it for compaction only
 * when it is the oldest: a segment dead only by its tombstones would
 * otherwise be rewritten again and again, its tombstones carried each time.
 *
 * One process: the in-memory index is this process's, so a second process
 * appending or compacting would corrupt it. Open takes an exclusive lock
 * (flock) on <root>/.packed/LOCK and refuses a volume another process (or
 * another open in this one) holds: KVP_EBUSY. Packed suits a volume one
 * process opens, e.g. a G4 volume only the advisor reads and writes.
 *
 * Segment lifetimes: a get pins the segment it reads (refs) and reads
 * outside the lock; compaction unlinks a segment once its live records are
 * copied and closes its descriptor when the last reader is done. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
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

typedef struct rec_s {
  uint32_t magic;
  uint8_t kind, nslen;
  uint16_t zero;
  uint32_t len, zero2;
  uint64_t version, hash, time_ns, sum;
} rec_t;
_Static_assert(sizeof(rec_t) == 48, "the record header is 48 bytes");

typedef struct seg_s {
  uint64_t no;
  int fd;
  uint64_t size; /* bytes appended or reserved */
  uint64_t dead; /* bytes of records no object owns (replaced, deleted, torn) */
  uint64_t tomb; /* bytes of its tombstones: reclaimable once no older
                    record needs shadowing (see compaction) */
  int refs;      /* readers and a compaction in flight */
  int retired;   /* unlinked: closed and freed when refs drops to 0 */
} seg_t;

typedef struct ent_s {
  uint64_t hash, version, off, time_ns;
  seg_t *seg; /* NULL: an empty slot */
  uint32_t len;
  uint16_t ns;
  uint8_t kind; /* REC_DEL only while loading */
} ent_t;

struct pack_s {
  char dir[3300];
  uint64_t seg_max;
  seg_t **segs; /* by number; the last is the active one */
  size_t nsegs, segs_cap;
  ent_t *tab; /* open addressing, linear probing, power-of-two size */
  size_t tab_cap, tab_n;
  char *nss[MAX_NS];
  size_t nns;
  uint64_t version;
  int lock_fd;                /* holds the exclusive flock on LOCK */
  pthread_mutex_t compacting; /* one compaction at a time */
};

static size_t rec_size(size_t nslen, size_t len) {
  return (sizeof(rec_t) + nslen + len + 7) & ~(size_t)7;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

/* The slot for (ns, hash): the existing entry, or a new empty one (seg
 * NULL) the caller fills. NULL when out of memory. */
static ent_t *slot(pack_t *k, uint16_t ns, uint64_t hash) {
  ent_t *e = find(k, ns, hash);
  if (e != NULL)
    return e;
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

/* --- segments ------------------------------------------------------------------ */

static void seg_path(const pack_t *k, uint64_t no, char *out, size_t n) {
  snprintf(out, n, "%s/%016" PRIx64 ".seg", k->dir, no);
}

static void seg_unref(seg_t *s) {
  if (--s->refs == 0 && s->retired) {
    close(s->fd);
    free(s);
  }
}

/* A new empty segment after the last one: the active segment. */
static int seg_new(posix_t *p, char *err, size_t errlen) {
  pack_t *k = p->pack;
  char path[3400];
  uint64_t no = k->nsegs ? k->segs[k->nsegs - 1]->no + 1 : 1;
  seg_t *s = calloc(1, sizeof *s);

  if (s == NULL || (k->nsegs == k->segs_cap && KVP_PLUGIN_GROW(k->segs, k->segs_cap) != 0)) {
    free(s);
    snprintf(err, errlen, "%s: out of memory", k->dir);
    return KVP_ENOMEM;
  }
  seg_path(k, no, path, sizeof path);
  if ((s->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
    int e = errno;
    free(s);
    return px_fail(px_errno_code(e), err, errlen, "%s: %s", path, e);
  }
  if (p->fsync)
    px_sync_dir(k->dir);
  s->no = no;
  s->refs = 1; /* the segment list's */
  k->segs[k->nsegs++] = s;
  return 0;
}

/* Reserves n bytes at the end of the active segment, rolling to a new one
 * when it would pass the segment size (a record larger than that gets a
 * segment of its own). Under the lock. */
static int reserve(posix_t *p, size_t n, seg_t **seg, uint64_t *off, char *err, size_t errlen) {
  pack_t *k = p->pack;
  seg_t *a = k->nsegs ? k->segs[k->nsegs - 1] : NULL;
  int rc;
  if (a == NULL || (a->size > 0 && a->size + n > k->seg_max)) {
    if ((rc = seg_new(p, err, errlen)) != 0)
      return rc;
    a = k->segs[k->nsegs - 1];
  }
  *seg = a;
  *off = a->size;
  a->size += n;
  a->refs++;
  return 0;
}

/* Writes a record whose header is h (sum filled here) with ns and the
 * payload iov at off in s; fdatasync with fsync=on. 0 or errno. */
static int write_rec(posix_t *p, seg_t *s, uint64_t off, rec_t *h, const char *ns,
                     const struct iovec *iov, int iovcnt) {
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
  if (p->fsync && fdatasync(s->fd) != 0)
    return errno;
  return 0;
}

/* The record at off of a mapped segment of size bytes: its header into h
 * and 1 when whole and its checksum right, else 0. */
static int rec_at(const unsigned char *m, uint64_t size, uint64_t off, rec_t *h) {
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
  return XXH3_64bits_digest(&st) == h->sum;
}

/* --- loading ------------------------------------------------------------------- */

/* Applies one record found at (s, off) while loading: the newest version
 * of each key stays; everything else is dead. */
static int load_rec(posix_t *p, seg_t *s, uint64_t off, const rec_t *h, const char *ns) {
  pack_t *k = p->pack;
  uint64_t size = rec_size(h->nslen, h->len);
  int id = ns_id(k, ns, 1);
  if (id < 0)
    return KVP_ENOMEM;
  if (h->version >= k->version)
    k->version = h->version + 1;
  if (h->kind == REC_DEL)
    s->tomb += size;
  ent_t *e = slot(k, (uint16_t)id, h->hash);
  if (e == NULL)
    return KVP_ENOMEM;
  if (e->seg != NULL && e->version >= h->version) {
    if (h->kind == REC_PUT)
      s->dead += size; /* an older record, or a second copy of one */
    return 0;
  }
  if (e->seg != NULL && e->kind == REC_PUT)
    e->seg->dead += rec_size(strlen(k->nss[e->ns]), e->len);
  *e = (ent_t){.hash = h->hash,
               .version = h->version,
               .off = off,
               .time_ns = h->time_ns,
               .seg = s,
               .len = h->len,
               .ns = (uint16_t)id,
               .kind = h->kind};
  return 0;
}

/* Scans one segment; torn or foreign bytes are skipped (dead) up to the
 * next record that checks. *end: the end of its last good record. */
static int load_seg(posix_t *p, seg_t *s, uint64_t *end, char *err, size_t errlen) {
  struct stat sb;
  char ns[65];
  rec_t h;
  int rc = 0;

  *end = 0;
  if (fstat(s->fd, &sb) != 0)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", p->pack->dir, errno);
  s->size = (uint64_t)sb.st_size;
  if (s->size == 0)
    return 0;
  unsigned char *m = mmap(NULL, s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
  if (m == MAP_FAILED)
    return px_fail(px_errno_code(errno), err, errlen, "%s: mmap: %s", p->pack->dir, errno);
  for (uint64_t off = 0; off < s->size && rc == 0;) {
    if (!rec_at(m, s->size, off, &h)) {
      uint64_t next = off + 8;
      while (next < s->size && !rec_at(m, s->size, next, &h))
        next += 8;
      s->dead += (next < s->size ? next : s->size) - off;
      off = next;
      continue;
    }
    memcpy(ns, m + off + sizeof h, h.nslen);
    ns[h.nslen] = '\0';
    if (!kvp_plugin_ns_ok(ns)) {
      s->dead += rec_size(h.nslen, h.len);
    } else {
      rc = load_rec(p, s, off, &h, ns);
    }
    off += rec_size(h.nslen, h.len);
    *end = off;
  }
  munmap(m, s->size);
  if (rc != 0)
    snprintf(err, errlen, "%s: out of memory loading the packed index", p->pack->dir);
  return rc;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The numbers of the segment files in dir, sorted. */
static int list_segs(const char *dir, uint64_t **out, size_t *n, char *err, size_t errlen) {
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  if (d == NULL)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", dir, errno);
  while ((de = readdir(d)) != NULL) {
    char *end;
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

int pk_open(posix_t *p, uint64_t segment_size, uint64_t pack_max, char *err, size_t errlen) {
  pack_t *k = calloc(1, sizeof *k);
  uint64_t *nos = NULL, end = 0;
  size_t n = 0;
  int rc;

  if (k == NULL)
    return KVP_ENOMEM;
  p->pack = k;
  k->lock_fd = -1;
  p->pack_max = pack_max;
  k->seg_max = segment_size;
  k->version = 1;
  pthread_mutex_init(&k->compacting, NULL);
  snprintf(k->dir, sizeof k->dir, "%s/%s", p->root, PACK_DIR);
  if (mkdir(k->dir, 0700) != 0 && errno != EEXIST)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", k->dir, errno);
  char lock[3400];
  snprintf(lock, sizeof lock, "%s/LOCK", k->dir);
  if ((k->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", lock, errno);
  if (flock(k->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    if (e == EWOULDBLOCK) {
      snprintf(err, errlen,
               "%s: the packed volume is open in another process (or open already): "
               "layout=packed allows one",
               p->root);
      return KVP_EBUSY;
    }
    return px_fail(px_errno_code(e), err, errlen, "%s: flock: %s", lock, e);
  }
  if ((rc = list_segs(k->dir, &nos, &n, err, errlen)) != 0)
    return rc;
  for (size_t i = 0; i < n; i++) {
    char path[3400];
    seg_t *s = calloc(1, sizeof *s);
    if (s == NULL || (k->nsegs == k->segs_cap && KVP_PLUGIN_GROW(k->segs, k->segs_cap) != 0)) {
      free(s);
      rc = KVP_ENOMEM;
      snprintf(err, errlen, "%s: out of memory", k->dir);
      break;
    }
    seg_path(k, nos[i], path, sizeof path);
    if ((s->fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
      rc = px_fail(px_errno_code(errno), err, errlen, "%s: %s", path, errno);
      free(s);
      break;
    }
    s->no = nos[i];
    s->refs = 1;
    k->segs[k->nsegs++] = s;
    if ((rc = load_seg(p, s, &end, err, errlen)) != 0)
      break;
  }
  free(nos);
  if (rc != 0)
    return rc;
  /* The active segment's torn tail goes, so appends follow good records. */
  if (k->nsegs > 0) {
    seg_t *a = k->segs[k->nsegs - 1];
    if (end < a->size && ftruncate(a->fd, (off_t)end) == 0) {
      a->dead -= a->size - end < a->dead ? a->size - end : a->dead;
      a->size = end;
    }
  }
  /* Tombstones were needed only to shadow older records while loading.
   * An erase may shift a later entry into i: i is looked at again. Every
   * entry shifted into a place already passed was passed itself. */
  for (size_t i = 0; i < k->tab_cap;) {
    if (k->tab[i].seg != NULL && k->tab[i].kind == REC_DEL)
      erase(k, &k->tab[i]);
    else
      i++;
  }
  for (size_t i = 0; i < k->tab_cap; i++)
    if (k->tab[i].seg != NULL) {
      p->used += k->tab[i].len;
      p->blocks++;
    }
  return 0;
}

void pk_close(posix_t *p) {
  pack_t *k = p->pack;
  if (k == NULL)
    return;
  for (size_t i = 0; i < k->nsegs; i++) {
    close(k->segs[i]->fd);
    free(k->segs[i]);
  }
  for (size_t i = 0; i < k->nns; i++)
    free(k->nss[i]);
  free(k->segs);
  free(k->tab);
  if (k->lock_fd >= 0)
    close(k->lock_fd); /* releases the lock */
  pthread_mutex_destroy(&k->compacting);
  free(k);
  p->pack = NULL;
}

/* --- operations ---------------------------------------------------------------- */

/* Makes the record at (s, off) the newest of its key if its version is the
 * highest: the usage changes and the old record's bytes die. Under the
 * lock. A record that lost to a newer one is dead itself. */
static void install(posix_t *p, int id, const rec_t *h, seg_t *s, uint64_t off) {
  pack_t *k = p->pack;
  ent_t *e = find(k, (uint16_t)id, h->hash);
  if (e != NULL && e->version > h->version) {
    *(h->kind == REC_DEL ? &s->tomb : &s->dead) += rec_size(h->nslen, h->len);
    return;
  }
  if (h->kind == REC_DEL) {
    s->tomb += rec_size(h->nslen, h->len);
    if (e != NULL) {
      e->seg->dead += rec_size(strlen(k->nss[e->ns]), e->len);
      p->used -= e->len < p->used ? e->len : p->used;
      p->blocks -= p->blocks ? 1 : 0;
      erase(k, e);
    }
    return;
  }
  if (e == NULL && (e = slot(k, (uint16_t)id, h->hash)) == NULL) {
    s->dead += rec_size(h->nslen, h->len); /* out of memory: as if lost */
    return;
  }
  if (e->seg != NULL) {
    e->seg->dead += rec_size(strlen(k->nss[e->ns]), e->len);
    p->used -= e->len < p->used ? e->len : p->used;
  } else {
    p->blocks++;
  }
  p->used += h->len;
  *e = (ent_t){.hash = h->hash,
               .version = h->version,
               .off = off,
               .time_ns = h->time_ns,
               .seg = s,
               .len = h->len,
               .ns = (uint16_t)id,
               .kind = REC_PUT};
}

/* Appends a record (a put with iov, or a tombstone) and installs it. */
static int append(posix_t *p, int kind, const char *ns, uint64_t hash, const struct iovec *iov,
                  int iovcnt, size_t len, char *err, size_t errlen) {
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
  if ((id = ns_id(p->pack, ns, 1)) < 0) {
    pthread_mutex_unlock(&p->mu);
    snprintf(err, errlen, "%s: namespace %s: more than %d namespaces, or out of memory",
             p->pack->dir, ns, MAX_NS);
    return KVP_ENOMEM;
  }
  if ((rc = reserve(p, size, &s, &off, err, errlen)) != 0) {
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  h.version = p->pack->version++;
  pthread_mutex_unlock(&p->mu);
  e = write_rec(p, s, off, &h, ns, iov, iovcnt);
  pthread_mutex_lock(&p->mu);
  if (e != 0)
    s->dead += size; /* reserved, not (wholly) written: the loader skips it */
  else
    install(p, id, &h, s, off);
  seg_unref(s);
  pthread_mutex_unlock(&p->mu);
  if (e != 0)
    return px_fail(px_errno_code(e), err, errlen, "%s: append: %s", p->pack->dir, e);
  return 0;
}

int pk_put(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t len, char *err, size_t errlen) {
  return append(p, REC_PUT, ns, hash, iov, iovcnt, len, err, errlen);
}

int pk_find(posix_t *p, const char *ns, uint64_t hash, size_t *len, uint64_t *time_ns) {
  pthread_mutex_lock(&p->mu);
  int id = ns_id(p->pack, ns, 0);
  ent_t *e = id < 0 ? NULL : find(p->pack, (uint16_t)id, hash);
  if (e != NULL && len)
    *len = e->len;
  if (e != NULL && time_ns)
    *time_ns = e->time_ns;
  pthread_mutex_unlock(&p->mu);
  return e != NULL;
}

int pk_get(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t *len, char *err, size_t errlen) {
  pthread_mutex_lock(&p->mu);
  int id = ns_id(p->pack, ns, 0);
  ent_t *e = id < 0 ? NULL : find(p->pack, (uint16_t)id, hash);
  if (e == NULL) {
    pthread_mutex_unlock(&p->mu);
    return 1;
  }
  seg_t *s = e->seg;
  uint64_t off = e->off + sizeof(rec_t) + strlen(ns);
  size_t want = e->len, room = 0;
  s->refs++;
  pthread_mutex_unlock(&p->mu);

  *len = want;
  for (int i = 0; i < iovcnt; i++)
    room += iov[i].iov_len;
  int rc = 0;
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
      if (r <= 0) {
        rc =
            px_fail(KVP_EIO, err, errlen, "%s: packed read: %s", p->pack->dir, r < 0 ? errno : EIO);
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
  if (!pk_find(p, ns, hash, NULL, NULL))
    return 1;
  return append(p, REC_DEL, ns, hash, NULL, 0, 0, err, errlen);
}

void pk_forget(posix_t *p, const char *ns, uint64_t hash) {
  pthread_mutex_lock(&p->mu);
  int id = ns_id(p->pack, ns, 0);
  ent_t *e = id < 0 ? NULL : find(p->pack, (uint16_t)id, hash);
  if (e != NULL) {
    e->seg->dead += rec_size(strlen(ns), e->len);
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
  int rc = 0;

  pthread_mutex_lock(&p->mu);
  if ((items = malloc((k->tab_n + 1) * sizeof *items)) == NULL) {
    pthread_mutex_unlock(&p->mu);
    return KVP_ENOMEM;
  }
  for (size_t i = 0; i < k->tab_cap; i++)
    if (k->tab[i].seg != NULL)
      items[n++] = (item_t){k->tab[i].hash, k->tab[i].len, k->tab[i].ns};
  pthread_mutex_unlock(&p->mu);
  /* Namespace strings live until close: safe to read unlocked. */
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = fn(ctx, k->nss[items[i].ns], items[i].hash, items[i].len);
  free(items);
  return rc;
}

void pk_garbage(posix_t *p, uint64_t *dead, uint64_t *total) {
  *dead = *total = 0;
  pthread_mutex_lock(&p->mu);
  for (size_t i = 0; i < p->pack->nsegs; i++) {
    *dead += p->pack->segs[i]->dead + p->pack->segs[i]->tomb;
    *total += p->pack->segs[i]->size;
  }
  pthread_mutex_unlock(&p->mu);
}

/* --- compaction ---------------------------------------------------------------- */

/* Copies the record at (v, off) with header h forward when it is still its
 * key's newest (a put) or still shadows something (a tombstone). */
static int carry(posix_t *p, seg_t *v, const unsigned char *m, uint64_t off, const rec_t *h,
                 int oldest, char *err, size_t errlen) {
  pack_t *k = p->pack;
  char ns[65];
  seg_t *s;
  uint64_t to;
  int rc;

  memcpy(ns, m + off + sizeof *h, h->nslen);
  ns[h->nslen] = '\0';
  pthread_mutex_lock(&p->mu);
  int id = ns_id(k, ns, 0);
  ent_t *e = id < 0 ? NULL : find(k, (uint16_t)id, h->hash);
  int keep = h->kind == REC_PUT ? e != NULL && e->seg == v && e->off == off
                                : !oldest && (e == NULL || e->version < h->version);
  if (!keep) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  size_t size = rec_size(h->nslen, h->len);
  if ((rc = reserve(p, size, &s, &to, err, errlen)) != 0) {
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  pthread_mutex_unlock(&p->mu);
  /* The record's bytes as they are: same version, same checksum. */
  struct iovec rec = {(void *)(m + off), size};
  int werr = px_pwrite_all(s->fd, &rec, 1, to);
  pthread_mutex_lock(&p->mu);
  if (werr != 0) {
    s->dead += size;
  } else if (h->kind == REC_DEL) {
    s->tomb += size;
  } else {
    e = find(k, (uint16_t)id, h->hash); /* the table may have moved */
    if (e != NULL && e->seg == v && e->off == off) {
      e->seg = s;
      e->off = to;
    } else {
      s->dead += size; /* replaced or deleted meanwhile */
    }
  }
  seg_unref(s);
  pthread_mutex_unlock(&p->mu);
  return werr ? px_fail(px_errno_code(werr), err, errlen, "%s: compaction: %s", k->dir, werr) : 0;
}

int pk_compact(posix_t *p, char *err, size_t errlen) {
  pack_t *k = p->pack;
  seg_t *v = NULL;
  char path[3400];
  int rc = 0, oldest;

  if (k == NULL)
    return 0;
  pthread_mutex_lock(&k->compacting);
  pthread_mutex_lock(&p->mu);
  /* The sealed segment with the largest share of reclaimable bytes. */
  double best = 0;
  for (size_t i = 0; i + 1 < k->nsegs; i++) {
    seg_t *s = k->segs[i];
    uint64_t gone = s->dead + (i == 0 ? s->tomb : 0);
    if (gone > 0 && (double)gone / (double)s->size > best) {
      best = (double)gone / (double)s->size;
      v = s;
    }
  }
  if (v == NULL) {
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&k->compacting);
    return 0;
  }
  oldest = v == k->segs[0];
  v->refs++;
  uint64_t size = v->size;
  pthread_mutex_unlock(&p->mu);

  unsigned char *m = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, v->fd, 0) : NULL;
  if (size && m == MAP_FAILED) {
    rc = px_fail(px_errno_code(errno), err, errlen, "%s: mmap: %s", k->dir, errno);
    m = NULL;
  }
  rec_t h;
  for (uint64_t off = 0; rc == 0 && off < size;) {
    if (!rec_at(m, size, off, &h)) {
      off += 8;
      continue;
    }
    rc = carry(p, v, m, off, &h, oldest, err, errlen);
    off += rec_size(h.nslen, h.len);
  }
  if (m != NULL)
    munmap(m, size);
  /* The copies are durable before the segment goes. */
  pthread_mutex_lock(&p->mu);
  seg_t *a = k->segs[k->nsegs - 1];
  a->refs++;
  pthread_mutex_unlock(&p->mu);
  if (rc == 0 && p->fsync && a != v && fdatasync(a->fd) != 0)
    rc = px_fail(px_errno_code(errno), err, errlen, "%s: fdatasync: %s", k->dir, errno);
  pthread_mutex_lock(&p->mu);
  seg_unref(a);
  if (rc == 0) {
    seg_path(k, v->no, path, sizeof path);
    if (unlink(path) != 0) {
      rc = px_fail(px_errno_code(errno), err, errlen, "%s: %s", path, errno);
    } else {
      for (size_t i = 0; i < k->nsegs; i++)
        if (k->segs[i] == v) {
          memmove(k->segs + i, k->segs + i + 1, (k->nsegs - i - 1) * sizeof *k->segs);
          k->nsegs--;
          break;
        }
      v->retired = 1;
      v->refs--; /* the segment list's; ours below is the last but readers' */
    }
  }
  seg_unref(v);
  pthread_mutex_unlock(&p->mu);
  if (rc == 0 && p->fsync)
    px_sync_dir(k->dir);
  pthread_mutex_unlock(&k->compacting);
  return rc == 0 ? 1 : rc;
}
