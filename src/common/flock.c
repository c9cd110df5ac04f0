/* Exclusive file locks; see flock.h. */
#include "common/flock.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "kvplane/status.h"

int kvp__flock_take(const char *path, int create, int *fd) {
  int f;

  *fd = -1;
  if ((f = open(path, create ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0600)) < 0)
    return errno == ENOENT ? KVP_ENOENT : KVP_EIO;
  if (flock(f, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(f);
    errno = e;
    return e == EWOULDBLOCK ? KVP_EBUSY : KVP_EIO;
  }
  *fd = f;
  return 0;
}

void kvp__flock_release(int fd) {
  if (fd >= 0)
    close(fd); /* the flock goes with the last descriptor of its open file */
}
