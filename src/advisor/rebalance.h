/* Live rebalancing's request parser (rebalance.c has the rest; its
 * functions on the advisor are in advisor_impl.h). */
#ifndef KVP_ADVISOR_REBALANCE_H
#define KVP_ADVISOR_REBALANCE_H

#include <stddef.h>
#include <stdint.h>

/* A live rebalance request: partitions to consume (add) or stop consuming
 * (drop), and to start (tier) or stop (untier) tiering. */
#define KVP__ADV_PARTS_REQ_MAX 64
typedef struct kvp__adv_parts_req_s {
  uint32_t add[KVP__ADV_PARTS_REQ_MAX], drop[KVP__ADV_PARTS_REQ_MAX];
  uint32_t tier[KVP__ADV_PARTS_REQ_MAX], untier[KVP__ADV_PARTS_REQ_MAX];
  int nadd, ndrop, ntier, nuntier;
} kvp__adv_parts_req_t;

/* Parses a live rebalance request, outside bytes from any NATS client:
 * {"add": [p, ...], "drop": [...], "tier": [...], "untier": [...]}, each
 * optional, each a list of at most 64 partitions below count; no
 * partition named twice in one list, in both add and drop, in both tier
 * and untier, or in both drop and tier. Returns 0 with r filled, or
 * KVP_EINVAL with err and every count 0. */
int kvp__adv_parts_parse(const void *data, size_t len, uint32_t count, kvp__adv_parts_req_t *r,
                         char *err, size_t errlen);

#endif
