#!/usr/bin/env bash
# The advisor's configuration errors as an operator meets them (ctest
# cli.advisor_conf, tests/cli/tests.cmake):
#   test_advisor_conf.sh BUILD_DIR
# Each bad [volume] section (a plugin that does not exist, a path whose
# parent directory does not exist, a parameter the plugin does not know, a
# G3 volume without capacity) makes both --print-config and a start with
# tiering enabled exit 1 with file:line and the key; the check writes nothing
# where the volume would live. A good section passes --print-config. A key
# given twice is warned of, naming both lines; usage errors name the program
# (not its path), and kvplane match -123 hints at --.
set -euo pipefail

build=$(cd "$1" && pwd)
adv=$build/tools/kvplane-advisor
export KVPLANE_PLUGIN_DIR=$build/plugins
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvp-advconf.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "test_advisor_conf: FAIL: $*" >&2
  exit 1
}

# conf BODY: a configuration with a [volume g3] section of BODY (lines 7 on).
conf() {
  printf '[store]\npath = %s/a.db\n[tiering]\nenabled = true\n[volume g3]\ntier = 3\n%s\n' \
    "$tmp" "$1" >"$tmp/a.conf"
}

# expect WHAT KEY-AND-CAUSE LINE: both modes exit 1 naming file:line and it.
expect() {
  local mode rc
  for mode in --print-config run; do
    rc=0
    if [ "$mode" = run ]; then
      timeout 20 "$adv" -c "$tmp/a.conf" -o nats.servers=nats://127.0.0.1:1 >"$tmp/out" 2>"$tmp/err" || rc=$?
    else
      "$adv" -c "$tmp/a.conf" --print-config >"$tmp/out" 2>"$tmp/err" || rc=$?
    fi
    [ "$rc" = 1 ] || fail "$1 ($mode): exit $rc, not 1: $(cat "$tmp/err")"
    grep -qF "$tmp/a.conf:$3: [volume g3] $2" "$tmp/err" ||
      fail "$1 ($mode): the error does not read '$tmp/a.conf:$3: [volume g3] $2...': $(cat "$tmp/err")"
  done
  [ ! -e "$tmp/a.db" ] || fail "$1: a database was created"
  echo "ok: $1: $(cat "$tmp/err")"
}

conf "plugin = nosuch
capacity = 1MiB"
expect "a plugin that does not exist" "plugin: no plugin 'nosuch'" 7

conf "plugin = posix
capacity = 1MiB
path = $tmp/missing/vol"
expect "a path whose parent is missing" "path: the parent directory $tmp/missing does not exist" 9

conf "plugin = posix
capacity = 1MiB
path = $tmp/vol
colour = red"
expect "an unknown plugin parameter" "volume g3 (plugin posix): unknown parameter 'colour'" 10
[ ! -e "$tmp/vol" ] || fail "the check made the volume's directory $tmp/vol"

# An empty path: --print-config checked the plugin against its scratch
# directory in place of it and passed, while the start refused it.
conf "plugin = posix
capacity = 1MiB
path ="
expect "an empty path" "volume g3 (plugin posix): path: required" 9

conf "plugin = posix
path = $tmp/vol"
expect "a G3 volume without capacity" "capacity (a G3 volume's watermarks are fractions of it): required" 6

conf "plugin = posix
capacity = 1MiB
path = $tmp/vol"
"$adv" -c "$tmp/a.conf" --print-config >"$tmp/out" 2>"$tmp/err" || fail "a good volume: --print-config: $(cat "$tmp/err")"
grep -q "^\[volume g3\]" "$tmp/out" || grep -q "g3" "$tmp/out" || fail "--print-config does not show the volume"
[ ! -e "$tmp/vol" ] || fail "--print-config made the volume's directory $tmp/vol"
# What --print-config prints reads back as it is (its help comments run
# past libinih's 200-byte line).
"$adv" -c "$tmp/out" --print-config >"$tmp/out2" 2>"$tmp/err" || fail "--print-config's output does not read back: $(cat "$tmp/err")"
cmp -s "$tmp/out" "$tmp/out2" || fail "--print-config's output read back prints differently"
# A log file that cannot be opened: a configuration error (exit 1) with the
# cause (it was exit 2, as for an unreachable database, without one).
rc=0
"$adv" -o "log.file=$tmp/missing/advisor.log" -o "store.path=$tmp/l.db" \
  -o nats.servers=nats://127.0.0.1:1 >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -qF "[log] file: cannot open $tmp/missing/advisor.log: No such file or directory" "$tmp/err" ||
  fail "log.file in a missing directory: exit $rc: $(cat "$tmp/err")"

# -o cannot set a [volume] key: said so, not "unknown section [volume g3]".
rc=0
"$adv" -o "volume g3.path=$tmp/vol" --print-config >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -qF "[volume NAME] sections are set in the configuration file" "$tmp/err" ||
  fail "-o volume g3.path: exit $rc: $(cat "$tmp/err")"
# The units etc/kvplane-advisor.conf names: 7d, 10TiB.
printf '[store]\npath = %s/a.db\nhistory_keep = 7d\n[volume g4]\ntier = 4\nplugin = posix\ncapacity = 10TiB\npath = %s/vol4\n' \
  "$tmp" "$tmp" >"$tmp/units.conf"
"$adv" -c "$tmp/units.conf" --print-config >"$tmp/out" 2>"$tmp/err" || fail "7d, 10TiB: $(cat "$tmp/err")"
grep -qx "history_keep = 604800000ms" "$tmp/out" || fail "history_keep = 7d is not 7 days"
grep -qx "capacity = 10995116277760" "$tmp/out" || fail "capacity = 10TiB is not 2^40 * 10 bytes"

# A key given twice: a warning naming both lines; the later value is used.
printf '[store]\npath = %s/a.db\nflush_interval = 1s\n\n[store]\nflush_interval = 2s\n' "$tmp" >"$tmp/dup.conf"
"$adv" -c "$tmp/dup.conf" --print-config >"$tmp/out" 2>"$tmp/err" || fail "duplicate key: --print-config failed: $(cat "$tmp/err")"
grep -qF "$tmp/dup.conf:6: [store] flush_interval repeats line 3" "$tmp/err" ||
  fail "a duplicate key is not warned of, naming both lines: $(cat "$tmp/err")"
grep -qx "flush_interval = 2000ms" "$tmp/out" || fail "the later value of a duplicate key is not the one used"
echo "ok: a duplicate key: $(cat "$tmp/err")"

# Usage errors name the program, not its path.
rc=0
"$adv" --frobnicate >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "kvplane-advisor --frobnicate: exit $rc"
grep -q "^kvplane-advisor: unrecognized option" "$tmp/err" || fail "usage error names the path: $(head -1 "$tmp/err")"
rc=0
"$build/tools/kvplane" match -123 >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || fail "kvplane match -123: exit $rc"
grep -q "^kvplane: invalid option" "$tmp/err" || fail "kvplane's usage error names the path: $(head -1 "$tmp/err")"
grep -qF "kvplane match -- -1" "$tmp/err" || fail "kvplane match -123 does not hint at --: $(cat "$tmp/err")"
echo "test_advisor_conf: PASS"
