/* Error messages into a caller's buffer: the (err, errlen) pair that
 * functions taking one fill on failure. */
#ifndef KVP_COMMON_ERRF_H
#define KVP_COMMON_ERRF_H

#include <stddef.h>

/* Writes the printf-formatted message to err (nothing when err is NULL or
 * errlen 0) and returns rc, so that a failure path reads
 * `return kvp__errf(err, errlen, KVP_EINVAL, "bad %s", what);`. */
int kvp__errf(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
