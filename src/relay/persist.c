/* The relay's restart state (state.h): per endpoint, a small text file
 * <state-dir>/<worker>.state with the last sequence the relay published (and
 * flushed to NATS), the publisher's epoch and an event id above every id
 * that publisher had used. A file rather than NATS: the state belongs to
 * this relay process and its engine, must be readable before NATS is
 * reachable, and a per-endpoint file is replaced atomically (temp file,
 * fsync, rename, fsync of the directory) so a crash leaves the old state or
 * the new one, never a torn one. Beside it, <worker>.map holds the
 * engine-to-kvplane map as of a sequence at or below the state's (written
 * with it, less often when the map is large): a restarted relay loads it and
 * rebuilds the rest from the engine's replay buffer.
 *
 *   kvplane-relay-state 1
 *   endpoint tcp://127.0.0.1:5557
 *   seq 41
 *   epoch 1764158400123456789
 *   next_event_id 1209
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "relay/state.h"

int kvp__relay_state_path(char *buf, size_t len, const char *dir, const char *worker,
                          const char *ext) {
  int n = snprintf(buf, len, "%s/%s.%s", dir, worker, ext);
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
  int ok = fscanf(f,
                  "kvplane-relay-state %d endpoint %255s seq %" SCNd64 " epoch %" SCNu64
                  " next_event_id %" SCNu64,
                  &version, ep, &s->seq, &s->epoch, &s->next_event_id) == 5;
  fclose(f);
  if (!ok || version != 1 || s->seq < 0 || s->epoch == 0)
    return KVP_EPROTO;
  if (strcmp(ep, endpoint) != 0)
    return KVP_ECONFIG; /* another engine's state: start afresh */
  return 0;
}

/* Replaces path with the bytes a then b: temp file, fsync, rename, fsync
 * of the directory. 0 or KVP_EIO. */
static int write_atomic(const char *path, const void *a, size_t alen, const void *b, size_t blen) {
  char tmp[600], dir[600];
  int fd;
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return KVP_ECONFIG;
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    return KVP_EIO;
  const uint8_t *parts[2] = {a, b};
  size_t lens[2] = {alen, blen};
  for (int i = 0; i < 2; i++)
    for (size_t off = 0; off < lens[i];) {
      ssize_t w = write(fd, parts[i] + off, lens[i] - off);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        goto fail_fd;
      off += (size_t)w;
    }
  if (fsync(fd) != 0)
    goto fail_fd;
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
fail_fd:
  close(fd);
fail:
  unlink(tmp);
  return KVP_EIO;
}

int kvp__relay_state_write(const char *path, const char *endpoint, const kvp__relay_saved_t *s) {
  char buf[512];
  int n = snprintf(buf, sizeof buf,
                   "kvplane-relay-state 1\nendpoint %s\nseq %" PRId64 "\nepoch %" PRIu64
                   "\nnext_event_id %" PRIu64 "\n",
                   endpoint, s->seq, s->epoch, s->next_event_id);
  if (n <= 0 || (size_t)n >= sizeof buf)
    return KVP_ECONFIG;
  return write_atomic(path, buf, (size_t)n, NULL, 0);
}

/* The map file: "KVPRMAP2", the sequence it is as of, the record count (both
 * u64, this machine's byte order, as the records), the records
 * (kvp_relay_map_rec_t). "KVPRMAP1" files, written before the records
 * carried parents, are read too: their records end after the native flag
 * (V1_REC bytes) and have no parent. */
#define V1_REC offsetof(kvp_relay_map_rec_t, parent)
typedef struct map_hdr_s {
  char magic[8];
  int64_t seq;
  uint64_t n;
} map_hdr_t;

int kvp__relay_map_write(const char *path, int64_t seq, const kvp_relay_map_t *m) {
  size_t n = kvp__relay_map_size(m);
  kvp_relay_map_rec_t *rec = malloc((n ? n : 1) * sizeof *rec);
  if (!rec)
    return KVP_ENOMEM;
  map_hdr_t h = {.magic = "KVPRMAP", .seq = seq};
  h.magic[7] = '2';
  h.n = kvp__relay_map_export(m, rec);
  int rc = write_atomic(path, &h, sizeof h, rec, (size_t)h.n * sizeof *rec);
  free(rec);
  return rc;
}

int kvp__relay_map_read(const char *path, int64_t *seq, kvp_relay_map_t *m) {
  map_hdr_t h;
  int rc = KVP_EPROTO;
  kvp_relay_map_rec_t *rec = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return errno == ENOENT ? KVP_ENOENT : KVP_EIO;
  struct stat sb;
  /* The file's size must be what its header says: a torn or corrupt count
   * never becomes a large allocation. */
  size_t rsz = 0;
  if (fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, "KVPRMAP", 7) == 0)
    rsz = h.magic[7] == '2' ? sizeof *rec : h.magic[7] == '1' ? V1_REC : 0;
  if (rsz == 0 || h.seq < 0 || h.n > (1u << 30) || fstat(fileno(f), &sb) != 0 ||
      (uint64_t)sb.st_size != sizeof h + (uint64_t)h.n * rsz)
    goto out;
  rc = KVP_ENOMEM;
  if (!(rec = calloc(h.n ? h.n : 1, sizeof *rec)))
    goto out;
  rc = KVP_EPROTO;
  for (uint64_t i = 0; i < h.n; i++) /* a v1 record is a v2 one's first V1_REC bytes */
    if (fread(&rec[i], rsz, 1, f) != 1)
      goto out;
  if (fgetc(f) != EOF)
    goto out;
  for (uint64_t i = 0; rsz == V1_REC && i < h.n; i++) /* v1: the native flag, whole */
    rec[i].flags = rec[i].flags ? KVP__RELAY_REC_NATIVE : 0;
  kvp__relay_map_clear(m);
  kvp__relay_map_import(m, rec, (size_t)h.n);
  *seq = h.seq;
  rc = 0;
out:
  free(rec);
  fclose(f);
  return rc;
}
