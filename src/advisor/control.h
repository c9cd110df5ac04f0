/* The operator's tiering controls over NATS (control.c):
 * kvplane.api.<ns>.tier, a JSON request, a JSON reply (docs/sql.md and
 * include/kvplane/client.h describe both). */
#ifndef KVP_ADVISOR_CONTROL_H
#define KVP_ADVISOR_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "tier/engine.h"

typedef enum kvp__adv_ctl_op_e {
  KVP__CTL_PIN,
  KVP__CTL_UNPIN,
  KVP__CTL_MOVE,
  KVP__CTL_DELETE,
} kvp__adv_ctl_op_t;

/* A parsed request: the blocks (hashes given, or the sequence hashes of
 * the full blocks of tokens) and the op's arguments. */
typedef struct kvp__adv_ctl_s {
  kvp__adv_ctl_op_t op;
  uint64_t *hashes; /* malloc'd */
  size_t n;
  int tier;        /* move: 3 or 4; delete: 0, 3 or 4 */
  char volume[64]; /* move: "" for the roomiest */
  char note[256];  /* pin: kept in the pins table */
} kvp__adv_ctl_t;

/* Parses a request of len bytes. Returns 0, or KVP_EPROTO / KVP_ETOOBIG /
 * KVP_ENOMEM with err saying what is wrong; c->hashes is then NULL. */
int kvp__adv_ctl_parse(const void *data, size_t len, kvp__adv_ctl_t *c, char *err, size_t errlen);

/* Parses and carries out a request on e (NULL: tiering is off, because of
 * off, or "[tiering] enabled = false" when off is NULL), and sets *reply
 * to the JSON reply (malloc'd; NULL only when out of memory). advisor:
 * this advisor's name, put in the reply; partitions: the deployment's
 * count (0: not partitioned), when the reply lists the partitions e tiers
 * for a gathering client (kvp_client_tier_all). */
void kvp__adv_ctl_handle(kvp__tier_engine_t *e, const char *off, const char *advisor,
                         uint32_t partitions, const void *data, size_t len, char **reply);

#endif
