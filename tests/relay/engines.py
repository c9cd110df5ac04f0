#!/usr/bin/python3
"""Test engines for kvplane-relay shaped like what each engine really sends
(README, relay section: the decoder table), written from the upstream
sources' field lists, not from their code:

  sglang  SGLang's ZmqEventPublisher (python/sglang/srt/disaggregation/
          kv_events.py): msgspec array_like structs, the batch [ts, events]
          without a rank, ["BlockStored", block_hashes, parent_block_hash,
          token_ids, block_size, lora_id] and ["BlockRemoved", block_hashes]
          without medium; sequences from 0; replies to a replay request as
          ["", seq, payload] (the "empty" layout). ENCODING map: the same
          fields by name (SGLang's "dynamo" format).
  trtllm  TensorRT-LLM through Dynamo (components/src/dynamo/trtllm/
          publisher.py, ZmqKvEventPublisher): the LLM API's events
          (get_kv_cache_events: {"event_id", "data": {"type": "stored" ...}})
          republished one per message as [time.time(), [event], dp_rank] with
          map events: BlockStored {type, block_hashes (signed i64),
          parent_block_hash, token_ids, block_size, lora_id (nil for 0),
          block_mm_infos}, BlockRemoved {type, block_hashes}. What the issue
          adds and this engine does too: a sequence that starts at a
          timestamp, AllBlocksCleared first, idle batches without events
          (one repeating its sequence), a replay buffer.
  chain   vLLM's map events: a prefix of four blocks, two also in CPU.
  mm      vLLM's BlockStored with extra_keys (vllm/distributed/kv_events.py):
          per block None or a tuple of the LoRA name, multimodal identifiers
          (64-hex digests, or [identifier, offset] from vLLM 0.19), the cache
          salt (first block) and prompt-embedding hashes (bytes).

  engines.py PUB_PORT REPLAY_PORT SCENARIO ENCODING LAYOUT EXPECT_FILE

Writes EXPECT_FILE (and EXPECT_FILE.parents) as engine_pub.py does. Exits 3
when the relay asked the replay socket for sequences no buffer could hold
(more than 2^21 before the first one the engine sent)."""
import os
import struct
import sys
import time

import msgpack
import zmq

from kvmodel import BS, MASK, Model, kvp_hashes, mm_id, seed_for

pub_port, rep_port, scenario, enc, layout, expect = sys.argv[1:7]
TOPIC = b"kv-events"

ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.bind("tcp://127.0.0.1:%s" % pub_port)
router = ctx.socket(zmq.ROUTER)
router.bind("tcp://127.0.0.1:%s" % rep_port)
buffer = []  # (seq, payload)
asked = []  # replay request starts
seq = 0
first_seq = None


def serve_replay(wait_ms, done=None):
    deadline = time.time() + wait_ms / 1000
    while time.time() < deadline:
        if done is not None and os.path.exists(done):
            break
        if not router.poll(20):
            continue
        ident, _, start = router.recv_multipart()
        start = struct.unpack(">q", start)[0]
        asked.append(start)
        for s, p in buffer:
            if s >= start:
                sb = struct.pack(">q", s)
                if layout == "topic":
                    router.send_multipart([ident, b"", TOPIC, sb, p])
                else:
                    router.send_multipart([ident, b"", sb, p])
        end = struct.pack(">q", -1)
        if layout == "topic":
            router.send_multipart([ident, b"", TOPIC, end, b""])
        else:
            router.send_multipart([ident, b"", end, b""])


def send(payload, drop=False, repeat=False):
    """Sends payload with the next sequence (repeat: with the last one
    again, not buffered); drop: into the buffer only, as if lost."""
    global seq, first_seq
    if first_seq is None:
        first_seq = seq
    s = seq - 1 if repeat else seq
    if not repeat:
        buffer.append((s, payload))
        seq += 1
    if not drop:
        pub.send_multipart([TOPIC, struct.pack(">q", s), payload])
    serve_replay(30)


def signed(h):
    return h - (1 << 64) if h >= 1 << 63 else h


m = Model()
tok = list(range(100, 116))  # 4 blocks of 4


def expect_stored(eh, tokens, parent=None, lora=None, lora_id=None, mm=None, native=False,
                  tier=1):
    eh = [e & MASK for e in eh]
    if native:
        m.stored(tier, eh, list(eh), m.map.get(parent & MASK) if parent is not None else None)
        return
    pk = m.map[parent & MASK] if parent is not None else None
    salt = lora or ("lora_id:%d" % lora_id if lora_id else None)
    m.stored(tier, eh, kvp_hashes(tokens, pk, seed_for(salt), mm), pk)


time.sleep(1.0)  # slow joiner: the relay is already connecting

