/* kvplane volume plugin "posix": blocks as files in a directory tree on any
 * mounted filesystem (local NVMe for G3; NFS or a parallel filesystem for
 * G4). Why this file is long: every operation checks the identity marker
 * and dispatches between the two layouts (files, packed records) under the
 * same usage accounting; the helpers are in volume.c and pack.c.
 * Parameters (docs/volumes.md):
 *
 *   path      the root directory (required; created at open if its parent
 *             exists, see init)
 *   init      auto (default): a root that is missing, or has no identity
 *             marker, becomes a new volume at open | never: the marker must
 *             be there (a mountpoint: an empty directory is not the volume)
 *   name      optional: the volume's name, recorded in a new marker
 *   capacity  bytes the volume may hold (suffixes K/M/G/T or KiB..TiB; 0 or
 *             absent: only the filesystem's free space bounds it)
 *   fsync     on (default) | off: off skips the file and directory fsyncs,
 *             for tests and scratch volumes only
 *   layout    files (default): one file per object | packed: objects of at
 *             most pack_max bytes are records in segment files (pack.c),
 *             larger ones files; deletes leave dead bytes that compact
 *             reclaims; several processes may open it at once
 *   pack_max  packed: the largest object packed (default 256K)
 *   segment_size  packed: a segment's size before the next one begins
 *             (default 64M)
 *
 * Layout: <path>/<ns>/<hh>/<hash as 16 hex digits>, hh the hash's top byte,
 * so no directory holds more than 1/256 of a namespace. A put writes
 * <final>.tmp.<pid>.<n>, fsyncs it, renames it over the final name and
 * fsyncs the directory: a reader sees the old object or the new one, and a
 * crash leaves at most a temporary file, which open removes. Usage (bytes
 * and objects) is rebuilt by a scan at open and kept under a mutex; the
 * capacity is checked before writing, and a full filesystem (ENOSPC, EDQUOT)
 * is KVP_ENOSPC with the old object untouched. Thread-safe per volume.
 *
 * Identity (DESIGN.md, "Storage volumes"): open writes <path>/.kvplane-volume
 * (a random id, the name, the time) when it creates the volume, and keeps
 * the marker's device and inode. Every put and delete first stats the
 * marker (one stat, small beside a put's fsyncs): when it is gone or another
 * file (a dropped mount shows the bare mountpoint; a deleted, re-created or
 * renamed directory) the volume is offline: KVP_EOFFLINE, nothing written
 * or deleted, and a get or exists that misses says KVP_EOFFLINE rather than
 * "not there". Once the marker is back (the mount returns) the volume is
 * online again. The plugin never creates its root after open; it creates
 * only the fan-out directories (<ns>, <ns>/<hh>) under a root whose marker
 * it has just seen.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "kvplane/volume_plugin.h"
#include "plugin_util.h"

#include "pack.h"
#include "posix.h"

/* The scan at open: a file's usage. A key both packed and a file is left
 * by a crash between a put's write and its removal of the other form: the
 * newer one stays (a record's time against the file's mtime). */
