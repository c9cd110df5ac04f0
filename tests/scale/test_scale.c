/* Scale-out parts that need no cluster: the partition function against a
 * real nats-server's subject mapping, the owned-partition parser, and the
 * scatter-gather merge (kvp_match_merge) on replies made here. */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/partset.h"
#include "harness.h"
#include "kvplane/client.h"
#include "kvplane/event.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/subjects.h"
#include "natsd.h"

static void partition_function_values(void **state) {
  (void)state;
  /* FNV-1a 32: "" is the offset basis, "a" is 0xe40c292c. */
  assert_int_equal(kvp_partition_of("", 1000), 2166136261u % 1000);
  assert_int_equal(kvp_partition_of("a", 7), 0xe40c292cu % 7);
  assert_int_equal(kvp_partition_of("anything", 1), 0);
  char buf[512];
  assert_int_equal(kvp_partition_mapping_conf(buf, sizeof buf, 4), 0);
  assert_non_null(strstr(buf,
                         "\"kvplane.ev.*.*\": "
                         "\"kvplane.pev.{{wildcard(1)}}.{{partition(4,2)}}.{{wildcard(2)}}\""));
  assert_int_equal(kvp_partition_mapping_conf(buf, sizeof buf, 0), KVP_EINVAL);
  assert_int_equal(kvp_partition_mapping_conf(buf, 10, 4), KVP_ETOOBIG);
}

static void partitioned_subjects_parse(void **state) {
  (void)state;
  char ns[KVP_SUBJECT_TOKEN_MAX + 1], w[KVP_SUBJECT_TOKEN_MAX + 1], b[KVP_SUBJECT_MAX];
  uint32_t p;
  assert_int_equal(kvp_subject_parse_any_events("kvplane.pev.t.3.w-1", ns, w, &p), 0);
  assert_string_equal(ns, "t");
  assert_string_equal(w, "w-1");
  assert_int_equal(p, 3);
  assert_int_equal(kvp_subject_parse_any_events("kvplane.ev.t.w", ns, w, &p), 0);
  assert_int_equal(p, UINT32_MAX);
  const char *bad[] = {"kvplane.pev.t.03.w", "kvplane.pev.t.1024.w", "kvplane.pev.t.x.w",
                       "kvplane.pev.t.1",    "kvplane.pev.t.1.w.x",  "kvplane.pev..1.w",
                       "kvplane.pev.t..w",   "kvplane.pev.t.99999.w"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (kvp_subject_parse_any_events(bad[i], ns, w, &p) != KVP_EPROTO)
      fail_msg("accepted %s", bad[i]);
  assert_int_equal(kvp_subject_pevents(b, sizeof b, "t", 2), 0);
  assert_string_equal(b, "kvplane.pev.t.2.*");
  assert_int_equal(kvp_subject_pevents_all(b, sizeof b, 2), 0);
  assert_string_equal(b, "kvplane.pev.*.2.*");
  assert_int_equal(kvp_subject_pevents(b, sizeof b, "t.x", 2), KVP_EINVAL);
}

/* The servers' partition() and ours give every worker the same partition. */
static void server_mapping_matches_partition_of(void **state) {
  (void)state;
  char dir[256], conf[320], map[1024];
  kvp_natsd_t d;
  natsConnection *nc = NULL;
  natsSubscription *sub = NULL;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(conf, sizeof conf, "%s/map.conf", dir);
  assert_int_equal(kvp_partition_mapping_conf(map, sizeof map, 5), 0);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs(map, f);
  fclose(f);
  kvp_natsd_opts_t o = {.config = conf};
  assert_int_equal(kvp_natsd_start(&d, &o), 0);
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);
  assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "kvplane.pev.>"), NATS_OK);
  assert_int_equal(natsConnection_Flush(nc), NATS_OK);
  int seen[5] = {0};
  for (int i = 0; i < 300; i++) {
    char w[32], subj[KVP_SUBJECT_MAX];
    snprintf(w, sizeof w, i % 2 ? "worker-%d" : "W_%d", i);
    assert_int_equal(kvp_subject_events(subj, sizeof subj, "ns1", w), 0);
    assert_int_equal(natsConnection_PublishString(nc, subj, "x"), NATS_OK);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, sub, 2000), NATS_OK);
    char ns[KVP_SUBJECT_TOKEN_MAX + 1], got[KVP_SUBJECT_TOKEN_MAX + 1];
    uint32_t p;
    assert_int_equal(kvp_subject_parse_any_events(natsMsg_GetSubject(m), ns, got, &p), 0);
    assert_string_equal(got, w);
    assert_string_equal(ns, "ns1");
    if (p != kvp_partition_of(w, 5))
      fail_msg("%s: server partition %u, kvp_partition_of %u", w, p, kvp_partition_of(w, 5));
    seen[p]++;
    natsMsg_Destroy(m);
  }
  for (int p = 0; p < 5; p++)
    assert_true(seen[p] > 20); /* all used, roughly evenly */
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

