/* kvplane-relay --reverse: kvplane's plane published as vLLM KV events, so
 * that a router that reads vLLM's ZMQ stream (Dynamo's KvEventPublisher in
 * relay mode, llm-d, SGLang's SMG, Mooncake's conductor) sees kvplane
 * workers, the advisor's G3/G4 moves (worker "_advisor") included, without
 * knowing kvplane (README, "Routers reading kvplane as vLLM events").
 *
 * Per stream (one kvplane worker, one or every dp rank of it): a ZMQ PUB
 * socket sending [topic, 8-byte big-endian sequence, msgpack payload]
 * (vllmenc.h), and optionally a ROUTER
 * socket answering replay requests as vLLM's ZmqEventPublisher does: a
 * request [identity, "", start] is answered with [identity, "", topic, seq,
 * payload] for every buffered message from start on, then [identity, "",
 * "", -1 as 8 bytes, ""], as vLLM 0.26+ sends them (vllm#45177: the topic
 * names the pod and model, which llm-d's router reads); without
 * replay_topic the topic frames are left out, as vLLM before 0.26 and
 * SGLang send them. Both sockets are bound. One stream per worker, not per
 * namespace: the vLLM format has no worker field (a stream is one engine),
 * and its sequence and replay buffer are per stream, as routers register
 * one endpoint per instance and dp rank.
 *
 * A run's sequences count from its start time in microseconds since the
 * Unix epoch (above every sequence of an earlier run), and its first
 * message on every stream is AllBlocksCleared: what an earlier run
 * announced is unknown to this one and the workers may have removed blocks
 * meanwhile. A consumer that stays subscribed across a restart sees its
 * sequence jump, replays from its last one + 1 and gets the clear, then the
 * stores of the resyncs the new run asks for.
 *
 * Fed from NATS: one core subscription to kvplane.ev.<ns>.>; a batch whose
 * worker id differs from its subject is dropped (counted spoofed). Per
 * (worker, dp rank) the relay follows epochs and event ids as the advisor
 * does, and on first sight (after events it missed, or at an epoch's first
 * event: G3/G4 blocks outlive epochs), after a gap and after a new epoch
 * (whose G1/G2 blocks it first announces removed) it asks the worker
 * for a resync (kvplane.ctl.<ns>.<worker>.resync), whose snapshots
 * vllmenc.c turns into the removals and stores that repair the stream.
 * A stream of every rank follows 1024 ranks at most: the batches of a rank
 * past them are dropped (counted untracked in the stats line).
 *
 * Threads: kvp__vout_run runs everything on the caller's thread;
 * kvp__vout_stop may be called from any thread or a signal handler. */
#ifndef KVP_RELAY_VLLMOUT_H
#define KVP_RELAY_VLLMOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvplane/nats.h"
#include "relay/relay.h"

typedef struct kvp__vout_stream_opts_s {
  const char *worker;   /* kvplane worker id */
  int64_t dp_rank;      /* -1: every dp rank of the worker */
  const char *endpoint; /* PUB to bind, e.g. tcp://0.0.0.0:5557 */
  const char *replay;   /* ROUTER to bind, or NULL: no replay */
} kvp__vout_stream_opts_t;

typedef struct kvp__vout_opts_s {
  kvp_nats_opts_t nats;
  const char *ns;
  const char *topic; /* first frame of every message; default "" */
  int replay_topic;  /* replay replies carry the topic frame (default 1) */
  kvp__vout_stream_opts_t streams[KVP_RELAY_MAX_ENDPOINTS];
  size_t nstreams;
  size_t buffer_steps; /* messages kept for replay; default 10000 (vLLM's) */
  size_t buffer_bytes; /* and their payloads' bytes at most, per stream; default 128 MiB (the
                        * newest message is kept whatever its size): a message is up to
                        * KVP__VOUT_MSG_BYTES, so 10000 of them could be 10 GiB */
  int sndhwm;          /* PUB high-water mark; default 100000 (vLLM's) */
  int format;          /* KVP__VOUT_VLLM (default), _MAP or _ARRAY (vllmenc.h) */
  const char *media;   /* "G<n>=NAME,..." overrides of the medium names, or NULL */
  int no_resync;       /* never ask workers for a resync */
  uint32_t idle_ms;    /* an empty batch on a stream silent this long (0: never); default
                        * 10000: a router learns of a gap (a restart of the relay) on an
                        * idle stream too, as TensorRT-LLM's publisher sends them */
  int partitioned;     /* the servers partition the event subjects (kvplane nats-config):
                        * subscribe to kvplane.pev.<ns>.*.*, where they map
                        * kvplane.ev.<ns>.<worker> to */
} kvp__vout_opts_t;

typedef struct kvp__vout_s kvp__vout_t;

void kvp__vout_opts_init(kvp__vout_opts_t *o);

/* Binds every stream's sockets and subscribes. Returns 0 with *out set, or
 * KVP_ECONFIG (a bad option, an endpoint that cannot be bound: err names
 * it), KVP_ECONN or KVP_EAUTH (NATS), KVP_ENOMEM. */
int kvp__vout_open(const kvp__vout_opts_t *o, kvp__vout_t **out, char *err, size_t errlen);

/* Runs until kvp__vout_stop. Returns 0. */
int kvp__vout_run(kvp__vout_t *v);

void kvp__vout_stop(kvp__vout_t *v);

/* One JSON line per stream with its figures. */
void kvp__vout_stats_print(const kvp__vout_t *v, FILE *f);

/* Closes the sockets and the connection; NULL is accepted. */
void kvp__vout_close(kvp__vout_t *v);

/* kvplane-relay --reverse's command line (argv without the program's
 * options before --reverse is fine: getopt sees all of it). Returns the
 * exit status: 0 after SIGINT/SIGTERM, 1 for bad options, 2 when NATS
 * cannot be reached. */
int kvp__vout_main(int argc, char **argv);

#endif
