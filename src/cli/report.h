/* kvplane report: a picture of the advisor's database over time, drawn by
 * gnuplot (Debian's gnuplot-nox): blocks held per tier (tier_history), fill
 * of each volume with a capacity (tier_history), and migrations finished
 * per interval by pair of tiers (migrations). Thread: any. */
#ifndef KVP_CLI_REPORT_H
#define KVP_CLI_REPORT_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvp__cli_report_opts_s {
  const char *path; /* the image to write */
  int svg;          /* 1: SVG, 0: PNG */
  int64_t since_ms; /* only samples and moves from this Unix time on (0: all) */
} kvp__cli_report_opts_t;

/* Draws the report into o->path. Returns 0; KVP_ENOENT when the database
 * has no tier_history sample in the time asked for; KVP_EDB when it cannot
 * be read; KVP_EIO when gnuplot cannot be run, fails or writes no file. err
 * says which. */
int kvp__cli_report(sqlite3 *db, const kvp__cli_report_opts_t *o, char *err, size_t errlen);

#endif
