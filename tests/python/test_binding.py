#!/usr/bin/python3
"""The Python binding (python/kvplane) against the real parts: a nats-server
started on a free loopback port and the kvplane-advisor program with its
SQLite database in a temporary directory, both started and stopped by each
test that needs them.

Why this file is long: every case shares the Plane fixture (nats-server and
kvplane-advisor started per test).

Environment (tests/python/tests.cmake sets it): KVPLANE_LIB (libkvplane.so),
KVPLANE_ADVISOR (the kvplane-advisor program), KVPLANE_ABI (tests/python/
abi.c, the C layout of the mirrored structs), PYTHONPATH (python/).
Run one case: /usr/bin/python3 test_binding.py BindingTest.test_removed
"""
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import kvplane
from kvplane import _lib

SRCDIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NS = "pyt"
BS = 16  # tokens per block


_prctl = ctypes.CDLL(None, use_errno=True).prctl
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # In the child between fork and exec: a bound libc call, nothing else.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv, **kw):
    """subprocess.Popen that dies with this test process: ctest kills a test
    at its timeout, not the servers it started (PR_SET_PDEATHSIG, as the C
    harness's kvp_test_spawn_child does)."""
    return subprocess.Popen(argv, preexec_fn=_die_with_parent, **kw)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(fn, timeout=10.0, what="condition"):
    """Calls fn until it returns a true value (returned) or timeout passes
    (AssertionError naming what and the last value)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError("%s not reached in %.0f s (last: %r)" % (what, timeout, last))


def reference_hashes():
    """tests/tools/hash_vectors.py (python3-xxhash, not kvplane's C) as
    (module, [(case, lora, block, ntokens, hashes)])."""
    path = os.path.join(SRCDIR, "tests", "tools", "hash_vectors.py")
    out = subprocess.run(["/usr/bin/python3", path], check=True, capture_output=True,
                         text=True, timeout=30).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        rows.append((int(f[0]), None if f[1] == "-" else f[1], int(f[2]), int(f[3]),
                     [int(h, 16) for h in f[4:]]))
    # Its token generator, loaded without running the script's printing tail.
    spec = importlib.util.spec_from_file_location("hash_vectors", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SystemExit:
        pass
    return mod, rows


class Plane:
    """nats-server and kvplane-advisor (core mode) in a temporary directory."""

    def __init__(self, tmp, js=False):
        self.tmp = tmp
        self.js = js
        self.port = free_port()
        self.url = "nats://127.0.0.1:%d" % self.port
        self.natsd = None
        self.advisor = None
        self.db = os.path.join(tmp, "advisor.db")

    def start_nats(self):
        log = open(os.path.join(self.tmp, "nats-server.log"), "w")
        argv = ["nats-server", "-a", "127.0.0.1", "-p", str(self.port)]
        if self.js:
            argv += ["-js", "-sd", os.path.join(self.tmp, "js")]
        self.natsd = spawn(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()

        def up():
            if self.natsd.poll() is not None:
                raise AssertionError("nats-server exited with %d" % self.natsd.returncode)
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False
        until(up, what="nats-server on port %d" % self.port)

    def start_advisor(self, extra=""):
        conf = os.path.join(self.tmp, "advisor.conf")
        with open(conf, "w") as f:
            f.write("[nats]\nservers = %s\nmode = %s\nconnect_timeout = 2s\n"
                    "[advisor]\nnamespace = %s\n"
                    "[store]\npath = %s\nflush_interval = 50ms\n"
                    % (self.url, "jetstream" if self.js else "core", NS, self.db) + extra)
        log = open(os.path.join(self.tmp, "advisor.log"), "w")
        self.advisor = spawn([os.environ["KVPLANE_ADVISOR"], "-c", conf],
                                        stdout=log, stderr=subprocess.STDOUT)
        log.close()
        with kvplane.Client(self.url, NS, timeout_ms=500) as c:
            def answers():
                if self.advisor.poll() is not None:
                    raise AssertionError("kvplane-advisor exited with %d: %s" % (
                        self.advisor.returncode, self.log("advisor.log")))
                try:
                    return c.stats()
                except kvplane.Error as e:
                    if e.name in ("KVP_ENOENT", "KVP_ETIMEDOUT"):
                        return None
                    raise
            until(answers, what="the advisor's stats reply")

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name)) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        for p in (self.advisor, self.natsd):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvp-py-")
        self.plane = None
        self.closers = []

    def tearDown(self):
        for c in reversed(self.closers):
            c.close()
        if self.plane:
            self.plane.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, advisor=True, js=False):
        self.plane = Plane(self.tmp, js)
        self.plane.start_nats()
        if advisor:
            self.plane.start_advisor()
        self.client = kvplane.Client(self.plane.url, NS, timeout_ms=2000)
        self.closers.append(self.client)
        return self.plane.url

    def publisher(self, worker="w0", **kw):
        pub = kvplane.Publisher(self.plane.url, NS, worker, BS, max_delay_ms=1, **kw)
        self.closers.append(pub)
        return pub

    def match_until(self, hashes, want, what):
        """Polls match(hashes) until it returns want (the advisor applies
        batches asynchronously)."""
        got = []

        def same():
            got[:] = self.client.match(hashes)
            return sorted(got) == sorted(want)
        try:
            until(same, what=what)
        except AssertionError:
            self.assertEqual(sorted(got), sorted(want), what)

    # --- layout and hashing (no servers) -----------------------------------

    def test_abi_layout(self):
        """Every mirrored struct has the C size and every field its C offset."""
        out = subprocess.run([os.environ["KVPLANE_ABI"]], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        seen = 0
        for line in out.splitlines():
            name, value = line.split()
            struct, _, field = name.partition(".")
            cls = _lib.STRUCTS[struct]
            if field:
                self.assertEqual(getattr(cls, field).offset, int(value), name)
            else:
                self.assertEqual(ctypes.sizeof(cls), int(value), name)
                self.assertEqual(len(cls._fields_), out.count(struct + ".") , struct)
            seen += 1
        self.assertGreater(seen, 40)

    def test_hash_blocks_reference(self):
        """hash_blocks equals the independent python3-xxhash reference for
        every case of tests/tools/hash_vectors.py, LoRA salting included."""
        mod, rows = reference_hashes()
        self.assertEqual(len(rows), len(mod.CASES))
        for case, lora, block, n, want in rows:
            toks = mod.tokens(case, n)
            self.assertEqual(kvplane.hash_blocks(toks, block, lora_name=lora), want,
                             "case %d" % case)
            # kvp_hash_block/kvp_hash_chain by hand, as DESIGN.md writes it.
            L = _lib.lib()
            seed = kvplane.hash_seed(lora)
            prev, mine = None, []
            for i in range(n // block):
                arr = (ctypes.c_uint32 * block)(*toks[i * block:(i + 1) * block])
                local = L.kvp_hash_block(arr, block, seed)
                prev = local if prev is None else L.kvp_hash_chain(prev, local, seed)
                mine.append(prev)
            self.assertEqual(mine, want, "case %d by block and chain" % case)
        self.assertEqual(kvplane.hash_seed(None), 1337)
        self.assertEqual(kvplane.hash_seed(""), 1337)
        self.assertEqual(kvplane.hash_blocks(list(range(15)), 16), [])  # no full block

    def test_hash_blocks_parent_chain(self):
        """A continuation hashed with parent_hash gives the same hashes as
        the whole sequence; array('I') and tuples work as token lists."""
        import array
        toks = [(i * 7919) % 50000 for i in range(BS * 5 + 3)]
        whole = kvplane.hash_blocks(toks, BS, lora_name="tenant")
        self.assertEqual(len(whole), 5)
        for k in range(1, 5):
            self.assertEqual(kvplane.hash_blocks(array.array("I", toks[k * BS:]), BS,
                                                 lora_name="tenant", parent_hash=whole[k - 1]),
                             whole[k:], "continuation after block %d" % k)
        self.assertEqual(kvplane.hash_blocks(tuple(toks), BS, lora_name="tenant"), whole)
        self.assertNotEqual(kvplane.hash_blocks(toks, BS), whole)  # the salt matters
        # The signed form of a parent hash is the same hash.
        signed = whole[0] - (1 << 64) if whole[0] >= 1 << 63 else whole[0]
        self.assertEqual(kvplane.hash_blocks(toks[BS:], BS, "tenant", parent_hash=signed),
                         whole[1:])

    # --- against nats-server and the advisor -------------------------------

    def test_stored_appears_in_advisor(self):
        """Blocks stored from token ids are matched by the advisor with the
        worker, dp rank, tier and prefix length they were stored with."""
        self.start()
        toks = list(range(1000, 1000 + BS * 4 + 5))
        with kvplane.Publisher(self.plane.url, NS, "w0", BS, dp_rank=3,
                               max_delay_ms=1) as pub:
            hashes = pub.stored(toks)
            self.assertEqual(hashes, kvplane.hash_blocks(toks, BS))
            self.assertEqual(len(hashes), 4)
            # The first two blocks also in host memory, by their hashes.
            self.assertEqual(pub.stored(block_hashes=hashes[:2], tier="G2"), hashes[:2])
            pub.flush()
            st = pub.stats()
            self.assertEqual(st["queued"], 2)
            self.assertEqual(st["blocks"], 6)
        self.match_until(hashes, [kvplane.Match("w0", 3, 1, 4), kvplane.Match("w0", 3, 2, 2)],
                         "w0 in G1 (4) and G2 (2)")
        self.assertEqual(self.client.match(hashes)[0], kvplane.Match("w0", 3, 1, 4))  # longest
        self.assertEqual(self.client.match_tokens(toks[:BS * 3], BS),
                         [kvplane.Match("w0", 3, 1, 3), kvplane.Match("w0", 3, 2, 2)])
        # Another LoRA's hashes of the same tokens are other blocks.
        self.assertEqual(self.client.match_tokens(toks, BS, lora_name="other"), [])
        # The one-shot function gives the same answer.
        self.assertEqual(sorted(kvplane.match(hashes, self.plane.url, NS)),
                         sorted(self.client.match(hashes)))
        # Gathered (kvp_client_match_all, the library's merge): one
        # unpartitioned advisor covers everything, nothing is missing.
        rows, info = self.client.match_all(hashes)
        self.assertEqual(rows, self.client.match(hashes))
        self.assertEqual((info["partitions"], info["replies"], info["used"], info["missing"]),
                         (0, 1, 1, []))

    def test_stored_with_parent(self):
        """stored() of a continuation with parent_hash extends the worker's
        prefix: the advisor matches the whole sequence."""
        self.start()
        toks = [(i * 31) % 32000 for i in range(BS * 4)]
        pub = self.publisher("w1", model="m")
        first = pub.stored(toks[:BS * 2])
        rest = pub.stored(toks[BS * 2:], parent_hash=first[-1])
        whole = kvplane.hash_blocks(toks, BS)
        self.assertEqual(first + rest, whole)
        pub.flush()
        self.match_until(whole, [kvplane.Match("w1", 0, 1, 4)], "w1 holds 4 blocks")
        # A trailing partial block is not announced.
        self.assertEqual(pub.stored(toks[:BS - 1]), [])

    def test_removed(self):
        """removed() takes blocks out: the prefix the advisor reports shrinks
        to the blocks before the first removed one, in that tier only."""
        self.start()
        toks = list(range(BS * 4))
        pub = self.publisher()
        hashes = pub.stored(toks)
        pub.stored(block_hashes=hashes, tier=2)
        pub.flush()
        self.match_until(hashes, [kvplane.Match("w0", 0, 1, 4), kvplane.Match("w0", 0, 2, 4)],
                         "stored in G1 and G2")
        pub.removed(hashes[2:])
        pub.flush()
        self.match_until(hashes, [kvplane.Match("w0", 0, 1, 2), kvplane.Match("w0", 0, 2, 4)],
                         "G1 down to 2 after removed")
        pub.removed(hashes[:1], tier=2)
        pub.flush()
        self.match_until(hashes, [kvplane.Match("w0", 0, 1, 2)], "G2 gone from the first block")

    def test_cleared(self):
        """cleared(tier) empties one tier; cleared() every tier; other
        workers keep their blocks."""
        self.start()
        toks = list(range(5, 5 + BS * 3))
        a, b = self.publisher("wa"), self.publisher("wb")
        hashes = a.stored(toks)
        a.stored(block_hashes=hashes, tier=2)
        b.stored(toks)
        a.flush()
        b.flush()
        self.match_until(hashes, [kvplane.Match("wa", 0, 1, 3), kvplane.Match("wa", 0, 2, 3),
                                  kvplane.Match("wb", 0, 1, 3)], "wa and wb stored")
        a.cleared(tier=2)
        a.flush()
        self.match_until(hashes, [kvplane.Match("wa", 0, 1, 3), kvplane.Match("wb", 0, 1, 3)],
                         "wa's G2 cleared")
        a.cleared()
        a.flush()
        self.match_until(hashes, [kvplane.Match("wb", 0, 1, 3)], "wa cleared in every tier")

    def test_accessed(self):
        """accessed() is accepted with and without hit counts and leaves the
        match unchanged."""
        self.start()
        pub = self.publisher()
        hashes = pub.stored(list(range(BS * 2)))
        pub.accessed(hashes)
        pub.accessed(hashes, hit_counts=[3, 1])
        pub.flush()
        self.match_until(hashes, [kvplane.Match("w0", 0, 1, 2)], "stored and accessed")
        self.assertEqual(pub.stats()["queued"], 3)
        with self.assertRaises(kvplane.Error) as cm:
            pub.accessed(hashes, hit_counts=[1])
        self.assertEqual(cm.exception.name, "KVP_EINVAL")

    def test_snapshot_resync(self):
        """A resync (requested here as the advisor would) makes poll() call
        the snapshot function and queue its sets: the advisor then holds
        exactly what the snapshot says, parents given or not. A snapshot
        function that raises makes poll() raise, and the resync stays due."""
        self.start()
        hs = kvplane.hash_blocks(list(range(7, 7 + BS * 4)), BS)
        state = {}
        calls = []

        def snapshot(tier):
            calls.append(tier)
            if "boom" in state:
                raise RuntimeError("engine state unavailable")
            return state.get(tier)
        pub = self.publisher(snapshot=snapshot, snapshot_tiers={1, 2})
        self.assertFalse(pub.poll())  # nothing due
        self.assertEqual(calls, [])
        pub.stored(block_hashes=hs)
        pub.flush()
        self.match_until(hs, [kvplane.Match("w0", 0, 1, 4)], "stored 4 in G1")
        # The engine's real state differs: 2 blocks in G1, 3 in G2 (with parents).
        state[1] = hs[:2]
        state[2] = (hs[:3], [None] + hs[:2])
        pub.request_resync()
        self.assertTrue(pub.poll())
        self.assertEqual(calls, [1, 2])
        self.assertFalse(pub.poll())
        pub.flush()
        self.match_until(hs, [kvplane.Match("w0", 0, 1, 2), kvplane.Match("w0", 0, 2, 3)],
                         "the snapshot's sets")
        self.assertEqual(pub.stats()["resyncs"], 1)
        # A failing snapshot function: poll raises, the resync stays due.
        state["boom"] = True
        pub.request_resync()
        with self.assertRaises(kvplane.Error) as cm:
            pub.poll()
        self.assertIn("RuntimeError: engine state unavailable", str(cm.exception))
        self.assertIsInstance(cm.exception.__cause__, RuntimeError)
        # A tier it does not have (None) is skipped; an empty tier is a set too.
        del state["boom"]
        state[1] = []
        del state[2]
        self.assertTrue(pub.poll())
        pub.flush()
        self.match_until(hs, [kvplane.Match("w0", 0, 2, 3)],
                         "G1 emptied by the snapshot; G2, skipped, kept")

    def test_jetstream(self):
        """In JetStream mode (the advisor's durable consumer, the publisher's
        acked publishes) stored and removed blocks reach the advisor too, and
        flush() returns once JetStream acked them."""
        self.start(js=True)
        pub = self.publisher("wj", mode="jetstream")
        hs = pub.stored(list(range(BS * 3)))
        pub.flush()
        st = pub.stats()
        self.assertEqual(st["acked"], st["sent"])
        self.assertGreaterEqual(st["acked"], 1)
        self.match_until(hs, [kvplane.Match("wj", 0, 1, 3)], "stored through JetStream")
        pub.removed(hs[1:])
        pub.flush()
        self.match_until(hs, [kvplane.Match("wj", 0, 1, 1)], "removed through JetStream")
        e = None
        try:
            kvplane.Publisher(self.plane.url, NS, "wk", BS, mode="jetstream",
                              stream="NO_SUCH_STREAM")
        except kvplane.Error as err:
            e = err
        self.assertIsNotNone(e)
        self.assertEqual(e.name, "KVP_ECONFIG")
        self.assertIn("NO_SUCH_STREAM", str(e))

    def test_bad_arguments(self):
        """Bad arguments raise kvplane.Error with the code's name and a
        message naming the argument."""
        self.start(advisor=False)

        def err(fn, *a, **kw):
            with self.assertRaises(kvplane.Error) as cm:
                fn(*a, **kw)
            return cm.exception

        e = err(kvplane.Publisher, self.plane.url, NS, "bad worker!", BS)
        self.assertEqual(e.name, "KVP_ECONFIG")
        self.assertIn("worker_id", str(e))
        self.assertEqual(e.code, -14)
        e = err(kvplane.Publisher, self.plane.url, "bad ns", "w0", BS)
        self.assertIn("ns", e.message)
        e = err(kvplane.Publisher, self.plane.url, NS, "w0", 0)
        self.assertEqual(e.name, "KVP_EINVAL")
        self.assertIn("block_size", str(e))
        e = err(kvplane.Publisher, "nats://127.0.0.1:%d" % free_port(), NS, "w0", BS,
                connect_timeout_ms=300)
        self.assertEqual(e.name, "KVP_ECONN")
        e = err(kvplane.Publisher, self.plane.url, NS, "w0", BS, mode="fast")
        self.assertIn("mode: 'fast'", str(e))
        e = err(kvplane.Publisher, self.plane.url, NS, "w0", BS, snapshot=5)
        self.assertIn("snapshot: 5 is not callable", str(e))
        e = err(kvplane.Publisher, self.plane.url, NS, "w0", BS, snapshot_volumes={3: "v" * 32})
        self.assertIn("longer than 31", str(e))
        e = err(kvplane.Publisher, self.plane.url, NS, "w0", BS, no_such_option=1)
        self.assertEqual(e.name, "KVP_ECONFIG")
        self.assertIn("no_such_option", str(e))

        pub = self.publisher()
        e = err(pub.stored, [1, 2, "3"] + [0] * BS)
        self.assertEqual(e.name, "KVP_EINVAL")
        self.assertIn("token_ids[2]", str(e))
        e = err(pub.stored, [1.5] * BS)
        self.assertIn("token_ids[0]", str(e))
        e = err(pub.stored, [-1] * BS)
        self.assertIn("token_ids[0]", str(e))
        e = err(pub.stored, [1 << 32] * BS)
        self.assertIn("token_ids[0]", str(e))
        e = err(pub.stored, "abc")
        self.assertIn("token_ids", str(e))
        e = err(pub.stored, list(range(BS)), tier=7)
        self.assertIn("tier", str(e))
        e = err(pub.stored)
        self.assertIn("token_ids or block_hashes", str(e))
        e = err(pub.stored, list(range(BS)), block_hashes=[1, 2])
        self.assertIn("2 block_hashes for 1 full blocks", str(e))
        e = err(pub.removed, [1 << 64])
        self.assertIn("block_hashes[0]", str(e))
        e = err(pub.removed, ["0x12"])
        self.assertIn("block_hashes[0]", str(e))
        e = err(pub.cleared, tier=9)
        self.assertIn("tier", str(e))
        e = err(kvplane.hash_blocks, [None], 4)
        self.assertIn("token_ids[0]", str(e))
        e = err(kvplane.hash_blocks, [1, 2], -1)
        self.assertIn("block_size", str(e))

        pub.close()
        self.assertTrue(pub.closed)
        pub.close()  # twice is harmless
        for call, args in ((pub.stored, (list(range(BS)),)), (pub.removed, ([1],)),
                           (pub.cleared, ()), (pub.flush, ()), (pub.stats, ())):
            e = err(call, *args)
            self.assertEqual(e.name, "KVP_ECLOSED")
            self.assertIn("publisher w0: closed", str(e))

        e = err(self.client.match, [])
        self.assertEqual(e.name, "KVP_EINVAL")
        e = err(self.client.match, [1] * 65537)
        self.assertIn("65537 hashes", str(e))
        e = err(kvplane.Client, self.plane.url, "bad ns")
        self.assertEqual(e.name, "KVP_EINVAL")
        self.client.close()
        e = err(self.client.match, [1])
        self.assertEqual(e.name, "KVP_ECLOSED")

    # --- the operator's tiering controls ----------------------------------

    def write_frame(self, root, h, parent, payload):
        """A block as the posix plugin stores it: the 64-byte frame header
        (docs/volumes.md, "The frame"), then the payload."""
        import struct
        import xxhash
        hdr = bytearray(struct.pack("<4sHHQQQI4I", b"KVPB", 1, 64, len(payload), h,
                                    parent or 0, 1 if parent else 0, 0, 0, 0, 0))
        hdr += b"\0" * 12
        struct.pack_into("<Q", hdr, 56, xxhash.xxh3_64_intdigest(payload))
        struct.pack_into("<I", hdr, 52, xxhash.xxh3_64_intdigest(bytes(hdr)) & 0xffffffff)
        d = os.path.join(root, NS, "%02x" % (h >> 56))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "%016x" % h), "wb") as f:
            f.write(bytes(hdr) + payload)

    def migrations(self):
        import sqlite3
        db = sqlite3.connect(self.plane.db)
        try:
            return db.execute("SELECT printf('%016x', hash), from_volume, to_volume, state "
                              "FROM migrations ORDER BY id").fetchall()
        finally:
            db.close()

    def test_operator_controls(self):
        """pin, move and delete against the advisor's tiering engine and
        real posix volumes: a pinned prefix stays in G3 through rounds that
        demote the rest, and its pins survive a restart of the advisor; a
        move lands in G4 and is journaled; a delete of a pinned block is
        refused, of an unpinned one journaled and announced, with its
        continuation in the tier deleted from. (A pin past a
        volume's capacity: tier_control.pin_past_capacity_is_refused.)"""
        g3, g4 = os.path.join(self.tmp, "g3"), os.path.join(self.tmp, "g4")
        block = 4096
        tiering = ("[tiering]\nenabled = true\ninterval = %s\ngrace = 0\n"
                   "min_residence = 0\nhigh_watermark = 0.5\nlow_watermark = 0.1\n"
                   "[volume g3]\ntier = 3\nplugin = posix\ncapacity = %d\npath = %s\n"
                   "fsync = off\n[volume g4]\ntier = 4\nplugin = posix\ncapacity = 1GiB\n"
                   "path = %s\nfsync = off\n")
        conf = lambda interval: tiering % (interval, 8 * (block + 64), g3, g4)
        self.plane = Plane(self.tmp)
        self.plane.start_nats()
        os.makedirs(g3)
        toks = list(range(5000, 5000 + BS * 6))
        hashes = kvplane.hash_blocks(toks, BS)
        for i, h in enumerate(hashes):
            self.write_frame(g3, h, hashes[i - 1] if i else None, bytes([i]) * block)
        # No round for an hour: the first would demote the chain (6 blocks
        # of the 8 that fit, over the 0.5 mark) before the pin.
        self.plane.start_advisor(conf("1h"))
        self.client = kvplane.Client(self.plane.url, NS, timeout_ms=5000)
        self.closers.append(self.client)
        with kvplane.Publisher(self.plane.url, NS, "w0", BS, max_delay_ms=1,
                               block_bytes=block + 64) as pub:
            pub.stored(toks, tier="G3", volume="g3")
            pub.flush()
        self.match_until(hashes, [kvplane.Match("w0", 0, 3, 6)], "w0 holds 6 blocks in G3")
        rep = self.client.pin(token_ids=toks[:BS * 3], block_size=BS, note="system prompt")
        self.assertEqual((rep["changed"], rep["pins"], rep["pinned_blocks"]), (3, 3, 3))
        time.sleep(0.3)  # the database's flush of the index, before the restart
        self.plane.advisor.send_signal(signal.SIGTERM)
        self.plane.advisor.wait(10)
        self.plane.start_advisor(conf("100ms"))
        until(lambda: self.client.stats()["tiering"]["demoted"] >= 3, timeout=20,
              what="the unpinned blocks demoted")
        time.sleep(0.5)  # more rounds: the pinned ones stay
        st = self.client.stats()["tiering"]
        self.assertEqual((st["pins"], st["pinned_blocks"], st["demoted"]), (3, 3, 3))
        where = lambda root, h: os.path.exists(os.path.join(root, NS, "%02x" % (h >> 56),
                                                            "%016x" % h))
        self.assertEqual([where(g3, h) for h in hashes], [True] * 3 + [False] * 3)
        self.assertEqual([where(g4, h) for h in hashes], [False] * 3 + [True] * 3)
        # A move now: a pinned block may be moved by hand.
        rep = self.client.move(4, [hashes[2]])
        self.assertEqual((rep["queued"], rep["skipped"]), (1, 0))
        until(lambda: ("%016x" % hashes[2], "g3", "g4", "source_deleted") in self.migrations(),
              timeout=20, what="the move journaled")
        self.assertTrue(where(g4, hashes[2]))
        self.assertEqual(self.client.move(4, [hashes[2]])["skipped"], 1)  # there already
        # A delete: refused while pinned, then journaled and announced.
        with self.assertRaises(kvplane.Error) as e:
            self.client.delete([hashes[0]])
        self.assertIn("pinned", str(e.exception))
        published = self.client.stats()["tiering"]["events_published"]
        self.assertEqual(self.client.unpin(token_ids=toks[:BS * 3], block_size=BS)["pins"], 0)
        # From G3 only: the first block, and its continuation there (the
        # second; the rest are in G4 and stay).
        rep = self.client.delete([hashes[0]], tier=3)
        self.assertEqual((rep["queued"], rep["continuations"]), (2, 1))
        until(lambda: ("%016x" % hashes[0], "g3", "", "source_deleted") in self.migrations(),
              timeout=20, what="the delete journaled")
        until(lambda: ("%016x" % hashes[1], "g3", "", "source_deleted") in self.migrations(),
              timeout=20, what="the continuation's delete journaled")
        until(lambda: self.client.stats()["tiering"]["events_published"] > published,
              timeout=10, what="the delete announced")
        self.assertEqual([where(g3, h) for h in hashes], [False] * 6)
        self.assertEqual([where(g4, h) for h in hashes], [False] * 2 + [True] * 4)

    def test_prefix_delete_takes_continuations(self):
        """A prefix delete against the advisor and real posix volumes takes
        the prefix's continuations with it: the chain A-B-C-D (C in G3, D
        in G4), deleted as the prefix A-B, loses C and D from the volumes,
        the index and the database, journaled and announced, and the reply
        counts them; the sibling chain A-B'-C' (below A, not below B, the
        prefix's last block) stays."""
        g3, g4 = os.path.join(self.tmp, "g3"), os.path.join(self.tmp, "g4")
        block = 4096
        self.plane = Plane(self.tmp)
        self.plane.start_nats()
        os.makedirs(g3)
        os.makedirs(g4)
        toks = list(range(7000, 7000 + BS * 4))
        sib = toks[:BS] + list(range(9000, 9000 + BS * 2))
        a, b, c, d = kvplane.hash_blocks(toks, BS)
        _, b2, c2 = kvplane.hash_blocks(sib, BS)
        for h, parent, root in ((a, None, g3), (b, a, g3), (c, b, g3), (d, c, g4),
                                (b2, a, g3), (c2, b2, g3)):
            self.write_frame(root, h, parent, bytes([h & 0xff]) * block)
        # No round of its own for an hour: only the delete starts one.
        self.plane.start_advisor(
            "[tiering]\nenabled = true\ninterval = 1h\ngrace = 0\nmin_residence = 0\n"
            "[volume g3]\ntier = 3\nplugin = posix\ncapacity = 1GiB\npath = %s\nfsync = off\n"
            "[volume g4]\ntier = 4\nplugin = posix\ncapacity = 1GiB\npath = %s\nfsync = off\n"
            % (g3, g4))
        self.client = kvplane.Client(self.plane.url, NS, timeout_ms=5000)
        self.closers.append(self.client)
        with kvplane.Publisher(self.plane.url, NS, "w0", BS, max_delay_ms=1,
                               block_bytes=block + 64) as pub:
            pub.stored(block_hashes=[d], parent_hash=c, tier="G4", volume="g4")
            pub.stored(toks[:BS * 3], tier="G3", volume="g3")
            pub.stored(sib, tier="G3", volume="g3")
            pub.flush()
        self.match_until([a, b2, c2], [kvplane.Match("w0", 0, 3, 3)], "w0 holds A-B'-C' in G3")
        self.match_until([a, b, c], [kvplane.Match("w0", 0, 3, 3)], "w0 holds A-B-C in G3")
        published = self.client.stats()["tiering"]["events_published"]

        rep = self.client.delete(token_ids=toks[:BS * 2], block_size=BS)
        self.assertEqual((rep["blocks"], rep["queued"], rep["skipped"], rep["continuations"]),
                         (2, 4, 0, 2), rep)
        want = {("%016x" % h, vol, "", "source_deleted")
                for h, vol in ((a, "g3"), (b, "g3"), (c, "g3"), (d, "g4"))}
        until(lambda: want <= set(self.migrations()), timeout=20, what="the deletes journaled")
        until(lambda: self.client.stats()["tiering"]["events_published"] - published >= 4,
              timeout=10, what="the deletes announced")
        self.assertEqual(self.client.stats()["tiering"]["events_published"] - published, 4)
        where = lambda root, h: os.path.exists(os.path.join(root, NS, "%02x" % (h >> 56),
                                                            "%016x" % h))
        self.assertEqual([where(g3, h) for h in (a, b, c, b2, c2)],
                         [False, False, False, True, True])
        self.assertFalse(where(g4, d))
        # The index and the database: no location of A-B-C-D left, B' and
        # C' still in G3.
        import sqlite3

        def located():
            db = sqlite3.connect(self.plane.db)
            try:
                return {r[0] for r in db.execute(
                    "SELECT printf('%016x', hash) FROM block_locations")}
            finally:
                db.close()
        until(lambda: located() == {"%016x" % h for h in (b2, c2)}, timeout=10,
              what="the database's locations: B' and C' only")
        self.assertEqual(self.client.match([a, b, c, d]), [])

    def test_bad_timeouts_and_sizes(self):
        """A timeout or size outside its C type is refused naming it: ctypes
        stored timeout_ms=-1 as 4294967295 ms (49 days), 2**40 as 0 (no
        wait), dp_rank=2**32 as 0; "x" and 1.5 raised ctypes.ArgumentError,
        not kvplane.Error."""
        self.start(advisor=False)
        for bad in (-1, 0, 2 ** 40, "x", 1.5, True):
            with self.assertRaises(kvplane.Error) as cm:
                self.client.match([1], timeout_ms=bad)
            self.assertEqual(cm.exception.name, "KVP_EINVAL")
            self.assertIn("timeout_ms: %r" % (bad,), str(cm.exception))
            with self.assertRaises(kvplane.Error):
                self.client.stats(timeout_ms=bad)
            with self.assertRaises(kvplane.Error):
                self.client.pin([1], timeout_ms=bad)
            with self.assertRaises(kvplane.Error):
                kvplane.Client(self.plane.url, NS, timeout_ms=bad)
        for name in ("dp_rank", "heartbeat_ms", "close_timeout_ms", "max_delay_ms"):
            with self.assertRaises(kvplane.Error) as cm:
                kvplane.Publisher(self.plane.url, NS, "w0", BS, **{name: 2 ** 32})
            self.assertIn("%s: %d is not an int in 0..4294967295" % (name, 2 ** 32),
                          str(cm.exception))

    def test_match_without_advisor(self):
        """With NATS up but no advisor, match fails at once with KVP_ENOENT
        naming the subject, not after the timeout."""
        self.start(advisor=False)
        t0 = time.monotonic()
        with self.assertRaises(kvplane.Error) as cm:
            self.client.match([1, 2, 3], timeout_ms=5000)
        self.assertEqual(cm.exception.name, "KVP_ENOENT")
        self.assertIn("kvplane.api.%s.match" % NS, str(cm.exception))
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_close_waits_for_calls(self):
        """close() on one thread while others publish: every call either
        succeeds or raises KVP_ECLOSED, and nothing crashes."""
        self.start(advisor=False)
        pub = self.publisher()
        outcomes = {"ok": 0, "closed": 0}
        lock = threading.Lock()
        stop = threading.Event()

        def producer(k):
            toks = list(range(k, k + BS * 2))
            while not stop.is_set():
                try:
                    pub.stored(toks)
                    key = "ok"
                except kvplane.Error as e:
                    self.assertEqual(e.name, "KVP_ECLOSED")
                    key = "closed"
                with lock:
                    outcomes[key] += 1
                if key == "closed":
                    return
        threads = [threading.Thread(target=producer, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        until(lambda: outcomes["ok"] >= 100, what="100 stored calls")
        pub.close()
        for t in threads:
            t.join(20)
            self.assertFalse(t.is_alive())
        stop.set()
        self.assertEqual(outcomes["closed"], 3)

    def test_example(self):
        """examples/python_publisher.py runs against the servers and prints
        the advisor's match of what it published."""
        self.start()
        env = dict(os.environ)
        out = subprocess.run(["/usr/bin/python3", os.path.join(SRCDIR, "examples",
                                                               "python_publisher.py"),
                              "--server", self.plane.url, "--ns", NS, "--worker", "ex0"],
                             capture_output=True, text=True, timeout=30, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ex0", out.stdout)
        self.assertIn("G1", out.stdout)

    def test_library_not_found(self):
        """An unusable KVPLANE_LIB is reported with its path, not skipped."""
        env = dict(os.environ, KVPLANE_LIB=os.path.join(self.tmp, "nope.so"))
        out = subprocess.run(["/usr/bin/python3", "-c", "import kvplane; kvplane.hash_seed()"],
                             capture_output=True, text=True, timeout=30, env=env)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("KVPLANE_LIB=%s: no such file" % env["KVPLANE_LIB"], out.stderr)


if __name__ == "__main__":
    unittest.main()
