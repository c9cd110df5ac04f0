/* kvplane report: tier occupancy and migrations over time, drawn by gnuplot
 * from the advisor's database (report.h). */
#include "cli/report.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvplane/status.h"

/* Writes the rows of one SELECT as a gnuplot datablock named name: each
 * row's columns after the first (all numeric) on a line. The first column
 * names the series: a new one starts a new data set, two blank lines apart
 * (`index k` picks the k-th), and its name goes to names[k] (malloc'd; up
 * to cap series, the rest left out). Returns the number of series, or -1
 * with err set and no name left allocated. */
static long datablock(sqlite3 *db, FILE *g, const char *name, const char *sql,
                      sqlite3_int64 since_ms, char **names, long cap, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  long n = 0;
  int rc;

  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "%s", sqlite3_errmsg(db));
    return -1;
  }
  sqlite3_bind_int64(s, 1, since_ms);
  fprintf(g, "$%s << EOD\n", name);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(s, 0);
    if (key == NULL)
      key = "";
    if (n == 0 || strcmp(key, names[n - 1]) != 0) {
      if (n == cap)
        break;
      if ((names[n] = strdup(key)) == NULL) {
        rc = SQLITE_NOMEM;
        break;
      }
      if (n++ > 0)
        fputs("\n\n", g);
    }
    for (int c = 1; c < sqlite3_column_count(s); c++)
      fprintf(g, "%s%.6f", c > 1 ? " " : "", sqlite3_column_double(s, c));
    fputc('\n', g);
  }
  fputs("EOD\n", g);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    snprintf(err, errlen, "%s", rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(db));
    while (n > 0)
      free(names[--n]);
    n = -1;
  }
  sqlite3_finalize(s);
  return n;
}

/* A gnuplot string literal: single quotes, doubled inside. */
static void gp_string(FILE *g, const char *s) {
  fputc('\'', g);
  for (; *s; s++) {
    if (*s == '\'')
      fputc('\'', g);
    fputc(*s, g);
  }
  fputc('\'', g);
}

/* A panel with nothing to draw says so (gnuplot refuses a plot with no
 * point: the function plotted lies outside the y range). */
static void empty_panel(FILE *g, const char *why) {
  fputs("set yrange [0:1]\nset label 1 ", g);
  gp_string(g, why);
  fputs(" at graph 0.5, 0.5 center\nplot -1 notitle\nunset label 1\nset yrange [0:*]\n", g);
}

/* Series keys sort as the datablocks list them (ORDER BY key, t). */
#define TIER_KEY "'G' || tier"
#define VOL_KEY "'G' || tier || ' ' || volume"
#define MOVE_KEY "'G' || from_tier || ' -> G' || to_tier"
#define MAX_SERIES 64