static int count(void *ctx, const char *ns, uint64_t hash, uint64_t bytes) {
  posix_t *p = ctx;
  uint64_t t;
  if (p->pack && pk_find(p, ns, hash, NULL, &t, 0)) {
    char dir[3200], file[3300];
    struct stat sb;
    px_paths(p, ns, hash, dir, sizeof dir, file, sizeof file);
    if (stat(file, &sb) != 0 ||
        (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec < t) {
      unlink(file);
      return 0;
    }
    pk_forget(p, ns, hash);
  }
  p->used += bytes;
  p->blocks++;
  return 0;
}

/* --- operations ------------------------------------------------------------- */

static void px_close(void *vol);

static int px_open(const kvp_volume_param_t *params, size_t n, void **vol, char *err,
                   size_t errlen) {
  posix_t *p = calloc(1, sizeof *p);
  const char *root = NULL, *name = NULL, *ns = NULL;
  char marker_ns[65];
  uint64_t seg_size = 64ull << 20, pack_max = 256u << 10;
  int rc, init_auto = 1, packed = 0;
  struct stat sb;

  if (p == NULL)
    return KVP_ENOMEM;
  pthread_mutex_init(&p->mu, NULL);
  p->fsync = 1;
  for (size_t i = 0; i < n; i++) {
    const char *k = params[i].key, *v = params[i].value ? params[i].value : "";
    if (strcmp(k, "path") == 0) {
      root = v;
    } else if (strcmp(k, "capacity") == 0) {
      if (kvp_plugin_parse_size(v, &p->capacity) != 0) {
        snprintf(err, errlen, "capacity: '%s' is not a size (bytes, or with K/M/G/T)", v);
        rc = KVP_ECONFIG;
        goto out;
      }
    } else if (strcmp(k, "fsync") == 0) {
      if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
        snprintf(err, errlen, "fsync: '%s' is not on or off", v);
        rc = KVP_ECONFIG;
        goto out;
      }
      p->fsync = strcmp(v, "on") == 0;
    } else if (strcmp(k, "init") == 0) {
      if (strcmp(v, "auto") != 0 && strcmp(v, "never") != 0) {
        snprintf(err, errlen, "init: '%s' is not auto or never", v);
        rc = KVP_ECONFIG;
        goto out;
      }
      init_auto = strcmp(v, "auto") == 0;
    } else if (strcmp(k, "name") == 0) {
      name = v;
    } else if (strcmp(k, "namespace") == 0) {
      ns = v; /* added by kvp_volume_open_ns (KVP_VOLUME_KNOWS_NAMESPACE) */
    } else if (strcmp(k, "layout") == 0) {
      if (strcmp(v, "files") != 0 && strcmp(v, "packed") != 0) {
        snprintf(err, errlen, "layout: '%s' is not files or packed", v);
        rc = KVP_ECONFIG;
        goto out;
      }
      packed = strcmp(v, "packed") == 0;
    } else if (strcmp(k, "pack_max") == 0 || strcmp(k, "segment_size") == 0) {
      uint64_t *dst = k[0] == 'p' ? &pack_max : &seg_size;
      if (kvp_plugin_parse_size(v, dst) != 0 || *dst == 0 || *dst > (1ull << 31)) {
        snprintf(err, errlen, "%s: '%s' is not a size from 1 byte to 2G", k, v);
        rc = KVP_ECONFIG;
        goto out;
      }
    } else {
      snprintf(err, errlen,
               "unknown parameter '%s' (path, capacity, fsync, init, name, namespace, layout, "
               "pack_max, segment_size)",
               k);
      rc = KVP_ECONFIG;
      goto out;
    }
  }
  if (root == NULL || root[0] == '\0' || strlen(root) >= sizeof p->root - 128) {
    snprintf(err, errlen, "path: required (the volume's root directory)");
    rc = KVP_ECONFIG;
    goto out;
  }
  snprintf(p->root, sizeof p->root, "%s", root);
  snprintf(p->marker, sizeof p->marker, "%s/%s", p->root, MARKER);
  if (init_auto && mkdir(p->root, 0700) != 0 && errno != EEXIST) {
    rc = px_fail(px_errno_code(errno), err, errlen, "path %s: %s", p->root, errno);
    goto out;
  }
  if (access(p->root, W_OK | X_OK) != 0) {
    rc = px_fail(px_errno_code(errno), err, errlen, "path %s: %s", p->root, errno);
    goto out;
  }
  if (px_read_marker(p->marker, p->id, marker_ns) != 0) {
    if (!init_auto) {
      snprintf(err, errlen, "path %s: no identity marker %s (init=never): offline", p->root,
               MARKER);
      rc = KVP_EOFFLINE;
      goto out;
    }
    if (px_write_marker(p, name, ns) != 0) {
      rc = px_fail(px_errno_code(errno), err, errlen, "path %s: the identity marker: %s", p->root,
                   errno);
      goto out;
    }
  } else if (ns != NULL && ns[0] != '\0' && marker_ns[0] != '\0' && strcmp(ns, marker_ns) != 0) {
    snprintf(err, errlen,
             "path %s: the volume belongs to namespace '%s' (its marker %s), not to namespace "
             "'%s': refused",
             p->root, marker_ns, MARKER, ns);
    rc = KVP_ECONFIG;
    goto out;
  }
  if (stat(p->marker, &sb) != 0) {
    rc = px_fail(px_errno_code(errno), err, errlen, "%s: %s", p->marker, errno);
    goto out;
  }
  p->mdev = sb.st_dev;
  p->mino = sb.st_ino;
  if (packed && (rc = pk_open(p, seg_size, pack_max, err, errlen)) != 0)
    goto out;
  if (!packed) {
    char dir[3300];
    snprintf(dir, sizeof dir, "%s/%s", p->root, PACK_DIR);
    if (stat(dir, &sb) == 0) {
      snprintf(err, errlen, "path %s holds packed segments (%s): open it with layout=packed",
               p->root, PACK_DIR);
      rc = KVP_ECONFIG;
      goto out;
    }
  }
  if ((rc = px_walk(p, 1, count, p, err, errlen)) != 0)
    goto out;
  *vol = p;
  return 0;
out:
  px_close(p);
  return rc;
}

