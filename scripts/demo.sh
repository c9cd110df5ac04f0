#!/usr/bin/env bash
# The main job, end to end on one machine: sets everything up (missing Debian
# packages, configure, build), starts a local nats-server with JetStream, the
# kvplane-advisor, and simulated workers that replay the bundled one-hour
# Mooncake trace; checks that the advisor's database holds exactly the
# workers' registered blocks; then shows the tier state as SQL results.
#   scripts/demo.sh [--workers N] [--mode core|jetstream] [--keep]
# --keep leaves the work directory (database, logs) in place for sqlite3.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

workers=4 mode=jetstream keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

kvp_install_packages
kvp_build -DKVP_BENCH=ON >/dev/null

work=$(mktemp -d /tmp/kvplane-demo-XXXXXX)
nats_pid="" adv_pid=""
cleanup() {
  [ -n "$adv_pid" ] && kill "$adv_pid" 2>/dev/null && wait "$adv_pid" 2>/dev/null || true
  [ -n "$nats_pid" ] && kill "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "demo: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=nats://127.0.0.1:$port
nats-server -a 127.0.0.1 -p "$port" -js -sd "$work/js" -l "$work/nats-server.log" &
nats_pid=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
  sleep 0.1
done
echo "== nats-server on $url (JetStream)"

db=$work/advisor.db
# The shipped configuration, plus tiering over the workers' G3 volumes (48 MiB
# each: they fill, and their coldest blocks are demoted) and the shared G4.
conf=$work/advisor.conf
mkdir -p "$work/volumes/g3"
cp "$KVP_ROOT/etc/kvplane-advisor.conf" "$conf"
for i in $(seq 0 $((workers - 1))); do
  printf '\n[volume g3-sim-%d]\ntier = 3\nplugin = posix\ncapacity = 48MiB\npath = %s\nfsync = off\n' \
    "$i" "$work/volumes/g3/sim-$i" >> "$conf"
done
printf '\n[volume g4-shared]\ntier = 4\nplugin = posix\ncapacity = 4GiB\npath = %s\nfsync = off\n' \
  "$work/volumes/g4" >> "$conf"
"$KVP_BUILD_DIR/tools/kvplane-advisor" -c "$conf" \
  -o nats.servers="$url" -o nats.mode="$mode" -o advisor.namespace=demo \
  -o store.path="$db" -o log.file="$work/advisor.log" \
  -o tiering.enabled=true -o tiering.plugin_dir="$KVP_BUILD_DIR/plugins" \
  -o tiering.interval=250ms -o tiering.grace=1s -o tiering.min_residence=0s \
  -o tiering.max_moves=4096 -o store.history_interval=1s &
adv_pid=$!
for _ in $(seq 100); do
  grep -q "running" "$work/advisor.log" 2>/dev/null && break
  kill -0 "$adv_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "running" "$work/advisor.log" 2>/dev/null; then
  echo "demo: kvplane-advisor did not start (its error is above)" >&2
  exit 1
fi
echo "== kvplane-advisor ($mode), database $db"

echo "== $workers simulated workers replaying data/conversation_trace.jsonl.gz"
echo "   (G1 and G2 in memory, G3 a 48 MiB posix volume per worker under $work/volumes/g3,"
echo "    G4 the shared posix volume $work/volumes/g4)"
"$KVP_BUILD_DIR/tools/kvplane-sim" -t "$KVP_ROOT/data/conversation_trace.jsonl.gz" \
  -s "$url" -n demo -w "$workers" -m "$mode" -e "$work/expect.csv" \
  --volumes "$work/volumes" --plugin-dir "$KVP_BUILD_DIR/plugins" --g3-capacity $((48 << 20))

# The advisor writes behind and moves blocks between the volumes; wait until
# the database holds what the workers registered in G1 and G2, and exactly
# the blocks that are in the G3 and G4 volumes, file for file by volume (the
# advisor's moves put blocks in any volume; every move settled), at most
# 60 s.
volumes_csv() {
  /usr/bin/python3 - "$work/volumes" <<'PY'
import os, sys
root = sys.argv[1]
for tier, base in ((3, os.path.join(root, "g3")), (4, os.path.join(root, "g4"))):
    for dirpath, _, files in os.walk(base):
        rel = os.path.relpath(dirpath, base).split(os.sep)
        volume = "g3-" + rel[0] if tier == 3 else "g4-shared"
        for f in files:
            if len(f) == 16:
                h = int(f, 16)
                print("%s,%d,%d" % (volume, tier, h - (1 << 64) if h >= 1 << 63 else h))
PY
}
want=$(wc -l < "$work/expect.csv")
check() {
  grep -E ',(1|2),' "$work/expect.csv" > "$work/expect12.csv"
  volumes_csv > "$work/expect34.csv"
  sqlite3 -batch "$db" <<SQL
.mode csv
CREATE TEMP TABLE expect(worker TEXT, tier INTEGER, hash INTEGER);
CREATE TEMP TABLE files(volume TEXT, tier INTEGER, hash INTEGER);
.import $work/expect12.csv expect
.import $work/expect34.csv files
SELECT (SELECT count(*) FROM (SELECT worker, tier, hash FROM expect
                              EXCEPT SELECT worker, tier, hash FROM block_locations WHERE tier <= 2))
     + (SELECT count(*) FROM (SELECT worker, tier, hash FROM block_locations WHERE tier <= 2
                              EXCEPT SELECT worker, tier, hash FROM expect))
     + (SELECT count(*) FROM (SELECT volume, tier, hash FROM files
                              EXCEPT SELECT volume, tier, hash FROM block_locations WHERE tier >= 3))
     + (SELECT count(*) FROM (SELECT volume, tier, hash FROM block_locations WHERE tier >= 3
                              EXCEPT SELECT volume, tier, hash FROM files));
SQL
}
unsettled() {
  sqlite3 -batch "$db" "SELECT count(*) FROM migrations WHERE state IN ('queued', 'copying', 'committed')" 2>/dev/null || echo busy
}
for _ in $(seq 300); do
  if [ "$(unsettled)" = 0 ]; then
    diff=$(check 2>/dev/null || echo busy)
    [ "$diff" = 0 ] && [ "$(unsettled)" = 0 ] && break
  fi
  sleep 0.2
done
if [ "$diff" != 0 ]; then
  echo "demo: the advisor's database differs from the workers' G1/G2 sets and the volumes' contents ($diff rows)" >&2
  tail -n 20 "$work/advisor.log" >&2
  exit 1
fi
echo "== the advisor's database equals the workers' G1/G2 sets and the G3/G4 volumes' contents:"
echo "   $(wc -l < "$work/expect12.csv") G1/G2 and $(wc -l < "$work/expect34.csv") G3/G4 block locations"

q() { echo; echo "sqlite> $1"; sqlite3 -header -column "$db" "$1"; }

# Fill over the run, from the history samples (every second): per G3 volume
# its peak, the time it spent above the high watermark in all and its
# longest stretch there; and no volume ever above its capacity.
high=$(sed -n 's/^high_watermark *= *//p' "$conf" | head -n 1)
q "WITH s AS (SELECT volume, t, 1.0 * bytes / capacity AS fill,
              lead(t) OVER (PARTITION BY volume ORDER BY t) - t AS dt
            FROM tier_history WHERE tier = 3 AND volume <> '' AND capacity > 0),
     g AS (SELECT *, sum(fill <= $high) OVER (PARTITION BY volume ORDER BY t) AS run FROM s),
     e AS (SELECT volume, run, sum(coalesce(dt, 0)) AS ms FROM g WHERE fill > $high
           GROUP BY volume, run)
