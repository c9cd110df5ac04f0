/* The floor under a gathered request on this machine: a request answered
 * by 4 processes against one answered by 1, through a real nats-server,
 * with nothing between the sockets and the NATS protocol. See
 * bench_natsfloor.c. */
#ifndef KVP_BENCH_NATSFLOOR_H
#define KVP_BENCH_NATSFLOOR_H

#include <stddef.h>
#include <stdint.h>

/* Starts 5 responder processes on the nats-server at 127.0.0.1:port (1 on
 * one subject, 4 on another; each answers every request with reply_bytes
 * bytes), then sends warmup + queries requests to each subject, alternating,
 * waiting for all answers of one before the next. lat1 and lat4 (queries
 * each) get the round trips in ns, unsorted. The responders are stopped
 * before it returns. Returns 0, or -1 with a line on stderr naming what
 * failed (a connection, a 2 s wait for an answer). */
int kvp_bench_nats_floor(int port, int queries, int warmup, size_t reply_bytes, uint64_t *lat1,
                         uint64_t *lat4);

#endif
