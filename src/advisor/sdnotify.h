/* The service manager's notification socket (systemd's sd_notify protocol,
 * sd_notify(3)): one datagram of "KEY=VALUE" lines to the AF_UNIX socket
 * named by $NOTIFY_SOCKET ('@' first: the abstract namespace).
 *
 * Written here rather than linked from libsystemd: the protocol is one
 * sendto, systemd documents it as stable for exactly this use, and the
 * advisor then needs no library that only Linux-with-systemd hosts have.
 * Without $NOTIFY_SOCKET (a shell, a test, another supervisor) every call
 * does nothing. */
#ifndef KVP_ADVISOR_SDNOTIFY_H
#define KVP_ADVISOR_SDNOTIFY_H

#include <stdint.h>

/* Sends msg (e.g. "STOPPING=1"). Returns 0 (also when there is no socket to
 * send to), KVP_EINVAL for a $NOTIFY_SOCKET that is not an absolute or
 * abstract path, or KVP_EIO when the datagram could not be sent. */
int kvp__sd_notify(const char *msg);

/* Asks the service manager for usec more microseconds, from now, before it
 * kills a stop (or start) in progress: "EXTEND_TIMEOUT_USEC=<usec>". The
 * unit needs NotifyAccess=main for systemd to read it. Same returns. */
int kvp__sd_extend_timeout(uint64_t usec);

#endif
