/* Test harness shared by every test program.
 *
 * Each test program registers its cases in a cmocka table and ends with
 * KVP_TEST_MAIN(group, tests). CMake registers one ctest per case (it reads the
 * cmocka_unit_test* lines of the source) and runs "<program> <case>", so a
 * failure names the case. With no argument the program runs every case. */
#ifndef KVP_TEST_HARNESS_H
#define KVP_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
/* cmocka.h needs the three includes above first. */
#include <cmocka.h>

int kvp_test_run(const char *group, const struct CMUnitTest *tests, size_t n, int argc,
                 char **argv);

#define KVP_TEST_MAIN(group, tests)                                                                \
  int main(int argc, char **argv) {                                                                \
    return kvp_test_run(group, tests, sizeof(tests) / sizeof((tests)[0]), argc, argv);             \
  }

/* Directory of the source tree's tests/ (for data files), set by CMake. */
const char *kvp_test_srcdir(void);

/* A fresh empty temporary directory (mkdtemp under $TMPDIR or /tmp) written
 * to buf; returns buf, or NULL on failure. */
char *kvp_test_tmpdir(char *buf, size_t len);

/* Removes a directory tree; errors are ignored (test cleanup). */
void kvp_test_rmtree(const char *path);

/* A 127.0.0.1 TCP port that was free a moment ago. */
int kvp_test_free_port(void);

/* GET path from 127.0.0.1:port over HTTP/1.0: the status code, with the
 * reply (head and body, NUL-terminated, cut to len) in buf when it is not
 * NULL; -1 when nothing answers or the reply has no status line. */
int kvp_test_http_get(int port, const char *path, char *buf, size_t len);

/* Runs argv (argv[0] looked up in PATH) with stdin from in_path (or
 * /dev/null), stdout to out_path (or /dev/null); returns the exit status, or
 * -1 when it could not be run or was killed by a signal. */
int kvp_test_spawn_wait(char *const argv[], const char *in_path, const char *out_path);

/* Starts a server: argv (argv[0] a path) in a process group of its own,
 * stdout and stderr appended to log_path, and waits up to 20 s until
 * 127.0.0.1:port accepts a connection. Returns its pid, or -1 (nothing left
 * running) with a line on stderr naming `who`, the cause and the log. */
pid_t kvp_test_spawn_server(char *const argv[], const char *log_path, int port, const char *who);

/* Starts argv (argv[0] a path) as a child that dies with this process
 * (PR_SET_PDEATHSIG), stdout and stderr appended to log_path (mode 0600).
 * Returns its pid, or -1 when fork failed; an exec that fails shows as the
 * child's exit status 127. */
pid_t kvp_test_spawn_child(char *const argv[], const char *log_path);

/* Kills a server of kvp_test_spawn_server (its whole group) and reaps it;
 * pid <= 0 is accepted. */
void kvp_test_kill_server(pid_t pid);

/* A connected socket to 127.0.0.1:port, or -1. */
int kvp_test_connect(int port);

/* Raises the soft limit on open files to at least want (up to the hard
 * limit); 1 when it is at least want then, else 0 (the caller skips). */
int kvp_test_nofile_at_least(unsigned long want);

/* Opens /dev/null until fds[0..n) are held (descriptors numbered past
 * what select() takes, for the tests of servers that must not use it);
 * returns how many were opened. */
int kvp_test_hold_fds(int *fds, int n);

#endif
