#!/usr/bin/python3
"""The routers' indexer API ([http] enabled; README "The routers' indexer
API") from outside: a client written from the Mooncake conductor indexer
API (RFC #1403: POST /query by token ids, POST /query_by_hash by rolling
sequence hashes, answers per tenant, instance, medium and DP rank, and the per-rank
cumulative tier boundaries `rank_matches` of Mooncake's PR #3088) with
urllib, against a real kvplane-advisor and nats-server, with events
published through the Python binding. Its answers must be the NATS match
reply's, read through the same client library, in the spec's shape.

Environment as test_binding.py (tests/python/tests.cmake sets it).
Run one case: /usr/bin/python3 test_router_api.py RouterApiTest.test_query_equals_match
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import kvplane
from test_binding import spawn, NS, Plane, free_port, until

BS = 16
MEDIUM = {1: "GPU", 2: "CPU", 3: "DISK", 4: "EXTERNAL"}


class HttpPlane(Plane):
    """Plane with the advisor's [http] section on a free loopback port."""

    def start_advisor(self, extra=""):
        self.http_port = free_port()
        conf = os.path.join(self.tmp, "advisor.conf")
        with open(conf, "w") as f:
            f.write("[nats]\nservers = %s\nmode = core\nconnect_timeout = 2s\n"
                    "[advisor]\nnamespace = %s\n"
                    "[store]\npath = %s\nflush_interval = 50ms\n"
                    "[http]\nenabled = true\nlisten = 127.0.0.1:%d\n%s"
                    % (self.url, NS, self.db, self.http_port, extra))
        log = open(os.path.join(self.tmp, "advisor.log"), "w")
        self.advisor = spawn([os.environ["KVPLANE_ADVISOR"], "-c", conf],
                                        stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def answers():
            if self.advisor.poll() is not None:
                raise AssertionError("kvplane-advisor exited with %d: %s" % (
                    self.advisor.returncode, self.log("advisor.log")))
            try:
                return self.post("/query_by_hash", {"seq_hashes": [], "block_size": 1})[0] == 200
            except OSError:
                return False
        until(answers, what="the advisor's HTTP API")

    def post(self, path, body, method="POST", raw=None):
        """(status, decoded JSON reply)."""
        data = raw if raw is not None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.http_port, path),
                                     data=data if method == "POST" else None, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())


def walk(held, n):
    """One rank's cumulative boundaries (blocks) over a query of n blocks,
    as Mooncake's conductor defines `rank_matches` (its PR #3088): consume
    the consecutive blocks held in GPU; at the first miss try that same
    block in CPU and continue there, then DISK, then (kvplane's fourth
    tier) EXTERNAL; never go back up; a miss in the last tier ends it.
    held: {tier: set of block positions}. Returns {tier: boundary}."""
    bound, pos, tier = {}, 0, 1
    while tier <= 4:
        if pos < n and pos in held.get(tier, ()):
            pos += 1
            continue
        bound[tier] = pos  # this tier's phase ends here
        tier += 1
    return bound


def expected(matches, tenant, block_size, instance=None, held=None, n=0):
    """The spec's answer: per medium and per DP rank from the NATS match
    rows (kvplane.Match: each tier's own prefix), rank_matches and
    longest_matched from the ranks' blocks (held: {(worker, dp_rank):
    {tier: set of block positions}}, every rank the advisor knows) walked
    over the query's n blocks."""
    held = held or {}
    out = {}

    def inst(worker):
        return out.setdefault(worker, {"longest_matched": 0, "GPU": 0, "CPU": 0, "DISK": 0,
                                       "EXTERNAL": 0, "DP": {}, "rank_matches": {}})
    if instance is not None:
        inst(instance)
    for m in matches:
        if instance is not None and m.worker != instance:
            continue
        i, tokens = inst(m.worker), m.length * block_size
        i[MEDIUM[m.tier]] = max(i[MEDIUM[m.tier]], tokens)
        i["DP"][str(m.dp_rank)] = max(i["DP"].get(str(m.dp_rank), 0), tokens)
    paths = {wr: walk(h, n) for wr, h in held.items()
             if instance is None or wr[0] == instance}
    for (w, _), b in paths.items():
        if b[4] > 0:
            inst(w)  # one of its ranks holds the first block
    for (w, r), b in paths.items():
        if w not in out:
            continue
        i = out[w]
        i["rank_matches"][str(r)] = {"gpu": b[1] * block_size, "cpu": b[2] * block_size,
                                     "disk": b[3] * block_size, "external": b[4] * block_size}
        i["DP"].setdefault(str(r), 0)
        i["longest_matched"] = max(i["longest_matched"], b[4] * block_size)
    return {tenant: out}