int kvp__cli_report(sqlite3 *db, const kvp__cli_report_opts_t *o, char *err, size_t errlen) {
  char *tiers[MAX_SERIES], *vols[MAX_SERIES], *moves[MAX_SERIES];
  long nt = 0, nv = 0, nm = 0;
  sqlite3_int64 since = o->since_ms;
  sqlite3_stmt *s = NULL;
  int rc = KVP_EDB;
  FILE *g = NULL;
  double t0 = 0, t1 = 0, bucket;

  /* The time span of the samples picks the migrations' bucket width:
   * about 60 bars, at least a second. */
  if (sqlite3_prepare_v2(db, "SELECT min(t), max(t), count(*) FROM tier_history WHERE t >= ?1", -1,
                         &s, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "%s (is the database older than schema version 4? run the advisor once)",
             sqlite3_errmsg(db));
    return KVP_EDB;
  }
  sqlite3_bind_int64(s, 1, since);
  if (sqlite3_step(s) != SQLITE_ROW || sqlite3_column_int64(s, 2) == 0) {
    sqlite3_finalize(s);
    snprintf(err, errlen,
             "no tier_history samples%s: the advisor samples every store.history_interval",
             since > 0 ? " in the time asked for" : "");
    return KVP_ENOENT;
  }
  t0 = (double)sqlite3_column_int64(s, 0) / 1000.0;
  t1 = (double)sqlite3_column_int64(s, 1) / 1000.0;
  sqlite3_finalize(s);
  bucket = (t1 - t0) / 60.0;
  if (bucket < 1.0)
    bucket = 1.0;

  /* gnuplot reads the script on its standard input; its own errors go to
   * our standard error. SIGPIPE would kill us if it died early: ignored,
   * the write then fails and pclose reports its status. */
  signal(SIGPIPE, SIG_IGN);
  if ((g = popen("gnuplot", "w")) == NULL) {
    snprintf(err, errlen, "cannot run gnuplot: %s", strerror(errno));
    rc = KVP_EIO;
    goto out;
  }
  if (o->svg)
    fputs("set terminal svg size 1000,900 dynamic font 'sans,11'\n", g);
  else
    fputs("set terminal pngcairo size 1000,900 font 'sans,10'\n", g);
  fputs("set output ", g);
  gp_string(g, o->path);
  fputc('\n', g);

  if ((nt = datablock(db, g, "tiers",
                      "SELECT " TIER_KEY " AS k, t / 1000.0, bytes / 1048576.0 FROM tier_history"
                      " WHERE t >= ?1 AND volume = '' ORDER BY k, t",
                      since, tiers, MAX_SERIES, err, errlen)) < 0 ||
      (nv = datablock(db, g, "vols",
                      "SELECT " VOL_KEY " AS k, t / 1000.0, 100.0 * bytes / capacity"
                      " FROM tier_history WHERE t >= ?1 AND volume <> '' AND capacity > 0"
                      " ORDER BY k, t",
                      since, vols, MAX_SERIES, err, errlen)) < 0)
    goto fail;
  /* Moves finished (source deleted) per bucket, per pair of tiers. */
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT " MOVE_KEY " AS k, (CAST(updated / 1000.0 / %.3f AS INTEGER) + 0.5) * %.3f,"
           " count(*) FROM migrations WHERE updated >= ?1 AND state = 'source_deleted'"
           " GROUP BY k, CAST(updated / 1000.0 / %.3f AS INTEGER) ORDER BY k, 2",
           bucket, bucket, bucket);
  if ((nm = datablock(db, g, "moves", sql, since, moves, MAX_SERIES, err, errlen)) < 0)
    goto fail;

  fputs("set multiplot layout 3,1 title 'kvplane: tier state over time'\n"
        "set xdata time\nset timefmt '%s'\nset format x '%H:%M:%S'\n"
        "set grid\nset key outside right top\nset lmargin 12\nset rmargin 22\n",
        g);
  fputs("set yrange [0:*]\n", g);
  fprintf(g, "set xrange [%.3f:%.3f]\n", t0,
          (t1 > t0 ? t1 : t0 + 1) + bucket); /* the last bar whole */
  fputs("set title 'Bytes held per tier (all workers and volumes)'\nset ylabel 'MiB'\n", g);
  if (nt == 0) {
    empty_panel(g, "no samples");
  } else {
    fputs("plot ", g);
    for (long i = 0; i < nt; i++) {
      fprintf(g, "%s$tiers index %ld using 1:2 with lines lw 2 title ", i ? ", " : "", i);
      gp_string(g, tiers[i]);
    }
    fputc('\n', g);
  }
  /* At least up to 110%, so that the capacity line (100%) shows. */
  fputs("set title 'Volume fill'\nset ylabel '% of capacity'\nset yrange [0:110<*]\n", g);
  if (nv == 0) {
    empty_panel(g, "no volumes with a capacity (tiering off?)");
  } else {
    fputs("plot ", g);
    for (long i = 0; i < nv; i++) {
      fprintf(g, "%s$vols index %ld using 1:2 with lines lw 2 title ", i ? ", " : "", i);
      gp_string(g, vols[i]);
    }
    /* The line no volume may cross. */
    fputs(", 100 with lines dt 2 lw 1 lc rgb 'black' title 'capacity'\n", g);
  }
  fprintf(g, "set autoscale y\nset title 'Migrations finished per %.0f s'\nset ylabel 'moves'\n",
          bucket);
  if (nm == 0) {
    empty_panel(g, "no migrations");
  } else {
    fprintf(g, "set boxwidth %.3f absolute\nset style fill solid 0.6\nplot ", bucket * 0.9 / nm);
    for (long i = 0; i < nm; i++) {
      fprintf(g, "%s$moves index %ld using ($1 + %.3f):2 with boxes title ", i ? ", " : "", i,
              bucket * 0.9 / nm * ((double)i - (double)(nm - 1) / 2));
      gp_string(g, moves[i]);
    }
    fputc('\n', g);
  }
  fputs("unset multiplot\n", g);
  int st = pclose(g);
  g = NULL;
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, errlen,
             "gnuplot failed (%s %d); is gnuplot installed (apt-get install gnuplot-nox)?",
             st != -1 && WIFEXITED(st) ? "exit status" : "status",
             st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : st);
    rc = KVP_EIO;
    goto out;
  }
  if (access(o->path, F_OK) != 0) {
    snprintf(err, errlen, "gnuplot wrote no %s", o->path);
    rc = KVP_EIO;
    goto out;
  }
  rc = 0;
  goto out;
fail:
  rc = KVP_EDB;
out:
  if (g != NULL)
    pclose(g);
  while (nt > 0)
    free(tiers[--nt]);
  while (nv > 0)
    free(vols[--nv]);
  while (nm > 0)
    free(moves[--nm]);
  return rc;
}
