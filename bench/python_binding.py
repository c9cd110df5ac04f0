#!/usr/bin/python3
"""Rates of the Python binding's calls (python/kvplane), against a
nats-server this script starts on a free loopback port:
  - hash_blocks of 4096 tokens in blocks of 512 (the C hash functions);
  - Publisher.stored from 64 token ids (4 blocks of 16 hashed per call);
  - Publisher.stored with 4 precomputed block hashes.
Each rate includes the final flush. Usage (from the source tree):
  KVPLANE_LIB=build/src/libkvplane.so bench/python_binding.py [--calls N]
"""
import argparse
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvplane  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50000, help="stored() calls per figure")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    natsd = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        toks = list(range(4096))
        n = max(1, args.calls // 25)
        t0 = time.perf_counter()
        for _ in range(n):
            kvplane.hash_blocks(toks, 512)
        dt = time.perf_counter() - t0
        print("hash_blocks(4096 tokens, 512):        %8.0f calls/s  %6.1f M tokens/s"
              % (n / dt, n * 4096 / dt / 1e6))
        with kvplane.Publisher("nats://127.0.0.1:%d" % port, "bench", "w0", 16) as pub:
            toks = list(range(64))
            t0 = time.perf_counter()
            for _ in range(args.calls):
                pub.stored(toks)
            pub.flush(30000)
            dt = time.perf_counter() - t0
            print("stored(64 token ids -> 4 blocks):    %8.0f calls/s  %6.0f blocks/s"
                  % (args.calls / dt, 4 * args.calls / dt))
            h = kvplane.hash_blocks(toks, 16)
            t0 = time.perf_counter()
            for _ in range(args.calls):
                pub.stored(block_hashes=h)
            pub.flush(30000)
            dt = time.perf_counter() - t0
            print("stored(block_hashes=4 hashes):       %8.0f calls/s  %6.0f blocks/s"
                  % (args.calls / dt, 4 * args.calls / dt))
    finally:
        natsd.terminate()
        natsd.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
