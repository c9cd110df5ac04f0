"""Loading libkvplane and declaring the C functions the binding calls.

The structs below mirror the C headers field for field; the header each one
comes from is named on it. tests/python/test_binding.py compares their sizes
and offsets with the C compiler's (tests/python/abi.c), so a header change
that is not mirrored here fails a test instead of corrupting memory.
"""
import ctypes
import ctypes.util
import os
import threading

# include/kvplane/event.h
TIER_ALL = 0
TIER_MAX = 4

# include/kvplane/subjects.h
SUBJECT_TOKEN_MAX = 64


class NatsOpts(ctypes.Structure):
    """kvp_nats_opts_t, include/kvplane/nats.h."""
    _fields_ = [
        ("servers", ctypes.c_char * 1024),
        ("user", ctypes.c_char * 128),
        ("password", ctypes.c_char * 256),
        ("token", ctypes.c_char * 256),
        ("creds", ctypes.c_char * 512),
        ("tls_ca", ctypes.c_char * 512),
        ("tls_cert", ctypes.c_char * 512),
        ("tls_key", ctypes.c_char * 512),
        ("connect_timeout_ms", ctypes.c_int64),
    ]


# kvp_snapshot_fn, include/kvplane/publisher.h. The arrays it returns are
# freed by the publisher with free(): they come from malloc() below.
SNAPSHOT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                               ctypes.POINTER(ctypes.POINTER(ctypes.c_uint64)),
                               ctypes.POINTER(ctypes.POINTER(ctypes.c_uint64)),
                               ctypes.POINTER(ctypes.c_size_t))


class PublisherOpts(ctypes.Structure):
    """kvp_publisher_opts_t, include/kvplane/publisher.h."""
    _fields_ = [
        ("nats", NatsOpts),
        ("ns", ctypes.c_char_p),
        ("worker_id", ctypes.c_char_p),
        ("dp_rank", ctypes.c_uint32),
        ("model", ctypes.c_char_p),
        ("mode", ctypes.c_int),
        ("stream", ctypes.c_char_p),
        ("stream_create", ctypes.c_int),
        ("batch_max_events", ctypes.c_size_t),
        ("batch_max_blocks", ctypes.c_size_t),
        ("batch_max_bytes", ctypes.c_size_t),
        ("max_delay_ms", ctypes.c_uint32),
        ("queue_capacity", ctypes.c_size_t),
        ("overflow", ctypes.c_int),
        ("coalesce", ctypes.c_int),
        ("heartbeat_ms", ctypes.c_uint32),
        ("ack_wait_ms", ctypes.c_uint32),
        ("close_timeout_ms", ctypes.c_uint32),
        ("js_max_inflight", ctypes.c_uint32),
        ("snapshot_tiers", ctypes.c_uint),
        ("snapshot_volumes", (ctypes.c_char * 32) * (TIER_MAX + 1)),
        ("block_tokens", ctypes.c_uint32),
        ("block_bytes", ctypes.c_uint64),
        ("snapshot", SNAPSHOT_FN),
        ("snapshot_ctx", ctypes.c_void_p),
        ("epoch", ctypes.c_uint64),
        ("first_event_id", ctypes.c_uint64),
        ("partitions", ctypes.c_uint32),
        ("stream_replicas", ctypes.c_uint32),
        ("snapshot_runs", ctypes.c_void_p),  # kvp_snapshot_runs_fn: not offered in Python
    ]


