#!/usr/bin/python3
"""Which blocks a G3 gets back, and the best an online order can hope for.

Reads the dump of `kvp-bench policy dump=PATH` (the bundled trace and the
worker's lower-tier stream: blocks offloaded to G3, blocks read from G3 or
G4) and prints:

  1. per G3 write, whether the block is read again before its next write,
     by what an online engine knows at that time: the number of requests
     that used the block, whether a block with it as its parent was seen
     (a prompt's last block has none), its depth in the prompt;
  2. the conversations behind it: requests linked to the one they continue
     (a prompt that holds all of an earlier prompt but its last block), the
     chance of a next turn by turn and the gaps between turns;
  3. a bound for orders that know a block's class and age but not its
     future: per class an expiry T (a block is kept T after its offload,
     and hit when read within T), chosen knowing the whole trace's
     statistics so that the blocks kept average at most the G3's capacity
     (the best T's per class by a Lagrange multiplier, two of them mixed to
     fill the capacity exactly). The capacity is an average, not a bound
     at every moment, and the T's are fitted to the trace they are measured
     on, so it is generous: lru measures 0.750 at 10% where one class gives
     0.779.

  /usr/bin/python3 bench/policy_reuse.py DUMP [PCT]   (PCT: 10 by default)

Standard library only; about 30 s on the whole trace.
"""

import bisect
import collections
import math
import sys


def load(path):
    reqs, evs = [], []  # (ts, hashes); (request, kind, hash)
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "R":
                reqs.append((int(p[2]), p[3:]))
            else:
                evs.append((len(reqs) - 1, p[0], p[1]))
    return reqs, evs


def writes(reqs, evs):
    """Per G3 write: (read again, uses so far, a child seen, depth, ms from
    the write to the read or to the end)."""
    uses, depth, first_kid = collections.defaultdict(list), {}, {}
    for q, (_, hs) in enumerate(reqs):
        for i, h in enumerate(hs):
            uses[h].append(q)
            depth[h] = i
            if i and hs[i - 1] not in first_kid:
                first_kid[hs[i - 1]] = q
    end = reqs[-1][0]
    reads = sum(1 for e in evs if e[1] == "r")
    open_w, out = {}, []
    for q, kind, h in evs:
        if kind == "w":
            if h in open_w:  # written again unread
                out[open_w[h]][0] = 0
            n = bisect.bisect_right(uses[h], q)
            kid = first_kid.get(h, len(reqs)) <= q
            open_w[h] = len(out)
            out.append([0, n, kid, depth[h], end - reqs[q][0], reqs[q][0]])
        elif h in open_w:
            w = out[open_w.pop(h)]
            w[0], w[4] = 1, reqs[q][0] - w[5]
    return out


def table(title, rows, key):
    c = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        k = key(r)
        c[k][0] += 1
        c[k][1] += r[0]
    print("# " + title)
    for k in sorted(c):
        print("  %-10s %7d writes, %.3f read again" % (k, c[k][0], c[k][1] / c[k][0]))


def conversations(reqs):
    last, turn, conv, nxt = {}, [], [], {}
    for q, (ts, hs) in enumerate(reqs):
        j = 0
        while j < len(hs) and hs[j] in last:
            j += 1
        p = last[hs[j - 1]] if j else None
        if p is not None and j >= 2 and j >= len(reqs[p][1]) - 1:
            turn.append(turn[p] + 1)
            conv.append(conv[p])
            nxt[p] = q
        else:
            turn.append(1)
            conv.append(q)
        for h in hs:
            last[h] = q
    c = collections.defaultdict(lambda: [0, 0])
    for q in range(len(reqs)):
        k = min(turn[q], 6)
        c[k][0] += 1
        c[k][1] += q in nxt
    print("# requests by turn (6: 6 or more), and the share with a next turn")
    for k in sorted(c):
        print("  turn %d %6d requests, %.3f continued" % (k, c[k][0], c[k][1] / c[k][0]))
    gaps = sorted(reqs[nxt[q]][0] - reqs[q][0] for q in nxt)
    qs = [gaps[int(len(gaps) * x)] / 1000 for x in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)]
    print("  gap to the next turn, s, at 10/25/50/75/90/99%%: %s" % qs)


TT = [0] + [int(1000 * 1.25**i) for i in range(60)]


def bound(rows, reads, end, capacity, key, name):
    by = collections.defaultdict(list)
    for r in rows:
        by[key(r)].append((r[4] if r[0] else None, r[4]))
    curves = {}
    for k, lst in by.items():
        hs, os = [], []
        for t in TT:
            h = o = 0
            for gap, horizon in lst:
                if gap is not None and gap <= t:
                    h, o = h + 1, o + gap
                else:
                    o += min(t, horizon)
            hs.append(h)
            os.append(o)
        curves[k] = (hs, os)
    budget = capacity * end

    def pick(lam):
        h = u = 0
        for hs, os in curves.values():
            j = max(range(len(TT)), key=lambda j: hs[j] - lam * os[j])
            h, u = h + hs[j], u + os[j]
        return h, u

    lo, hi = 0.0, 1e-3
    for _ in range(60):
        mid = (lo + hi) / 2
        if pick(mid)[1] > budget:
            lo = mid
        else:
            hi = mid
    (h1, u1), (h2, u2) = pick(lo), pick(hi)
    hits = h2 if u1 == u2 else h2 + (h1 - h2) * (budget - u2) / (u1 - u2)
    print("  %-32s %.3f" % (name, hits / reads))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pct = float(sys.argv[2]) if len(sys.argv) > 2 else 10
    reqs, evs = load(sys.argv[1])
    rows = writes(reqs, evs)
    distinct = len({h for _, hs in reqs for h in hs})
    print("# %d requests, %d distinct blocks, %d G3 writes, %d read again; %d G3/G4 reads" %
          (len(reqs), distinct, len(rows), sum(r[0] for r in rows),
           sum(1 for e in evs if e[1] == "r")))
    table("by requests that used the block (8: 8 or more)", rows, lambda r: min(r[1], 8))
    table("by a child seen (False: the last block of every prompt so far)", rows,
          lambda r: r[2])
    table("by depth in the prompt (by 8s; 40: 40 or deeper)", rows,
          lambda r: min(r[3] // 8 * 8, 40))
    table("by requests (4: 4 or more) and a child seen", rows,
          lambda r: (min(r[1], 4), r[2]))
    conversations(reqs)
    cap = distinct * pct / 100
    print("# per-class expiry bound, G3 at %g%% (%d blocks): G3 hits / reads" % (pct, cap))
    end = reqs[-1][0]
    reads = sum(1 for e in evs if e[1] == "r")
    bound(rows, reads, end, cap, lambda r: 0, "one class (an lru)")
    bound(rows, reads, end, cap, lambda r: min(r[1], 8), "requests (1..8)")
    bound(rows, reads, end, cap, lambda r: (min(r[1], 8), r[2]), "requests x a child seen")
    bound(rows, reads, end, cap, lambda r: (min(r[1], 8), r[2], min(r[3] // 8, 4)),
          "requests x a child x depth")
    bound(rows, reads, end, cap, lambda r: r[0], "the future (read again or not)")


if __name__ == "__main__":
    main()
