#!/usr/bin/python3
"""A custom engine publishing its KV-cache events with the Python binding.

Simulates an engine with 16-token blocks: it caches two requests that share
a prefix, offloads part of one to host memory (G2), evicts a block, then
asks the advisor which workers hold the second request's prefix.

    cmake --build build                      # builds build/src/libkvplane.so
    nats-server -a 127.0.0.1 -p 4222 &
    build/tools/kvplane-advisor -o nats.mode=core -o store.path=/tmp/adv.db &
    PYTHONPATH=python examples/python_publisher.py --server nats://127.0.0.1:4222

The library is found through $KVPLANE_LIB, else build/src next to python/,
else the system's library path. Without an advisor the events are still
published; the match at the end then reports that no advisor answered.
"""
import argparse
import os
import sys
import time

# Run from a source tree without installing: python/ is next to examples/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import kvplane  # noqa: E402

BLOCK = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default="nats://127.0.0.1:4222", help="NATS URL(s), comma-separated")
    ap.add_argument("--ns", default="default", help="kvplane namespace")
    ap.add_argument("--worker", default="py-engine-0", help="this worker's id ([A-Za-z0-9_-])")
    ap.add_argument("--timeout-ms", type=int, default=2000, help="match reply timeout")
    args = ap.parse_args()

    system_prompt = list(range(100, 100 + 3 * BLOCK))          # 3 shared blocks
    request_a = system_prompt + list(range(7000, 7000 + 2 * BLOCK + 5))
    request_b = system_prompt + list(range(9000, 9000 + BLOCK))

    try:
        with kvplane.Publisher(args.server, args.ns, args.worker, BLOCK, model="example") as pub:
            # Prefill of request A: every full block is now in device memory.
            a = pub.stored(request_a)
            # Request B reuses the shared prefix; only its new block is stored,
            # chained to the last shared block.
            b_new = pub.stored(request_b[3 * BLOCK:], parent_hash=a[2])
            # A is offloaded to host memory, and its last block evicted from G1.
            pub.stored(block_hashes=a, tier="G2")
            pub.removed(a[-1:])
            pub.accessed(a[:3])
            pub.flush()
            print("published %d events for worker %s: A=%d blocks, B's new=%d block"
                  % (pub.stats()["queued"], args.worker, len(a), len(b_new)))
    except kvplane.Error as e:
        print("publisher: %s" % e, file=sys.stderr)
        return 1

    b = kvplane.hash_blocks(request_b, BLOCK)
    assert b[3:] == b_new  # same identities as the chained store above
    try:
        with kvplane.Client(args.server, args.ns, timeout_ms=args.timeout_ms) as client:
            # The advisor applies batches asynchronously; a router would not
            # wait, the example retries briefly to show the settled answer.
            for _ in range(50):
                rows = client.match(b)
                if rows and rows[0].length == len(b):
                    break
                time.sleep(0.05)
    except kvplane.Error as e:
        print("match: %s" % e, file=sys.stderr)
        return 1
    print("request B (%d blocks) is cached at:" % len(b))
    for m in rows:
        print("  worker %s dp_rank %d tier G%d: %d leading blocks"
              % (m.worker, m.dp_rank, m.tier, m.length))
    return 0


if __name__ == "__main__":
    sys.exit(main())