/* A partitioned publisher (partitions = 4, JetStream) makes its worker's
 * partition stream (R1 here) and its acked batches land there, under the
 * mapped subject. */
static void partitioned_publisher_uses_its_partition_stream(void **state) {
  (void)state;
  char dir[256], conf[320], map[1024], err[256], stream[64];
  kvp_natsd_t d;
  assert_non_null(kvp_test_tmpdir(dir, sizeof dir));
  snprintf(conf, sizeof conf, "%s/map.conf", dir);
  assert_int_equal(kvp_partition_mapping_conf(map, sizeof map, 4), 0);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fputs(map, f);
  fclose(f);
  kvp_natsd_opts_t o = {.jetstream = 1, .config = conf};
  assert_int_equal(kvp_natsd_start(&d, &o), 0);
  kvp_publisher_opts_t po;
  kvp_publisher_opts_init(&po);
  snprintf(po.nats.servers, sizeof po.nats.servers, "%s", d.url);
  po.ns = "t";
  po.worker_id = "pw7";
  po.mode = KVP_PUB_JETSTREAM;
  po.partitions = 4;
  po.max_delay_ms = 1;
  kvp_publisher_t *pub = NULL;
  assert_int_equal(kvp_publisher_open(&po, &pub, err, sizeof err), 0);
  uint64_t h[3] = {11, 12, 13};
  assert_int_equal(kvp_publisher_stored(pub, KVP_TIER_G1, NULL, NULL, h, 3, 16, 1024, 0), 0);
  assert_int_equal(kvp_publisher_flush(pub, 5000), 0);
  kvp_publisher_close(pub);

  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  jsStreamInfo *si = NULL;
  uint32_t p = kvp_partition_of("pw7", 4);
  snprintf(stream, sizeof stream, "KVPLANE_EVENTS_P%u", p);
  assert_int_equal(natsConnection_ConnectTo(&nc, d.url), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  assert_int_equal(js_GetStreamInfo(&si, js, stream, NULL, NULL), NATS_OK);
  char want[KVP_SUBJECT_MAX];
  assert_true(si->State.Msgs >= 1);
  assert_int_equal(kvp_subject_pevents_all(want, sizeof want, p), 0);
  assert_string_equal(si->Config->Subjects[0], want);
  jsStreamInfo_Destroy(si);
  /* The stored batch is under the mapped subject. */
  natsMsg *m = NULL;
  snprintf(want, sizeof want, "kvplane.pev.t.%u.pw7", p);
  assert_int_equal(js_GetLastMsg(&m, js, stream, want, NULL, NULL), NATS_OK);
  assert_string_equal(natsMsg_GetSubject(m), want);
  natsMsg_Destroy(m);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  kvp_natsd_stop(&d);
  kvp_test_rmtree(dir);
}

static void owned_partitions_parse(void **state) {
  (void)state;
  kvp__adv_partset_t ps;
  char err[256];
  assert_int_equal(kvp__adv_partset_parse(&ps, 8, "0,2,5-7", err, sizeof err), 0);
  assert_int_equal(ps.n, 5);
  assert_int_equal(ps.p[0], 0);
  assert_int_equal(ps.p[1], 2);
  assert_int_equal(ps.p[4], 7);
  assert_int_equal(kvp__adv_partset_slot(&ps, 5), 2);
  assert_int_equal(kvp__adv_partset_slot(&ps, 1), -1);
  assert_int_equal(kvp__adv_partset_parse(&ps, 4, "", err, sizeof err), 0);
  assert_int_equal(ps.n, 4);
  assert_int_equal(kvp__adv_partset_parse(&ps, 0, "", err, sizeof err), 0);
  assert_int_equal(ps.n, 1);
  assert_int_equal(kvp__adv_partset_slot(&ps, 3), 0);
  const char *bad[] = {"4", "1,1", "0-1,1", "3-2", "x", "1,", "-1", "01x", "0-99"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (kvp__adv_partset_parse(&ps, 4, bad[i], err, sizeof err) != KVP_ECONFIG)
      fail_msg("accepted owned '%s'", bad[i]);
  assert_non_null(strstr(err, "[partitions] owned"));
  assert_int_equal(kvp__adv_partset_parse(&ps, 0, "1", err, sizeof err), KVP_ECONFIG);
}

/* [tiering] partitions: a subset of the owned ones, "none", or empty for
 * all of them; not without partitions; errors name the key. */
static void tiered_partitions_config(void **state) {
  (void)state;
  kvp_advisor_config_t cfg;
  kvp__adv_partset_t owned, tiered;
  char err[256];
  int all = -1;
  kvp_advisor_config_defaults(&cfg);
  cfg.partitions = 8;
  cfg.mode = KVP_ADVISOR_JETSTREAM;
  snprintf(cfg.owned, sizeof cfg.owned, "0-3");
  assert_int_equal(kvp__adv_partset_parse(&owned, 8, cfg.owned, err, sizeof err), 0);
  assert_int_equal(kvp__adv_partset_tiered(&cfg, &owned, &tiered, &all, err, sizeof err), 0);
  assert_int_equal(all, 1);
  assert_int_equal(tiered.n, 4);
  snprintf(cfg.tier_parts, sizeof cfg.tier_parts, "1,3");
  assert_int_equal(kvp__adv_partset_tiered(&cfg, &owned, &tiered, &all, err, sizeof err), 0);
  assert_int_equal(all, 0);
  assert_int_equal(tiered.n, 2);
  assert_int_equal(tiered.p[1], 3);
  snprintf(cfg.tier_parts, sizeof cfg.tier_parts, "none");
  assert_int_equal(kvp__adv_partset_tiered(&cfg, &owned, &tiered, &all, err, sizeof err), 0);
  assert_int_equal(tiered.n, 0);
  const char *bad[] = {"4", "1,1", "x", "2-9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(cfg.tier_parts, sizeof cfg.tier_parts, "%s", bad[i]);
    if (kvp__adv_partset_check(&cfg, err, sizeof err) != KVP_ECONFIG ||
        strstr(err, "[tiering] partitions") == NULL)
      fail_msg("accepted [tiering] partitions '%s' (%s)", bad[i], err);
  }
  assert_non_null(strstr(err, "2-9"));
  cfg.partitions = 0;
  cfg.owned[0] = '\0';
  snprintf(cfg.tier_parts, sizeof cfg.tier_parts, "0");
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "count is 0"));
}

