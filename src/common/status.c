/* Status code names and messages, generated from KVP_STATUS_MAP. */
#include "kvplane/status.h"

#include <stdarg.h>
#include <stdio.h>

#include "common/errf.h"

const char *kvp_strerror(int status) {
  switch (status) {
  case KVP_OK:
    return "success";
#define XX(name, msg)                                                                              \
  case KVP_##name:                                                                                 \
    return msg;
    KVP_STATUS_MAP(XX)
#undef XX
  default:
    return "unknown error";
  }
}

const char *kvp_err_name(int status) {
  switch (status) {
  case KVP_OK:
    return "KVP_OK";
#define XX(name, msg)                                                                              \
  case KVP_##name:                                                                                 \
    return "KVP_" #name;
    KVP_STATUS_MAP(XX)
#undef XX
  default:
    return "KVP_EUNKNOWN";
  }
}

int kvp__errf(char *err, size_t errlen, int rc, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}
