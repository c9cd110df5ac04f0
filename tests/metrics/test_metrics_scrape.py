#!/usr/bin/python3
"""Scrapes the real kvplane-advisor and kvplane-relay over HTTP with curl and
parses the exposition with Debian's python3-prometheus-client.

  test_metrics_scrape.py advisor|advisor_tiering|advisor_tiering_lease|advisor_errors|relay

advisor:        nats-server (JetStream) on a free port, kvplane-advisor with
                [metrics] listen on another, kvplane-sim replaying part of the
                bundled trace; /metrics is scraped during and after the run
                (families and types as documented, counters never going back,
                event counters rising), /healthz, /readyz (200, then 503 once
                nats-server is stopped), 404 and 405.
advisor_tiering: the same with [tiering] over a posix G3 volume that the
                simulated worker fills past its watermark and a G4 volume:
                demotions, bytes G3 -> G4, volume fill.
advisor_tiering_lease: two unpartitioned advisors configured to tier the same
                volumes: only the holder of the namespace's tiering lease moves
                (the lease gauges say who), the other takes over when it stops.
advisor_errors: a bad [metrics] listen and a port in use stop the advisor at
                start with an error naming the key; a port in use is exit 1
                for the advisor and for the relay's --metrics alike.
relay:          kvplane-relay with --metrics and endpoints no engine serves:
                /readyz 200 while NATS is up, 503 when it is stopped, 200
                once it is back; /metrics parses, one series per worker.

Environment: KVP_TEST_BINDIR (the build directory), KVP_TEST_SRCDIR (the
source tree), both set by ctest."""
import json
import os
import shutil
import sqlite3
import signal
import socket
import subprocess
import sys
import tempfile
import time

from prometheus_client.parser import text_string_to_metric_families

BIN = os.environ.get("KVP_TEST_BINDIR", os.path.join(os.path.dirname(__file__), "../../build"))
SRC = os.environ.get("KVP_TEST_SRCDIR", os.path.join(os.path.dirname(__file__), "../.."))
DEADLINE = 20.0  # seconds any wait may take


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def curl(url, method="GET"):
    """(status, body) of one request; status 0 when nothing answered."""
    r = subprocess.run(["curl", "-s", "-X", method, "-o", "-", "-w", "\n%{http_code}", url],
                       capture_output=True, text=True, timeout=10)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body.rstrip("\n")


