#!/usr/bin/env bash
# Compares two builds of a benchmark in alternating runs (A B B A A B ...),
# so that drift of a noisy machine falls on both alike, and prints per pair
# the ratio B/A of each figure named, then the median ratio over the pairs.
#   scripts/abba.sh PAIRS BENCH_A BENCH_B 'ARGS' FIGURE...
# e.g. (before/after a change to the block manager):
#   scripts/abba.sh 8 /tmp/kvp-bench-A build/bench/kvp-bench blockmgr \
#     blockmgr.512tok.blocks_per_s blockmgr.16tok.blocks_per_s
# A figure is the first number on the line of kvp-bench output that starts
# with its name. Exit status 0; the caller judges the ratios.
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
pairs=$1 a=$2 b=$3 args=$4
shift 4
figs=("$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # run BIN FILE
  # shellcheck disable=SC2086
  "$1" $args >"$2" 2>&1 || { echo "abba: $1 $args failed:" >&2; tail -5 "$2" >&2; exit 1; }
}
fig() { # fig FILE NAME
  awk -v n="$2" '$1 == n { print $2; exit }' "$1"
}

for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then
    run "$a" "$out/a$i"; run "$b" "$out/b$i"
  else
    run "$b" "$out/b$i"; run "$a" "$out/a$i"
  fi
  line="pair $((i + 1))"
  for f in "${figs[@]}"; do
    va=$(fig "$out/a$i" "$f") vb=$(fig "$out/b$i" "$f")
    [ -n "$va" ] && [ -n "$vb" ] || { echo "abba: figure $f missing in pair $((i + 1))" >&2; exit 1; }
    echo "$f $va $vb" >>"$out/all"
    line+=$(awk -v f="$f" -v x="$va" -v y="$vb" 'BEGIN { printf "  %s A %.0f B %.0f ratio %.3f", f, x, y, y / x }')
  done
  echo "$line"
done
for f in "${figs[@]}"; do
  awk -v f="$f" '$1 == f { r[n++] = $3 / $2 }
    END {
      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
      m = n % 2 ? r[int(n / 2)] : (r[n / 2 - 1] + r[n / 2]) / 2
      printf "median %s ratio B/A %.3f over %d pairs (min %.3f, max %.3f)\n", f, m, n, r[0], r[n - 1]
    }' "$out/all"
done
