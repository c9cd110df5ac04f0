"""kvplane: Python binding (ctypes) over libkvplane for custom engines.

Why this file is long: the package is one module (Publisher, Client, the
hashing helpers) so that it imports with no build step.

    import kvplane
    with kvplane.Publisher("nats://127.0.0.1:4222", "default", "w0", block_size=16) as pub:
        hashes = pub.stored(token_ids)        # kvplane hashes of the full blocks
        pub.removed(hashes[-1:])
    with kvplane.Client("nats://127.0.0.1:4222", "default") as c:
        c.match(hashes)                       # [Match(worker='w0', dp_rank=0, tier=1, length=...)]

The library is found through $KVPLANE_LIB, then the build tree next to this
package (build/src/libkvplane.so), then the system's library path. Every
failure of a library call raises kvplane.Error carrying the KVP_E code, its
name and the library's message; bad arguments raise kvplane.Error with
KVP_EINVAL before anything is sent.
"""
import array
import collections
import ctypes
import json
import threading

from . import _lib

__all__ = ["Error", "Publisher", "Client", "Match", "hash_blocks", "hash_seed", "match",
           "TIER_ALL", "TIER_G1", "TIER_G2", "TIER_G3", "TIER_G4"]

# kvp_tier_t, include/kvplane/event.h.
TIER_ALL, TIER_G1, TIER_G2, TIER_G3, TIER_G4 = 0, 1, 2, 3, 4
_TIER_NAMES = {"ALL": 0, "G1": 1, "G2": 2, "G3": 3, "G4": 4}

# Codes of include/kvplane/status.h (minus the position in the table).
EINVAL = -1
ENOMEM = -2
EPROTO = -9
ETIER = -10
ECLOSED = -16

_MASK64 = (1 << 64) - 1
_ERRLEN = 1024


class Error(Exception):
    """A kvplane failure: code is the negative KVP_E value, name its symbol
    ("KVP_EINVAL"), message what failed and why."""

    def __init__(self, code, message):
        self.code = code
        self.name = _lib.lib().kvp_err_name(code).decode()
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


def _fail(code, err=None, what=None):
    """Raises Error for a KVP_E code, with the library's one-line message in
    err when it wrote one, else kvp_strerror's text, prefixed by what."""
    text = err.value.decode(errors="replace") if err is not None and err.value else ""
    if not text:
        text = _lib.lib().kvp_strerror(code).decode()
    raise Error(code, "%s: %s" % (what, text) if what else text)


def _invalid(message):
    raise Error(EINVAL, message)


def _tier(tier, allow_all=False):
    if isinstance(tier, str) and tier.upper() in _TIER_NAMES:
        tier = _TIER_NAMES[tier.upper()]
    if isinstance(tier, bool) or not isinstance(tier, int) or not (
            (0 if allow_all else 1) <= tier <= _lib.TIER_MAX):
        _invalid("tier: %r is not a tier (1..4 or 'G1'..'G4'%s)"
                 % (tier, ", or 0 / 'ALL'" if allow_all else ""))
    return tier


def _u32_array(values, what):
    """values as a C uint32_t array (ctypes view, count, the array that owns
    the memory); Error naming the first element that is not a token id."""
    if isinstance(values, (str, bytes, int)) or values is None:
        _invalid("%s: expected a sequence of ints, got %s" % (what, type(values).__name__))
    if not isinstance(values, (list, tuple, range, array.array)):
        values = list(values)
    try:
        # One C-speed conversion; it refuses non-ints and values out of range.
        arr = array.array("I", values)
    except (TypeError, OverflowError):
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 0xFFFFFFFF:
                _invalid("%s[%d]: %r is not a token id (an int in 0..2^32-1)" % (what, i, v))
        raise
    if len(arr) == 0:
        return None, 0, arr
    return (ctypes.c_uint32 * len(arr)).from_buffer(arr), len(arr), arr


def _hash(v, what):
    # Hashes are u64; the signed form SQLite and JSON show is accepted too.
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v <= _MASK64:
        _invalid("%s: %r is not a block hash (an int in -2^63..2^64-1)" % (what, v))
    return v & _MASK64


def _u64_array(values, what):
    if isinstance(values, (str, bytes, int)):
        _invalid("%s: expected a sequence of hashes, got %s" % (what, type(values).__name__))
    out = [_hash(v, "%s[%d]" % (what, i)) for i, v in enumerate(values)]
    return (ctypes.c_uint64 * len(out))(*out), len(out)


