#!/usr/bin/python3
"""A KV-event publisher shaped like vLLM's ZmqEventPublisher (and SGLang's):
a PUB socket sending [topic, 8-byte big-endian seq, msgpack batch] and a
ROUTER replay socket answering [identity, "", start_seq] with the buffered
messages from start_seq in one of three layouts, then seq -1.

  engine_pub.py PUB_PORT REPLAY_PORT SCENARIO ENCODING LAYOUT EXPECT_FILE [BUFFER]

SCENARIO: basic, gap, noreplay, restart, badseq. ENCODING: array or map. LAYOUT:
topic (["", topic, seq, payload], vLLM 0.26+), empty (["", seq, payload],
older vLLM), bare ([seq, payload], SGLang). Writes EXPECT_FILE with the
blocks the index must end with ("tier,signed hash" lines), computing
kvplane's sequence hashes independently (python3-xxhash)."""
import os
import struct
import sys
import time

import msgpack
import zmq

from kvmodel import BS, MASK, Model, kvp_hashes, seed_for

pub_port, rep_port, scenario, enc, layout, expect = sys.argv[1:7]
# The replay buffer keeps the last BUFFER messages (vLLM's buffer_steps); 0: all.
bufmax = int(sys.argv[7]) if len(sys.argv) > 7 else 0


MEDIUM_TIER = {None: 1, "GPU": 1, "CPU": 2, "DISK": 3}


INDEXED_KINDS = (None, "full_attention", "mla_attention", "sink_full_attention")


def stored(model, eh, tokens, parent=None, medium=None, lora=None, extra=None, group=0,
           kind=None, apply=True, lora_id=None, locality=None):
    if enc == "array":
        ev = ["BlockStored", eh, parent, tokens, BS, lora_id, medium, lora, extra]
        if group or kind or locality:
            ev += [group, kind]
        if locality:
            ev += [None, locality]  # upstream slot 11: never part of a hash
    else:
        ev = {"type": "BlockStored", "block_hashes": eh, "token_ids": tokens,
              "block_size": BS, "locality": "local", "session_id": "s"}
        if parent is not None:
            ev["parent_block_hash"] = parent
        if medium is not None:
            ev["medium"] = medium
        if lora is not None:
            ev["lora_name"] = lora
        if extra is not None:
            ev["extra_keys"] = extra
        if group:
            ev["group_idx"] = group
        if kind:
            ev["kv_cache_spec_kind"] = kind
        if lora_id is not None:
            ev["lora_id"] = lora_id
    if apply and model is not None and not group and kind in INDEXED_KINDS:
        tier = MEDIUM_TIER[medium]
        if extra is not None:
            kh = list(eh)
        else:
            pk = model.map[parent] if parent is not None else None
            salt = lora or ("lora_id:%d" % lora_id if lora_id else None)
            kh = kvp_hashes(tokens, pk, seed_for(salt))
        model.stored(tier, [e & MASK for e in eh], kh,
                     model.map.get(parent) if parent is not None else None)
    return ev


def removed(model, eh, medium=None):
    if model is not None:
        model.removed(MEDIUM_TIER[medium], eh)
    if enc == "array":
        return ["BlockRemoved", eh, medium]
    ev = {"type": "BlockRemoved", "block_hashes": eh}
    if medium is not None:
        ev["medium"] = medium
    return ev


def cleared(model):
    model.clear()
    return ["AllBlocksCleared"] if enc == "array" else {"type": "AllBlocksCleared"}


def batch(events):
    return msgpack.packb([time.time(), events, 0] if enc == "array" else
                         {"ts": time.time(), "events": events, "data_parallel_rank": 0})


ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.bind("tcp://127.0.0.1:%s" % pub_port)
router = None
if scenario != "noreplay":
    router = ctx.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:%s" % rep_port)
buffer = []  # (seq, payload)
seq = 0
TOPIC = b"kv-events"


