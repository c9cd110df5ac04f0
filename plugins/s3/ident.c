/* The s3 volume's identity (s3.h): the marker object <prefix>.kvplane-volume,
 * written when open finds none (a random id, the namespace of the caller
 * that created the volume), read at open and checked again before puts,
 * deletes and listings once it is older than identity_ttl_ms: a bucket or
 * prefix whose marker is gone or another volume's (a bucket emptied or
 * re-created, a prefix pointed elsewhere) is KVP_EOFFLINE, and nothing is
 * written. The listing (s3_list.c) skips the marker: it has no '/' after
 * the prefix. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvplane/status.h"
#include "plugin_util.h"
#include "s3.h"

#define MARKER ".kvplane-volume"

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Reads the marker: 1 with id (33 bytes) and ns (65 bytes) set, 0 when
 * there is none, or a negative code. */
static int read_marker(s3_t *s, char *id, char *ns, char *err, size_t errlen) {
  char key[512], url[4096], what[1400], buf[512];
  struct iovec iov = {buf, sizeof buf - 1};
  req_t r = {.down = &iov, .ndown = 1, .cap = sizeof buf - 1};

  snprintf(key, sizeof key, "%s%s", s->prefix, MARKER);
  snprintf(what, sizeof what, "bucket %s: GET %s", s->bucket, key);
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  int rc = kvp__s3_perform(s, "GET", url, &r, what, err, errlen);
  if (rc == 0 && r.status == 404)
    rc = 0;
  else if (rc == 0 && r.status != 200)
    rc = kvp__s3_http_error(&r, what, err, errlen);
  else if (rc == 0) {
    buf[r.got < sizeof buf ? r.got : sizeof buf - 1] = '\0';
    if (kvp_plugin_parse_marker(buf, id, ns) != 0) {
      snprintf(err, errlen, "%s: not a kvplane volume marker", what);
      rc = KVP_EOFFLINE;
    } else {
      rc = 1;
    }
  }
  free(r.text);
  return rc;
}

static int write_marker(s3_t *s, const char *ns, char *err, size_t errlen) {
  char key[512], url[4096], what[1400], text[512];
  unsigned char rnd[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
    if (fd >= 0)
      close(fd);
    snprintf(err, errlen, "bucket %s: no random id for the identity marker", s->bucket);
    return KVP_EIO;
  }
  close(fd);
  for (int i = 0; i < 16; i++)
    snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
  int n = snprintf(text, sizeof text, "kvplane volume\nid=%s\nnamespace=%s\ncreated_unix=%ld\n",
                   s->id, ns ? ns : "", (long)time(NULL));
  struct iovec iov = {text, (size_t)n};
  req_t r = {.up = &iov, .nup = 1};
  snprintf(key, sizeof key, "%s%s", s->prefix, MARKER);
  snprintf(what, sizeof what, "bucket %s: PUT %s", s->bucket, key);
  kvp__s3_url_of(s, key, NULL, url, sizeof url);
  int rc = kvp__s3_perform(s, "PUT", url, &r, what, err, errlen);
  if (rc == 0 && r.status != 200)
    rc = kvp__s3_http_error(&r, what, err, errlen);
  free(r.text);
  return rc;
}

int kvp__s3_identity_open(s3_t *s, const char *ns, char *err, size_t errlen) {
  char ns_of[65];
  int rc = read_marker(s, s->id, ns_of, err, errlen);
  if (rc == 0)
    rc = write_marker(s, ns, err, errlen);
  else if (rc == 1 && ns && ns[0] && ns_of[0] && strcmp(ns, ns_of) != 0) {
    snprintf(err, errlen,
             "bucket %s prefix '%s': the volume belongs to namespace '%s' (its marker %s%s), not "
             "to namespace '%s': refused",
             s->bucket, s->prefix, ns_of, s->prefix, MARKER, ns);
    return KVP_ECONFIG;
  } else if (rc == 1) {
    rc = 0;
  }
  if (rc == 0)
    s->id_checked_ms = mono_ms();
  return rc;
}

int kvp__s3_identity(s3_t *s, char *err, size_t errlen) {
  char id[33], ns[65], why[512] = "";
  uint64_t now = mono_ms();
  pthread_mutex_lock(&s->mu);
  int fresh = now - s->id_checked_ms < (uint64_t)s->id_ttl_ms;
  pthread_mutex_unlock(&s->mu);
  if (fresh)
    return 0;
  int rc = read_marker(s, id, ns, why, sizeof why);
  if (rc < 0 && rc != KVP_EOFFLINE)
    return rc; /* the store did not answer: that error, not offline */
  if (rc == 1 && strcmp(id, s->id) == 0) {
    pthread_mutex_lock(&s->mu);
    s->id_checked_ms = now;
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  snprintf(err, errlen,
           "bucket %s prefix '%s' is offline: its identity marker %s%s is %s (a bucket emptied or "
           "re-created, a prefix pointed elsewhere); nothing is written",
           s->bucket, s->prefix, s->prefix, MARKER, rc == 0 ? "gone" : "another volume's");
  return KVP_EOFFLINE;
}
