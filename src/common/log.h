/* Daemon logging: leveled lines with a UTC timestamp to stderr, or to syslog.
 *
 * Lines read "2026-11-23T01:02:03.456Z warn advisor: <message>". A log line
 * names the object (worker, volume, hash in hex) and the cause. Thread-safe:
 * each line is written with a single write(2). */
#ifndef KVP_COMMON_LOG_H
#define KVP_COMMON_LOG_H

#include <stdarg.h>

enum kvp_log_level_e {
  KVP_LOG_ERROR = 0,
  KVP_LOG_WARN = 1,
  KVP_LOG_INFO = 2,
  KVP_LOG_DEBUG = 3,
};

/* Parses "error", "warn", "info" or "debug"; returns the level or -1. */
int kvp__log_level_parse(const char *s);

/* Sets the process-wide threshold and the program tag (copied, 31 chars). */
void kvp__log_setup(int level, const char *tag);

/* Sends lines to syslog (LOG_DAEMON) instead of stderr when on != 0. */
void kvp__log_use_syslog(int on);

/* Reopens the log: the file path given to kvp__log_set_file, if any
 * (SIGHUP handlers call this from the loop thread, not the signal handler).
 * Returns 0 or KVP_EIO. */
int kvp__log_reopen(void);

/* Appends lines to path instead of stderr (NULL: back to stderr). Returns 0 or
 * KVP_EIO when the file cannot be opened; the previous target stays. */
int kvp__log_set_file(const char *path);

int kvp__log_enabled(int level);

void kvp__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kvp__vlog(int level, const char *fmt, va_list ap);

#define kvp_log_error(...) kvp__log(KVP_LOG_ERROR, __VA_ARGS__)
#define kvp_log_warn(...) kvp__log(KVP_LOG_WARN, __VA_ARGS__)
#define kvp_log_info(...) kvp__log(KVP_LOG_INFO, __VA_ARGS__)
#define kvp_log_debug(...)                                                                         \
  do {                                                                                             \
    if (kvp__log_enabled(KVP_LOG_DEBUG))                                                           \
      kvp__log(KVP_LOG_DEBUG, __VA_ARGS__);                                                        \
  } while (0)

#endif
