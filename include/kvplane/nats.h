/* NATS connection options: one struct for every kvplane part that talks to
 * NATS (the publisher, the advisor, the kvplane CLI, the relay), so the same
 * setting has the same name everywhere: in C, in the advisor's [nats]
 * configuration section and on command lines.
 *
 * Strings are stored inside the struct (fixed capacities), so the struct is
 * copied by value and owns nothing. Set them with kvp_nats_opts_set(),
 * which refuses a value that does not fit, or write them directly. */
#ifndef KVPLANE_NATS_H
#define KVPLANE_NATS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_NATS_DEFAULT_SERVERS "nats://127.0.0.1:4222"

typedef struct kvp_nats_opts_s {
  char servers[1024];         /* comma-separated URLs; default nats://127.0.0.1:4222 */
  char user[128];             /* with password */
  char password[256];         /* with user */
  char token[256];            /* exclusive with user/password and creds */
  char creds[512];            /* NATS credentials file (JWT + NKey seed) */
  char tls_ca[512];           /* CA certificates (PEM) to verify the server; turns TLS on */
  char tls_cert[512];         /* client certificate chain (PEM), with tls_key; turns TLS on */
  char tls_key[512];          /* client private key (PEM), with tls_cert */
  int64_t connect_timeout_ms; /* first connection; default 5000 */
} kvp_nats_opts_t;

/* Fills o with the defaults: the local server, no auth, no TLS, 5 s. */
void kvp_nats_opts_init(kvp_nats_opts_t *o);

/* Sets one option by name ("servers", "user", "password", "token", "creds",
 * "tls_ca", "tls_cert", "tls_key", "connect_timeout_ms"). Returns 0, or
 * KVP_ECONFIG with err naming the option when the name is unknown, the
 * value does not fit or is not a number. */
int kvp_nats_opts_set(kvp_nats_opts_t *o, const char *name, const char *value, char *err,
                      size_t errlen);

/* Checks the options against each other and the files they name: servers
 * non-empty URLs, user and password together, at most one of user, token and
 * creds, tls_cert and tls_key together, every named file readable. Returns 0
 * or KVP_ECONFIG; err reads "<prefix><option>: <cause>" (prefix may be NULL;
 * the advisor passes "[nats] "). */
int kvp_nats_opts_check(const kvp_nats_opts_t *o, const char *prefix, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_NATS_H */