/* An advisor of some partitions may tier (each partition's objects under
 * its own key namespace, tier/parts.c), when those namespaces fit;
 * partitions only in JetStream mode. The key namespaces and the advisor
 * workers: <ns>-p<p>, and a name in partition p. */
static void tiering_per_partition_config_and_names(void **state) {
  (void)state;
  kvp_advisor_config_t cfg;
  char err[256], buf[80];
  kvp_advisor_config_defaults(&cfg);
  cfg.partitions = 4;
  snprintf(cfg.owned, sizeof cfg.owned, "0,1");
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), 0);
  cfg.tiering = 1;
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), 0);
  memset(cfg.ns, 'n', 62);
  cfg.ns[62] = '\0'; /* 62 + "-p3" > 64 */
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), KVP_ECONFIG);
  assert_non_null(strstr(err, "key namespaces"));
  snprintf(cfg.ns, sizeof cfg.ns, "default");
  cfg.owned[0] = '\0';
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), 0);
  cfg.mode = KVP_ADVISOR_CORE;
  assert_int_equal(kvp__adv_partset_check(&cfg, err, sizeof err), KVP_ECONFIG);

  assert_int_equal(kvp_partition_volume_ns(buf, sizeof buf, "prod", 12), 0);
  assert_string_equal(buf, "prod-p12");
  assert_int_equal(kvp_partition_volume_ns(buf, 6, "prod", 12), KVP_ETOOBIG);
  for (uint32_t n = 1; n <= 64; n *= 2)
    for (uint32_t p = 0; p < n; p++) {
      assert_int_equal(kvp_partition_advisor_worker(buf, sizeof buf, p, n), 0);
      assert_int_equal(kvp_partition_of(buf, n), p);
      assert_int_equal(strncmp(buf, "_advisor-p", 10), 0);
    }
  assert_int_equal(kvp_partition_advisor_worker(buf, sizeof buf, 4, 4), KVP_EINVAL);
}

