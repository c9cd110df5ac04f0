/* Leveled logging for the daemons; see log.h. */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "kvplane/status.h"

/* The level is read on every log call from any thread: an atomic, so a
 * second daemon in the same process (tests) may set it while the first logs.
 * The rest is read and written under g_mu. */
static _Atomic int g_level = KVP_LOG_INFO;
static int g_syslog;
static int g_fd = STDERR_FILENO;
static char g_tag[32] = "kvplane";
static char g_path[4096];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int kvp__log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (s && strcmp(s, level_names[i]) == 0)
      return i;
  return -1;
}

void kvp__log_setup(int level, const char *tag) {
  atomic_store_explicit(&g_level, level, memory_order_relaxed);
  pthread_mutex_lock(&g_mu);
  if (tag)
    snprintf(g_tag, sizeof g_tag, "%s", tag);
  pthread_mutex_unlock(&g_mu);
}

void kvp__log_use_syslog(int on) {
  pthread_mutex_lock(&g_mu);
  if (on && !g_syslog)
    openlog(g_tag, LOG_PID | LOG_NDELAY, LOG_DAEMON);
  else if (!on && g_syslog)
    closelog();
  g_syslog = on;
  pthread_mutex_unlock(&g_mu);
}

static int open_path(const char *path) {
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int kvp__log_set_file(const char *path) {
  int fd = STDERR_FILENO;

  if (path) {
    fd = open_path(path);
    if (fd < 0)
      return KVP_EIO;
  }
  pthread_mutex_lock(&g_mu);
  if (g_fd != STDERR_FILENO)
    close(g_fd);
  g_fd = fd;
  snprintf(g_path, sizeof g_path, "%s", path ? path : "");
  pthread_mutex_unlock(&g_mu);
  return 0;
}

int kvp__log_reopen(void) {
  char path[sizeof g_path];

  pthread_mutex_lock(&g_mu);
  memcpy(path, g_path, sizeof path);
  pthread_mutex_unlock(&g_mu);
  return path[0] ? kvp__log_set_file(path) : 0;
}

int kvp__log_enabled(int level) {
  return level <= atomic_load_explicit(&g_level, memory_order_relaxed);
}

void kvp__vlog(int level, const char *fmt, va_list ap) {
  char line[2048];
  struct timespec ts;
  struct tm tm;
  int n, m;

  if (!kvp__log_enabled(level))
    return;
  if (level < 0)
    level = 0;
  if (level > KVP_LOG_DEBUG)
    level = KVP_LOG_DEBUG;
  char tag[sizeof g_tag];
  pthread_mutex_lock(&g_mu);
  int use_syslog = g_syslog;
  memcpy(tag, g_tag, sizeof tag);
  pthread_mutex_unlock(&g_mu);
  if (use_syslog) {
    static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
    vsnprintf(line, sizeof line, fmt, ap);
    syslog(prio[level], "%s", line);
    return;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ", tm.tm_year + 1900,
               tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
               level_names[level], tag);
  m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  if (m < 0)
    m = 0;
  n += m;
  if ((size_t)n > sizeof line - 2)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  pthread_mutex_lock(&g_mu);
  /* A short or failed write of a log line has nowhere to be reported. */
  ssize_t w = write(g_fd, line, (size_t)n);
  (void)w;
  pthread_mutex_unlock(&g_mu);
}

void kvp__log(int level, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  kvp__vlog(level, fmt, ap);
  va_end(ap);
}
