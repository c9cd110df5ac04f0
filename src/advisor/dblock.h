/* One advisor per database: an exclusive flock(2) on the database file,
 * held from before the advisor touches NATS or the database until after its
 * last SQLite connection is closed. Two advisors on one file would each
 * write their own index behind (the last flush wins), and in JetStream mode
 * remake each other's durable consumer in turn. */
#ifndef KVP_ADVISOR_DBLOCK_H
#define KVP_ADVISOR_DBLOCK_H

#include <stddef.h>

/* Locks the database file path for this advisor into *fd. Returns 0 with
 * *fd the locked descriptor, or 0 with *fd = -1 when the file does not
 * exist yet (call again once it is made); KVP_EBUSY when another advisor
 * (another process, or another advisor of this one) holds it, KVP_EIO when
 * it cannot be opened; err says which, naming the file. flock is not
 * fcntl: SQLite's own byte-range locks on the file are untouched, but the
 * descriptor must be closed (kvp__adv_db_unlock) only after every SQLite
 * connection to the file, since closing any descriptor of a file drops the
 * process's fcntl locks on it. */
int kvp__adv_db_lock(const char *path, int *fd, char *err, size_t errlen);

/* Releases the lock; fd -1 is ignored. */
void kvp__adv_db_unlock(int fd);

#endif
