/* Live rebalancing's request parser (rebalance.c has the rest; its
 * functions on the advisor are in advisor_impl.h). */
#ifndef KVP_ADVISOR_REBALANCE_H
#define KVP_ADVISOR_REBALANCE_H

#include <stddef.h>
#include <stdint.h>

/* Parses a live rebalance request, outside bytes from any NATS client:
 * {"add": [p, ...], "drop": [p, ...]}, either optional, each a list of at
 * most KVP__ADV_MAX_OWNED (64) partitions below count, no partition named
 * twice (in one list or both). add and drop have room for 64 each.
 * Returns 0 with *nadd and *ndrop set, or KVP_EINVAL with err and both 0. */
int kvp__adv_parts_parse(const void *data, size_t len, uint32_t count, uint32_t *add, int *nadd,
                         uint32_t *drop, int *ndrop, char *err, size_t errlen);

#endif
