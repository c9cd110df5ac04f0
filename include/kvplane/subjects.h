/* NATS subjects: a public contract (DESIGN.md, "Subjects"). Every kvplane
 * part builds and reads subjects through these functions; no other code
 * spells them.
 *
 *   kvplane.ev.<ns>.<worker>           event batches of a worker
 *   kvplane.ctl.<ns>.<worker>.resync   resync request to a worker
 *   kvplane.api.<ns>.<call>            advisor requests (match, stats)
 *
 * <ns> and <worker> are tokens: 1..64 characters of [A-Za-z0-9_-]. The
 * builders write a NUL-terminated subject into buf and return 0, KVP_EINVAL
 * when a token is invalid, or KVP_ETOOBIG when buf is too small; a subject
 * of valid tokens always fits KVP_SUBJECT_MAX bytes. */
#ifndef KVPLANE_SUBJECTS_H
#define KVPLANE_SUBJECTS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_SUBJECT_MAX 256
#define KVP_SUBJECT_TOKEN_MAX 64

/* Every event subject of every namespace: the JetStream stream's subjects. */
#define KVP_SUBJECT_EVENTS_ALL "kvplane.ev.>"

/* The advisor's request calls. */
#define KVP_API_MATCH "match"
#define KVP_API_STATS "stats"
#define KVP_API_TIER "tier" /* the operator's pins, moves and deletes (kvplane pin, ...) */

/* True when s is a valid token (namespace or worker id): 1..64 characters
 * of [A-Za-z0-9_-]. */
int kvp_subject_token_valid(const char *s);

/* kvplane.ev.<ns>.<worker> */
int kvp_subject_events(char *buf, size_t len, const char *ns, const char *worker);

/* kvplane.ev.<ns>.> : every worker's events in one namespace. */
int kvp_subject_events_ns(char *buf, size_t len, const char *ns);

/* kvplane.ctl.<ns>.<worker>.resync */
int kvp_subject_resync(char *buf, size_t len, const char *ns, const char *worker);

/* kvplane.api.<ns>.<call>; call is a token too (KVP_API_MATCH, ...). */
int kvp_subject_api(char *buf, size_t len, const char *ns, const char *call);

/* Reads kvplane.ev.<ns>.<worker>: copies the tokens into ns and worker
 * (each KVP_SUBJECT_TOKEN_MAX + 1 bytes) and returns 0, or KVP_EPROTO when
 * subject is anything else (another prefix, a missing or extra token, an
 * invalid token). */
int kvp_subject_parse_events(const char *subject, char ns[KVP_SUBJECT_TOKEN_MAX + 1],
                             char worker[KVP_SUBJECT_TOKEN_MAX + 1]);

#ifdef __cplusplus
}
#endif
#endif /* KVPLANE_SUBJECTS_H */