def check_invariants(test, answer, n_tokens):
    """The spec's invariants of rank_matches, with kvplane's fourth tier
    as the last boundary: dp.keys == rank_matches.keys, gpu <= cpu <= disk
    <= external <= the query's complete tokens, longest_matched == the
    largest last boundary; and kvplane's own: every medium's own prefix is
    at most longest_matched."""
    for tenant in answer.values():
        for name, i in tenant.items():
            rm = i["rank_matches"]
            test.assertEqual(set(i["DP"]), set(rm), name)
            for r in rm.values():
                test.assertTrue(0 <= r["gpu"] <= r["cpu"] <= r["disk"] <= r["external"]
                                <= n_tokens, (name, r))
            test.assertEqual(i["longest_matched"],
                             max([r["external"] for r in rm.values()] or [0]), name)
            for m in MEDIUM.values():
                test.assertLessEqual(i[m], i["longest_matched"], (name, m))


class RouterApiTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvp-rapi-")
        self.plane = HttpPlane(self.tmp)
        self.closers = []

    def start(self, extra=""):
        self.plane.start_nats()
        self.plane.start_advisor(extra)
        self.client = kvplane.Client(self.plane.url, NS, timeout_ms=2000)
        self.closers.append(self.client)

    def tearDown(self):
        for c in reversed(self.closers):
            c.close()
        self.plane.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def publisher(self, worker, dp_rank=0):
        pub = kvplane.Publisher(self.plane.url, NS, worker, BS, dp_rank=dp_rank, max_delay_ms=1)
        self.closers.append(pub)
        return pub

    def fill(self):
        """Three workers over G1..G4 and two DP ranks; returns (tokens,
        hashes, the NATS match rows once the advisor has applied it all)."""
        toks = [(i * 7919 + 11) % 50000 for i in range(BS * 6 + 5)]
        hs = kvplane.hash_blocks(toks, BS)
        a0, a1, b = self.publisher("wa", 0), self.publisher("wa", 1), self.publisher("wb", 2)
        a0.stored(toks[:BS * 6])
        a0.stored(block_hashes=hs[:2], tier="G2")
        a1.stored(block_hashes=hs[:3], tier="G2")
        b.stored(block_hashes=hs[:4], tier="G3", volume="ssd0")
        b.stored(block_hashes=hs[:5], tier="G4", volume="s3")
        for p in (a0, a1, b):
            p.flush()
        want = [kvplane.Match("wa", 0, 1, 6), kvplane.Match("wa", 0, 2, 2),
                kvplane.Match("wa", 1, 2, 3), kvplane.Match("wb", 2, 3, 4),
                kvplane.Match("wb", 2, 4, 5)]
        rows = until(lambda: sorted(self.client.match(hs)) == sorted(want) and
                     self.client.match(hs), what="the NATS match reply")
        held = {("wa", 0): {1: set(range(6)), 2: {0, 1}}, ("wa", 1): {2: {0, 1, 2}},
                ("wb", 2): {3: set(range(4)), 4: set(range(5))}}
        return toks, hs, rows, held

    def test_query_equals_match(self):
        """/query (token ids) and /query_by_hash (u64 hashes as JSON numbers,
        above 2^63 included) answer what the NATS match request answers, in
        the spec's per-tenant, per-instance, per-medium and per-DP shape."""
        self.start()
        toks, hs, rows, held = self.fill()
        self.assertTrue(any(h >= 1 << 63 for h in hs), "no hash above 2^63 in the test data")
        want = expected(rows, "default", BS, held=held, n=len(hs))
        self.assertEqual(want["default"]["wa"],
                         {"longest_matched": 96, "GPU": 96, "CPU": 48, "DISK": 0, "EXTERNAL": 0,
                          "DP": {"0": 96, "1": 48},
                          "rank_matches": {
                              "0": {"gpu": 96, "cpu": 96, "disk": 96, "external": 96},
                              "1": {"gpu": 0, "cpu": 48, "disk": 48, "external": 48}}})
        st, got = self.plane.post("/query", {"model": "m", "token_ids": toks, "block_size": BS})
        self.assertEqual(st, 200, got)
        self.assertEqual(got, want)
        check_invariants(self, got, len(hs) * BS)
        st, got = self.plane.post("/query_by_hash",
                                  {"model": "m", "seq_hashes": hs, "block_size": BS})
        self.assertEqual((st, got), (200, want))
        # The older name of the field, and Dynamo's.
        for key in ("block_hash", "block_hashes"):
            self.assertEqual(self.plane.post("/query_by_hash", {key: hs, "block_size": BS}),
                             (200, want), key)
        # Hex strings, and the i64 form of a u64 (what SQLite shows), are the same hashes.
        signed = [h - (1 << 64) if h >= 1 << 63 else h for h in hs]
        self.assertEqual(self.plane.post("/query_by_hash", {"seq_hashes": signed,
                                                            "block_size": BS}), (200, want))
        self.assertEqual(self.plane.post("/query_by_hash", {
            "seq_hashes": ["0x%016x" % h for h in hs], "block_size": BS}), (200, want))
        # A shorter prompt: only its full blocks count (the 3.5 blocks are 3).
        part = toks[:BS * 3 + BS // 2]
        self.assertEqual(self.plane.post("/query", {"token_ids": part, "block_size": BS}),
                         (200, expected(self.client.match_tokens(part, BS), "default", BS,
                                        held=held, n=3)))
        # One instance; the namespace's own name as the tenant.
        st, got = self.plane.post("/query", {"token_ids": toks, "block_size": BS,
                                             "tenant_id": NS, "instance_id": "wb"})
        self.assertEqual((st, got), (200, expected(rows, NS, BS, instance="wb", held=held,
                                                   n=len(hs))))
        self.assertEqual(got[NS]["wb"]["DISK"], 64)
        self.assertEqual(got[NS]["wb"]["EXTERNAL"], 80)
        # An instance without the prefix is reported with zeros.
        self.assertEqual(self.plane.post("/query", {"token_ids": toks, "block_size": BS,
                                                    "instance_id": "nobody"}),
                         (200, expected([], "default", BS, instance="nobody")))
        # Another tenant (namespace) has no instance at this advisor.
        self.assertEqual(self.plane.post("/query", {"token_ids": toks, "block_size": BS,
                                                    "tenant_id": "other-ns"}),
                         (200, {"other-ns": {}}))

    def test_cumulative_tiers(self):
        """rank_matches walks each rank's tiers in order (GPU, then CPU from
        the first GPU miss, then DISK, then EXTERNAL), so a prefix split
        over tiers counts whole in longest_matched, while each medium keeps
        its own prefix (the NATS match reply's); a rank without a hit is
        listed with zeros."""
        self.start()
        toks = [(i * 104729 + 7) % 50000 for i in range(BS * 8)]
        hs = kvplane.hash_blocks(toks, BS)
        r0, r1 = self.publisher("wc", 0), self.publisher("wc", 1)
        r0.stored(block_hashes=hs[:2])                              # G1: blocks 0, 1
        r0.stored(block_hashes=hs[2:4], tier="G2")                  # G2: 2, 3
        r0.stored(block_hashes=hs[5:6], tier="G3", volume="ssd0")   # G3: 5 (not 4)
        r0.stored(block_hashes=hs[4:5], tier="G4", volume="s3")     # G4: 4
        r0.stored(block_hashes=hs[6:7], tier="G4", volume="s3")     # G4: 6 (after a miss)
        r1.stored(list(range(9000, 9000 + BS)))                     # rank 1: other blocks
        for p in (r0, r1):
            p.flush()
        held = {("wc", 0): {1: {0, 1}, 2: {2, 3}, 3: {5}, 4: {4, 6}}, ("wc", 1): {}}
        rows = until(lambda: len(self.client.match(hs)) == 1 and self.client.match(hs),
                     what="the NATS match reply")
        until(lambda: self.client.match(hs[4:5]) and self.client.match(hs[6:7]),
              what="every tier applied")
        want = expected(rows, "default", BS, held=held, n=len(hs))
        self.assertEqual(want["default"]["wc"], {
            "longest_matched": 80, "GPU": 32, "CPU": 0, "DISK": 0, "EXTERNAL": 0,
            "DP": {"0": 32, "1": 0},
            "rank_matches": {"0": {"gpu": 32, "cpu": 64, "disk": 64, "external": 80},
                             "1": {"gpu": 0, "cpu": 0, "disk": 0, "external": 0}}})
        for path, body in (("/query", {"token_ids": toks}), ("/query_by_hash", {"seq_hashes": hs})):
            body["block_size"] = BS
            st, got = self.plane.post(path, body)
            self.assertEqual((st, got), (200, want), path)
            check_invariants(self, got, len(hs) * BS)
        # The whole prompt on GPU: every later boundary inherits it.
        st, got = self.plane.post("/query_by_hash", {"seq_hashes": hs[:2], "block_size": BS})
        self.assertEqual(got["default"]["wc"]["rank_matches"]["0"],
                         {"gpu": 32, "cpu": 32, "disk": 32, "external": 32})
        # Asked for by instance_id: its ranks, hit or not.
        # Block 7 is held by no rank.
        st, got = self.plane.post("/query_by_hash", {"seq_hashes": hs[7:], "block_size": BS,
                                                     "instance_id": "wc"})
        zero = {"gpu": 0, "cpu": 0, "disk": 0, "external": 0}
        self.assertEqual((st, got), (200, {"default": {"wc": {
            "longest_matched": 0, "GPU": 0, "CPU": 0, "DISK": 0, "EXTERNAL": 0,
            "DP": {"0": 0, "1": 0}, "rank_matches": {"0": zero, "1": zero}}}}))

    def test_salts(self):
        """lora_name salts the hashes as the publisher and the relay salt
        them; lora_id is the name "lora_id:<n>"; cache_salt is the salt when
        neither is given."""
        self.start()
        toks = list(range(3000, 3000 + BS * 3))
        pub = self.publisher("wl")
        for salt in ("adapter-a", "lora_id:7", "tenant-salt"):
            pub.stored(toks, lora_name=salt)
        pub.flush()
        for salt in ("adapter-a", "lora_id:7", "tenant-salt"):
            hs = kvplane.hash_blocks(toks, BS, lora_name=salt)
            until(lambda: self.client.match(hs), what="salted blocks applied")
        want = {"default": {"wl": {"longest_matched": 48, "GPU": 48, "CPU": 0, "DISK": 0,
                                   "EXTERNAL": 0, "DP": {"0": 48}, "rank_matches": {
                                       "0": {"gpu": 48, "cpu": 48, "disk": 48, "external": 48}}}}}
        for body in ({"lora_name": "adapter-a"}, {"lora_id": 7}, {"cache_salt": "tenant-salt"},
                     {"lora_name": "adapter-a", "cache_salt": "ignored"}):
            body.update(token_ids=toks, block_size=BS)
            self.assertEqual(self.plane.post("/query", body), (200, want), body)
        self.assertEqual(self.plane.post("/query", {"token_ids": toks, "block_size": BS}),
                         (200, {"default": {}}))  # unsalted: other blocks

    def test_bad_requests(self):
        """Bad requests get a 4xx with a JSON error saying what is wrong;
        the advisor keeps answering."""
        self.start()
        def err(path, body, status, words, method="POST", raw=None):
            st, got = self.plane.post(path, body, method, raw)
            self.assertEqual(st, status, (path, body, got))
            self.assertIn("error", got)
            for w in words:
                self.assertIn(w, got["error"], (path, body))

        err("/query", None, 400, ["bad JSON"], raw=b"{\"token_ids\": [1,")
        err("/query", None, 400, ["bad JSON"], raw=b"")
        err("/query", [1, 2], 400, ["object"])
        err("/query", {"block_size": BS}, 400, ["token_ids", "required"])
        err("/query", {"token_ids": [1] * BS}, 400, ["block_size", "required"])
        err("/query", {"token_ids": [1], "block_size": 0}, 400, ["block_size"])
        err("/query", {"token_ids": [1, -2], "block_size": 1}, 400, ["token_ids[1]"])
        err("/query", {"token_ids": [1, 1 << 32], "block_size": 1}, 400, ["token_ids[1]"])
        err("/query", {"token_ids": [1], "block_size": 1, "lora_id": 1, "lora_name": "x"}, 400,
            ["lora_id", "lora_name"])
        err("/query", {"token_ids": [1], "block_size": 1, "tenant_id": 5}, 400, ["tenant_id"])
        err("/query_by_hash", {"block_size": 1}, 400, ["seq_hashes", "required"])
        err("/query_by_hash", {"seq_hashes": [1, "zz"], "block_size": 1}, 400, ["seq_hashes[1]"])
        err("/query_by_hash", {"seq_hashes": [1 << 64], "block_size": 1}, 400, ["bad JSON"])
        err("/query_by_hash", {"seq_hashes": list(range(65537)), "block_size": 1}, 413,
            ["65536"])
        err("/query", None, 413, ["body over"], raw=b" " * (17 << 20))
        err("/query", None, 405, ["POST"], method="GET")
        err("/nope", {}, 404, ["/query"])
        err("/register", {"endpoint": "tcp://127.0.0.1:5557", "instance_id": "x"}, 501,
            ["NATS", "kvplane-relay"])
        err("/unregister", {"instance_id": "x"}, 501, ["NATS"])
        self.assertEqual(self.plane.post("/query_by_hash", {"seq_hashes": [1],
                                                            "block_size": 1}),
                         (200, {"default": {}}))

    def test_expect_continue_too_large_is_refused_first(self):
        """A client that sends Expect: 100-continue with a Content-Length over
        16 MiB is answered 413 at once, not told to go on and send the body
        first (curl does this for large bodies): the server answered 100
        Continue and waited for 17 MiB it would refuse. Under the bound it
        still gets 100 Continue."""
        self.start()
        def head(length):
            s = socket.create_connection(("127.0.0.1", self.plane.http_port))
            s.settimeout(5)
            s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % length)
            try:
                return s.recv(4096)
            finally:
                s.close()
        got = head(17 << 20)
        self.assertTrue(got.startswith(b"HTTP/1.1 413"), got)
        self.assertIn(b"body over", got)
        self.assertTrue(head(1000).startswith(b"HTTP/1.1 100"))

    def test_a_body_framed_two_ways_is_refused(self):
        """A request whose body is framed two ways, two Content-Length
        headers that disagree or Content-Length beside Transfer-Encoding,
        is refused with 400 and the connection closed (RFC 9112, 6.3): a
        proxy in front may frame it the other way, and the rest would be
        a request to one and a body to the other (request smuggling).
        libmicrohttpd took the first Content-Length and answered the
        request. A plain request on the same server still answers."""
        self.start()
        def send(head, body):
            s = socket.create_connection(("127.0.0.1", self.plane.http_port))
            s.settimeout(5)
            s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body)
            got = b""
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
            except socket.timeout:
                pass
            finally:
                s.close()
            return got
        body = json.dumps({"model": "m", "token_ids": list(range(BS)), "block_size": BS}).encode()
        self.assertTrue(send(b"Content-Length: %d\r\n" % len(body), body).startswith(
            b"HTTP/1.1 200"))
        two = send(b"Content-Length: %d\r\nContent-Length: 5\r\n" % len(body), body)
        self.assertTrue(two.startswith(b"HTTP/1.1 400"), two[:200])
        self.assertIn(b"Content-Length", two)
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        both = send(b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(chunked),
                    chunked)
        self.assertTrue(both.startswith(b"HTTP/1.1 400"), both[:200])

    def test_bodies_held_at_once_are_bounded(self):
        """The bodies being read are bounded together, not only each one
        (256 connections of 16 MiB would make the advisor hold 4 GiB): with
        four unfinished 15 MiB bodies held (64 MiB), a fifth is refused
        with a 503 saying to retry; once they are gone it is read again."""
        self.start()
        chunk = b" " * (1 << 20)
        held = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", self.plane.http_port))
            s.sendall(b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 16000000\r\n\r\n")
            for _ in range(15):
                s.sendall(chunk)
            held.append(s)
        time.sleep(1.0)  # read by the server
        big = b"{" + b" " * (15 << 20) + b"}"
        st, got = self.plane.post("/query", None, raw=big)
        self.assertEqual(st, 503, got)
        self.assertIn("retry", got["error"])
        for s in held:
            s.close()
        time.sleep(0.5)
        st, got = self.plane.post("/query", None, raw=big)
        self.assertEqual(st, 400, got)  # read whole: an object without block_size
        self.assertIn("block_size", got["error"])

    def test_default_block_size(self):
        """[http] block_size stands in for a request without one."""
        self.start("block_size = %d\n" % BS)
        toks = list(range(BS * 2))
        pub = self.publisher("wd")
        hs = pub.stored(toks)
        pub.flush()
        until(lambda: self.client.match(hs), what="blocks applied")
        self.assertEqual(self.plane.post("/query", {"token_ids": toks})[1]["default"]["wd"]
                         ["longest_matched"], 32)
        self.assertEqual(self.plane.post("/query_by_hash", {"seq_hashes": hs,
                                                            "block_size": 4})[1]["default"]["wd"]
                         ["GPU"], 8)


if __name__ == "__main__":
    unittest.main()
