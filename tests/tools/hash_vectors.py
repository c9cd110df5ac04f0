#!/usr/bin/python3
"""Independent reference for kvplane's block and sequence hashes.

Uses Debian's python3-xxhash (not kvplane's C code) to compute the hashes of
DESIGN.md "Hashing" for the deterministic token sequences that
tests/test_hash.c generates, and prints one line per case:
    <case> <lora or -> <block_tokens> <seq_hash_hex> ...
"""
import struct
import sys

import xxhash

SEED = 1337
MASK = (1 << 64) - 1


def tokens(case, n):
    # Same generator as tests/test_hash.c: an LCG over u32.
    x = (case * 2654435761 + 12345) & 0xFFFFFFFF
    out = []
    for _ in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(x % 151936)
    return out


def seed_for(lora):
    if not lora:
        return SEED
    return (SEED + xxhash.xxh3_64_intdigest(lora.encode(), seed=0)) & MASK


def seq_hashes(toks, block, lora):
    seed = seed_for(lora)
    out = []
    prev = None
    for i in range(len(toks) // block):
        blk = toks[i * block:(i + 1) * block]
        local = xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(blk), *blk), seed=seed)
        if prev is None:
            h = local
        else:
            h = xxhash.xxh3_64_intdigest(struct.pack("<QQ", prev, local), seed=seed)
        out.append(h)
        prev = h
    return out


CASES = [
    # case, ntokens, block, lora
    (0, 16, 16, None),
    (1, 64, 16, None),
    (2, 100, 16, None),
    (3, 64, 16, "sql-adapter"),
    (4, 2048, 512, None),
    (5, 1024, 32, "tenant-42"),
    (6, 7, 16, None),
]

for case, n, block, lora in CASES:
    hs = seq_hashes(tokens(case, n), block, lora)
    print(case, lora or "-", block, n, " ".join("%016x" % h for h in hs))
sys.exit(0)
