/* kvplane-relay's daemon run (cli.h, kvp__relay_serve): signals, the loop
 * thread, the figures on stdout and the --metrics server. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

#include "kvplane/status.h"
#include "metrics/server.h"
#include "relay/cli.h"
#include "relay/metrics.h"

/* The relay the signal handlers act on: one serve per process. */
static kvp_relay_t *signalled;
static volatile sig_atomic_t dump_due;

static void on_stop(int sig) {
  (void)sig;
  if (signalled)
    kvp_relay_stop(signalled);
}

static void on_usr1(int sig) {
  (void)sig;
  dump_due = 1;
}

static void *run_loop(void *r) {
  kvp_relay_run(r);
  return NULL;
}

/* Runs the loop on its own thread while this one prints the figures on
 * SIGUSR1 and every interval seconds, until a signal stops the relay.
 * Returns 0, or 2 when the thread did not start. */
static int run_until_stopped(kvp_relay_t *r, unsigned interval) {
  pthread_t th;
  if (pthread_create(&th, NULL, run_loop, r) != 0) {
    fprintf(stderr, "kvplane-relay: cannot start the loop thread\n");
    return 2;
  }
  time_t last = time(NULL);
  for (;;) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (dump_due || (interval && time(NULL) - last >= (time_t)interval)) {
      dump_due = 0;
      last = time(NULL);
      kvp_relay_stats_print(r, stdout);
    }
    if (kvp_relay_stopped(r))
      break;
  }
  pthread_join(th, NULL);
  kvp_relay_stats_print(r, stdout);
  return 0;
}

int kvp__relay_serve(const kvp__relay_cli_t *c) {
  kvp__metrics_server_t *msrv = NULL;
  kvp_relay_t *r = NULL;
  char err[512];
  int rc, status = 0;

  rc = kvp_relay_open(&c->o, &r, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "kvplane-relay: %s (%s)\n", err, kvp_err_name(rc));
    return (rc == KVP_ECONFIG || rc == KVP_EINVAL) ? 1 : 2;
  }
  if (c->metrics != NULL && (rc = kvp__relay_metrics_start(r, c->metrics, &c->metrics_opts, &msrv,
                                                           err, sizeof err)) != 0) {
    fprintf(stderr, "kvplane-relay: %s (%s)\n", err, kvp_err_name(rc));
    status = 1;
    goto out;
  }
  for (size_t i = 0; i < c->o.nendpoints; i++)
    fprintf(stderr, "kvplane-relay: %s (%s): subscribed, replay %s\n", c->o.endpoints[i].endpoint,
            c->o.endpoints[i].worker_id,
            c->o.endpoints[i].replay ? c->o.endpoints[i].replay : "none");
  signalled = r;
  signal(SIGINT, on_stop);
  signal(SIGTERM, on_stop);
  signal(SIGUSR1, on_usr1);
  signal(SIGPIPE, SIG_IGN);
  status = run_until_stopped(r, c->stats_interval);
  signalled = NULL; /* a late signal must not reach a closed relay */
out:
  kvp__metrics_server_stop(msrv); /* it reads the relay: stopped first */
  kvp_relay_close(r);
  return status;
}
