/* kvplane-relay's command line and daemon run, as library code so that they
 * are testable in-process; tools/kvplane-relay.c is a thin main over them
 * (it parses argv with getopt and prints the usage).
 *
 * An option is applied by its long name with its value (cli.c); the
 * endpoints are kept as given until kvp__relay_cli_finish expands them over
 * --dp-ranks (rank k at port + k, endpoint and replay; worker <id>-dp<k>)
 * into the relay's options. kvp__relay_serve (serve.c) then runs the
 * relay as the daemon does. */
#ifndef KVP_RELAY_CLI_H
#define KVP_RELAY_CLI_H

#include <stddef.h>

#include "metrics/server.h"
#include "relay/relay.h"

typedef struct kvp__relay_cli_s {
  kvp_relay_opts_t o; /* for kvp_relay_open; endpoints filled by _finish */
  /* The endpoints as given: each --endpoint with its --replay and --worker
   * (NULL when absent). */
  const char *endpoint[KVP_RELAY_MAX_ENDPOINTS];
  const char *replay[KVP_RELAY_MAX_ENDPOINTS];
  const char *worker[KVP_RELAY_MAX_ENDPOINTS];
  size_t nargs;
  unsigned dp_ranks;                        /* 1: no expansion */
  unsigned stats_interval;                  /* seconds between figures on stdout; 0: none */
  const char *metrics;                      /* --metrics host:port, or NULL */
  kvp__metrics_server_opts_t metrics_opts;  /* --metrics-timeout, --metrics-per-client */
  char *owned[3 * KVP_RELAY_MAX_ENDPOINTS]; /* URLs and worker ids made by _finish */
  size_t nowned;
} kvp__relay_cli_t;

/* The defaults (kvp_relay_opts_init, one rank, no metrics). */
void kvp__relay_cli_init(kvp__relay_cli_t *c);

/* Applies one option, named as its long form without dashes ("endpoint",
 * "dp-ranks", "nats"...; tools/kvplane-relay.c's usage lists them). value
 * is kept, not copied: it must outlive c (argv does). Returns 0, or
 * KVP_ECONFIG with err saying why ("--mode: 'fast' is not core or
 * jetstream"): a bad value, a --replay or --worker without its --endpoint,
 * more than KVP_RELAY_MAX_ENDPOINTS endpoints, an unknown name. */
int kvp__relay_cli_set(kvp__relay_cli_t *c, const char *name, const char *value, char *err,
                       size_t errlen);

/* After the last option: checks every endpoint's worker id, expands the
 * endpoints over dp_ranks into c->o.endpoints and checks the NATS options.
 * Returns 0, KVP_ECONFIG with err (no endpoint, a missing or bad worker id,
 * an endpoint without a port to add a rank to, too many endpoints x ranks,
 * a worker id too long with its -dp<k>, a bad NATS option), or KVP_ENOMEM. */
int kvp__relay_cli_finish(kvp__relay_cli_t *c, char *err, size_t errlen);

/* For a tcp:// ZMQ endpoint given to option opt ("--endpoint"), checks that
 * its port (after the last ':') is a decimal in 1..65535: libzmq takes
 * 70000 as port 4464 (the value mod 65536) without an error. Other
 * transports (ipc://, inproc://) are not checked. Returns 0, or
 * KVP_ECONFIG with err naming the option, the URL and the port. */
int kvp__relay_url_port_check(const char *opt, const char *url, char *err, size_t errlen);

/* Frees what _finish made. Calling it again, or before _finish, is harmless. */
void kvp__relay_cli_cleanup(kvp__relay_cli_t *c);

/* Runs the relay as the daemon does, until SIGINT or SIGTERM: opens it from
 * c->o, serves c->metrics, logs each subscription on stderr, runs the loop
 * on its own thread while this one prints the figures (kvp_relay_stats_print)
 * on stdout on SIGUSR1 and every stats_interval seconds, and once more at
 * the end. It installs handlers for SIGINT, SIGTERM and SIGUSR1 and ignores
 * SIGPIPE, so one process runs one at a time. Errors go to stderr. Returns
 * the exit status: 0 after a signal stopped it, 1 for bad options (or a
 * --metrics address that cannot be served), 2 when NATS could not be
 * reached or refused the credentials, or the loop thread did not start. */
int kvp__relay_serve(const kvp__relay_cli_t *c);

#endif
