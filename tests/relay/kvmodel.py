"""What the advisor must hold after a test engine's stream, computed apart
from the relay: kvplane's sequence hashes (python3-xxhash), the
engine-to-kvplane map, and the blocks per tier. Shared by the test engines
of tests/relay (engine_pub.py: vLLM; engines.py: SGLang, TensorRT-LLM
through Dynamo, vLLM's extra_keys)."""
import struct

import xxhash

MASK = (1 << 64) - 1
SEED = 1337
BS = 4


def seed_for(name):
    if not name:
        return SEED
    return (SEED + xxhash.xxh3_64_intdigest(name.encode(), seed=0)) & MASK


def mm_id(ident):
    """Dynamo's hash_mm_identifier: a 64-hex digest gives its first 16 hex
    digits, another string XXH3-64 of its bytes with seed 0."""
    if len(ident) == 64 and all(c in "0123456789abcdefABCDEF" for c in ident):
        return int(ident[:16], 16)
    return xxhash.xxh3_64_intdigest(ident.encode(), seed=0)


def kvp_hashes(tokens, parent_kvp, seed, mm=None):
    """Sequence hashes of tokens' blocks; mm[i] lists block i's multimodal
    hashes (appended to its tokens as sorted le u64, Dynamo's rule)."""
    out, prev = [], parent_kvp
    for b, i in enumerate(range(0, len(tokens), BS)):
        blk = tokens[i:i + BS]
        data = struct.pack("<%dI" % len(blk), *blk)
        ids = sorted(mm[b]) if mm and b < len(mm) and mm[b] else []
        data += struct.pack("<%dQ" % len(ids), *ids)
        local = xxhash.xxh3_64_intdigest(data, seed=seed)
        if prev is None:
            prev = local
        else:
            prev = xxhash.xxh3_64_intdigest(struct.pack("<QQ", prev, local), seed=seed)
        out.append(prev)
    return out


class Model:
    """What the index must hold: tier -> set of hashes; engine -> kvplane;
    kvplane -> its parent's kvplane hash (the prefix structure)."""

    def __init__(self):
        self.tiers = {}
        self.map = {}
        self.parents = {}

    def stored(self, tier, eh, kh, parent_kh=None):
        prev = parent_kh
        for e, k in zip(eh, kh):
            self.map[e] = k
            self.tiers.setdefault(tier, set()).add(k)
            if prev is not None:
                self.parents[k] = prev
            prev = k

    def removed(self, tier, eh):
        for e in eh:
            k = self.map.pop(e, e)
            self.tiers.get(tier, set()).discard(k)

    def clear(self):
        self.tiers, self.map = {}, {}

    def write(self, expect):
        """EXPECT ("tier,signed hash" lines), EXPECT.engine (the same by engine
        hash) and EXPECT.parents ("hash,parent" for the blocks still held),
        written atomically, EXPECT last."""
        held = set().union(*self.tiers.values()) if self.tiers else set()

        def signed(h):
            return h - (1 << 64) if h >= 1 << 63 else h

        import os
        # EXPECT.engine: "tier,signed engine hash" of the blocks held, for a
        # block a relay could only publish under its engine hash (its parent
        # was published before a replay buffer that a lost map needed).
        with open(expect + ".engine.tmp", "w") as f:
            for tier, hs in sorted(self.tiers.items()):
                for e in sorted(e for e, k in self.map.items() if k in hs):
                    f.write("%d,%d\n" % (tier, signed(e & MASK)))
        os.rename(expect + ".engine.tmp", expect + ".engine")
        with open(expect + ".parents.tmp", "w") as f:
            for k in sorted(held):
                if k in self.parents and self.parents[k] in held:
                    f.write("%d,%d\n" % (signed(k), signed(self.parents[k])))
        os.rename(expect + ".parents.tmp", expect + ".parents")
        with open(expect + ".tmp", "w") as f:
            for tier, hs in sorted(self.tiers.items()):
                for h in sorted(hs):
                    f.write("%d,%d\n" % (tier, signed(h)))
        os.rename(expect + ".tmp", expect)
