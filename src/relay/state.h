/* Internal state of a relay, shared by the files of src/relay: relay.c
 * (open, the poll loop, close, figures), recover.c (one endpoint's message
 * sequence: gaps, replays, restarts) and apply.c (a decoded payload
 * republished as kvplane events). */
#ifndef KVP_RELAY_STATE_H
#define KVP_RELAY_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "relay/relay.h"
#include "relay/decode.h"
#include "relay/map.h"

/* The figures are read by other threads (kvp_relay_stats): relaxed atomics. */
#define CNT(ep, f) __atomic_fetch_add(&(ep)->st.f, 1, __ATOMIC_RELAXED)
#define CNTN(ep, f, n) __atomic_fetch_add(&(ep)->st.f, (n), __ATOMIC_RELAXED)

#define LOG(ep, fmt, ...)                                                                          \
  fprintf(stderr, "kvplane-relay: %s (%s): " fmt "\n", (ep)->endpoint, (ep)->worker, __VA_ARGS__)

#define KVP__RELAY_UNKNOWN_LOGGED 16

/* Few lines for a flood of bad input: the first ten, then one in 1000. */
static inline int kvp__relay_worth_logging(uint64_t count) {
  return count <= 10 || count % 1000 == 0;
}

/* What persist.c keeps of an endpoint across relay restarts. */
typedef struct kvp__relay_saved_s {
  int64_t seq; /* last sequence published and flushed; -1: none */
  uint64_t epoch;
  uint64_t next_event_id; /* above every event id the publisher had used */
} kvp__relay_saved_t;

/* A restarted publisher's first event id is this far above the saved one:
 * more events than a relay can queue between two state writes. */
#define KVP__RELAY_ID_MARGIN (UINT64_C(1) << 32)

typedef struct kvp__relay_ep_s {
  char endpoint[256], replay[256], worker[65];
  void *sub;
  kvp_publisher_t *pub;
  kvp_relay_map_t *map;
  int64_t last_seq;     /* -1: nothing seen yet */
  int64_t resume_seq;   /* restarted relay: last sequence the previous run published, or -1 */
  int64_t silent_until; /* sequences below are applied to the map only (already published) */
  int silent;           /* applying without publishing */
  char state_path[512]; /* "" without --state-dir */
  char map_path[512];
  int lock_fd; /* the flock on <state-dir>/<worker>.lock, held while open; -1: none */
  uint64_t map_saved_ms, map_cost_ms; /* when the map file was written, how long it took */
  int64_t map_seq;                    /* resuming: the sequence the loaded map is as of, or -1 */
  int64_t saved_seq;                  /* what the state file holds */
  int64_t map_file_seq;               /* what the map file holds (-1: none written or read) */
  uint64_t first_event_id;            /* the publisher's first id: ids used <= first + queued */
  kvp_relay_stats_t st;
  char unknown[KVP__RELAY_UNKNOWN_LOGGED][32]; /* media and kinds already logged */
  size_t nunknown;
} kvp__relay_ep_t;

struct kvp_relay_s {
  void *zctx;
  kvp__relay_ep_t *ep;
  size_t nep;
  int stop;
  int rcvhwm;
  uint32_t replay_timeout_ms, block_size, state_interval_ms, join_window;
  kvp_relay_media_t media;
  kvp_relay_decoder_t *dec;  /* live messages */
  kvp_relay_decoder_t *rdec; /* replayed ones, while a live message waits decoded */
  uint64_t *hbuf;            /* kvplane hashes of one event */
  size_t hcap;
};

/* apply.c: republishes the events of one decoded payload. */
void kvp__relay_apply(kvp_relay_t *r, kvp__relay_ep_t *ep, const kvp_relay_decoded_t *d);

/* apply.c: publishes AllBlocksCleared (every tier) for the worker and
 * forgets its hashes; why goes to the log. */
void kvp__relay_clear(kvp__relay_ep_t *ep, const char *why);

/* persist.c: the state file of worker under dir (dir/worker.ext), read and written
 * atomically. read returns 0, KVP_ENOENT (no file), KVP_EPROTO (unreadable),
 * KVP_ECONFIG (another endpoint's state) or KVP_EIO; write 0 or KVP_EIO. */
int kvp__relay_state_path(char *buf, size_t len, const char *dir, const char *worker,
                          const char *ext);
int kvp__relay_state_read(const char *path, const char *endpoint, kvp__relay_saved_t *s);
int kvp__relay_state_write(const char *path, const char *endpoint, const kvp__relay_saved_t *s);
/* The map file: write returns 0, KVP_ENOMEM or KVP_EIO; read replaces m's
 * entries and sets *seq (the sequence the map is as of), or returns
 * KVP_ENOENT, KVP_EPROTO (unreadable: m unchanged), KVP_ENOMEM, KVP_EIO. */
int kvp__relay_map_write(const char *path, int64_t seq, const kvp_relay_map_t *m);
int kvp__relay_map_read(const char *path, int64_t *seq, kvp_relay_map_t *m);

/* relay.c: when ep's last sequence moved since the state file was written,
 * flushes the publisher (so the file never claims what NATS has not got)
 * and writes it, then the map file (always when closing). */
void kvp__relay_save(kvp__relay_ep_t *ep, int closing);

/* recover.c: reads one message of ep's SUB socket (without waiting), checks
 * its sequence against the last one (a gap is replayed or cleared, a
 * sequence that goes back clears) and applies its payload. */
void kvp__relay_on_message(kvp_relay_t *r, kvp__relay_ep_t *ep);

#endif
