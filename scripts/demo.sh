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
"$KVP_BUILD_DIR/tools/kvplane-advisor" -c "$KVP_ROOT/etc/kvplane-advisor.conf" \
  -o nats.servers="$url" -o nats.mode="$mode" -o advisor.namespace=demo \
  -o store.path="$db" -o log.file="$work/advisor.log" &
adv_pid=$!
for _ in $(seq 100); do
  grep -q "running" "$work/advisor.log" 2>/dev/null && break
  sleep 0.1
done
echo "== kvplane-advisor ($mode), database $db"

echo "== $workers simulated workers replaying data/conversation_trace.jsonl.gz"
echo "   (G1 and G2 in memory, G3 a posix volume per worker under $work/volumes/g3,"
echo "    G4 the shared posix volume $work/volumes/g4)"
"$KVP_BUILD_DIR/tools/kvplane-sim" -t "$KVP_ROOT/data/conversation_trace.jsonl.gz" \
  -s "$url" -n demo -w "$workers" -m "$mode" -e "$work/expect.csv" \
  --volumes "$work/volumes" --plugin-dir "$KVP_BUILD_DIR/plugins"

# The advisor writes behind; wait until the database holds what the workers
# registered (every event applied and flushed), at most 60 s.
want=$(wc -l < "$work/expect.csv")
check() {
  sqlite3 -batch "$db" <<SQL
.mode csv
CREATE TEMP TABLE expect(worker TEXT, tier INTEGER, hash INTEGER);
.import $work/expect.csv expect
SELECT (SELECT count(*) FROM (SELECT worker, tier, hash FROM expect
                              EXCEPT SELECT worker, tier, hash FROM block_locations WHERE tier IN (1, 2, 3)))
     + (SELECT count(*) FROM (SELECT worker, tier, hash FROM block_locations WHERE tier IN (1, 2, 3)
                              EXCEPT SELECT worker, tier, hash FROM expect));
SQL
}
for _ in $(seq 600); do
  diff=$(check 2>/dev/null || echo busy)
  [ "$diff" = 0 ] && break
  sleep 0.1
done
if [ "$diff" != 0 ]; then
  echo "demo: the advisor's database differs from the workers' registered sets ($diff rows)" >&2
  tail -n 20 "$work/advisor.log" >&2
  exit 1
fi
echo "== the advisor's database equals the workers' registered sets: $want block locations"

q() { echo; echo "sqlite> $1"; sqlite3 -header -column "$db" "$1"; }
q "SELECT * FROM tier_usage ORDER BY tier, volume;"
q "SELECT worker, dp_rank, status, g1_blocks, g2_blocks, last_event_id FROM worker_status ORDER BY worker;"
q "SELECT hash_hex, hits, round(freq, 2) AS freq, tiers FROM hot_blocks LIMIT 5;"
q "SELECT tier, count(DISTINCT hash) AS blocks, count(*) AS locations FROM block_locations GROUP BY tier;"
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
