/* The s3 volume plugin's parts (s3.c: the parameters and the operations;
 * creds.c: the credential chain; request.c: HTTP requests, signed, with
 * retries; list.c: listing a prefix).
 * Private to the plugin: nothing here is exported from its shared object. */
#ifndef KVP_PLUGIN_S3_H
#define KVP_PLUGIN_S3_H

#include <curl/curl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "kvplane/volume_plugin.h"

#define MAX_HANDLES 16
#define KEY_LOCKS 64

/* A volume: its parameters, a pool of curl handles, and its usage. */
typedef struct s3_s {
  char endpoint[512], bucket[256], region[64], prefix[256];
  char access[256], secret[256], token[2048];
  char ca_file[1024], profile[128];
  int virtual_host;
  uint64_t capacity;
  long timeout_ms;     /* cap on one request, 0: none */
  long connect_ms;     /* connecting */
  long stall_ms;       /* no byte moved for this long ends a request */
  long backoff_max_ms; /* cap on one wait between attempts */
  int retries;
  pthread_mutex_t mu;
  CURL *pool[MAX_HANDLES];
  int npool;
  uint64_t used, blocks;
  uint64_t reserved; /* bytes of puts in flight, counted against capacity */
  /* A put or delete holds its key's lock from looking up the old size to
   * counting the change, so that two of one key never both count it. */
  pthread_mutex_t key_mu[KEY_LOCKS];
  unsigned seed;
  char id[33];            /* the identity marker's id (ident.c) */
  uint64_t id_checked_ms; /* when it was last found in place (monotonic; under mu) */
  long id_ttl_ms;         /* it is checked again after this long */
} s3_t;

/* One request's buffers and result. */
typedef struct req_s {
  /* upload */
  const struct iovec *up;
  int nup, upi;
  size_t upoff;
  /* download into iovecs, or into a growable text buffer (listings) */
  const struct iovec *down;
  int ndown;
  size_t got, cap;
  int overflow;
  char *text;
  size_t ntext, captext;
  /* result */
  long hstatus;        /* the status line seen so far (routes the body) */
  long status;         /* the final status */
  curl_off_t clen;     /* Content-Length of the response, -1 unknown */
  char code[64];       /* the <Code> of an error body */
  long retry_after_ms; /* a Retry-After header in seconds, -1 none */
  /* stall detection (request.c's progress callback) */
  long stall_ms;
  int64_t moved_at_ms; /* when a byte last moved, monotonic */
  curl_off_t last_dl, last_ul;
  int stalled;
} req_t;

/* Which parameters were given at open: the chain fills the others. */
typedef struct s3_given_s {
  int endpoint, region, access, secret, token, ca_file, addressing;
} s3_given_t;

/* The AWS SDKs' chain for what the parameters left out (creds.c):
 * credentials from the parameters, else AWS_ACCESS_KEY_ID /
 * AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the profile (profile
 * parameter, AWS_PROFILE, "default") in ~/.aws/credentials or
 * ~/.aws/config; a session token only with credentials from the same
 * place. Region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
 * us-east-1. Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
 * profile's endpoint_url, https://s3.<region>.amazonaws.com. CA bundle:
 * AWS_CA_BUNDLE, the profile's ca_bundle; a named one must be readable.
 * Returns 0 or KVP_ECONFIG with err saying what is missing or wrong. */
int kvp__s3_resolve(s3_t *s, const s3_given_t *given, char *err, size_t errlen);

/* s with every byte but A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash) as
 * %XX, uppercase hex: SigV4's URI encoding, which S3 canonicalises to.
 * Returns 0, or -1 when out (len bytes) is too small. */
int kvp__s3_uri_encode(const char *in, int keep_slash, char *out, size_t len);

/* curl_global_init, once per process. */
void kvp__s3_global_init(void);

/* Returns the curl handles of the pool to libcurl (s3_close). */
void kvp__s3_free_handles(s3_t *s);

/* The URL of key (NULL: the bucket itself) with an optional query: the key
 * URI-encoded per SigV4 ('/' kept), so that libcurl's signer, which signs
 * the path as given, signs what S3 canonicalises; query must be encoded
 * and its parameters sorted by the caller. Returns 0, or -1 when out is
 * too small. */
int kvp__s3_url_of(const s3_t *s, const char *key, const char *query, char *out, size_t len);

/* <prefix><ns>/<hash as 16 hex>. */
void kvp__s3_key_of(const s3_t *s, const char *ns, uint64_t hash, char *out, size_t len);

/* Performs method on url with r's buffers, signed (SigV4), retrying what may
 * pass on a second try (5xx, 429, 400 RequestTimeout, timeouts, dropped
 * connections) with exponential backoff and jitter, each wait capped at
 * backoff_max_ms and at least a Retry-After the store sent (under the cap).
 * url must be canonical already (kvp__s3_url_of, sorted query). Returns 0 (r->status holds the
 * final HTTP status) or a KVP_E* code for a transport failure, with err naming what and the cause.
 */
int kvp__s3_perform(s3_t *s, const char *method, const char *url, req_t *r, const char *what,
                    char *err, size_t errlen);

/* The code for an HTTP status other than 2xx (403 KVP_EAUTH, 404
 * KVP_ENOENT, 503/429 KVP_EAGAIN, else KVP_EIO), with err naming what, the
 * status and the store's error code. */
int kvp__s3_http_error(req_t *r, const char *what, char *err, size_t errlen);

/* Calls fn for every object named <prefix><ns>/<16 hex> in the bucket,
 * following continuation tokens; a non-zero return of fn stops and is
 * returned. A missing bucket is KVP_ENOENT. */
int kvp__s3_list(s3_t *s, kvp_volume_key_fn fn, void *ctx, char *err, size_t errlen);

/* ident.c. At open: reads the marker <prefix>.kvplane-volume, or writes a
 * new one (a random id, namespace ns, may be NULL) when there is none; a
 * marker of another namespace is KVP_ECONFIG naming both. Then before a
 * write or a listing: 0 while the marker was found in place within
 * id_ttl_ms, else it is read again: KVP_EOFFLINE (err names the bucket,
 * prefix and why) when it is gone or another volume's, the store's error
 * when it does not answer. */
int kvp__s3_identity_open(s3_t *s, const char *ns, char *err, size_t errlen);
int kvp__s3_identity(s3_t *s, char *err, size_t errlen);

#endif