if scenario == "sglang":
    def batch(events):
        return msgpack.packb([time.time(), events])  # no dp rank

    def st(eh, tokens, parent=None, lora_id=None):
        expect_stored(eh, tokens, parent, lora_id=lora_id)
        if enc == "array":
            return ["BlockStored", eh, parent, tokens, BS, lora_id]
        return {"type": "BlockStored", "block_hashes": eh, "parent_block_hash": parent,
                "token_ids": tokens, "block_size": BS, "lora_id": lora_id}

    def rm(eh):
        m.removed(1, eh)
        return ["BlockRemoved", eh] if enc == "array" else {"type": "BlockRemoved",
                                                           "block_hashes": eh}

    send(batch([st([1001, 1002], tok[:8])]))
    send(batch([st([2001], tok[:4], lora_id=5)]))  # another adapter: another identity
    send(batch([st([1003], tok[8:12], parent=1002)]), drop=True)  # lost: replayed
    send(batch([st([1004], tok[12:16], parent=1003), rm([1001])]))
    send(batch([rm([2001])]))
elif scenario == "trtllm":
    seq = time.time_ns()  # the sequence starts at a timestamp

    def batch(events):
        return msgpack.packb([time.time(), events, 0])

    def st(eh, tokens, parent=None, mm=None):
        expect_stored(eh, tokens, parent, mm=mm)
        ev = {"type": "BlockStored", "block_hashes": [signed(e & MASK) for e in eh],
              "parent_block_hash": signed(parent & MASK) if parent is not None else None,
              "token_ids": tokens, "block_size": BS, "lora_id": None}
        if mm:
            ev["block_mm_infos"] = [{"mm_objects": [{"mm_hash": h, "offsets": []} for h in b]}
                                    if b else None for b in mm]
        return ev

    def rm(eh):
        m.removed(1, [e & MASK for e in eh])
        return {"type": "BlockRemoved", "block_hashes": [signed(e & MASK) for e in eh]}

    m.clear()
    # Before the relay's first message: only the replay buffer has these.
    send(batch([{"type": "AllBlocksCleared"}]), drop=True)
    send(batch([st([2**63 + 5, 1002], tok[:8])]), drop=True)
    send(batch([]), drop=True)  # idle
    send(batch([st([1003], tok[8:12], parent=1002, mm=[[0x1234567890abcdef]])]))
    send(batch([]))  # idle
    send(batch([]), repeat=True)  # idle, its sequence again
    send(batch([rm([2**63 + 5])]))
    send(batch([st([1004], tok[12:16], parent=1003)]))
elif scenario == "mm":
    dig_a = "ab" * 32
    dig_b = "0123456789abcdef" * 4

    def batch(events):
        if enc == "array":
            return msgpack.packb([time.time(), events, 0], use_bin_type=True)
        return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": 0},
                             use_bin_type=True)

    def st(eh, tokens, extra, parent=None, lora=None, mm=None, native=False):
        expect_stored(eh, tokens, parent, lora=lora, mm=mm, native=native)
        if enc == "array":
            return ["BlockStored", eh, parent, tokens, BS, None, None, lora, extra]
        ev = {"type": "BlockStored", "block_hashes": eh, "parent_block_hash": parent,
              "token_ids": tokens, "block_size": BS, "lora_id": None, "medium": None,
              "lora_name": lora, "extra_keys": extra}
        return ev

    send(batch([st([1001, 1002], tok[:8], [[dig_a], None], mm=[[mm_id(dig_a)], None])]))
    send(batch([st([1003], tok[8:12], [[["opaque-image-7", 2]]], parent=1002,
                   mm=[[mm_id("opaque-image-7")]])]))
    send(batch([st([1004], tok[12:16], [["adapter-x", dig_b, dig_a]], parent=1003,
                   lora="adapter-x", mm=[[mm_id(dig_b), mm_id(dig_a)]])]))
    send(batch([st([2001], tok[:4], [["tenant-salt"]], native=True)]))  # cache salt
    send(batch([st([2002], tok[4:8], [[b"\x01\x02"]], native=True)]))  # prompt embeds
    send(batch([st([3001], tok[:4], [None])]))  # no keys: plain tokens
    send(batch([["BlockRemoved", [1003], None] if enc == "array" else
                {"type": "BlockRemoved", "block_hashes": [1003], "medium": None}]))
    m.removed(1, [1003])
elif scenario == "chain":
    # A prefix of four blocks in two tiers, for the advisor's resync.
    def st(eh, tokens, parent=None, medium=None):
        expect_stored(eh, tokens, parent, tier=2 if medium else 1)
        return {"type": "BlockStored", "block_hashes": eh, "parent_block_hash": parent,
                "token_ids": tokens, "block_size": BS, "lora_id": None, "medium": medium,
                "lora_name": None}

    def batch(events):
        return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": 0})

    send(batch([st([1001, 1002], tok[:8])]))
    send(batch([st([1003], tok[8:12], parent=1002), st([1004], tok[12:16], parent=1003)]))
    send(batch([st([1001, 1002], tok[:8], medium="CPU")]))
m.write(expect)
# Replays asked until the test has what it wants (it creates EXPECT_FILE.done)
# or 10 s: a relay asks when its next message shows it a gap.
serve_replay(10000, done=expect + ".done")
bad = [a for a in asked if first_seq is not None and a < first_seq - (1 << 21)]
if bad:
    print("engines.py: replay asked from %d, %d before the first sequence" %
          (bad[0], first_seq - bad[0]), file=sys.stderr)
    sys.exit(3)
