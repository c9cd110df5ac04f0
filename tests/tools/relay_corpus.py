#!/usr/bin/python3
"""Writes the seed corpus of fuzz_relay_payload: real-shaped vLLM/SGLang
KV-event batches in both encodings (tagged arrays, maps with "type").
Run with Debian's python3 (python3-msgpack): tests/tools/relay_corpus.py DIR"""
import os
import sys

import msgpack

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
toks = list(range(1000, 1064))
arr_stored = ["BlockStored", [11, 12, 13, 14], None, toks, 16, None, "GPU"]
arr_stored_full = ["BlockStored", [2**63 + 5, -7], 11, toks[:32], 16, 1, "CPU", "lora-a",
                   [None, ["mm"]], 0, "full_attention", None, "salt"]
arr_removed = ["BlockRemoved", [11, 12], "GPU"]
map_stored = {"type": "BlockStored", "block_hashes": [b"\x00" * 24 + b"\x01\x02",
              b"\x01\x02\x03\x04\x05\x06\x07\x08"], "parent_block_hash": None,
              "token_ids": toks[:32], "block_size": 16, "medium": "CPU_PINNED",
              "lora_name": None, "locality": "local", "ownership": "owned", "session_id": "s1"}
map_hybrid = {"type": "BlockStored", "block_hashes": [99], "group_idx": 1,
              "kv_cache_spec_kind": "sliding_window", "kv_cache_spec_sliding_window": 4096}
map_removed = {"type": "BlockRemoved", "block_hashes": [11], "medium": "DISK", "group_idx": 0}
seeds = {
    "vllm_array": [1732500000.25, [arr_stored, arr_removed, ["AllBlocksCleared"]], 0],
    "vllm_array_full": [1732500000.5, [arr_stored_full], None],
    "vllm_array_norank": [1732500000.5, [arr_stored, arr_removed]],
    "vllm_map_events": [1732500001.0, [map_stored, map_hybrid, map_removed,
                                       {"type": "AllBlocksCleared"}], 1],
    "outer_map": {"ts": 1732500002.0, "events": [map_stored, arr_removed],
                  "data_parallel_rank": 2},
    "empty": [1732500003.0, [], 0],
}
for name, obj in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(msgpack.packb(obj, use_bin_type=True))