class PublisherStats(ctypes.Structure):
    """kvp_publisher_stats_t, include/kvplane/publisher.h."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "queued", "sent", "acked", "dropped", "batches", "bytes", "reconnects", "resyncs",
        "blocks", "retries", "resent")]


class Match(ctypes.Structure):
    """kvp_match_t, include/kvplane/client.h."""
    _fields_ = [
        ("worker", ctypes.c_char * (SUBJECT_TOKEN_MAX + 1)),
        ("dp_rank", ctypes.c_uint32),
        ("tier", ctypes.c_int),
        ("length", ctypes.c_uint64),
    ]


# include/kvplane/client.h
GATHER_MISSING_MAX = 64


class GatherInfo(ctypes.Structure):
    """kvp_gather_info_t, include/kvplane/client.h."""
    _fields_ = [
        ("partitions", ctypes.c_uint32),
        ("replies", ctypes.c_uint32),
        ("used", ctypes.c_uint32),
        ("errors", ctypes.c_uint32),
        ("nmissing", ctypes.c_uint32),
        ("missing", ctypes.c_uint32 * GATHER_MISSING_MAX),
        ("elapsed_us", ctypes.c_uint64),
    ]


# The structs the ABI test checks, by their C names.
STRUCTS = {
    "kvp_nats_opts_t": NatsOpts,
    "kvp_publisher_opts_t": PublisherOpts,
    "kvp_publisher_stats_t": PublisherStats,
    "kvp_match_t": Match,
    "kvp_gather_info_t": GatherInfo,
}

_P = ctypes.POINTER
_u64p = _P(ctypes.c_uint64)
_u32p = _P(ctypes.c_uint32)
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_cp = ctypes.c_char_p
_int = ctypes.c_int

# name: (restype, argtypes), as declared in include/kvplane/*.h.
_PROTOTYPES = {
    # status.h
    "kvp_strerror": (_cp, [_int]),
    "kvp_err_name": (_cp, [_int]),
    # hash.h
    "kvp_hash_seed": (ctypes.c_uint64, [_cp]),
    "kvp_hash_block": (ctypes.c_uint64, [_u32p, _sz, ctypes.c_uint64]),
    "kvp_hash_chain": (ctypes.c_uint64, [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64]),
    "kvp_hash_sequence": (_sz, [_u32p, _sz, _sz, ctypes.c_uint64, _u64p, _sz]),
    # subjects.h
    "kvp_subject_token_valid": (_int, [_cp]),
    # nats.h
    "kvp_nats_opts_init": (None, [_P(NatsOpts)]),
    "kvp_nats_opts_set": (_int, [_P(NatsOpts), _cp, _cp, _cp, _sz]),
    # publisher.h
    "kvp_publisher_opts_init": (None, [_P(PublisherOpts)]),
    "kvp_publisher_open": (_int, [_P(PublisherOpts), _P(_vp), _cp, _sz]),
    "kvp_publisher_stored": (_int, [_vp, _int, _cp, _u64p, _u64p, _sz, ctypes.c_uint32,
                                    ctypes.c_uint64, ctypes.c_int32]),
    "kvp_publisher_removed": (_int, [_vp, _int, _cp, _u64p, _sz]),
    "kvp_publisher_accessed": (_int, [_vp, _int, _u64p, _u32p, _sz]),
    "kvp_publisher_cleared": (_int, [_vp, _int]),
    "kvp_publisher_flush": (_int, [_vp, ctypes.c_uint32]),
    "kvp_publisher_poll": (_int, [_vp]),
    "kvp_publisher_request_resync": (None, [_vp]),
    "kvp_publisher_close": (None, [_vp]),
    "kvp_publisher_stats": (None, [_vp, _P(PublisherStats)]),
    "kvp_publisher_epoch": (ctypes.c_uint64, [_vp]),
    # client.h
    "kvp_client_open": (_int, [_P(NatsOpts), _cp, _P(_vp), _cp, _sz]),
    "kvp_client_match": (_int, [_vp, _u64p, _sz, ctypes.c_uint32, _P(Match), _sz, _P(_sz), _cp,
                                _sz]),
    "kvp_client_match_all": (_int, [_vp, _u64p, _sz, ctypes.c_uint32, _P(Match), _sz, _P(_sz),
                                     _P(GatherInfo), _cp, _sz]),
    "kvp_client_request": (_int, [_vp, _cp, _cp, ctypes.c_uint32, _P(_vp), _cp, _sz]),
    "kvp_client_tier_all": (_int, [_vp, _cp, ctypes.c_uint32, _P(_vp), _cp, _sz]),
    "kvp_client_reply_free": (None, [_vp]),
    "kvp_client_close": (None, [_vp]),
}

_lock = threading.Lock()
_lib = None
_libc = None


def malloc(size):
    """size bytes from the C library's malloc (the allocator libkvplane's
    free() releases), as an int address; 0 when out of memory."""
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None)  # the process's own symbols: the libc libkvplane uses
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        _libc = libc
    return _libc.malloc(size) or 0


def candidates():
    """Where the library is looked for, in order: $KVPLANE_LIB, the library
    directory of the tree this package was installed with (cmake --install
    --component python writes it into _install.py), the build tree this
    package sits in (python/../build/src), the system's search path
    (ctypes.util.find_library, which needs the development symlink) and the
    versioned soname (found by the loader after ldconfig)."""
    out = []
    env = os.environ.get("KVPLANE_LIB")
    if env:
        out.append(env)
    try:
        from . import _install
        out.append(os.path.join(_install.LIBDIR, "libkvplane.so.%d" % _install.SOVERSION))
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, "..", "..", "build", "src", "libkvplane.so"))
    found = ctypes.util.find_library("kvplane")
    if found:
        out.append(found)
    out.append("libkvplane.so.0")
    return out


def lib():
    """The loaded library with its prototypes declared; loaded on first use.
    Raises OSError naming every place tried when none loads."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            # $KVPLANE_LIB is the user's explicit choice: its failure is
            # reported, not skipped over for another copy.
            explicit = path == os.environ.get("KVPLANE_LIB")
            if os.sep in path and not os.path.exists(path):
                if explicit:
                    raise OSError("KVPLANE_LIB=%s: no such file" % path)
                tried.append("%s (absent)" % path)
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                if explicit:
                    raise OSError("KVPLANE_LIB=%s: cannot load: %s" % (path, e)) from None
                tried.append("%s (%s)" % (path, e))
                continue
            for name, (res, args) in _PROTOTYPES.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError:
                    raise OSError("%s: has no %s (a libkvplane older than this binding?)"
                                  % (path, name)) from None
                fn.restype = res
                fn.argtypes = args
            _lib = handle
            return _lib
        raise OSError("libkvplane not found; set KVPLANE_LIB to the path of libkvplane.so "
                      "(tried: %s)" % "; ".join(tried or ["nothing"]))