def serve_replay(wait_ms, done=None):
    """Answers replay requests for up to wait_ms, or until the file done
    exists."""
    if router is None:
        deadline = time.time() + wait_ms / 1000
        while time.time() < deadline and not (done is not None and os.path.exists(done)):
            time.sleep(0.02)
        return
    deadline = time.time() + wait_ms / 1000
    while time.time() < deadline:
        if done is not None and os.path.exists(done):
            break
        if not router.poll(20):
            continue
        ident, empty, start = router.recv_multipart()
        start = struct.unpack(">q", start)[0]
        for s, p in buffer:
            if s >= start:
                sb = struct.pack(">q", s)
                if layout == "topic":
                    router.send_multipart([ident, b"", TOPIC, sb, p])
                elif layout == "empty":
                    router.send_multipart([ident, b"", sb, p])
                else:
                    router.send_multipart([ident, sb, p])
        end = struct.pack(">q", -1)
        if layout == "topic":
            router.send_multipart([ident, b"", TOPIC, end, b""])
        elif layout == "empty":
            router.send_multipart([ident, b"", end, b""])
        else:
            router.send_multipart([ident, end, b""])


def send(payload, drop=False):
    global seq, buffer
    buffer.append((seq, payload))
    if bufmax and len(buffer) > bufmax:
        buffer = buffer[-bufmax:]
    if not drop:
        pub.send_multipart([TOPIC, struct.pack(">q", seq), payload])
    seq += 1
    serve_replay(30)


time.sleep(1.0)  # slow joiner: the relay is already connecting
m = Model()
tok = list(range(100, 116))  # 4 blocks of 4
if scenario == "basic":
    send(batch([stored(m, [1001, 1002], tok[:8])]))
    send(batch([stored(m, [1003, 1004], tok[8:], parent=1002)]))
    send(batch([stored(m, [-5, 2**63 + 7], tok[:8], medium="CPU", lora="adapter-x")]))
    send(batch([stored(m, [2001], tok[:4], extra=[["mm-1"]], medium="DISK")]))  # native
    send(batch([stored(m, [3001, 3002], tok[:8], group=1, kind="sliding_window")]))  # skipped
    send(batch([stored(m, [4001, 4002], tok[4:12], kind="mla_attention", lora_id=7),
                stored(m, [4003], tok[12:16], kind="sink_full_attention", locality="LOCAL"),
                stored(m, [4004], tok[:4], kind="mamba"),  # skipped by rule
                stored(m, [4005], tok[:4], kind="brand_new_kind")]))  # unknown: skipped
    send(b"\xc1\xc1garbage")  # malformed payload: counted
    pub.send_multipart([TOPIC, b"\x00\x01"])  # wrong frame count: counted
    send(batch([{"type": "Unknown"} if enc == "map" else ["Unknown", 1],
                removed(m, [1004])]))
elif scenario in ("gap", "noreplay"):
    send(batch([stored(m, [1001], tok[:4])]))
    lost = batch([stored(m if scenario == "gap" else None, [1002], tok[4:8], parent=1001)])
    send(lost, drop=True)
    if scenario == "noreplay":
        m.clear()  # the relay clears; 1001 is gone from the index
    send(batch([stored(m, [5001], tok[8:12])]))
elif scenario == "badseq":
    # Undecodable messages whose sequence numbers cannot be trusted (0 and
    # +1000) and one in sequence: none may clear, replay or move the stream.
    send(batch([stored(m, [1001, 1002], tok[:8])]))
    send(batch([stored(m, [1003], tok[8:12], parent=1002)]))
    pub.send_multipart([TOPIC, struct.pack(">q", 0), b"\xc1garbage"])
    pub.send_multipart([TOPIC, struct.pack(">q", seq + 1000), b"\x93\x01"])
    serve_replay(30)
    send(b"\xc1\xc1")  # in sequence but undecodable: one lost sequence
    send(batch([stored(m, [1004], tok[12:16], parent=1003)]))
    send(batch([removed(m, [1001])]))
