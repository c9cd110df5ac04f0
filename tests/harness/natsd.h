/* A real nats-server for tests: started on a free 127.0.0.1 port with its own
 * temporary store directory, waited for until it answers, stopped at the end.
 *
 * The server dies with the test process (PR_SET_PDEATHSIG), so a test that
 * fails or crashes does not leave it behind; kvp_natsd_stop() also removes
 * the store directory. */
#ifndef KVP_TEST_NATSD_H
#define KVP_TEST_NATSD_H

#include <sys/types.h>

typedef struct kvp_natsd_opts_s {
  int jetstream;    /* -js with a file store under the temp dir */
  const char *user; /* with pass: --user/--pass */
  const char *pass;
  const char *token; /* --auth */
  const char *config;   /* -c FILE (authorization, permissions...); the flags above win */
  const char *tls_cert; /* --tls with this server certificate (PEM), with tls_key */
  const char *tls_key;
  const char *tls_ca; /* with tls_cert: --tlsverify, clients must show a cert signed by it */
} kvp_natsd_opts_t;

typedef struct kvp_natsd_s {
  pid_t pid;
  int port;
  char dir[256]; /* temp dir: store and log */
  char url[64];  /* nats://127.0.0.1:<port> */
  kvp_natsd_opts_t opts;
} kvp_natsd_t;

/* Test PKI made with the openssl command in dir: ca.pem (a CA),
 * server.pem/server-key.pem (CN and SAN 127.0.0.1 and localhost, signed by
 * the CA), client.pem/client-key.pem (signed by the CA) and
 * rogue-ca.pem (another CA that signed nothing here). Returns 0 or -1. */
int kvp_test_make_certs(const char *dir);

/* Starts a server (opts may be NULL: core NATS, no auth) and waits up to 10 s
 * for it to answer. Returns 0, or -1 with nothing left running. */
int kvp_natsd_start(kvp_natsd_t *d, const kvp_natsd_opts_t *opts);

/* Sends sig to the server (SIGSTOP/SIGCONT to freeze and thaw it). */
void kvp_natsd_signal(kvp_natsd_t *d, int sig);

/* Kills the server hard (SIGKILL) and waits for it; the store dir stays, so
 * kvp_natsd_restart() brings back its JetStream state. */
void kvp_natsd_kill(kvp_natsd_t *d);

/* Starts the server again on the same port and store. Returns 0 or -1. */
int kvp_natsd_restart(kvp_natsd_t *d);

/* Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its dir.
 * Safe to call twice and on a server that failed to start. */
void kvp_natsd_stop(kvp_natsd_t *d);

#endif