static void px_close(void *vol) {
  posix_t *p = vol;
  if (p == NULL)
    return;
  pk_close(p);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

static size_t iov_len(const struct iovec *iov, int n) {
  size_t t = 0;
  for (int i = 0; i < n; i++)
    t += iov[i].iov_len;
  return t;
}

/* A put of a small object into the packed layout, its len reserved; a file
 * of the same key (the object was larger before, or the volume held files
 * before it was packed) goes once the record is durable. */
static int put_packed(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov,
                      int iovcnt, size_t len, const char *file, char *err, size_t errlen) {
  struct stat sb;
  int rc = pk_put(p, ns, hash, iov, iovcnt, len, err, errlen);
  pthread_mutex_lock(&p->mu);
  p->reserved -= len;
  if (rc == 0 && stat(file, &sb) == 0 && unlink(file) == 0) {
    p->used -= (uint64_t)sb.st_size < p->used ? (uint64_t)sb.st_size : p->used;
    p->blocks -= p->blocks ? 1 : 0;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static int px_put(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  char *err, size_t errlen) {
  posix_t *p = vol;
  char dir[3200], file[3300], tmp[3400];
  struct stat sb;
  size_t len = iov_len(iov, iovcnt);
  uint64_t old = 0;
  int fd = -1, e, rc;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  if ((rc = px_identity(p, err, errlen)) != 0)
    return rc;
  px_paths(p, ns, hash, dir, sizeof dir, file, sizeof file);
  if (stat(file, &sb) == 0)
    old = (uint64_t)sb.st_size;
  size_t packed_len = 0;
  if (p->pack && pk_find(p, ns, hash, &packed_len, NULL, p->capacity != 0))
    old += packed_len;
  pthread_mutex_lock(&p->mu);
  if (p->capacity && p->used + p->reserved + len > p->capacity + old) {
    pthread_mutex_unlock(&p->mu);
    snprintf(err, errlen,
             "%016" PRIx64 ": %zu bytes do not fit: %" PRIu64 " of %" PRIu64 " bytes used", hash,
             len, p->used + p->reserved, p->capacity);
    return KVP_ENOSPC;
  }
  p->reserved += len;
  pthread_mutex_unlock(&p->mu);
  if (p->pack && len <= p->pack_max)
    return put_packed(p, ns, hash, iov, iovcnt, len, file, err, errlen);

  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%" PRIuFAST64, file, (long)getpid(),
           (uint_fast64_t)atomic_fetch_add(&p->seq, 1));
  if (px_mkdir_p(p->root, ns, dir) != 0) {
    e = errno;
    rc = px_fail(px_errno_code(e), err, errlen, "%s: %s", dir, e);
    goto done;
  }
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
    e = errno;
    rc = px_fail(px_errno_code(e), err, errlen, "%s: %s", tmp, e);
    goto done;
  }
  if ((e = px_pwrite_all(fd, iov, iovcnt, 0)) != 0 || (p->fsync && fsync(fd) != 0 && (e = errno))) {
    rc = px_fail(px_errno_code(e), err, errlen, "%s: write: %s", tmp, e);
    goto done;
  }
  if (close(fd) != 0) {
    fd = -1;
    e = errno;
    rc = px_fail(px_errno_code(e), err, errlen, "%s: close: %s", tmp, e);
    goto done;
  }
  fd = -1;
  /* Whether the rename replaces an object decides the usage change: the
   * look and the rename are one step under the lock, or two puts of a new
   * key would both count it. */
  pthread_mutex_lock(&p->mu);
  int existed = stat(file, &sb) == 0;
  old = existed ? (uint64_t)sb.st_size : 0;
  if (rename(tmp, file) != 0) {
    e = errno;
    pthread_mutex_unlock(&p->mu);
    rc = px_fail(px_errno_code(e), err, errlen, "%s: rename: %s", file, e);
    goto done;
  }
  p->used = p->used - old + len;
  p->blocks += existed ? 0 : 1;
  p->reserved -= len;
  pthread_mutex_unlock(&p->mu);
  /* The root went away between the check and the rename: the object is in
   * whatever is at the path now, not in this volume. */
  if ((rc = px_identity(p, err, errlen)) != 0) {
    unlink(file);
    pthread_mutex_lock(&p->mu);
    p->used -= len < p->used ? len : p->used;
    p->blocks -= existed || !p->blocks ? 0 : 1;
    pthread_mutex_unlock(&p->mu);
    return rc;
  }
  if (p->fsync && px_sync_dir(dir) != 0) {
    e = errno;
    /* The object is in place but may not survive a power loss. */
    return px_fail(px_errno_code(e), err, errlen, "%s: fsync of the directory: %s", dir, e);
  }
  /* It was packed when it was smaller: the record goes once the file is
   * durable (a crash between leaves both; open keeps the newer). */
  if (p->pack && (rc = pk_del(p, ns, hash, err, errlen)) < 0)
    return rc;
  return 0;
done:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  pthread_mutex_lock(&p->mu);
  p->reserved -= len;
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static int px_get(void *vol, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
                  size_t *len, char *err, size_t errlen) {
  posix_t *p = vol;
  char dir[3200], file[3300];
  struct stat sb;
  int fd, e;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  if (p->pack && (e = pk_get(p, ns, hash, iov, iovcnt, len, err, errlen)) != 1)
    return e;
  px_paths(p, ns, hash, dir, sizeof dir, file, sizeof file);
  if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0) {
    e = errno;
    if (e == ENOENT && px_identity(p, err, errlen) != 0)
      return KVP_EOFFLINE;
    return px_fail(px_errno_code(e), err, errlen, "%s: %s", file, e);
  }
  if (fstat(fd, &sb) != 0) {
    e = errno;
    close(fd);
    return px_fail(px_errno_code(e), err, errlen, "%s: %s", file, e);
  }
  *len = (size_t)sb.st_size;
  if (*len > iov_len(iov, iovcnt)) {
    close(fd);
    snprintf(err, errlen, "%s: %zu bytes, more than the %zu-byte buffer", file, *len,
             iov_len(iov, iovcnt));
    return KVP_ETOOBIG;
  }
  /* Read exactly the file's size into the buffers, in order. */
  size_t left = *len;
  for (int i = 0; i < iovcnt && left > 0; i++) {
    size_t want = iov[i].iov_len < left ? iov[i].iov_len : left, got = 0;
    while (got < want) {
      ssize_t r = read(fd, (char *)iov[i].iov_base + got, want - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0) {
        e = r < 0 ? errno : EIO;
        close(fd);
        /* Shorter than its size: changed under us; the frame check catches
         * a short object, this is an I/O error. */
        return px_fail(KVP_EIO, err, errlen, "%s: read: %s", file, e);
      }
      got += (size_t)r;
    }
    left -= want;
  }
  close(fd);
  return 0;
}

static int px_del(void *vol, const char *ns, uint64_t hash, char *err, size_t errlen) {
  posix_t *p = vol;
  char dir[3200], file[3300];
  struct stat sb;
  int e, rc;

  if (!kvp_plugin_ns_ok(ns)) {
    snprintf(err, errlen, "namespace '%s' is not 1..64 of [A-Za-z0-9_-]", ns ? ns : "");
    return KVP_EINVAL;
  }
  if ((rc = px_identity(p, err, errlen)) != 0)
    return rc;
  px_paths(p, ns, hash, dir, sizeof dir, file, sizeof file);
  /* Packed: the tombstone is the delete, unless a file of the key is there
   * too (a put between its two forms): it goes as well. */
  if (p->pack && (rc = pk_del(p, ns, hash, err, errlen)) != 1 &&
      (rc != 0 || access(file, F_OK) != 0))
    return rc;
  /* The size, the unlink and the usage change are one step under the lock
   * (see put). */
  pthread_mutex_lock(&p->mu);
  uint64_t size = stat(file, &sb) == 0 ? (uint64_t)sb.st_size : 0;
  if (unlink(file) != 0) {
    e = errno;
    pthread_mutex_unlock(&p->mu);
    return px_fail(px_errno_code(e), err, errlen, "%s: %s", file, e);
  }
  p->used -= size < p->used ? size : p->used;
  p->blocks -= p->blocks ? 1 : 0;
  pthread_mutex_unlock(&p->mu);
  if (p->fsync)
    px_sync_dir(dir);
  return 0;
}

static int px_exists(void *vol, const char *ns, uint64_t hash, size_t *len) {
  posix_t *p = vol;
  char dir[3200], file[3300];
  struct stat sb;

  if (!kvp_plugin_ns_ok(ns))
    return KVP_EINVAL;
  if (p->pack && pk_find(p, ns, hash, len, NULL, 1))
    return 1;
  px_paths(p, ns, hash, dir, sizeof dir, file, sizeof file);
  if (stat(file, &sb) != 0) {
    if (errno == ENOENT)
      return px_identity(p, NULL, 0) != 0 ? KVP_EOFFLINE : 0;
    return px_errno_code(errno);
  }
  if (len)
    *len = (size_t)sb.st_size;
  return 1;
}

static int px_stat(void *vol, kvp_volume_stat_t *st, char *err, size_t errlen) {
  posix_t *p = vol;
  int rc = px_identity(p, err, errlen);
  if (rc == 0)
    rc = pk_refresh(p, err, errlen);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  *st = (kvp_volume_stat_t){p->capacity, p->used, p->blocks};
  pthread_mutex_unlock(&p->mu);
  return 0;
}

static int px_iterate(void *vol, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen) {
  posix_t *p = vol;
  int rc = px_identity(p, err, errlen);
  if (rc == 0)
    rc = px_walk(p, 0, fn, ctx, err, errlen);
  if (rc == 0 && p->pack)
    rc = pk_iterate(p, fn, ctx);
  return rc;
}

static int px_compact(void *vol, char *err, size_t errlen) {
  posix_t *p = vol;
  int rc = px_identity(p, err, errlen);
  return rc != 0 ? rc : pk_compact(p, err, errlen);
}

/* Dead bytes are the packed segments'; total is the live objects' bytes
 * and the dead ones. The files layout has no garbage: KVP_ENOTSUP, so the
 * engine does not look again. */
static int px_garbage(void *vol, uint64_t *dead, uint64_t *total, char *err, size_t errlen) {
  posix_t *p = vol;
  uint64_t segs = 0;
  if (p->pack == NULL) {
    snprintf(err, errlen, "%s: layout=files has no dead bytes to compact", p->root);
    return KVP_ENOTSUP;
  }
  int rc = px_identity(p, err, errlen);
  if (rc != 0)
    return rc;
  if ((rc = pk_garbage(p, dead, &segs, err, errlen)) != 0)
    return rc;
  pthread_mutex_lock(&p->mu);
  *total = p->used + *dead;
  pthread_mutex_unlock(&p->mu);
  return 0;
}

static const kvp_volume_ops_t ops = {
    .abi_version = KVP_VOLUME_ABI_VERSION,
    .name = "posix",
    .flags = KVP_VOLUME_KNOWS_NAMESPACE | KVP_VOLUME_CAN_COMPACT,
    .open = px_open,
    .close = px_close,
    .put = px_put,
    .get = px_get,
    .del = px_del,
    .exists = px_exists,
    .stat = px_stat,
    .iterate = px_iterate,
    .compact = px_compact,
    .garbage = px_garbage,
};

__attribute__((visibility("default"))) const kvp_volume_ops_t *kvp_volume_plugin_v1(void) {
  return &ops;
}
