/* Connecting to NATS, the event stream and the status mapping; see conn.h. */
#define _GNU_SOURCE /* strcasestr */
#include "nats/conn.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"

/* nats.c reports an "Authorization Violation" from the server as a plain
 * connection error with the server's text in its last error. */
static int last_error_is_auth(void) {
  const char *why = nats_GetLastError(NULL);
  return why != NULL &&
         (strcasestr(why, "authorization") != NULL || strcasestr(why, "authentication") != NULL ||
          strcasestr(why, "permissions violation") != NULL);
}

/* nats.c's last error without its "(file.c:line): " prefix, or NULL. */
static const char *last_error_text(void) {
  const char *why = nats_GetLastError(NULL);
  if (why != NULL && why[0] == '(') {
    const char *end = strstr(why, "): ");
    if (end != NULL)
      why = end + 3;
  }
  return why;
}

int kvp__nats_status(natsStatus s) {
  switch (s) {
  case NATS_OK:
    return 0;
  case NATS_NOT_PERMITTED:
  case NATS_CONNECTION_AUTH_FAILED:
    return KVP_EAUTH;
  case NATS_NO_MEMORY:
    return KVP_ENOMEM;
  case NATS_TIMEOUT:
    return KVP_ETIMEDOUT;
  case NATS_NOT_FOUND:
    return KVP_ENOENT;
  default:
    return last_error_is_auth() ? KVP_EAUTH : KVP_ECONN;
  }
}

/* Applies o's servers, auth and TLS to no. Returns 0 or KVP_ECONFIG /
 * KVP_ENOMEM with err naming the option. */
static int apply_opts(natsOptions *no, const kvp_nats_opts_t *o, char *err, size_t errlen) {
  char *urls = strdup(o->servers);
  const char *list[64];
  int n = 0, rc = KVP_ENOMEM;

  if (urls == NULL)
    return KVP_ENOMEM;
  for (char *sp = NULL, *t = strtok_r(urls, ",", &sp); t != NULL; t = strtok_r(NULL, ",", &sp)) {
    while (*t == ' ')
      t++;
    if (n == (int)(sizeof list / sizeof list[0])) {
      snprintf(err, errlen, "servers: more than %d URLs", n);
      rc = KVP_ECONFIG;
      goto out;
    }
    list[n++] = t;
  }
  rc = KVP_ECONFIG;
  if (natsOptions_SetServers(no, list, n) != NATS_OK) {
    snprintf(err, errlen, "servers: cannot parse '%s'", o->servers);
    goto out;
  }
  if (o->user[0] && natsOptions_SetUserInfo(no, o->user, o->password) != NATS_OK) {
    snprintf(err, errlen, "user: not accepted by the client library");
    goto out;
  }
  if (o->token[0] && natsOptions_SetToken(no, o->token) != NATS_OK) {
    snprintf(err, errlen, "token: not accepted by the client library");
    goto out;
  }
  if (o->creds[0] && natsOptions_SetUserCredentialsFromFiles(no, o->creds, NULL) != NATS_OK) {
    snprintf(err, errlen, "creds: cannot use %s", o->creds);
    goto out;
  }
  if ((o->tls_ca[0] || o->tls_cert[0]) && natsOptions_SetSecure(no, true) != NATS_OK) {
    snprintf(err, errlen, "tls_ca: TLS is not available in this nats.c build");
    goto out;
  }
  if (o->tls_ca[0] && natsOptions_LoadCATrustedCertificates(no, o->tls_ca) != NATS_OK) {
    snprintf(err, errlen, "tls_ca: cannot load %s", o->tls_ca);
    goto out;
  }
  if (o->tls_cert[0] && natsOptions_LoadCertificatesChain(no, o->tls_cert, o->tls_key) != NATS_OK) {
    snprintf(err, errlen, "tls_cert: cannot load %s / %s", o->tls_cert, o->tls_key);
    goto out;
  }
  rc = 0;
out:
  free(urls);
  return rc;
}