def _text(v, what, allow_none=True):
    if v is None and allow_none:
        return None
    if not isinstance(v, str):
        _invalid("%s: expected a str, got %s" % (what, type(v).__name__))
    if "\0" in v:
        _invalid("%s: contains a NUL character" % what)
    return v.encode()


def _uint(v, what, lo, hi):
    """v when it is an int in lo..hi, else Error naming what: ctypes would
    store a larger int in a uint32 field modulo 2^32 (2^32 + 5 as 5) and a
    negative one as a huge one, without a word."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        _invalid("%s: %r is not an int in %d..%d" % (what, v, lo, hi))
    return v


_U32 = 0xFFFFFFFF
_U64 = _MASK64


def _timeout(v, what="timeout_ms"):
    # The library's timeouts are uint32 milliseconds; 0 would never wait.
    return _uint(v, what, 1, _U32)


def _block_size(block_size):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or not (
            0 < block_size <= 0xFFFFFFFF):
        _invalid("block_size: %r is not a positive int" % (block_size,))
    return block_size


def hash_seed(lora_name=None):
    """The hashing seed: 1337, or 1337 + xxh3_64(lora_name) when a LoRA
    adapter or cache namespace name is given (DESIGN.md, Hashing)."""
    return _lib.lib().kvp_hash_seed(_text(lora_name, "lora_name"))


def _chain(tokens, n, block_size, seed, parent_hash):
    """Sequence hashes of the full blocks of tokens, chained from
    parent_hash when given (the parent's sequence hash), as the C side and
    kvplane-relay do."""
    L = _lib.lib()
    nblocks = n // block_size
    if nblocks == 0:
        return []
    if parent_hash is None:
        out = (ctypes.c_uint64 * nblocks)()
        L.kvp_hash_sequence(tokens, n, block_size, seed, out, nblocks)
        return list(out)
    prev, out = parent_hash, []
    base = ctypes.addressof(tokens)
    for i in range(nblocks):
        blk = ctypes.cast(base + 4 * i * block_size, ctypes.POINTER(ctypes.c_uint32))
        prev = L.kvp_hash_chain(prev, L.kvp_hash_block(blk, block_size, seed), seed)
        out.append(prev)
    return out


def hash_blocks(token_ids, block_size, lora_name=None, parent_hash=None):
    """kvplane sequence hashes (ints in 0..2^64-1) of the full blocks of
    token_ids, block_size tokens each; a trailing partial block is not
    hashed. lora_name salts the seed; parent_hash chains the first block to
    a preceding block's hash. Raises Error (KVP_EINVAL) for a token that is
    not an int in 0..2^32-1 or a block_size that is not positive."""
    block_size = _block_size(block_size)
    tokens, n, _keep = _u32_array(token_ids, "token_ids")
    parent = None if parent_hash is None else _hash(parent_hash, "parent_hash")
    return _chain(tokens, n, block_size, hash_seed(lora_name), parent)


def _nats_opts(servers, nats):
    """A kvp_nats_opts_t from servers (a URL, comma-separated URLs or a list)
    and the extra options by name (user, password, token, creds, tls_ca,
    tls_cert, tls_key, connect_timeout_ms)."""
    L = _lib.lib()
    o = _lib.NatsOpts()
    L.kvp_nats_opts_init(ctypes.byref(o))
    if not isinstance(servers, str):
        servers = ",".join(servers)
    err = ctypes.create_string_buffer(_ERRLEN)
    for name, value in [("servers", servers)] + list(nats.items()):
        if value is None:
            continue
        rc = L.kvp_nats_opts_set(ctypes.byref(o), _text(name, "option name"),
                                 _text(str(value), name), err, _ERRLEN)
        if rc:
            _fail(rc, err)
    return o


class Publisher:
    """A worker's event publisher (DESIGN.md, Publisher): blocks stored,
    removed, accessed and cleared in the worker's KV cache, published as
    kvplane event batches on kvplane.ev.<ns>.<worker>.

    Calls are thread-safe and return once the event is queued; flush()
    waits until the queued events are sent. Without a snapshot source the
    publisher counts the advisor's resync requests (stats()['resyncs'])
    but cannot answer them.

    servers: NATS URL(s); ns: namespace; worker: worker id
    ([A-Za-z0-9_-]{1,64}); block_size: tokens per block. Keyword options:
    dp_rank, model, mode ('core' or 'jetstream'), stream, stream_create,
    overflow ('block' or 'drop'), coalesce, block_bytes, max_delay_ms,
    queue_capacity, heartbeat_ms, close_timeout_ms, and the NATS options
    user, password, token, creds, tls_ca, tls_cert, tls_key,
    connect_timeout_ms.

    Resyncs: with snapshot=fn, fn(tier) returns the worker's registered
    set of that tier (a list of hashes, or (hashes, parents) with None for
    "no parent"), or None for a tier it does not have; snapshot_tiers (a
    set of tiers, default {1, 2, 3}) says which tiers are asked, and
    snapshot_volumes ({3: "ssd0"}) names a G3/G4 tier's volume. When the
    advisor asks for a resync (or request_resync() is called), the next
    poll(), made on the thread that owns that state, calls fn and queues
    the snapshot at that point of the event stream.
    """

    _MODES = {"core": 0, "jetstream": 1}
    _OVERFLOW = {"block": 0, "drop": 1}

    def __init__(self, servers, ns, worker, block_size, *, dp_rank=0, model=None, mode="core",
                 stream=None, stream_create=False, overflow="block", coalesce=True,
                 block_bytes=0, max_delay_ms=0, queue_capacity=0, heartbeat_ms=0,
                 close_timeout_ms=0, snapshot=None, snapshot_tiers=None, snapshot_volumes=None,
                 **nats):
        L = _lib.lib()
        self._pub = None
        self._cv = threading.Condition()
        self._calls = 0
        self._closed = False
        self.worker = worker
        self.block_size = _block_size(block_size)
        if mode not in self._MODES:
            _invalid("mode: %r is not 'core' or 'jetstream'" % (mode,))
        if overflow not in self._OVERFLOW:
            _invalid("overflow: %r is not 'block' or 'drop'" % (overflow,))
        for name, v, hi in (("dp_rank", dp_rank, _U32), ("block_bytes", block_bytes, _U64),
                            ("max_delay_ms", max_delay_ms, _U32),
                            ("queue_capacity", queue_capacity, _U32),
                            ("heartbeat_ms", heartbeat_ms, _U32),
                            ("close_timeout_ms", close_timeout_ms, _U32)):
            _uint(v, name, 0, hi)
        o = _lib.PublisherOpts()
        L.kvp_publisher_opts_init(ctypes.byref(o))
        o.nats = _nats_opts(servers, nats)
        # The C struct borrows these until open copies them.
        self._strings = [_text(ns, "ns", False), _text(worker, "worker", False),
                         _text(model, "model"), _text(stream, "stream")]
        o.ns, o.worker_id, o.model = self._strings[0], self._strings[1], self._strings[2]
        if stream is not None:
            o.stream = self._strings[3]
        o.dp_rank = dp_rank
        o.mode = self._MODES[mode]
        o.stream_create = 1 if stream_create else 0
        o.overflow = self._OVERFLOW[overflow]
        o.coalesce = 1 if coalesce else 0
        o.block_tokens = self.block_size
        o.block_bytes = block_bytes
        if max_delay_ms:
            o.max_delay_ms = max_delay_ms
        if queue_capacity:
            o.queue_capacity = queue_capacity
        if heartbeat_ms:
            o.heartbeat_ms = heartbeat_ms
        if close_timeout_ms:
            o.close_timeout_ms = close_timeout_ms
        self.block_bytes = block_bytes
        self._snapshot = snapshot
        self._snapshot_error = None
        self._snapshot_cb = None
        if snapshot is not None:
            if not callable(snapshot):
                _invalid("snapshot: %r is not callable" % (snapshot,))
            # Kept on self: the C publisher calls it for as long as it lives.
            self._snapshot_cb = _lib.SNAPSHOT_FN(self._take_snapshot)
            o.snapshot = self._snapshot_cb
        if snapshot_tiers is not None:
            o.snapshot_tiers = sum(1 << _tier(t) for t in set(snapshot_tiers))
        for t, vol in (snapshot_volumes or {}).items():
            v = _text(vol, "snapshot_volumes[%r]" % (t,), False)
            if len(v) > 31:
                _invalid("snapshot_volumes[%r]: %r is longer than 31 bytes" % (t, vol))
            o.snapshot_volumes[_tier(t)].value = v
        pub = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = L.kvp_publisher_open(ctypes.byref(o), ctypes.byref(pub), err, _ERRLEN)
        if rc:
            _fail(rc, err, "publisher %s" % worker)
        self._pub = pub

    # Every call holds a use count so close() never frees the C publisher
    # under a call in progress (publisher.h: no call may run while close does).
    def _enter(self):
        with self._cv:
            if self._closed:
                raise Error(ECLOSED, "publisher %s: closed" % self.worker)
            self._calls += 1
        return self._pub

    def _leave(self):
        with self._cv:
            self._calls -= 1
            if self._calls == 0:
                self._cv.notify_all()

    def _call(self, what, fn, *args):
        pub = self._enter()
        try:
            rc = fn(pub, *args)
        finally:
            self._leave()
        if rc:
            _fail(rc, None, "publisher %s: %s" % (self.worker, what))

    def stored(self, token_ids=None, block_hashes=None, parent_hash=None, lora_name=None, tier=1,
               *, volume=None, lora_id=0):
        """Announces blocks registered in tier. When block_hashes is None
        they are the kvplane hashes of the full blocks of token_ids
        (lora_name salting the seed, chained from parent_hash, the sequence
        hash of the block before them, when given); a trailing partial block
        is not announced. Returns the announced hashes (empty when there is
        no full block: nothing is sent)."""
        tier = _tier(tier)
        vol = _text(volume, "volume")
        if isinstance(lora_id, bool) or not isinstance(lora_id, int) or not (
                -(1 << 31) <= lora_id < (1 << 31)):
            _invalid("lora_id: %r is not an int32" % (lora_id,))
        parent = None if parent_hash is None else _hash(parent_hash, "parent_hash")
        if block_hashes is None:
            if token_ids is None:
                _invalid("stored: give token_ids or block_hashes")
            hashes = hash_blocks(token_ids, self.block_size, lora_name, parent)
        else:
            hashes = [_hash(v, "block_hashes[%d]" % i) for i, v in enumerate(
                _u64_check(block_hashes, "block_hashes"))]
            if token_ids is not None:
                _t, n, _k = _u32_array(token_ids, "token_ids")
                if n // self.block_size != len(hashes):
                    _invalid("stored: %d block_hashes for %d full blocks of token_ids"
                             % (len(hashes), n // self.block_size))
        if not hashes:
            return []
        arr = (ctypes.c_uint64 * len(hashes))(*hashes)
        par = ctypes.byref(ctypes.c_uint64(parent)) if parent is not None else None
        self._call("stored", _lib.lib().kvp_publisher_stored, tier, vol, par, arr, len(hashes),
                   self.block_size, self.block_bytes, lora_id)
        return hashes

    def removed(self, block_hashes, tier=1, *, volume=None):
        """Announces blocks no longer registered in tier."""
        tier = _tier(tier)
        vol = _text(volume, "volume")
        arr, n = _u64_array(block_hashes, "block_hashes")
        if n == 0:
            return
        self._call("removed", _lib.lib().kvp_publisher_removed, tier, vol, arr, n)

    def accessed(self, block_hashes, tier=1, hit_counts=None):
        """Announces hits on blocks of tier (one each, or hit_counts[i])."""
        tier = _tier(tier)
        arr, n = _u64_array(block_hashes, "block_hashes")
        hits = None
        if hit_counts is not None:
            hits, nh, _keep = _u32_array(hit_counts, "hit_counts")
            if nh != n:
                _invalid("accessed: %d hit_counts for %d block_hashes" % (nh, n))
        if n == 0:
            return
        self._call("accessed", _lib.lib().kvp_publisher_accessed, tier, arr, hits, n)

    def cleared(self, tier=TIER_ALL):
        """Announces that every block of tier (default: of every tier) is gone."""
        self._call("cleared", _lib.lib().kvp_publisher_cleared, _tier(tier, allow_all=True))

    @staticmethod
    def _c_array(values):
        """values (ints) in a malloc'd uint64_t array the publisher frees;
        None when out of memory. Never NULL for an empty set."""
        addr = _lib.malloc(8 * max(len(values), 1))
        if addr and values:
            ctypes.memmove(addr, (ctypes.c_uint64 * len(values))(*values), 8 * len(values))
        return ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint64)) if addr else None

    def _take_snapshot(self, _ctx, tier, hashes_out, parents_out, n_out):
        # Called by kvp_publisher_poll on poll()'s thread. An exception cannot
        # cross the C frames: it is kept for poll() to raise, and the C side
        # keeps the resync due.
        try:
            got = self._snapshot(tier)
            if got is None:
                return ETIER
            hashes, parents = got if isinstance(got, tuple) else (got, None)
            what = "snapshot(%d)" % tier
            hs = [_hash(v, "%s hashes[%d]" % (what, i)) for i, v in enumerate(
                _u64_check(hashes, what + " hashes"))]
            ps = None
            if parents is not None:
                parents = list(_u64_check(parents, what + " parents"))
                if len(parents) != len(hs):
                    _invalid("%s: %d parents for %d hashes" % (what, len(parents), len(hs)))
                ps = [hs[i] if v is None else _hash(v, "%s parents[%d]" % (what, i))
                      for i, v in enumerate(parents)]
            h = self._c_array(hs)
            p = self._c_array(ps) if ps is not None else None
            # Set before any failure return: the publisher frees both then.
            hashes_out[0] = h
            parents_out[0] = p
            n_out[0] = len(hs)
            if h is None or (ps is not None and p is None):
                self._snapshot_error = Error(ENOMEM, "%s: no memory for %d hashes"
                                             % (what, len(hs)))
                return ENOMEM
            return 0
        except BaseException as e:  # noqa: B902 - reported by poll()
            self._snapshot_error = e
            return EINVAL

    def request_resync(self):
        """Marks a resync as due, as the advisor's request would; the next
        poll() takes the snapshot."""
        pub = self._enter()
        try:
            _lib.lib().kvp_publisher_request_resync(pub)
        finally:
            self._leave()

    def poll(self):
        """When a resync is due and the link is up, calls the snapshot
        function for each tier and queues the snapshot; returns True then,
        False when nothing was due (or no snapshot function was given).
        Call it from the thread that owns the cache state (an engine's
        scheduler loop). An exception from the snapshot function is raised
        here (chained) and the resync stays due."""
        self._snapshot_error = None
        pub = self._enter()
        try:
            rc = _lib.lib().kvp_publisher_poll(pub)
        finally:
            self._leave()
        if rc < 0:
            cause, self._snapshot_error = self._snapshot_error, None
            if isinstance(cause, Error):
                raise Error(cause.code, "publisher %s: poll: %s" % (self.worker, cause.message)) \
                    from cause
            if cause is not None:
                raise Error(rc, "publisher %s: poll: the snapshot function raised %s: %s"
                            % (self.worker, type(cause).__name__, cause)) from cause
            _fail(rc, None, "publisher %s: poll" % self.worker)
        return rc == 1

    @property
    def epoch(self):
        """This open's epoch (Unix time in ns at open), as batches carry it."""
        pub = self._enter()
        try:
            return _lib.lib().kvp_publisher_epoch(pub)
        finally:
            self._leave()

    def flush(self, timeout_ms=5000):
        """Waits until every event queued before the call is sent (core mode:
        the server has it) or acked (JetStream); Error KVP_ETIMEDOUT after
        timeout_ms."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not (
                0 <= timeout_ms <= 0xFFFFFFFF):
            _invalid("timeout_ms: %r is not a non-negative int" % (timeout_ms,))
        self._call("flush", _lib.lib().kvp_publisher_flush, timeout_ms)

    def stats(self):
        """The publisher's cumulative counters (publisher.h,
        kvp_publisher_stats_t) as a dict."""
        s = _lib.PublisherStats()
        pub = self._enter()
        try:
            _lib.lib().kvp_publisher_stats(pub, ctypes.byref(s))
        finally:
            self._leave()
        return {name: getattr(s, name) for name, _t in s._fields_}

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Flushes (for at most close_timeout_ms), then closes the connection.
        Waits for calls in progress on other threads; later calls raise
        Error KVP_ECLOSED. Closing twice is harmless."""
        with self._cv:
            if self._closed or self._pub is None:
                self._closed = True
                return
            self._closed = True
            while self._calls:
                self._cv.wait()
            pub, self._pub = self._pub, None
        _lib.lib().kvp_publisher_close(pub)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _u64_check(values, what):
    if isinstance(values, (str, bytes, int)):
        _invalid("%s: expected a sequence of hashes, got %s" % (what, type(values).__name__))
    return values


