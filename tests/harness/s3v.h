/* The verifying S3 server for tests: tests/tools/s3_verify.py (Debian's
 * python3-botocore recomputes every request's SigV4 signature from the
 * request as S3 canonicalises it, and answers 403 SignatureDoesNotMatch when
 * it differs) on a free 127.0.0.1 port, with a temp data directory, bucket
 * "kvb", one region and two credentials: a long-term key and a session key
 * that needs its token. Faults (a stall, errors with Retry-After) on demand. */
#ifndef KVP_TEST_S3V_H
#define KVP_TEST_S3V_H

#include <sys/types.h>

typedef struct kvp_s3v_s {
  pid_t pid;
  int port;
  char dir[256];
  char endpoint[64];      /* http://127.0.0.1:<port> (path-style) */
  char host_endpoint[64]; /* http://localhost:<port>: virtual-hosted kvb.localhost */
  char bucket[32];
  char region[32];
  int page; /* keys per listing page at most (1000, as S3) */
} kvp_s3v_t;

#define KVP_S3V_ACCESS "KVPTESTKEY"
#define KVP_S3V_SECRET "kvp/test+secret=1"
#define KVP_S3V_SESSION_ACCESS "KVPSESSIONKEY"
#define KVP_S3V_SESSION_SECRET "session/secret"
#define KVP_S3V_SESSION_TOKEN "FwoGZX/session+token=="

/* Starts the server with bucket "kvb" in region (NULL: us-east-1) and
 * waits up to 20 s for it. Returns 0 or -1, nothing left running. */
int kvp_s3v_start(kvp_s3v_t *s, const char *region);

/* Kills the server hard and waits for it; the data stays for a restart. */
void kvp_s3v_kill(kvp_s3v_t *s);

/* Starts it again on the same port and data. Returns 0 or -1. */
int kvp_s3v_restart(kvp_s3v_t *s);

/* Sends the server a fault request (query of /__kvp_ctl, see
 * s3_verify.py): "stall=3&count=2", "fail=1&status=503&retry_after=1".
 * Returns 0 when it answered 200. */
int kvp_s3v_control(const kvp_s3v_t *s, const char *query);

/* Stops it and removes its data; safe twice. */
void kvp_s3v_stop(kvp_s3v_t *s);

#endif