def scrape(port):
    """The parsed exposition of a successful scrape (curl -sf), {name: family}."""
    r = subprocess.run(["curl", "-sf", "http://127.0.0.1:%d/metrics" % port],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, "curl -sf /metrics failed: exit %d" % r.returncode
    return {f.name: f for f in text_string_to_metric_families(r.stdout)}, r.stdout


def lint(text):
    """promtool check metrics (Prometheus' own linter) finds nothing in an
    exposition; skipped without promtool (apt-get install prometheus)."""
    if shutil.which("promtool") is None:
        return
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        "promtool check metrics:\n" + r.stdout + r.stderr


def value(fams, name, **labels):
    """Sum of the samples of family name (prometheus_client strips _total from
    counter family names) whose labels include labels."""
    fam = fams[name]
    total = 0.0
    for s in fam.samples:
        if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


def wait_for(what, pred, timeout=DEADLINE):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except (AssertionError, KeyError, OSError, subprocess.SubprocessError):
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


class Procs:
    """Processes started by a test, stopped (and waited for) at the end."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child has its own copy
        self.procs.append((name, p))
        return p

    def stop(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log")) as f:
            return f.read()

    def close(self):
        for _, p in reversed(self.procs):
            self.stop(p)


def start_nats(procs, port, js=True):
    argv = ["nats-server", "-a", "127.0.0.1", "-p", str(port)]
    if js:
        argv += ["-js", "-sd", os.path.join(procs.tmp, "js")]
    p = procs.start("nats-server", argv)

    def up():
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    wait_for("nats-server on port %d" % port, up)
    return p


def advisor_conf(tmp, nats_port, listen, extra=""):
    path = os.path.join(tmp, "advisor.conf")
    with open(path, "w") as f:
        f.write("[nats]\nservers = nats://127.0.0.1:%d\nmode = jetstream\n"
                "[store]\npath = %s\nflush_interval = 100ms\n"
                "[metrics]\nlisten = %s\n%s" % (nats_port, os.path.join(tmp, "advisor.db"), listen,
                                               extra))
    return path


COUNTERS = ["kvplane_advisor_messages", "kvplane_advisor_batches", "kvplane_advisor_events",
            "kvplane_advisor_block_events", "kvplane_advisor_decode_errors",
            "kvplane_advisor_gaps", "kvplane_advisor_resyncs", "kvplane_advisor_skipped",
            "kvplane_store_flushes", "kvplane_store_flush_errors"]
GAUGES = ["kvplane_index_blocks", "kvplane_index_locations", "kvplane_index_bytes",
          "kvplane_index_memory_bytes", "kvplane_store_flush_lag_seconds",
          "kvplane_store_pending_seconds", "kvplane_store_dirty_blocks", "kvplane_workers",
          "kvplane_advisor_apply_lag_seconds", "kvplane_advisor_ready"]


def check_build_info(fams, prog):
    """kvplane_build_info is 1 with the labels the program's --version prints."""
    f = fams["kvplane_build_info"]
    assert f.type == "gauge", f.type
    assert len(f.samples) == 1 and f.samples[0].value == 1, f.samples
    lab = f.samples[0].labels
    out = subprocess.run([os.path.join(BIN, "tools", prog), "--version"], check=True,
                         capture_output=True, text=True).stdout.strip()
    want = "%s %s (revision %s, build %s, volume plugin ABI %s)" % (
        prog, lab["version"], lab["revision"], lab["build_type"], lab["plugin_abi"])
    assert out == want, (out, want)


def check_advisor_families(fams):
    check_build_info(fams, "kvplane-advisor")
    for n in COUNTERS:
        assert fams[n].type == "counter", "%s: type %s" % (n, fams[n].type)
    for n in GAUGES:
        assert fams[n].type == "gauge", "%s: type %s" % (n, fams[n].type)
    h = fams["kvplane_store_flush_seconds"]
    assert h.type == "histogram", h.type
    buckets = [s for s in h.samples if s.name.endswith("_bucket")]
    les = [s.labels["le"] for s in buckets]
    assert les[-1] == "+Inf", les
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "buckets not cumulative: %s" % counts
    count = [s.value for s in h.samples if s.name.endswith("_count")][0]
    assert counts[-1] == count, (counts[-1], count)
    types = {s.labels["type"] for s in fams["kvplane_advisor_events"].samples}
    assert types == {"stored", "removed", "accessed", "cleared", "snapshot"}, types
    tiers = {s.labels["tier"] for s in fams["kvplane_index_locations"].samples}
    assert tiers == {"G1", "G2", "G3", "G4"}, tiers


def test_advisor(tmp):
    procs = Procs(tmp)
    try:
        nport, mport = free_port(), free_port()
        nats = start_nats(procs, nport)
        conf = advisor_conf(tmp, nport, "127.0.0.1:%d" % mport)
        adv = procs.start("advisor", [os.path.join(BIN, "tools/kvplane-advisor"), "-c", conf])
        wait_for("/readyz 200", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 200)
        assert curl("http://127.0.0.1:%d/healthz" % mport) == (200, "ok"), "healthz"
        code, body = curl("http://127.0.0.1:%d/nothing" % mport)
        assert code == 404, code
        code, _ = curl("http://127.0.0.1:%d/metrics" % mport, method="POST")
        assert code == 405, code

        fams, text = scrape(mport)
        check_advisor_families(fams)
        lint(text)
        assert value(fams, "kvplane_advisor_events") == 0

        sim = procs.start("sim", [os.path.join(BIN, "tools/kvplane-sim"), "--trace",
                                  os.path.join(SRC, "data/conversation_trace.jsonl.gz"),
                                  "--server", "nats://127.0.0.1:%d" % nport, "--mode",
                                  "jetstream", "--workers", "2", "--limit", "400"])
        # Scrapes during the run: counters never go back.
        last, scrapes = {}, 0
        end = time.time() + DEADLINE
        while time.time() < end:
            running = sim.poll() is None
            fams, _ = scrape(mport)
            scrapes += 1
            for n in COUNTERS:
                v = value(fams, n)
                assert v >= last.get(n, 0), "%s went back: %s -> %s" % (n, last.get(n), v)
                last[n] = v
            if not running and value(fams, "kvplane_advisor_events", type="stored") > 0 and \
                    value(fams, "kvplane_workers", state="up") == 2:
                break
            time.sleep(0.2)
        assert sim.wait(timeout=DEADLINE) == 0, "kvplane-sim failed:\n" + procs.log("sim")
        check_advisor_families(fams)
        assert value(fams, "kvplane_advisor_events", type="stored") > 0
        assert value(fams, "kvplane_advisor_events") >= value(fams, "kvplane_advisor_events",
                                                               type="stored")
        assert value(fams, "kvplane_advisor_block_events") > 0
        assert value(fams, "kvplane_advisor_batches") > 0
        assert value(fams, "kvplane_index_blocks") > 0
        assert value(fams, "kvplane_index_locations", tier="G1") > 0
        assert value(fams, "kvplane_workers", state="up") == 2
        assert value(fams, "kvplane_advisor_decode_errors") == 0
        assert value(fams, "kvplane_advisor_ready") == 1
        wait_for("a committed flush", lambda: value(scrape(mport)[0], "kvplane_store_flushes") > 0)
        h = scrape(mport)[0]["kvplane_store_flush_seconds"]
        assert [s.value for s in h.samples if s.name.endswith("_count")][0] > 0

        # NATS goes away: not ready, still healthy.
        procs.stop(nats)
        wait_for("/readyz 503", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 503)
        code, body = curl("http://127.0.0.1:%d/readyz" % mport)
        assert code == 503 and "NATS" in body, (code, body)
        assert curl("http://127.0.0.1:%d/healthz" % mport)[0] == 200
        # The ready gauge says what /readyz says, for alert rules.
        assert value(scrape(mport)[0], "kvplane_advisor_ready") == 0
        procs.stop(adv)
        assert adv.returncode == 0, "advisor exit %s:\n%s" % (adv.returncode, procs.log("advisor"))
        print("advisor: %d scrapes during the run; events %d, blocks %d" %
              (scrapes, value(fams, "kvplane_advisor_events"), value(fams, "kvplane_index_blocks")))
    finally:
        procs.close()


def test_advisor_tiering(tmp):
    """The tiering families: a simulated worker offloads reused G2 victims to
    its G3 volume, which the advisor sees 128 KiB large, so it is over its
    high watermark and the advisor demotes blocks to G4."""
    procs = Procs(tmp)
    try:
        nport, mport = free_port(), free_port()
        start_nats(procs, nport)
        vols = os.path.join(tmp, "volumes")
        os.makedirs(os.path.join(vols, "g3"))  # as the demo: the posix plugin makes the last level
        plugins = os.path.join(BIN, "plugins")
        extra = ("[tiering]\nenabled = true\nplugin_dir = %s\ninterval = 200ms\ngrace = 0s\n"
                 "min_residence = 0s\nscrub_interval = 300ms\nscrub_verify = true\n"
                 "[volume g3-sim-0]\ntier = 3\nplugin = posix\ncapacity = 128KiB\npath = %s\n"
                 "fsync = off\n"
                 "[volume g4-shared]\ntier = 4\nplugin = posix\ncapacity = 1GiB\npath = %s\n"
                 "fsync = off\n" % (plugins, os.path.join(vols, "g3", "sim-0"),
                                     os.path.join(vols, "g4")))
        conf = advisor_conf(tmp, nport, "127.0.0.1:%d" % mport, extra)
        adv = procs.start("advisor", [os.path.join(BIN, "tools/kvplane-advisor"), "-c", conf])
        wait_for("/readyz 200", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 200)
        fams, _ = scrape(mport)
        assert fams["kvplane_migrations"].type == "counter"
        assert fams["kvplane_volume_fill_ratio"].type == "gauge"
        assert value(fams, "kvplane_volume_capacity_bytes", volume="g3-sim-0") == 128 * 1024
        assert value(fams, "kvplane_migrations", result="demoted") == 0
        sim = procs.start("sim", [os.path.join(BIN, "tools/kvplane-sim"), "--trace",
                                  os.path.join(SRC, "data/conversation_trace.jsonl.gz"),
                                  "--server", "nats://127.0.0.1:%d" % nport, "--mode",
                                  "jetstream", "--workers", "1", "--g1-blocks", "128",
                                  "--g2-blocks", "256", "--limit", "3000", "--volumes", vols,
                                  "--plugin-dir", plugins])
        assert sim.wait(timeout=45) == 0, "kvplane-sim failed:\n" + procs.log("sim")

        def demoted():
            f, _ = scrape(mport)
            return value(f, "kvplane_migrations", result="demoted") > 0 and \
                value(f, "kvplane_migrated_bytes", **{"from": "G3", "to": "G4"}) > 0 and \
                value(f, "kvplane_volume_used_bytes", volume="g4-shared") > 0
        wait_for("demotions to G4", demoted)
        fams, _ = scrape(mport)
        assert value(fams, "kvplane_migrations", result="failed") == 0
        assert value(fams, "kvplane_migrated_bytes", **{"from": "G4", "to": "G3"}) == 0
        for v in ("g3-sim-0", "g4-shared"):
            used = value(fams, "kvplane_volume_used_bytes", volume=v)
            cap = value(fams, "kvplane_volume_capacity_bytes", volume=v)
            fill = value(fams, "kvplane_volume_fill_ratio", volume=v)
            assert abs(fill - used / cap) < 1e-9, (v, used, cap, fill)
        # The scrub: verifying passes, in metrics, the stats reply and SQL.
        def scrubbed():
            f, _ = scrape(mport)
            return value(f, "kvplane_scrub_volumes") >= 2 and \
                value(f, "kvplane_scrub_verified") > 0
        wait_for("two scrub passes", scrubbed)
        fams, _ = scrape(mport)
        assert fams["kvplane_scrub_running"].type == "gauge"
        assert fams["kvplane_scrub_verified_bytes"].type == "counter"
        assert value(fams, "kvplane_scrub_corrupt") == 0
        out = subprocess.run([os.path.join(BIN, "tools", "kvplane"), "stats", "-s",
                              "nats://127.0.0.1:%d" % nport], check=True, capture_output=True,
                             text=True).stdout
        scrub = json.loads(out)["tiering"]["scrub"]
        assert scrub["passes"] >= 2 and scrub["verified"] > 0 and scrub["corrupt"] == 0, scrub
        procs.stop(adv)
        assert adv.returncode == 0, "advisor exit %s:\n%s" % (adv.returncode, procs.log("advisor"))
        db = sqlite3.connect(os.path.join(tmp, "advisor.db"))
        done = db.execute("SELECT count(*), sum(verified) FROM scrubs WHERE state = 'done'").fetchone()
        db.close()
        assert done[0] >= 2 and done[1] > 0, done
        print("advisor_tiering: demoted %d, %d bytes G3 -> G4" %
              (value(fams, "kvplane_migrations", result="demoted"),
               value(fams, "kvplane_migrated_bytes", **{"from": "G3", "to": "G4"})))
    finally:
        procs.close()


def test_advisor_errors(tmp):
    procs = Procs(tmp)
    try:
        nport = free_port()
        start_nats(procs, nport)
        adv = os.path.join(BIN, "tools/kvplane-advisor")
        r = subprocess.run([adv, "-c", advisor_conf(tmp, nport, "127.0.0.1")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "[metrics] listen" in r.stderr, r.stderr
        # A port in use: someone else listens on it.
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run([adv, "-c", advisor_conf(tmp, nport, "127.0.0.1:%d" % port)],
                           capture_output=True, text=True, timeout=30)
        # Exit 1, as the relay's --metrics below: the address is the
        # operator's to change (2 is for the database or NATS).
        assert r.returncode == 1, r.returncode
        assert "[metrics] listen" in r.stderr and "in use" in r.stderr, r.stderr
        r = subprocess.run([os.path.join(BIN, "tools/kvplane-relay"), "-e",
                            "tcp://127.0.0.1:%d" % free_port(), "-w", "w0", "-s",
                            "nats://127.0.0.1:%d" % nport, "--metrics", "127.0.0.1:%d" % port],
                           capture_output=True, text=True, timeout=30)
        busy.close()
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "--metrics" in r.stderr and "in use" in r.stderr, r.stderr
        # No database was made by the advisor that did not start.
        assert not os.path.exists(os.path.join(tmp, "advisor.db"))
    finally:
        procs.close()


def test_relay(tmp):
    procs = Procs(tmp)
    try:
        nport, mport, eport = free_port(), free_port(), free_port()
        nats = start_nats(procs, nport, js=False)
        relay = procs.start("relay", [os.path.join(BIN, "tools/kvplane-relay"), "-e",
                                      "tcp://127.0.0.1:%d" % eport, "-w", "w0", "-e",
                                      "tcp://127.0.0.1:%d" % free_port(), "-w", "w1", "-s",
                                      "nats://127.0.0.1:%d" % nport, "--metrics",
                                      "127.0.0.1:%d" % mport])
        wait_for("relay /readyz 200", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 200)
        assert curl("http://127.0.0.1:%d/healthz" % mport) == (200, "ok")
        assert curl("http://127.0.0.1:%d/x" % mport)[0] == 404
        fams, text = scrape(mport)
        lint(text)
        for n in ["kvplane_relay_events_in", "kvplane_relay_events_out", "kvplane_relay_skipped",
                  "kvplane_relay_gaps", "kvplane_relay_replays", "kvplane_relay_clears",
                  "kvplane_relay_decode_errors", "kvplane_relay_messages"]:
            assert fams[n].type == "counter", (n, fams[n].type)
        assert fams["kvplane_relay_nats_connected"].type == "gauge"
        check_build_info(fams, "kvplane-relay")
        workers = {s.labels["worker"] for s in fams["kvplane_relay_events_in"].samples}
        assert workers == {"w0", "w1"}, workers
        assert value(fams, "kvplane_relay_nats_connected", worker="w1") == 1
        assert value(fams, "kvplane_relay_last_sequence", worker="w0") == -1
        procs.stop(nats)
        wait_for("relay /readyz 503", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 503)
        code, body = curl("http://127.0.0.1:%d/readyz" % mport)
        assert "not connected" in body, body
        fams, _ = scrape(mport)
        assert value(fams, "kvplane_relay_nats_connected") == 0
        r = subprocess.run([os.path.join(BIN, "tools/kvplane-relay"), "-e", "tcp://127.0.0.1:1",
                            "-w", "w0", "--metrics", "127.0.0.1:99999"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "--metrics" in r.stderr, r.stderr
        # NATS back on the same port: the publishers reconnect, ready again
        # (and the relay's last flush at exit does not wait for a server).
        start_nats(procs, nport, js=False)
        wait_for("relay /readyz 200 again",
                 lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 200)
        procs.stop(relay)
        assert relay.returncode == 0, procs.log("relay")
        print("relay: %d families" % len(fams))
    finally:
        procs.close()


def test_relay_http_limits(tmp):
    """kvplane-relay --metrics-timeout and --metrics-per-client: with 400ms
    and 2, a third connection of one address is refused at once, the two
    whose request never ends are cut near 0.4 s (not the default 10 s), and
    /metrics counts both."""
    procs = Procs(tmp)
    try:
        nport, mport = free_port(), free_port()
        start_nats(procs, nport, js=False)
        relay = procs.start("relay", [os.path.join(BIN, "tools/kvplane-relay"), "-e",
                                      "tcp://127.0.0.1:%d" % free_port(), "-w", "w0", "-s",
                                      "nats://127.0.0.1:%d" % nport, "--metrics",
                                      "127.0.0.1:%d" % mport, "--metrics-timeout", "400ms",
                                      "--metrics-per-client", "2"])
        wait_for("relay /readyz 200", lambda: curl("http://127.0.0.1:%d/readyz" % mport)[0] == 200)
        time.sleep(0.2)  # curl's connection closed on the server's side too
        t0 = time.monotonic()
        socks = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", mport), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
            socks.append(s)
            time.sleep(0.05)
        closed = []
        for s in (socks[2], socks[0], socks[1]):  # the refused one first
            try:
                got = s.recv(256)
            except (ConnectionResetError, socket.timeout):
                got = b""
            closed.append(time.monotonic() - t0)
            assert got == b"", got
            s.close()
        assert closed[0] < 0.3, closed  # refused at once
        assert 0.3 <= closed[1] < 2.0 and 0.3 <= closed[2] < 2.0, closed  # cut at the deadline
        fams, _ = scrape(mport)
        assert value(fams, "kvplane_http_requests_timed_out", server="metrics") == 2, \
            value(fams, "kvplane_http_requests_timed_out", server="metrics")
        assert value(fams, "kvplane_http_connections_refused", server="metrics") == 1
        procs.stop(relay)
        assert relay.returncode == 0, procs.log("relay")
    finally:
        procs.close()


def test_advisor_tiering_lease(tmp):
    """Two unpartitioned advisors (a standby pair: each its own consumer and
    database) configured to tier the same G3 and G4 volumes, JetStream mode:
    only the holder of the namespace's tiering lease moves anything (the
    other's rounds wait: no migration row, its controls answer "tiering":
    false naming the holder); when the holder stops, the other takes the
    lease and tiers."""
    procs = Procs(tmp)
    try:
        nport = free_port()
        start_nats(procs, nport)
        vols = os.path.join(tmp, "volumes")
        os.makedirs(os.path.join(vols, "g3"))
        plugins = os.path.join(BIN, "plugins")
        extra = ("[tiering]\nenabled = true\nplugin_dir = %s\ninterval = 200ms\ngrace = 0s\n"
                 "min_residence = 0s\nlease_ms = 1000ms\n" % plugins)
        for w in ("sim-0", "sim-1"):
            extra += ("[volume g3-%s]\ntier = 3\nplugin = posix\ncapacity = 128KiB\npath = %s\n"
                      "fsync = off\n" % (w, os.path.join(vols, "g3", w)))
        extra += ("[volume g4-shared]\ntier = 4\nplugin = posix\ncapacity = 1GiB\npath = %s\n"
                  "fsync = off\n" % os.path.join(vols, "g4"))
        advs, mports, dbs = [], [], []
        for i in range(2):
            d = os.path.join(tmp, "a%d" % i)
            os.makedirs(d)
            mports.append(free_port())
            conf = advisor_conf(d, nport, "127.0.0.1:%d" % mports[i],
                                "[jetstream]\nconsumer = a%d\n" % i + extra)
            dbs.append(os.path.join(d, "advisor.db"))
            advs.append(procs.start("advisor%d" % i,
                                    [os.path.join(BIN, "tools/kvplane-advisor"), "-c", conf]))
            wait_for("advisor %d /readyz 200" % i,
                     lambda: curl("http://127.0.0.1:%d/readyz" % mports[i])[0] == 200)
            if i == 0:
                wait_for("advisor 0 holds the lease", lambda: value(
                    scrape(mports[0])[0], "kvplane_tier_leases_held") == 1)
        # Caught up, it wants the lease and waits (the gauges follow the
        # metrics snapshot, refreshed by the advisor's tick).
        wait_for("advisor 1 waits for the lease", lambda: value(
            scrape(mports[1])[0], "kvplane_tier_leases_waiting") == 1)
        assert value(scrape(mports[1])[0], "kvplane_tier_leases_held") == 0

        def sim(workers):
            p = procs.start("sim", [os.path.join(BIN, "tools/kvplane-sim"), "--trace",
                                    os.path.join(SRC, "data/conversation_trace.jsonl.gz"),
                                    "--server", "nats://127.0.0.1:%d" % nport, "--mode",
                                    "jetstream", "--workers", str(workers), "--g1-blocks", "128",
                                    "--g2-blocks", "256", "--limit", "3000", "--volumes", vols,
                                    "--plugin-dir", plugins])
            assert p.wait(timeout=45) == 0, "kvplane-sim failed:\n" + procs.log("sim")

        def moved(i):
            return value(scrape(mports[i])[0], "kvplane_migrations", result="demoted")

        def rows(i):
            db = sqlite3.connect(dbs[i])
            n = db.execute("SELECT count(*) FROM migrations").fetchone()[0]
            db.close()
            return n

        def g34(i):
            db = sqlite3.connect(dbs[i])
            r = db.execute("SELECT hash, worker, tier, volume FROM block_locations "
                           "WHERE tier >= 3 ORDER BY 1, 2, 3, 4").fetchall()
            db.close()
            return r

        sim(1)
        wait_for("advisor 0 demotes", lambda: moved(0) > 0)
        time.sleep(2.0)  # two lease periods more
        assert moved(1) == 0 and rows(1) == 0, (moved(1), rows(1))
        # The standby's G3/G4 rows are the holder's: the holder's moves
        # reach it as its worker's events, the sources it deleted too.
        try:
            wait_for("the standby's G3 and G4 rows equal the holder's",
                     lambda: g34(0) == g34(1))
        except AssertionError:
            a, b = set(g34(0)), set(g34(1))
            print("holder only: %s\nstandby only: %s" % (sorted(a - b)[:10], sorted(b - a)[:10]))
            raise
        assert any(r[2] == 4 for r in g34(1)), "no G4 row"
        out = subprocess.run([os.path.join(BIN, "tools", "kvplane"), "pin", "-s",
                              "nats://127.0.0.1:%d" % nport, "0x1"], capture_output=True,
                             text=True)
        assert out.returncode == 0, (out.stdout, out.stderr)
        pin = json.loads(out.stdout)
        # a0 pinned; a1 answered "tiering": false (listed in not_tiering
        # when its reply came within the client's grace) and kept no pin.
        assert pin["changed"] == 1 and pin["advisors"] == ["a0"], pin
        assert "a0" not in json.dumps(pin.get("not_tiering", [])), pin
        db = sqlite3.connect(dbs[1])
        assert db.execute("SELECT count(*) FROM pins").fetchone()[0] == 0
        db.close()
        both = []

        def two_replies():
            # Gathered: both advisors' replies, once both answered within
            # the client's grace (a slow build may miss it once).
            out = json.loads(subprocess.run(
                [os.path.join(BIN, "tools", "kvplane"), "stats", "-s",
                 "nats://127.0.0.1:%d" % nport], check=True, capture_output=True,
                text=True).stdout)
            both[:] = out.get("replies", [])
            return len(both) == 2
        wait_for("both advisors' stats replies", two_replies)
        leases = sorted(json.dumps(r["tiering"]["leases"]) for r in both)
        assert '"held": false, "holder": "advisor a0' in leases[0], leases
        assert '"held": true, "holder": "this advisor"' in leases[1], leases
        before = moved(0)

        # The holder stops (its lease released): advisor 1 takes it and tiers.
        procs.stop(advs[0])
        assert advs[0].returncode == 0, procs.log("advisor0")
        t0 = time.time()
        wait_for("advisor 1 holds the lease", lambda: value(
            scrape(mports[1])[0], "kvplane_tier_leases_held") == 1)
        took = time.time() - t0
        sim(2)  # sim-1 fills its own G3 now
        wait_for("advisor 1 demotes", lambda: moved(1) > 0)
        f1, _ = scrape(mports[1])
        assert value(f1, "kvplane_migrations", result="failed") == 0
        print("advisor_tiering_lease: advisor 0 demoted %d while advisor 1 made no move; advisor 1 "
              "held the lease %.2f s after advisor 0 stopped and demoted %d" %
              (before, took, moved(1)))
    finally:
        procs.close()


def main():
    tests = {"advisor": test_advisor, "advisor_tiering": test_advisor_tiering,
             "advisor_tiering_lease": test_advisor_tiering_lease,
             "advisor_errors": test_advisor_errors, "relay": test_relay,
             "relay_http_limits": test_relay_http_limits}
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in tests:
        sys.exit("usage: test_metrics_scrape.py %s" % "|".join(tests))
    tmp = tempfile.mkdtemp(prefix="kvp-metrics-")
    try:
        tests[name](tmp)
    except BaseException:
        for f in sorted(os.listdir(tmp)):
            if f.endswith(".log"):
                with open(os.path.join(tmp, f)) as fh:
                    sys.stderr.write("--- %s\n%s" % (f, fh.read()[-4000:]))
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok " + name)


if __name__ == "__main__":
    main()