/* Applies the part-specific settings of a. Returns 0 or KVP_ENOMEM. */
static int apply_args(natsOptions *no, const kvp_nats_opts_t *o, const kvp__nats_conn_args_t *a) {
  natsStatus s = natsOptions_SetTimeout(no, o->connect_timeout_ms);
  if (s == NATS_OK)
    s = natsOptions_SetMaxReconnect(no, -1);
  if (s == NATS_OK && a->name)
    s = natsOptions_SetName(no, a->name);
  if (s == NATS_OK && a->reconnect_wait_ms)
    s = natsOptions_SetReconnectWait(no, a->reconnect_wait_ms);
  if (s == NATS_OK && a->ping_interval_ms)
    s = natsOptions_SetPingInterval(no, a->ping_interval_ms);
  if (s == NATS_OK && a->max_pings_out)
    s = natsOptions_SetMaxPingsOut(no, a->max_pings_out);
  if (s == NATS_OK && a->write_deadline_ms)
    s = natsOptions_SetWriteDeadline(no, a->write_deadline_ms);
  if (s == NATS_OK && a->reconnect_buf_bytes)
    s = natsOptions_SetReconnectBufSize(no, a->reconnect_buf_bytes);
  if (s == NATS_OK && a->send_asap)
    s = natsOptions_SetSendAsap(no, true);
  if (s == NATS_OK && a->disconnected)
    s = natsOptions_SetDisconnectedCB(no, a->disconnected, a->closure);
  if (s == NATS_OK && a->reconnected)
    s = natsOptions_SetReconnectedCB(no, a->reconnected, a->closure);
  if (s == NATS_OK && a->closed)
    s = natsOptions_SetClosedCB(no, a->closed, a->closure);
  if (s == NATS_OK && a->ev_loop)
    s = natsOptions_SetEventLoop(no, a->ev_loop, a->ev_attach, a->ev_read, a->ev_write,
                                 a->ev_detach);
  return s == NATS_OK ? 0 : KVP_ENOMEM;
}

int kvp__nats_connect(const kvp_nats_opts_t *o, const kvp__nats_conn_args_t *a,
                      natsConnection **out, char *err, size_t errlen) {
  static const kvp__nats_conn_args_t none;
  natsOptions *no = NULL;
  natsStatus s;
  int rc;

  *out = NULL;
  if (a == NULL)
    a = &none;
  if ((rc = kvp_nats_opts_check(o, NULL, err, errlen)) != 0)
    return rc;
  if (natsOptions_Create(&no) != NATS_OK)
    return KVP_ENOMEM;
  if ((rc = apply_opts(no, o, err, errlen)) != 0 || (rc = apply_args(no, o, a)) != 0)
    goto out;
  /* nats.c copies the options into the connection: no is ours to free. */
  s = natsConnection_Connect(out, no);
  if (s != NATS_OK) {
    const char *why = last_error_text();
    rc = kvp__nats_status(s);
    if (rc != KVP_EAUTH && rc != KVP_ENOMEM)
      rc = KVP_ECONN;
    snprintf(err, errlen, "servers: cannot connect to %s: %s", o->servers,
             why && why[0] ? why : natsStatus_GetText(s));
    *out = NULL;
  }
out:
  natsOptions_Destroy(no);
  return rc;
}

int kvp__nats_ensure_stream(jsCtx *js, const char *stream, int create, int *created, char *err,
                            size_t errlen) {
  return kvp__nats_ensure_stream_ex(js, stream, NULL, 1, create, created, err, errlen);
}

int kvp__nats_ensure_stream_ex(jsCtx *js, const char *stream, const char *subject, int replicas,
                               int create, int *created, char *err, size_t errlen) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s;

  if (created)
    *created = 0;
  s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
  if (s == NATS_OK) {
    if (si->Config != NULL && replicas > 1 && si->Config->Replicas != replicas)
      kvp_log_warn("nats: stream %s has %" PRId64 " replicas, not the %d configured; it is used "
                   "as it is (change it with the nats CLI: nats stream edit --replicas)",
                   stream, (int64_t)si->Config->Replicas, replicas);
    jsStreamInfo_Destroy(si);
    return 0;
  }
  if (s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
    /* No responder to the JetStream API: a server without JetStream. */
    snprintf(err, errlen, "stream: cannot look up %s: %s (jetstream error %d)%s", stream,
             natsStatus_GetText(s), (int)jerr,
             s == NATS_NO_RESPONDERS ? "; JetStream is probably not enabled on the server "
                                       "(nats-server -js, or jetstream {} in its configuration)"
                                     : "");
    return kvp__nats_status(s);
  }
  if (!create) {
    snprintf(err, errlen, "stream: %s does not exist and stream creation is off", stream);
    return KVP_ECONFIG;
  }
  const char *subjects[] = {subject ? subject : KVP_SUBJECT_EVENTS_ALL};
  jsStreamConfig sc;
  jsStreamConfig_Init(&sc);
  sc.Name = stream;
  sc.Subjects = subjects;
  sc.SubjectsLen = 1;
  sc.Storage = js_FileStorage;
  sc.Replicas = replicas > 1 ? replicas : 1;
  jerr = 0;
  s = js_AddStream(&si, js, &sc, NULL, &jerr);
  jsStreamInfo_Destroy(si);
  if (s == NATS_OK) {
    if (created)
      *created = 1;
    return 0;
  }
  /* Another client created it between our lookup and our create. */
  if (jerr == JSStreamNameExistErr)
    return 0;
  snprintf(err, errlen, "stream: cannot create %s: %s (jetstream error %d)%s", stream,
           natsStatus_GetText(s), (int)jerr,
           s == NATS_NO_RESPONDERS ? "; JetStream is probably not enabled on the server "
                                     "(nats-server -js, or jetstream {} in its configuration)"
                                   : "");
  return kvp__nats_status(s);
}
