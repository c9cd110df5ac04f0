/* Integration: a real nats-server started by the harness carries an encoded
 * EventBatch from a publisher connection to a subscriber that decodes it. */
#include <nats/nats.h>
#include <signal.h>
#include <string.h>

#include "harness.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"
#include "natsd.h"

static int setup(void **state) {
  static kvp_natsd_t d;
  kvp_natsd_opts_t o = {.jetstream = 1};
  if (kvp_natsd_start(&d, &o) != 0)
    return -1;
  *state = &d;
  return 0;
}

static int teardown(void **state) {
  kvp_natsd_stop(*state);
  return 0;
}

static void publish_and_decode_batch(void **state) {
  kvp_natsd_t *d = *state;
  natsConnection *pub = NULL, *sub_nc = NULL;
  natsSubscription *sub = NULL;
  natsMsg *msg = NULL;
  uint64_t hashes[64];
  uint8_t buf[4096];
  size_t len;
  kvp_wire_batch_t *wb;

  for (int i = 0; i < 64; i++)
    hashes[i] = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  kvp_event_t ev = {.event_id = 1,
                    .type = KVP_EV_STORED,
                    .tier = KVP_TIER_G1,
                    .hashes = hashes,
                    .nhashes = 64,
                    .block_tokens = 16};
  kvp_batch_t b = {.ns = "test",
                   .worker_id = "w0",
                   .epoch = 1,
                   .first_event_id = 1,
                   .events = &ev,
                   .nevents = 1};
  assert_int_equal(kvp_wire_encode(&b, buf, sizeof buf, &len), 0);

  assert_int_equal(natsConnection_ConnectTo(&sub_nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_ConnectTo(&pub, d->url), NATS_OK);
  assert_int_equal(natsConnection_SubscribeSync(&sub, sub_nc, "kvplane.ev.test.>"), NATS_OK);
  assert_int_equal(natsConnection_Flush(sub_nc), NATS_OK);
  assert_int_equal(natsConnection_Publish(pub, "kvplane.ev.test.w0", buf, (int)len), NATS_OK);
  assert_int_equal(natsConnection_Flush(pub), NATS_OK);
  assert_int_equal(natsSubscription_NextMsg(&msg, sub, 5000), NATS_OK);
  assert_string_equal(natsMsg_GetSubject(msg), "kvplane.ev.test.w0");
  assert_int_equal(kvp_wire_decode((const uint8_t *)natsMsg_GetData(msg),
                                   (size_t)natsMsg_GetDataLength(msg), NULL, &wb),
                   0);
  assert_int_equal(kvp_wire_batch_view(wb)->nevents, 1);
  assert_memory_equal(kvp_wire_batch_view(wb)->events[0].hashes, hashes, sizeof hashes);
  kvp_wire_batch_free(wb);
  natsMsg_Destroy(msg);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(pub);
  natsConnection_Destroy(sub_nc);
}

static void jetstream_is_enabled(void **state) {
  kvp_natsd_t *d = *state;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsAccountInfo *ai = NULL;
  jsErrCode jerr = 0;
  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  assert_int_equal(js_GetAccountInfo(&ai, js, NULL, &jerr), NATS_OK);
  jsAccountInfo_Destroy(ai);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
}

static void restart_keeps_port(void **state) {
  kvp_natsd_t *d = *state;
  int port = d->port;
  natsConnection *nc = NULL;
  assert_int_equal(kvp_natsd_restart(d), 0);
  assert_int_equal(d->port, port);
  assert_int_equal(natsConnection_ConnectTo(&nc, d->url), NATS_OK);
  natsConnection_Destroy(nc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(publish_and_decode_batch, setup, teardown),
    cmocka_unit_test_setup_teardown(jetstream_is_enabled, setup, teardown),
    cmocka_unit_test_setup_teardown(restart_keeps_port, setup, teardown),
};

int main(int argc, char **argv) {
  int rc = kvp_test_run("nats", tests, sizeof tests / sizeof tests[0], argc, argv);
  nats_Close();
  return rc;
}
