/* One advisor per database file; see dblock.h. */
#include "advisor/dblock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/flock.h"
#include "kvplane/status.h"

int kvp__adv_db_lock(const char *path, int *fd, char *err, size_t errlen) {
  int rc = kvp__flock_take(path, 0, fd);
  if (rc == KVP_ENOENT)
    return 0; /* made later, and locked then */
  if (rc == KVP_EBUSY)
    snprintf(err, errlen,
             "%s: in use by another kvplane-advisor (one advisor per database: stop it, or give "
             "this one its own [store] path)",
             path);
  else if (rc != 0)
    snprintf(err, errlen, "%s: cannot open and lock: %s", path, strerror(errno));
  return rc;
}

void kvp__adv_db_unlock(int fd) {
  kvp__flock_release(fd);
}