elif scenario == "copies":
    # One block's copies per medium share its kvplane identity, also when
    # the CPU store is a placeholder without tokens; copies are referenced.
    send(batch([stored(m, [1001, 1002], tok[:8])]))
    k1, k2 = m.map[1001], m.map[1002]

    def placeholder(eh, medium):
        if enc == "array":
            return ["BlockStored", eh, None, [], 0, None, medium, None]
        return {"type": "BlockStored", "block_hashes": eh, "parent_block_hash": None,
                "token_ids": [], "block_size": 0, "medium": medium}

    def removed_counts(eh, medium, counts):
        if enc == "array":
            return ["BlockRemoved", eh, medium, None, counts]
        return {"type": "BlockRemoved", "block_hashes": eh, "medium": medium,
                "remaining_copy_counts": counts}

    send(batch([placeholder([1001, 1002], "CPU")]))
    send(batch([removed(None, [1001, 1002], "GPU")]))
    send(batch([placeholder([1001], "cpu")]))  # a second reference, lower case
    send(batch([removed(None, [1001], "CPU")]))  # one reference left
    send(batch([removed_counts([1002], "CPU", [1])]))  # the engine says one is left
    send(batch([placeholder([1001], "SHARED_STORAGE"), placeholder([1003], "CPU_PINNED"),
                placeholder([1004], "TAPE")]))  # TAPE: unknown medium, skipped
    m.tiers = {2: {k1, k2, 1003}, 3: {k1}}
    send(batch([removed_counts([1002], "CPU", [0])]))
    m.tiers[2].discard(k2)
elif scenario == "late":
    # The relay joins after the engine's first batches: only the replay
    # buffer has them, and a later child chains to a parent among them.
    send(batch([stored(m, [1001, 1002], tok[:8])]), drop=True)
    send(batch([stored(m, [1003], tok[8:12], parent=1002)]), drop=True)
    send(batch([removed(m, [1001])]), drop=True)
    send(batch([stored(m, [1004], tok[12:16], parent=1003)]))
elif scenario == "long":
    # A stream of a few seconds while the relay is killed and restarted:
    # chains of two blocks, and removals of blocks stored a while before.
    # KVP_TEST_PACE slows it where the relay itself runs slower (the
    # ThreadSanitizer build restarts in several hundred ms more).
    pace = float(__import__("os").environ.get("KVP_TEST_PACE", "1"))
    for i in range(70):
        eh = 10000 + 2 * i
        send(batch([stored(m, [eh, eh + 1], list(range(1000 + 8 * i, 1008 + 8 * i)))]))
        if i >= 6 and i % 3 == 0:
            send(batch([removed(m, [10000 + 2 * (i - 6) + 1])]))
        if i % 10 == 9:
            send(batch([stored(m, [eh + 1000], list(range(5000 + 4 * i, 5004 + 4 * i)),
                               parent=eh)]))
        time.sleep(0.03 * pace)
elif scenario == "restart":
    send(batch([stored(m, [1001, 1002], tok[:8])]))
    send(batch([stored(m, [1003], tok[8:12], parent=1002)]))
    m.clear()
    seq = 0
    buffer = []
    # The restarted engine's first message is lost on the live socket: the
    # relay sees the sequence go back from 1 to 1, and replays 0 first.
    send(batch([stored(m, [6001], tok[:4])]), drop=True)
    send(batch([stored(m, [7001], tok[8:12])]))
if scenario == "long":
    serve_replay(3000)  # the restart tests act once the relay took the whole stream
m.write(expect)
# Replays asked until the test has what it wants (it creates EXPECT_FILE.done)
# or 10 s: a relay asks when its next message shows it a gap, and a
# restarted one when it starts.
serve_replay(10000, done=expect + ".done")