/* A worker name in partition p of n. */
static const char *worker_in(uint32_t p, uint32_t n, char *buf, size_t len) {
  for (int i = 0;; i++) {
    snprintf(buf, len, "w%d", i);
    if (kvp_partition_of(buf, n) == p)
      return buf;
  }
}

static void merge_prefers_the_freshest_and_reports_missing(void **state) {
  (void)state;
  char w0[16], w1[16], w2[16], r[3][512];
  worker_in(0, 4, w0, sizeof w0);
  worker_in(1, 4, w1, sizeof w1);
  worker_in(2, 4, w2, sizeof w2);
  /* A owns 0 and 1 at positions 10 and 20; its standby B is fresher for 1
   * (25) and staler for 0 (9); C owns 2. Nobody owns 3. */
  snprintf(r[0], sizeof r[0],
           "{\"hashes\":3,\"matches\":[{\"worker\":\"%s\",\"dp_rank\":0,\"tier\":\"G1\",\"length\":"
           "3},{\"worker\":\"%s\",\"dp_rank\":0,\"tier\":\"G2\",\"length\":1}],\"partitions\":{"
           "\"count\":4,\"owned\":[0,1],\"positions\":[10,20]},\"advisor\":\"a\"}",
           w0, w1);
  snprintf(r[1], sizeof r[1],
           "{\"hashes\":3,\"matches\":[{\"worker\":\"%s\",\"dp_rank\":0,\"tier\":\"G1\",\"length\":"
           "2},{\"worker\":\"%s\",\"dp_rank\":0,\"tier\":\"G2\",\"length\":2}],\"partitions\":{"
           "\"count\":4,\"owned\":[0,1],\"positions\":[9,25]},\"advisor\":\"b\"}",
           w0, w1);
  snprintf(r[2], sizeof r[2],
           "{\"hashes\":3,\"matches\":[{\"worker\":\"%s\",\"dp_rank\":1,\"tier\":\"G3\",\"length\":"
           "1}],\"partitions\":{\"count\":4,\"owned\":[2],\"positions\":[5]},\"advisor\":\"c\"}",
           w2);
  const char *reps[] = {r[0], r[1], r[2]};
  size_t lens[] = {strlen(r[0]), strlen(r[1]), strlen(r[2])}, n = 0;
  kvp_match_t m[8];
  kvp_gather_info_t info;
  char err[256];
  assert_int_equal(kvp_match_merge(reps, lens, 3, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(n, 3);
  /* w0 from A (fresher for 0): length 3; w1 from B (fresher for 1): 2. */
  assert_string_equal(m[0].worker, w0);
  assert_int_equal(m[0].length, 3);
  assert_string_equal(m[1].worker, w1);
  assert_int_equal(m[1].length, 2);
  assert_string_equal(m[2].worker, w2);
  assert_int_equal(m[2].dp_rank, 1);
  assert_int_equal(info.partitions, 4);
  assert_int_equal(info.nmissing, 1);
  assert_int_equal(info.missing[0], 3);
  assert_int_equal(info.used, 3);
  /* Disagreeing counts are an error, not a silent merge. */
  char bad[256];
  snprintf(bad, sizeof bad,
           "{\"matches\":[],\"partitions\":{\"count\":8,\"owned\":[5],\"positions\":[1]}}");
  const char *reps2[] = {r[0], bad};
  size_t lens2[] = {strlen(r[0]), strlen(bad)};
  assert_int_equal(kvp_match_merge(reps2, lens2, 2, m, 8, &n, &info, err, sizeof err), KVP_EPROTO);
  assert_non_null(strstr(err, "disagree"));
  /* An error reply is counted; nothing answered: every partition missing. */
  const char *reps3[] = {"{\"error\":\"bad\"}"};
  size_t lens3[] = {strlen(reps3[0])};
  assert_int_equal(kvp_match_merge(reps3, lens3, 1, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(info.errors, 1);
  assert_int_equal(info.nmissing, 1);
  assert_int_equal(n, 0);
  /* A reply that is not a match reply is skipped the same way. */
  const char *reps5[] = {r[2], "{\"matches\":[],\"partitions\":{\"count\":4}}", "[1]"};
  size_t lens5[] = {strlen(r[2]), strlen(reps5[1]), 3};
  assert_int_equal(kvp_match_merge(reps5, lens5, 3, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(info.errors, 2);
  assert_int_equal(info.nmissing, 3);
  assert_int_equal(n, 1);
  /* Nor is one that is not JSON (a responder on the subject answering
   * garbage): counted, skipped; the others' rows stay (it failed the whole
   * merge, "reply 1 is not JSON"). */
  const char *reps6[] = {r[2], "garbage", r[0]};
  size_t lens6[] = {strlen(r[2]), 7, strlen(r[0])};
  assert_int_equal(kvp_match_merge(reps6, lens6, 3, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(info.replies, 3);
  assert_int_equal(info.errors, 1);
  assert_int_equal(info.nmissing, 1);
  assert_int_equal(info.missing[0], 3);
  assert_int_equal(n, 3);
  /* An unpartitioned advisor answering beside partitioned ones (left
   * running while the servers are switched to the mapping) is skipped and
   * counted, in any order: it failed the merge ("disagree ... 4 and 0"). */
  const char *unp = "{\"hashes\":1,\"matches\":[{\"worker\":\"x\",\"dp_rank\":0,\"tier\":"
                    "\"G1\",\"length\":1}],\"partitions\":{\"count\":0,\"owned\":[0],"
                    "\"positions\":[7]}}";
  const char *reps7[] = {unp, r[2], r[0]};
  size_t lens7[] = {strlen(unp), strlen(r[2]), strlen(r[0])};
  assert_int_equal(kvp_match_merge(reps7, lens7, 3, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(info.partitions, 4);
  assert_int_equal(info.errors, 1);
  assert_int_equal(info.nmissing, 1);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++)
    assert_string_not_equal(m[i].worker, "x");
  /* An unpartitioned advisor covers everything. */
  const char *reps4[] = {"{\"hashes\":1,\"matches\":[{\"worker\":\"x\",\"dp_rank\":0,\"tier\":"
                         "\"G1\",\"length\":1}],\"partitions\":{\"count\":0,\"owned\":[0],"
                         "\"positions\":[7]}}"};
  size_t lens4[] = {strlen(reps4[0])};
  assert_int_equal(kvp_match_merge(reps4, lens4, 1, m, 8, &n, &info, err, sizeof err), 0);
  assert_int_equal(n, 1);
  assert_int_equal(info.nmissing, 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(partition_function_values),
      cmocka_unit_test(partitioned_subjects_parse),
      cmocka_unit_test(server_mapping_matches_partition_of),
      cmocka_unit_test(partitioned_publisher_uses_its_partition_stream),
      cmocka_unit_test(owned_partitions_parse),
      cmocka_unit_test(tiered_partitions_config),
      cmocka_unit_test(tiering_per_partition_config_and_names),
      cmocka_unit_test(merge_prefers_the_freshest_and_reports_missing),
  };
  return kvp_test_run("scale", tests, sizeof tests / sizeof tests[0], argc, argv);
}