SELECT s.volume, count(*) AS samples, round(max(s.fill), 4) AS peak_fill,
       (SELECT coalesce(sum(ms), 0) FROM e WHERE e.volume = s.volume) AS ms_above_high,
       (SELECT coalesce(max(ms), 0) FROM e WHERE e.volume = s.volume) AS longest_ms_above_high
FROM s GROUP BY s.volume ORDER BY s.volume;"
over=$(sqlite3 -batch "$db" "SELECT count(*) FROM tier_history WHERE tier >= 3 AND volume <> ''
                             AND capacity > 0 AND bytes > capacity")
if [ "$over" != 0 ]; then
  echo "demo: $over history samples have a volume above its capacity" >&2
  exit 1
fi
echo "== no history sample has a volume above its capacity"
# The same time as the engine's rounds (every 250 ms) saw it, from the stats
# reply: per G3 volume in all, and its longest stretch.
echo
echo "\$ kvplane stats --server $url --ns demo  (tiering.volumes: above_high_ms, above_high_max_ms)"
"$KVP_BUILD_DIR/tools/kvplane" stats --server "$url" --ns demo | /usr/bin/python3 -c '
import json, sys
for v in json.load(sys.stdin)["tiering"]["volumes"]:
    if v["tier"] == 3:
        print("%-10s above the high watermark: %5d ms in all, longest stretch %5d ms"
              % (v["name"], v["above_high_ms"], v["above_high_max_ms"]))'

q "SELECT * FROM tier_usage ORDER BY tier, volume;"
q "SELECT worker, dp_rank, status, g1_blocks, g2_blocks, last_event_id FROM worker_status ORDER BY worker;"
q "SELECT hash_hex, hits, round(freq, 2) AS freq, tiers FROM hot_blocks LIMIT 5;"
q "SELECT tier, count(DISTINCT hash) AS blocks, count(*) AS locations FROM block_locations GROUP BY tier;"
q "SELECT state, 'G' || from_tier || ' -> G' || to_tier AS move, count(*) AS moves, sum(bytes) / 1048576 AS mib FROM migrations GROUP BY state, from_tier, to_tier;"
q "SELECT count(*) AS blocks_with_parent, (SELECT count(*) FROM blocks) AS blocks FROM blocks WHERE parent IS NOT NULL;"
echo
echo "== note: the workers have stopped. After [workers] heartbeat_timeout (30 s in"
echo "   etc/kvplane-advisor.conf) the advisor marks them down and drops their G1/G2"
echo "   locations, since that memory died with them: the same queries then show no"
echo "   G1/G2 rows. The workers table keeps when each went down and how many"
echo "   locations were dropped (docs/sql.md, \"Workers that stop\"); --keep keeps the"
echo "   database to look."
echo
echo "\$ kvplane status --db $db --server $url --ns demo"
"$KVP_BUILD_DIR/tools/kvplane" status --db "$db" --server "$url" --ns demo
echo
report=$KVP_BUILD_DIR/kvplane-report.png
echo "\$ kvplane report --db $db --png $report"
"$KVP_BUILD_DIR/tools/kvplane" report --db "$db" --png "$report"
echo "== the tier state over time (blocks per tier, volume fill, migrations) is drawn in $report"
