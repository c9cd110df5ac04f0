#!/usr/bin/env bash
# etc/prometheus and etc/grafana (ctest metrics_rules.*, tests/metrics/tests.cmake):
#   test_alert_rules.sh names SOURCE_DIR     every kvplane_* metric the alert
#       rules and the Grafana dashboard use is one the daemons export (the names their metric writers
#       pass to kvp__prom_*: src/advisor/metrics.c, src/relay/metrics.c,
#       src/metrics/build_info.c, src/metrics/server.c; a histogram's _bucket,
#       _sum, _count too)
#   test_alert_rules.sh promtool SOURCE_DIR  promtool check rules accepts the
#       rules and promtool check config the scrape example, and every query of
#       the dashboard parses as PromQL (checked as recording rules; exit 77,
#       skipped, without promtool: apt-get install prometheus)
set -euo pipefail

mode=$1
src=$(cd "$2" && pwd)
rules=$src/etc/prometheus/kvplane-alerts.yml
dashboard=$src/etc/grafana/kvplane-dashboard.json
# The dashboard's queries, one a line, with Grafana's variables made PromQL.
dashboard_exprs() {
  /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for p in d["panels"]:
    for t in p.get("targets", []):
        print(t["expr"].replace("$__rate_interval", "5m").replace("$instance", ".*"))
' "$dashboard"
}
fail() {
  echo "test_alert_rules: FAIL: $*" >&2
  exit 1
}

case $mode in
names)
  exported=$(grep -oh '"kvplane_[a-z0-9_]*"' "$src/src/advisor/metrics.c" "$src/src/relay/metrics.c" \
    "$src/src/metrics/build_info.c" "$src/src/metrics/server.c" | tr -d '"' | sort -u)
  [ -n "$exported" ] || fail "no exported metric names found in the sources"
  exprs=$(dashboard_exprs) || fail "$dashboard is not a dashboard (JSON with panels and targets)"
  for f in rules dashboard; do
    if [ $f = rules ]; then
      used=$(grep -v '^ *#' "$rules" | grep -o 'kvplane_[a-z0-9_]*' | sort -u)
    else
      used=$(printf '%s\n' "$exprs" | grep -o 'kvplane_[a-z0-9_]*' | sort -u)
    fi
    [ -n "$used" ] || fail "the $f use no kvplane metric"
    for m in $used; do
      base=$(echo "$m" | sed -E 's/_(bucket|sum|count)$//')
      # A here-string, not a pipe: grep -q exits at the first match, and
      # printf's SIGPIPE would fail the pipeline under pipefail.
      if ! grep -qx -e "$m" -e "$base" <<<"$exported"; then
        fail "the $f use $m, which no daemon exports (a typo, or a metric that went away)"
      fi
    done
    echo "test_alert_rules: the $f: $(echo "$used" | wc -l) metrics, all exported"
  done
  ;;
promtool)
  if ! command -v promtool >/dev/null; then
    echo "SKIP: promtool is not installed (apt-get install prometheus): rules not checked"
    exit 77
  fi
  promtool check rules "$rules"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvp-rules.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # The example names the rules where a package puts them; here, this tree's.
  sed "s|/etc/prometheus/kvplane-alerts.yml|$rules|" "$src/etc/prometheus/prometheus.yml.example" \
    >"$tmp/prometheus.yml"
  promtool check config "$tmp/prometheus.yml"
  {
    echo "groups:"
    echo "  - name: dashboard"
    echo "    rules:"
    n=0
    while IFS= read -r e; do
      n=$((n + 1))
      printf '      - record: kvplane_dashboard_query_%d\n        expr: %s\n' "$n" \
        "$(printf '%s' "$e" | /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')"
    done < <(dashboard_exprs)
  } >"$tmp/dashboard-rules.yml"
  promtool check rules "$tmp/dashboard-rules.yml"
  ;;
*)
  fail "mode '$mode': names or promtool"
  ;;
esac
echo "test_alert_rules: PASS"
