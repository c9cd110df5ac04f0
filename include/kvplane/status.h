/* kvplane status codes.
 *
 * Every kvplane function that can fail returns int: 0 on success or one of
 * the negative KVP_E* codes below. The codes come from a single X-macro table
 * so the enum, kvp_strerror() and kvp_err_name() can never disagree.
 */
#ifndef KVPLANE_STATUS_H
#define KVPLANE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, message). The value of KVP_E<name> is minus its 1-based position. */
#define KVP_STATUS_MAP(XX)                                                                         \
  XX(EINVAL, "invalid argument")                                                                   \
  XX(ENOMEM, "out of memory")                                                                      \
  XX(ENOSPC, "no free or evictable block")                                                         \
  XX(ENOENT, "not found")                                                                          \
  XX(EEXIST, "already exists")                                                                     \
  XX(ESTATE, "illegal block state transition")                                                     \
  XX(EBUSY, "resource busy")                                                                       \
  XX(ETOOBIG, "size limit exceeded")                                                               \
  XX(EPROTO, "malformed message")                                                                  \
  XX(ETIER, "unknown tier")                                                                        \
  XX(EIO, "I/O error")                                                                             \
  XX(ETIMEDOUT, "timed out")                                                                       \
  XX(ECONN, "connection failed")                                                                   \
  XX(ECONFIG, "bad configuration")                                                                 \
  XX(ENOTSUP, "operation not supported")                                                           \
  XX(ECLOSED, "object is closed")                                                                  \
  XX(ECORRUPT, "checksum mismatch")                                                                \
  XX(EDB, "database error")                                                                        \
  XX(EAGAIN, "resource temporarily unavailable")                                                   \
  XX(EOVERFLOW, "queue full")                                                                      \
  XX(EAUTH, "authentication failed")                                                               \
  XX(EOFFLINE, "volume offline: its identity marker is gone")

enum kvp_status_offset_e {
  KVP__STATUS_ZERO = 0,
#define KVP__XX(name, msg) KVP__OFF_##name,
  KVP_STATUS_MAP(KVP__XX)
#undef KVP__XX
      KVP__STATUS_COUNT
};

typedef enum kvp_status_e {
  KVP_OK = 0,
#define KVP__XX(name, msg) KVP_##name = -KVP__OFF_##name,
  KVP_STATUS_MAP(KVP__XX)
#undef KVP__XX
} kvp_status_t;

/* Human-readable message for a status code; never NULL. Unknown codes give
 * "unknown error". */
const char *kvp_strerror(int status);

/* Symbolic name ("KVP_ENOSPC", "KVP_OK"); never NULL. Unknown codes give
 * "KVP_EUNKNOWN". */
const char *kvp_err_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_STATUS_H */
