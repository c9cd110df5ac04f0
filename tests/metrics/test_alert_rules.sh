#!/usr/bin/env bash
# etc/prometheus (ctest metrics_rules.*, tests/metrics/tests.cmake):
#   test_alert_rules.sh names SOURCE_DIR     every kvplane_* metric the alert
#       rules use is one the daemons export (the names their metric writers
#       pass to kvp__prom_*: src/advisor/metrics.c, src/relay/metrics.c,
#       src/metrics/build_info.c; a histogram's _bucket, _sum, _count too)
#   test_alert_rules.sh promtool SOURCE_DIR  promtool check rules accepts the
#       rules and promtool check config the scrape example (exit 77, skipped,
#       without promtool: apt-get install prometheus)
set -euo pipefail

mode=$1
src=$(cd "$2" && pwd)
rules=$src/etc/prometheus/kvplane-alerts.yml
fail() {
  echo "test_alert_rules: FAIL: $*" >&2
  exit 1
}

case $mode in
names)
  exported=$(grep -oh '"kvplane_[a-z0-9_]*"' "$src/src/advisor/metrics.c" "$src/src/relay/metrics.c" \
    "$src/src/metrics/build_info.c" | tr -d '"' | sort -u)
  [ -n "$exported" ] || fail "no exported metric names found in the sources"
  used=$(grep -v '^ *#' "$rules" | grep -o 'kvplane_[a-z0-9_]*' | sort -u)
  [ -n "$used" ] || fail "$rules uses no kvplane metric"
  for m in $used; do
    base=$(echo "$m" | sed -E 's/_(bucket|sum|count)$//')
    if ! printf '%s\n' "$exported" | grep -qx -e "$m" -e "$base"; then
      fail "$rules uses $m, which no daemon exports"
    fi
  done
  echo "test_alert_rules: the rules use $(echo "$used" | wc -l) metrics, all exported"
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
  ;;
*)
  fail "mode '$mode': names or promtool"
  ;;
esac
echo "test_alert_rules: PASS"