Match = collections.namedtuple("Match", "worker dp_rank tier length")
Match.__doc__ = """One row of a match reply: worker (dp_rank) holds the first
length hashes of the query consecutively in tier (1..4)."""


class Client:
    """Queries to the advisor of namespace ns over NATS (include/kvplane/
    client.h): match() and stats(), and the operator's tiering controls
    pin(), unpin(), move() and delete(). Thread-safe; close() or use as a
    context manager. NATS options as for Publisher."""

    def __init__(self, servers, ns="default", *, timeout_ms=2000, **nats):
        L = _lib.lib()
        self._c = None
        self.ns = ns
        self.timeout_ms = _timeout(timeout_ms)
        o = _nats_opts(servers, nats)
        c = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = L.kvp_client_open(ctypes.byref(o), _text(ns, "ns", False), ctypes.byref(c), err,
                               _ERRLEN)
        if rc:
            _fail(rc, err, "client")
        self._c = c

    def _wait(self, timeout_ms):
        """The call's timeout: timeout_ms, checked, else the client's."""
        return self.timeout_ms if timeout_ms is None else _timeout(timeout_ms)

    def _handle(self):
        if self._c is None:
            raise Error(ECLOSED, "client of namespace %s: closed" % self.ns)
        return self._c

    def match(self, hashes, timeout_ms=None):
        """For sequence hashes (a request's blocks in order), which workers
        hold how many leading blocks in which tier: a list of Match, longest
        first; empty when none holds the first block."""
        arr, n = _u64_array(hashes, "hashes")
        if n == 0:
            _invalid("match: no hashes")
        L = _lib.lib()
        cap = 64
        err = ctypes.create_string_buffer(_ERRLEN)
        while True:
            rows = (_lib.Match * cap)()
            got = ctypes.c_size_t()
            rc = L.kvp_client_match(self._handle(), arr, n,
                                    self._wait(timeout_ms), rows,
                                    cap, ctypes.byref(got), err, _ERRLEN)
            if rc:
                _fail(rc, err)
            if got.value <= cap:
                return [Match(r.worker.decode(), r.dp_rank, r.tier, r.length)
                        for r in rows[:got.value]]
            cap = got.value  # more rows than room: ask again with room for all

    def match_all(self, hashes, timeout_ms=None):
        """match() answered by every advisor for its partitions and merged by
        the library (kvp_client_match_all: the freshest standby per
        partition). Returns (matches, info): matches as match() returns
        them, info a dict with "partitions" (the deployment's count, 0 when
        not partitioned), "replies", "used" and "missing" (the partitions no
        advisor answered for within the timeout: their workers are absent
        from matches)."""
        arr, n = _u64_array(hashes, "hashes")
        if n == 0:
            _invalid("match_all: no hashes")
        L = _lib.lib()
        cap = 64
        err = ctypes.create_string_buffer(_ERRLEN)
        while True:
            rows = (_lib.Match * cap)()
            got = ctypes.c_size_t()
            info = _lib.GatherInfo()
            rc = L.kvp_client_match_all(self._handle(), arr, n,
                                        self._wait(timeout_ms),
                                        rows, cap, ctypes.byref(got), ctypes.byref(info), err,
                                        _ERRLEN)
            if rc:
                _fail(rc, err)
            if got.value <= cap:
                nm = min(info.nmissing, _lib.GATHER_MISSING_MAX)
                return ([Match(r.worker.decode(), r.dp_rank, r.tier, r.length)
                         for r in rows[:got.value]],
                        {"partitions": info.partitions, "replies": info.replies,
                         "used": info.used, "missing": list(info.missing[:nm])})
            cap = got.value

    def match_tokens(self, token_ids, block_size, lora_name=None, timeout_ms=None):
        """match() of hash_blocks(token_ids, block_size, lora_name)."""
        hashes = hash_blocks(token_ids, block_size, lora_name)
        if not hashes:
            _invalid("match_tokens: %d tokens make no full block of %d"
                     % (len(token_ids), block_size))
        return self.match(hashes, timeout_ms)

    def stats(self, timeout_ms=None):
        """The advisor's stats reply as a dict (docs/stats.md)."""
        return json.loads(self._request("stats", "{}", timeout_ms))

    def _tier_control(self, op, hashes, token_ids, block_size, lora_name, timeout_ms, **extra):
        req = {"op": op}
        if (hashes is None) == (token_ids is None):
            _invalid("%s: give hashes or token_ids (with block_size)" % op)
        if hashes is not None:
            arr, n = _u64_array(_u64_check(hashes, "hashes"), "hashes")
            if n == 0:
                _invalid("%s: no hashes" % op)
            req["hashes"] = ["%016x" % arr[i] for i in range(n)]
        else:
            req["hashes"] = ["%016x" % h for h in hash_blocks(token_ids, block_size, lora_name)]
            if not req["hashes"]:
                _invalid("%s: %d tokens make no full block of %d" % (op, len(token_ids), block_size))
        req.update({k: v for k, v in extra.items() if v is not None})
        # Every advisor's reply, merged by the library (kvp_client_tier_all):
        # partitioned advisors each act on their own partitions' blocks.
        L = _lib.lib()
        out = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = L.kvp_client_tier_all(self._handle(), json.dumps(req).encode(),
                                   self._wait(timeout_ms),
                                   ctypes.byref(out), err, _ERRLEN)
        if rc:
            _fail(rc, err)
        try:
            rep = json.loads(ctypes.string_at(out).decode())
        finally:
            L.kvp_client_reply_free(out)
        if "error" in rep:
            raise Error(EPROTO, "%s: %s" % (op, rep["error"]))
        return rep

    def pin(self, hashes=None, *, token_ids=None, block_size=None, lora_name=None, note=None,
            timeout_ms=None):
        """Pins blocks (the last block of a prefix pins its ancestors too):
        the advisor's tiering engine never demotes or evicts them; kept in
        its database. Refused (Error) past a volume's capacity. Returns the
        reply of every advisor merged (kvp_client_tier_all: partitioned
        advisors each pin their own partitions' blocks): {"op", "blocks",
        "changed", "pins", "pinned_blocks", "advisors", "partitions",
        "missing"}."""
        return self._tier_control("pin", hashes, token_ids, block_size, lora_name, timeout_ms,
                                  note=note)

    def unpin(self, hashes=None, *, token_ids=None, block_size=None, lora_name=None,
              timeout_ms=None):
        """Removes pins made by pin()."""
        return self._tier_control("unpin", hashes, token_ids, block_size, lora_name, timeout_ms)

    def move(self, tier, hashes=None, *, token_ids=None, block_size=None, lora_name=None,
             volume=None, timeout_ms=None):
        """Moves blocks to a G3 (tier 3) or G4 (tier 4) volume now, journaled
        like every move: {"op", "blocks", "queued", "skipped", "in_flight"
        (blocks a running round moves now: decided after it)}."""
        return self._tier_control("move", hashes, token_ids, block_size, lora_name, timeout_ms,
                                  tier=tier, volume=volume)

    def delete(self, hashes=None, *, token_ids=None, block_size=None, lora_name=None, tier=None,
               timeout_ms=None):
        """Deletes blocks from the advisor's G3 and G4 volumes (or tier 3 or
        4 only), journaled and announced, and with them the prefix's
        continuations there (the blocks below its last block; not the
        siblings of its inner blocks): {"op", "blocks", "queued",
        "skipped", "continuations", "in_flight"}. Refused (Error) for a
        pinned block."""
        return self._tier_control("delete", hashes, token_ids, block_size, lora_name, timeout_ms,
                                  tier=tier)

    def _request(self, call, body, timeout_ms):
        L = _lib.lib()
        rep = ctypes.c_void_p()
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = L.kvp_client_request(self._handle(), call.encode(), body.encode(),
                                  self._wait(timeout_ms),
                                  ctypes.byref(rep), err, _ERRLEN)
        if rc:
            _fail(rc, err)
        try:
            return ctypes.string_at(rep).decode()
        finally:
            L.kvp_client_reply_free(rep)

    def close(self):
        """Closes the connection; closing twice is harmless."""
        c, self._c = self._c, None
        if c is not None:
            _lib.lib().kvp_client_close(c)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def match(hashes, servers="nats://127.0.0.1:4222", ns="default", timeout_ms=2000, **nats):
    """One-shot match(): connects, asks the advisor, closes."""
    with Client(servers, ns, timeout_ms=timeout_ms, **nats) as c:
        return c.match(hashes)
