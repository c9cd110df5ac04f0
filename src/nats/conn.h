/* NATS client plumbing shared by every kvplane part that talks to NATS (the
 * publisher, the advisor, the kvplane CLI): connecting with a
 * kvp_nats_opts_t, finding or creating the event stream, and the one mapping
 * of nats.c statuses to KVP_E codes.
 *
 * Threads: these functions run on the caller's thread and block for at most
 * the connect timeout (connect) or one JetStream API round trip (stream).
 * The handlers in kvp__nats_conn_args_t run later on nats.c's own threads. */
#ifndef KVP_NATS_CONN_H
#define KVP_NATS_CONN_H

#include <nats/nats.h>
#include <stddef.h>
#include <stdint.h>

#include "kvplane/nats.h"

/* What differs between the parts: the connection's name and its reconnect
 * behaviour. Zero fields keep nats.c's defaults. */
typedef struct kvp__nats_conn_args_s {
  const char *name;          /* shown by the server (connz); may be NULL */
  int64_t reconnect_wait_ms; /* between reconnect attempts */
  int64_t ping_interval_ms;  /* how often the server is pinged */
  int max_pings_out;         /* unanswered pings before the link counts as broken */
  int64_t write_deadline_ms; /* a socket write blocked this long breaks the link */
  int reconnect_buf_bytes;   /* published bytes kept while reconnecting; 0 default */
  int send_asap;             /* publish without waiting for nats.c's flusher (requests) */
  natsConnectionHandler disconnected, reconnected, closed; /* may be NULL */
  void *closure;                                           /* passed to the handlers */
  /* Event-loop mode (natsOptions_SetEventLoop): the connection's socket is
   * read and written by this loop through these adapter callbacks instead
   * of nats.c's reader and flusher threads. ev_loop NULL: threads. */
  void *ev_loop;
  natsEvLoop_Attach ev_attach;
  natsEvLoop_ReadAddRemove ev_read;
  natsEvLoop_WriteAddRemove ev_write;
  natsEvLoop_Detach ev_detach;
} kvp__nats_conn_args_t;

/* Connects with o (checked first with kvp_nats_opts_check), reconnecting
 * forever afterwards. Returns 0 with *out set, or with *out NULL:
 *   KVP_ECONFIG  a bad option or an unusable file (err names the option);
 *   KVP_EAUTH    the server refused the credentials;
 *   KVP_ECONN    no server answered within connect_timeout_ms;
 *   KVP_ENOMEM.
 * err reads "servers: cannot connect to <servers>: <cause>" on a failed
 * connection. */
int kvp__nats_connect(const kvp_nats_opts_t *o, const kvp__nats_conn_args_t *a,
                      natsConnection **out, char *err, size_t errlen);

/* The KVP_E code of a nats.c status: 0 for NATS_OK; KVP_EAUTH when the
 * server refused the credentials or a permission (nats.c reports some of
 * those only in its last-error text, which is read too); KVP_ENOMEM;
 * KVP_ETIMEDOUT for NATS_TIMEOUT; KVP_ENOENT for NATS_NOT_FOUND; KVP_ECONN
 * for everything else. */
int kvp__nats_status(natsStatus s);

/* Makes sure the JetStream stream exists, with subjects
 * KVP_SUBJECT_EVENTS_ALL and file storage when it has to be created.
 * Returns 0 (found, or created when create is set), KVP_ECONFIG when it is
 * missing and create is off, or the mapped status of a failed lookup or
 * creation; err names the stream. *created (may be NULL) tells whether this
 * call created it. */
int kvp__nats_ensure_stream(jsCtx *js, const char *stream, int create, int *created, char *err,
                            size_t errlen);

/* The same with the stream's subject (NULL: KVP_SUBJECT_EVENTS_ALL) and,
 * when it has to be created, its replica count (1..5; a cluster places the
 * replicas on that many servers). An existing stream is used as it is; its
 * replica count is logged when it differs from replicas. */
int kvp__nats_ensure_stream_ex(jsCtx *js, const char *stream, const char *subject, int replicas,
                               int create, int *created, char *err, size_t errlen);

#endif
