/* What the posix plugin's files share: the volume's state and the helpers
 * that open (posix.c), the identity checks and the scan (volume.c) use.
 * Private to plugins/posix/; the symbols are hidden in the plugin. */
#ifndef KVP_PLUGIN_POSIX_H
#define KVP_PLUGIN_POSIX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define MARKER ".kvplane-volume" /* the identity marker, in the root */

typedef struct pack_s pack_t; /* the packed layout (pack.c) */

typedef struct posix_s {
  char root[3072], marker[3200];
  char id[33]; /* the marker's random id, hex */
  dev_t mdev;  /* the marker's device and inode, as open found them */
  ino_t mino;
  uint64_t capacity;
  int fsync;
  pthread_mutex_t mu;
  uint64_t used, blocks;
  uint64_t reserved; /* bytes of puts in flight, counted against capacity */
  atomic_uint_fast64_t seq;
  pack_t *pack;      /* layout=packed; NULL: one file per object */
  uint64_t pack_max; /* objects of at most this many bytes are packed */
} posix_t;

/* Writes fmt (with a and strerror(e)) to err and returns rc. */
int px_fail(int rc, char *err, size_t errlen, const char *fmt, const char *a, int e);
/* The KVP_E* code of an errno. */
int px_errno_code(int e);
/* The directory and file of (ns, hash) under the root. */
void px_paths(const posix_t *p, const char *ns, uint64_t hash, char *dir, size_t dlen, char *file,
              size_t flen);
/* Writes all of iov[0..n) (n at most PX_IOV_MAX) at off, however short the
 * writes; 0 or an errno. */
#define PX_IOV_MAX 16
int px_pwrite_all(int fd, const struct iovec *iov, int n, uint64_t off);
/* fsyncs a directory; 0 or -1 with errno. */
int px_sync_dir(const char *dir);
/* Creates the fan-out directories <root>/<ns>/<hh> (never the root); 0 or -1. */
int px_mkdir_p(const char *root, const char *ns, const char *dir);

/* volume.c: identity. */
/* Reads the marker's id into id (33 bytes) and, when ns is not NULL, its
 * namespace into ns (65 bytes, "" when it names none). Returns 0, or -1
 * with errno. */
int px_read_marker(const char *path, char *id, char *ns);
/* Writes a new marker (temp name, fsync, rename): a new volume of name and
 * namespace ns (either may be NULL). */
int px_write_marker(posix_t *p, const char *name, const char *ns);
/* 0 when the marker open found is at its place, else KVP_EOFFLINE with err
 * (may be NULL) naming the root and why. */
int px_identity(posix_t *p, char *err, size_t errlen);

/* volume.c: the scan. Calls fn for each object under the root and removes
 * temporary files when clean is set; fn's non-zero return stops it. */
typedef int (*px_visit_fn)(void *ctx, const char *ns, uint64_t hash, uint64_t bytes);
int px_walk(posix_t *p, int clean, px_visit_fn fn, void *ctx, char *err, size_t errlen);

#endif
