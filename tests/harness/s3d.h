/* s3rver (npm, installed by scripts/setup.sh into .npm-tools/) on a free
 * 127.0.0.1 port with a temp data directory and one bucket, for comparisons
 * (kvp-bench volume --s3rver, the conformance suite's --s3rver).
 *
 * s3rver checks the access key id (an unknown one is 403
 * InvalidAccessKeyId; the known one is S3RVER / secret S3RVER) but not the
 * signature: the s3 plugin's tests use the verifying server (s3v.h). */
#ifndef KVP_TEST_S3D_H
#define KVP_TEST_S3D_H

#include <sys/types.h>

typedef struct kvp_s3d_s {
  pid_t pid;
  int port;
  char dir[256];
  char endpoint[64]; /* http://127.0.0.1:<port> */
  char bucket[32];
} kvp_s3d_t;

#define KVP_S3D_ACCESS "S3RVER"
#define KVP_S3D_SECRET "S3RVER"

/* Path of the s3rver program ($KVP_S3RVER, else .npm-tools of the source
 * tree), or NULL when it is not installed. */
const char *kvp_s3d_program(void);

/* When s3rver is not installed: says so on stdout and ends the test program
 * with status 77, which ctest reports as skipped (SKIP_RETURN_CODE on the
 * tests labelled s3, tests/CMakeLists.txt). Nothing else left running: the
 * harness's servers die with the process. kvp_s3d_start calls it. */
void kvp_s3d_require(void);

/* Starts s3rver with bucket "kvb" and waits up to 20 s for it. Returns 0
 * or -1, nothing left running. */
int kvp_s3d_start(kvp_s3d_t *s);

/* Kills the server hard and waits for it; the data stays for a restart. */
void kvp_s3d_kill(kvp_s3d_t *s);

/* Starts it again on the same port and data. Returns 0 or -1. */
int kvp_s3d_restart(kvp_s3d_t *s);

/* Stops it and removes its data; safe twice. */
void kvp_s3d_stop(kvp_s3d_t *s);

#endif
