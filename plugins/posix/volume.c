/* The posix volume on disk (posix.h): its identity marker and the scan of
 * its tree, with the small file helpers the operations share. */
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

#include "posix.h"

int px_fail(int rc, char *err, size_t errlen, const char *fmt, const char *a, int e) {
  snprintf(err, errlen, fmt, a, strerror(e));
  return rc;
}

int px_errno_code(int e) {
  switch (e) {
  case ENOENT:
    return KVP_ENOENT;
  case ENOSPC:
  case EDQUOT:
    return KVP_ENOSPC;
  case EACCES:
  case EPERM:
    return KVP_EAUTH;
  case ENOMEM:
    return KVP_ENOMEM;
  default:
    return KVP_EIO;
  }
}

void px_paths(const posix_t *p, const char *ns, uint64_t hash, char *dir, size_t dlen, char *file,
              size_t flen) {
  snprintf(dir, dlen, "%s/%s/%02x", p->root, ns, (unsigned)(hash >> 56));
  snprintf(file, flen, "%s/%016" PRIx64, dir, hash);
}

int px_sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int px_mkdir_p(const char *root, const char *ns, const char *dir) {
  char nsdir[3200];
  if (mkdir(dir, 0700) == 0 || errno == EEXIST)
    return 0;
  snprintf(nsdir, sizeof nsdir, "%s/%s", root, ns);
  if (mkdir(nsdir, 0700) != 0 && errno != EEXIST)
    return -1;
  return mkdir(dir, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

int px_pwrite_all(int fd, const struct iovec *iov, int n, uint64_t off) {
  struct iovec v[PX_IOV_MAX];
  if (n > PX_IOV_MAX)
    return EINVAL;
  memcpy(v, iov, (size_t)n * sizeof *v);
  struct iovec *cur = v;
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += v[i].iov_len;
  while (total > 0) { /* an empty object writes nothing */
    ssize_t w = pwritev(fd, cur, n, (off_t)off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return w < 0 ? errno : EIO;
    off += (uint64_t)w;
    total -= (size_t)w;
    size_t left = (size_t)w;
    while (n > 0 && left >= cur->iov_len) {
      left -= cur->iov_len;
      cur++;
      n--;
    }
    if (n > 0) {
      cur->iov_base = (char *)cur->iov_base + left;
      cur->iov_len -= left;
    }
  }
  return 0;
}

/* --- identity ---------------------------------------------------------------- */

/* Reads the marker's id into id (33 bytes) and, when ns is not NULL, the
 * namespace it names into ns (64 bytes; "" for a marker written before
 * markers held one). Returns 0, or -1 with errno. */
int px_read_marker(const char *path, char *id, char *ns) {
  char buf[512], ignore[65];
  FILE *fp = fopen(path, "re");
  if (fp == NULL)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  if (kvp_plugin_parse_marker(buf, id, ns ? ns : ignore) != 0) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

/* Writes a new marker (temp name, fsync, rename): a new volume. */
int px_write_marker(posix_t *p, const char *name, const char *ns) {
  char tmp[3300], text[512];
  unsigned char rnd[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
    if (fd >= 0)
      close(fd);
    errno = EIO;
    return -1;
  }
  close(fd);
  for (int i = 0; i < 16; i++)
    snprintf(p->id + 2 * i, 3, "%02x", rnd[i]);
  int n = snprintf(text, sizeof text,
                   "kvplane volume\nid=%s\nname=%s\nnamespace=%s\ncreated_unix=%ld\n", p->id,
                   name ? name : "", ns ? ns : "", (long)time(NULL));
  snprintf(tmp, sizeof tmp, "%s.tmp", p->marker);
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
    return -1;
  if (write(fd, text, (size_t)n) != n || fsync(fd) != 0) {
    int e = errno ? errno : EIO;
    close(fd);
    unlink(tmp);
    errno = e;
    return -1;
  }
  close(fd);
  if (rename(tmp, p->marker) != 0)
    return -1;
  px_sync_dir(p->root);
  return 0;
}

/* KVP_EOFFLINE, with err naming the root and why, unless the marker open
 * found is at its place. A marker that is another file with the same id (a
 * volume restored from a copy) is this volume again. */
int px_identity(posix_t *p, char *err, size_t errlen) {
  struct stat sb;
  char id[33];
  if (stat(p->marker, &sb) == 0) {
    pthread_mutex_lock(&p->mu);
    int same = sb.st_dev == p->mdev && sb.st_ino == p->mino;
    pthread_mutex_unlock(&p->mu);
    if (same)
      return 0;
  }
  if (stat(p->marker, &sb) == 0 && px_read_marker(p->marker, id, NULL) == 0 &&
      strcmp(id, p->id) == 0) {
    pthread_mutex_lock(&p->mu);
    p->mdev = sb.st_dev;
    p->mino = sb.st_ino;
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  if (err)
    snprintf(err, errlen,
             "volume root %s is offline: its identity marker %s is gone or another volume's "
             "(a dropped mount, a deleted or moved directory)",
             p->root, MARKER);
  return KVP_EOFFLINE;
}

/* --- the scan at open: usage, and temporary files removed ----------------- */

static int is_hex16(const char *s, uint64_t *out) {
  char *end;
  if (strlen(s) != 16)
    return 0;
  for (int i = 0; i < 16; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return 0;
  *out = strtoull(s, &end, 16);
  return 1;
}

/* Walks <root>/<ns>/<hh>/: calls fn for each object, removes temporary
 * files when clean is set. */
int px_walk(posix_t *p, int clean, px_visit_fn fn, void *ctx, char *err, size_t errlen) {
  DIR *r = opendir(p->root), *n = NULL, *h = NULL;
  struct dirent *de, *de2, *de3;
  char path[4096];
  int rc = 0;

  if (r == NULL)
    return px_fail(px_errno_code(errno), err, errlen, "%s: %s", p->root, errno);
  while (rc == 0 && (de = readdir(r)) != NULL) {
    if (!kvp_plugin_ns_ok(de->d_name))
      continue;
    snprintf(path, sizeof path, "%s/%s", p->root, de->d_name);
    if ((n = opendir(path)) == NULL)
      continue;
    while (rc == 0 && (de2 = readdir(n)) != NULL) {
      if (strlen(de2->d_name) != 2 || de2->d_name[0] == '.')
        continue;
      snprintf(path, sizeof path, "%s/%s/%s", p->root, de->d_name, de2->d_name);
      if ((h = opendir(path)) == NULL)
        continue;
      while (rc == 0 && (de3 = readdir(h)) != NULL) {
        char file[4352];
        struct stat sb;
        uint64_t hash;
        snprintf(file, sizeof file, "%s/%s", path, de3->d_name);
        if (clean && strstr(de3->d_name, ".tmp.") != NULL) {
          unlink(file);
          continue;
        }
        if (!is_hex16(de3->d_name, &hash) || stat(file, &sb) != 0 || !S_ISREG(sb.st_mode))
          continue;
        rc = fn(ctx, de->d_name, hash, (uint64_t)sb.st_size);
      }
      closedir(h);
    }
    closedir(n);
  }
  closedir(r);
  return rc;
}
