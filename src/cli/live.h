/* The kvplane CLI's long-running commands: top (the status view refreshed,
 * with rates), replay (simulated workers with a progress bar) and bench
 * (the benchmark suites as one table). Library code so that tests run them
 * in-process; tools/kvplane.c parses the options. Threads: the caller's
 * (replay adds the simulated workers' own). */
#ifndef KVP_CLI_LIVE_H
#define KVP_CLI_LIVE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/sim.h"

/* Rates between two stats replies of the advisor (NULL: no answer). */
typedef struct kvp__cli_rates_s {
  int have;                /* both replies present and dt > 0 */
  double events_per_s;     /* block-events applied */
  double batches_per_s;    /* batches applied */
  double migrations_per_s; /* moves finished (tiering demoted + evicted + promoted) */
} kvp__cli_rates_t;

/* The rates from prev to cur, dt_ms apart. */
void kvp__cli_rates(const json_t *prev, const json_t *cur, uint64_t dt_ms, kvp__cli_rates_t *r);

/* One line for a log or a pipe: Unix time, rates, blocks, locations, lags;
 * "advisor: no answer" when cur is NULL, with why (the cause) when given. */
void kvp__cli_top_line(FILE *f, uint64_t now_ms, const json_t *cur, const kvp__cli_rates_t *r,
                       const char *why);

/* replay: runs the simulated workers of o, and while they run draws a
 * progress bar on f when tty is set (else a line every 10%). Returns
 * kvp__sim_create's or kvp__sim_run's result; err names the cause. The
 * summary (requests, seconds, hit rate, events) goes to f. */
int kvp__cli_replay(const kvp__sim_opts_t *o, FILE *f, int tty, char *err, size_t errlen);

/* bench: runs `bench_path SUITE` for each suite (or `all` when nsuites is 0)
 * and prints, for every figure line that has a baseline, one row of a table
 * (suite, figure, value, unit, baseline, ratio) on f. Returns 0, KVP_EIO
 * when the program cannot be run or a suite fails (err says which), or
 * KVP_ENOENT when it printed no figure. */
int kvp__cli_bench(const char *bench_path, char *const *suites, int nsuites, FILE *f, char *err,
                   size_t errlen);

#endif
