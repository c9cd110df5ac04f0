/* The posix plugin's packed layout (layout=packed, pack.c): small objects
 * as records appended to segment files under <root>/.packed/, an index of
 * them in memory, deletes and replacements that leave dead bytes, and a
 * compaction that rewrites a segment's live records and removes it. Several
 * processes may open one volume at once: each appends to segments of its
 * own and reads the others' as they grow (pack.c's header says how).
 * Private to plugins/posix/; every call takes the volume's mutex itself. */
#ifndef KVP_PLUGIN_POSIX_PACK_H
#define KVP_PLUGIN_POSIX_PACK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "posix.h"

#define PACK_DIR ".packed"

/* Opens (creating it when missing) the packed store of p: loads every
 * segment, keeps the newest record of each object, and adds the live ones
 * to p->used and p->blocks. Called by open before the file scan. KVP_EBUSY
 * when a process of the earlier one-process layout holds the volume. */
int pk_open(posix_t *p, uint64_t segment_size, uint64_t pack_max, char *err, size_t errlen);
void pk_close(posix_t *p);

/* Appends (ns, hash) with the bytes of iov as its newest record; the usage
 * changes are made here. Returns 0 or a KVP_E* code with err. */
int pk_put(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t len, char *err, size_t errlen);
/* 1 when (ns, hash) is packed, with *len (may be NULL) and *time_ns (may be
 * NULL: when its record was written); 0 when not. With fresh set, what
 * other processes appended or compacted since the last look is read first
 * (so a delete they acknowledged is seen). */
int pk_find(posix_t *p, const char *ns, uint64_t hash, size_t *len, uint64_t *time_ns, int fresh);
/* Reads what other processes appended or compacted since the last look
 * (cheap when nothing changed): p->used and p->blocks are the volume's. */
int pk_refresh(posix_t *p, char *err, size_t errlen);
/* Reads a packed object: 0, KVP_ETOOBIG, KVP_EIO; 1 when it is not packed
 * (the caller then looks for a file). */
int pk_get(posix_t *p, const char *ns, uint64_t hash, const struct iovec *iov, int iovcnt,
           size_t *len, char *err, size_t errlen);
/* Deletes a packed object with a tombstone: 0, a KVP_E* code, or 1 when it
 * is not packed. */
int pk_del(posix_t *p, const char *ns, uint64_t hash, char *err, size_t errlen);
/* Forgets a packed object in memory only, its bytes dead (open: a file of
 * the same key is newer). */
void pk_forget(posix_t *p, const char *ns, uint64_t hash);
/* Calls fn for every packed object (a snapshot taken under the lock). */
int pk_iterate(posix_t *p, px_visit_fn fn, void *ctx);
/* The bytes of records no object owns, and the segments' bytes in all
 * (after a refresh): 0 or a KVP_E* code with err. */
int pk_garbage(posix_t *p, uint64_t *dead, uint64_t *total, char *err, size_t errlen);
/* One step of compaction: the sealed segment with the largest share of
 * dead bytes that no writer holds is rewritten (its live records appended
 * to this process's segment) and removed. 1 when a segment was compacted;
 * 0 when none has dead bytes or another process is compacting; or a
 * negative code with err. */
int pk_compact(posix_t *p, char *err, size_t errlen);

#endif
