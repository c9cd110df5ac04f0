/* The relay's restart state (state.h): per endpoint, a small text file
 * <state-dir>/<worker>.state with the last sequence the relay published (and
 * flushed to NATS), the publisher's epoch and an event id above every id
 * that publisher had used. A file rather than NATS: the state belongs to
 * this relay process and its engine, must be readable before NATS is
 * reachable, and a per-endpoint file is replaced atomically (temp file,
 * fsync, rename, fsync of the directory) so a crash leaves the old state or
 * the new one, never a torn one.
 *
 *   kvplane-relay-state 1
 *   endpoint tcp://127.0.0.1:5557
 *   seq 41
 *   epoch 1764158400123456789
 *   next_event_id 1209
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "relay/state.h"

int kvp__relay_state_path(char *buf, size_t len, const char *dir, const char *worker) {
  int n = snprintf(buf, len, "%s/%s.state", dir, worker);
  return n > 0 && (size_t)n < len ? 0 : KVP_ECONFIG;
}

int kvp__relay_state_read(const char *path, const char *endpoint, kvp__relay_saved_t *s) {
  char ep[256] = "";
  int version = 0;
  memset(s, 0, sizeof *s);
  s->seq = -1;
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? KVP_ENOENT : KVP_EIO;
  int ok = fscanf(f, "kvplane-relay-state %d endpoint %255s seq %" SCNd64 " epoch %" SCNu64
                     " next_event_id %" SCNu64,
                  &version, ep, &s->seq, &s->epoch, &s->next_event_id) == 5;
  fclose(f);
  if (!ok || version != 1 || s->seq < 0 || s->epoch == 0)
    return KVP_EPROTO;
  if (strcmp(ep, endpoint) != 0)
    return KVP_ECONFIG; /* another engine's state: start afresh */
  return 0;
}

int kvp__relay_state_write(const char *path, const char *endpoint, const kvp__relay_saved_t *s) {
  char tmp[600], dir[600];
  int rc = KVP_EIO, fd;
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return KVP_ECONFIG;
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    return KVP_EIO;
  char buf[512];
  int n = snprintf(buf, sizeof buf,
                   "kvplane-relay-state 1\nendpoint %s\nseq %" PRId64 "\nepoch %" PRIu64
                   "\nnext_event_id %" PRIu64 "\n",
                   endpoint, s->seq, s->epoch, s->next_event_id);
  if (n <= 0 || (size_t)n >= sizeof buf || write(fd, buf, (size_t)n) != n || fsync(fd) != 0) {
    close(fd);
    goto fail;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0)
    goto fail;
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
  return 0;
fail:
  unlink(tmp);
  return rc;
}
