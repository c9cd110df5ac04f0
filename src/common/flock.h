/* An exclusive flock(2) on a file, taken without waiting: one process (or
 * one open of it) at a time. The daemons hold one for as long as they own a
 * file another instance must not use beside them: the advisor its database
 * (advisor/dblock.c), the relay a worker's restart state (relay.c). */
#ifndef KVP_COMMON_FLOCK_H
#define KVP_COMMON_FLOCK_H

/* Locks path, made (0600) when create is set and it does not exist.
 * Returns 0 with *fd the locked descriptor (the lock lasts until it is
 * closed: kvp__flock_release), or with *fd -1: KVP_EBUSY when another open
 * of the file holds the lock, KVP_ENOENT when it does not exist and create
 * is 0, KVP_EIO otherwise (errno says why). flock is not fcntl: SQLite's
 * byte-range locks on the same file are untouched, but closing any
 * descriptor of a file drops the process's fcntl locks on it. */
int kvp__flock_take(const char *path, int create, int *fd);

/* Releases a lock of kvp__flock_take; -1 is ignored. */
void kvp__flock_release(int fd);

#endif
