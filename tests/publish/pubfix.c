/* Publisher test fixture (see pubfix.h). */
#include "kvplane/subjects.h"
#include "pubfix.h"
#include "natsd.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void pf_sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

uint64_t pf_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void pf_set_add(pf_set_t *s, uint64_t v) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1024;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
  }
  s->v[s->n++] = v;
}

void pf_set_del(pf_set_t *s, uint64_t v) {
  for (size_t i = s->n; i-- > 0;)
    if (s->v[i] == v) {
      s->v[i] = s->v[--s->n];
      return;
    }
}

int pf_set_has(const pf_set_t *s, uint64_t v) {
  for (size_t i = 0; i < s->n; i++)
    if (s->v[i] == v)
      return 1;
  return 0;
}

void pf_set_free(pf_set_t *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}

static int cmp64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int pf_set_equal(const pf_set_t *a, const pf_set_t *b) {
  if (a->n != b->n)
    return 0;
  if (a->n == 0)
    return 1;
  uint64_t *x = malloc(a->n * sizeof *x), *y = malloc(b->n * sizeof *y);
  memcpy(x, a->v, a->n * sizeof *x);
  memcpy(y, b->v, b->n * sizeof *y);
  qsort(x, a->n, sizeof *x, cmp64);
  qsort(y, b->n, sizeof *y, cmp64);
  int eq = memcmp(x, y, a->n * sizeof *x) == 0;
  free(x);
  free(y);
  return eq;
}

int pf_sub_open(pf_sub_t *s, const char *url, const char *ns, int js, const char *user,
                const char *pass) {
  char subj[KVP_SUBJECT_MAX];
  natsOptions *o = NULL;
  memset(s, 0, sizeof *s);
  if (kvp_subject_events_ns(subj, sizeof subj, ns) != 0)
    return -1;
  if (natsOptions_Create(&o) != NATS_OK || natsOptions_SetURL(o, url) != NATS_OK)
    goto fail;
  if (user != NULL)
    natsOptions_SetUserInfo(o, user, pass);
  natsOptions_SetMaxReconnect(o, -1);
  natsOptions_SetReconnectWait(o, 100);
  if (natsConnection_Connect(&s->nc, o) != NATS_OK)
    goto fail;
  if (js) {
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    if (natsConnection_JetStream(&s->js, s->nc, NULL) != NATS_OK ||
        js_SubscribeSync(&s->sub, s->js, subj, NULL, &so, NULL) != NATS_OK)
      goto fail;
  } else if (natsConnection_SubscribeSync(&s->sub, s->nc, subj) != NATS_OK) {
    goto fail;
  }
  natsSubscription_SetPendingLimits(s->sub, -1, -1);
  natsConnection_Flush(s->nc);
  natsOptions_Destroy(o);
  return 0;
fail:
  natsOptions_Destroy(o);
  pf_sub_close(s);
  return -1;
}

void pf_sub_close(pf_sub_t *s) {
  natsSubscription_Destroy(s->sub);
  jsCtx_Destroy(s->js);
  natsConnection_Destroy(s->nc);
  for (int t = 0; t < 5; t++) {
    pf_set_free(&s->tier[t]);
    pf_set_free(&s->stage[t]);
  }
  pf_set_free(&s->stored);
  pf_set_free(&s->ids);
  memset(s, 0, sizeof *s);
}

static void apply(pf_sub_t *s, const kvp_batch_t *b) {
  s->batches++;
  s->dropped_total += b->dropped_events;
  if (b->nevents == 0)
    s->heartbeats++;
  if (s->next_id != 0 && b->first_event_id != s->next_id && b->dropped_events == 0)
    s->id_errors++;
  if (b->nevents > 0 || s->next_id == 0 || b->first_event_id > s->next_id)
    s->next_id = b->first_event_id + b->nevents;
  for (size_t i = 0; i < b->nevents; i++) {
    const kvp_event_t *e = &b->events[i];
    s->events++;
    pf_set_add(&s->ids, e->event_id);
    if (e->event_id != b->first_event_id + i)
      s->id_errors++;
    switch (e->type) {
    case KVP_EV_STORED:
      for (size_t k = 0; k < e->nhashes; k++) {
        pf_set_add(&s->tier[e->tier], e->hashes[k]);
        pf_set_add(&s->stored, e->hashes[k]);
      }
      s->blocks += e->nhashes;
      break;
    case KVP_EV_REMOVED:
      for (size_t k = 0; k < e->nhashes; k++)
        pf_set_del(&s->tier[e->tier], e->hashes[k]);
      s->blocks += e->nhashes;
      break;
    case KVP_EV_ACCESSED:
      s->blocks += e->nhashes;
      break;
    case KVP_EV_CLEARED:
      for (int t = 1; t < 5; t++)
        if (e->tier == 0 || e->tier == t)
          s->tier[t].n = 0;
      break;
    case KVP_EV_SNAPSHOT:
      s->snapshot_chunks++;
      if (e->chunk == 0)
        s->stage[e->tier].n = 0;
      for (size_t k = 0; k < e->nhashes; k++)
        pf_set_add(&s->stage[e->tier], e->hashes[k]);
      if (e->last) {
        pf_set_t tmp = s->tier[e->tier];
        s->tier[e->tier] = s->stage[e->tier];
        s->stage[e->tier] = tmp;
        s->stage[e->tier].n = 0;
        s->snapshots_done++;
      }
      break;
    }
  }
}

static int read_one(pf_sub_t *s, int timeout_ms) {
  natsMsg *m = NULL;
  kvp_wire_batch_t *wb = NULL;
  if (natsSubscription_NextMsg(&m, s->sub, timeout_ms) != NATS_OK)
    return 0;
  if (kvp_wire_decode((const uint8_t *)natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), NULL,
                      &wb) == 0) {
    apply(s, kvp_wire_batch_view(wb));
    kvp_wire_batch_free(wb);
  } else {
    s->decode_errors++;
  }
  natsMsg_Destroy(m);
  return 1;
}

void pf_sub_drain(pf_sub_t *s, int idle_ms, int total_ms) {
  uint64_t end = pf_now_ms() + (uint64_t)total_ms;
  while (pf_now_ms() < end && read_one(s, idle_ms))
    ;
}

void pf_sub_wait_events(pf_sub_t *s, size_t nevents, int total_ms) {
  uint64_t end = pf_now_ms() + (uint64_t)total_ms;
  while (s->events < nevents && pf_now_ms() < end)
    read_one(s, 100);
}

const char *const pf_user = "alice", *const pf_pass = "s3cret", *const pf_token = "tok-123";
static kvp_natsd_t pf_d;

static int start(void **state, const kvp_natsd_opts_t *o) {
  if (kvp_natsd_start(&pf_d, o) != 0)
    return -1;
  *state = &pf_d;
  return 0;
}

int pf_setup_core(void **state) {
  return start(state, NULL);
}

int pf_setup_js(void **state) {
  kvp_natsd_opts_t o = {.jetstream = 1};
  return start(state, &o);
}

int pf_setup_user(void **state) {
  kvp_natsd_opts_t o = {.user = pf_user, .pass = pf_pass};
  return start(state, &o);
}

int pf_setup_token(void **state) {
  kvp_natsd_opts_t o = {.token = pf_token};
  return start(state, &o);
}

int pf_teardown(void **state) {
  kvp_natsd_stop(*state);
  return 0;
}
