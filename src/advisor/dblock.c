/* One advisor per database file; see dblock.h. */
#include "advisor/dblock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "kvplane/status.h"

int kvp__adv_db_lock(const char *path, int *fd, char *err, size_t errlen) {
  int f;

  *fd = -1;
  if ((f = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    if (errno == ENOENT)
      return 0;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return KVP_EIO;
  }
  if (flock(f, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(f);
    if (e == EWOULDBLOCK) {
      snprintf(err, errlen,
               "%s: in use by another kvplane-advisor (one advisor per database: stop it, or "
               "give this one its own [store] path)",
               path);
      return KVP_EBUSY;
    }
    snprintf(err, errlen, "%s: cannot lock: %s", path, strerror(e));
    return KVP_EIO;
  }
  *fd = f;
  return 0;
}

void kvp__adv_db_unlock(int fd) {
  if (fd >= 0)
    close(fd); /* the flock goes with the last descriptor of its open file */
}
