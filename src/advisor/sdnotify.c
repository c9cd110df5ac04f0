/* The sd_notify protocol by hand (sdnotify.h says why). */
#include "advisor/sdnotify.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvplane/status.h"

int kvp__sd_notify(const char *msg) {
  const char *path = getenv("NOTIFY_SOCKET");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t len;

  if (path == NULL || path[0] == '\0')
    return 0;
  len = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || len < 2 || len >= sizeof sa.sun_path)
    return KVP_EINVAL;
  memcpy(sa.sun_path, path, len);
  if (sa.sun_path[0] == '@')
    sa.sun_path[0] = '\0'; /* abstract: the length, not a NUL, ends it */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return KVP_EIO;
  ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (const struct sockaddr *)&sa,
                     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
  close(fd);
  return n == (ssize_t)strlen(msg) ? 0 : KVP_EIO;
}

int kvp__sd_extend_timeout(uint64_t usec) {
  char msg[48];
  snprintf(msg, sizeof msg, "EXTEND_TIMEOUT_USEC=%" PRIu64, usec);
  return kvp__sd_notify(msg);
}
