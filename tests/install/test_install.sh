#!/usr/bin/env bash
# The install test (ctest install.tree, tests/install/tests.cmake):
#   test_install.sh BUILD_DIR SOURCE_DIR
# 1. cmake --install BUILD_DIR into a temporary prefix; every part is there;
#    libkvplane.so and kvplane.pc name none of the daemons' libraries; a
#    second install keeps the configuration edited after the first (conffiles)
#    and refreshes the .example files beside it; --component python installs
#    the binding, which imports and loads the prefix's library by itself.
# 2. examples/ built out of tree against it with find_package(kvplane)
#    (shared and static library) and with pkg-config (shared and static);
#    a probe program linked each way finds the prefix's plugin directory.
# 3. The installed kvplane-advisor, with the installed configuration copied
#    and pointed at a temporary state directory, a nats-server started here on
#    a free loopback port and a posix volume (plugin found with no path in the
#    configuration), ingests the events of the four example builds, then
#    stops on SIGTERM with exit 0, leaving its database.
# 4. The systemd units: ExecStart= and the files they name are in the prefix,
#    the state directory matches the configuration's database path, and
#    systemd-analyze verify accepts them (skipped when it is not installed).
# Environment (from tests.cmake): KVP_INSTALL_LIBDIR, KVP_INSTALL_BINDIR,
# KVP_INSTALL_SYSCONFDIR (the build's CMAKE_INSTALL_*), KVP_INSTALL_CC,
# KVP_INSTALL_CFLAGS (sanitizer flags the installed library needs).
# KVP_KEEP_TMP=1 keeps the temporary directory. Exit 77: skipped.
set -euo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
libdir=${KVP_INSTALL_LIBDIR:-lib}
bindir=${KVP_INSTALL_BINDIR:-bin}
sysconfdir=${KVP_INSTALL_SYSCONFDIR:-etc}
cc=${KVP_INSTALL_CC:-cc}
export CFLAGS=${KVP_INSTALL_CFLAGS:-}
export LDFLAGS=${KVP_INSTALL_CFLAGS:-}
unset KVPLANE_PLUGIN_DIR

for d in "$libdir" "$bindir" "$sysconfdir"; do
  case $d in
  /*)
    echo "test_install: SKIP: $d is absolute: a temporary prefix cannot hold it"
    exit 77
    ;;
  esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvp-install.XXXXXX")
tmp=$(realpath "$tmp")
prefix=$tmp/prefix
nats_pid=
adv_pid=

cleanup() {
  local rc=$?
  # Only the processes this script started, by their pid.
  for p in $adv_pid $nats_pid; do
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] && [ -f "$tmp/advisor.log" ]; then
    echo "--- advisor log" >&2
    tail -n 40 "$tmp/advisor.log" >&2
  fi
  if [ "${KVP_KEEP_TMP:-0}" = 1 ]; then
    echo "test_install: kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

fail() {
  echo "test_install: FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

# run LOG CMD...: runs CMD with its output in LOG, shown if it fails.
run() {
  local log=$1
  shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 40 "$log" >&2
    fail "$* (exit status $rc)"
  fi
}

step "cmake --install $build --prefix $prefix"
run "$tmp/install.log" cmake --install "$build" --prefix "$prefix"
for f in "$bindir/kvplane-advisor" "$bindir/kvplane-relay" "$bindir/kvplane" "$bindir/kvplane-sim" \
  "$libdir/libkvplane.so" "$libdir/libkvplane.a" "$libdir/pkgconfig/kvplane.pc" \
  "$libdir/cmake/kvplane/kvplaneConfig.cmake" "$libdir/cmake/kvplane/kvplaneConfigVersion.cmake" \
  "$libdir/kvplane/plugins/kvplane-volume-posix.so" "$libdir/kvplane/plugins/kvplane-volume-s3.so" \
  include/kvplane/kvplane.h share/kvplane/proto/kvplane/v1/kvplane.proto \
  "$sysconfdir/kvplane/kvplane-advisor.conf" "$sysconfdir/kvplane/kvplane-relay.env" \
  "$sysconfdir/kvplane/kvplane-advisor.conf.example" "$sysconfdir/kvplane/kvplane-relay.env.example" \
  lib/systemd/system/kvplane-advisor.service lib/systemd/system/kvplane-relay.service \
  lib/sysusers.d/kvplane.conf; do
  [ -e "$prefix/$f" ] || fail "not installed: $prefix/$f"
done
plugins=$prefix/$libdir/kvplane/plugins

step "a reinstall keeps edited configuration (conffiles), the shipped one beside it"
for c in kvplane-advisor.conf kvplane-relay.env; do
  f=$prefix/$sysconfdir/kvplane/$c
  cmp -s "$f.example" "$src/etc/$c" || fail "$f.example is not the shipped etc/$c"
  echo "# edited by the operator" >>"$f"
done
run "$tmp/reinstall.log" cmake --install "$build" --prefix "$prefix"
for c in kvplane-advisor.conf kvplane-relay.env; do
  f=$prefix/$sysconfdir/kvplane/$c
  tail -n 1 "$f" | grep -qx "# edited by the operator" || fail "a reinstall overwrote the edited $f"
  cmp -s "$f.example" "$src/etc/$c" || fail "a reinstall did not refresh $f.example"
  grep -q "Keeping: $f" "$tmp/reinstall.log" || fail "the reinstall does not say it kept $f"
done

step "the Python package (--component python) imports from the prefix, without KVPLANE_LIB"
pydir=${KVP_INSTALL_PYDIR:-lib/python3/dist-packages}
run "$tmp/install-python.log" cmake --install "$build" --component python --prefix "$prefix"
[ -f "$prefix/$pydir/kvplane/_install.py" ] || fail "no $prefix/$pydir/kvplane/_install.py"
[ ! -e "$prefix/$pydir/kvplane/__pycache__" ] || fail "installed a __pycache__"
if [ -n "${KVP_INSTALL_CFLAGS:-}" ]; then
  echo "sanitizer build: an instrumented libkvplane cannot load into python3; import not tried"
else
  # Run from / so that no build tree beside the package is found instead.
  got=$(cd / && env -u KVPLANE_LIB -u LD_LIBRARY_PATH PYTHONPATH="$prefix/$pydir" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -c 'import kvplane, kvplane._lib as l
print(l.lib()._name)
print(len(kvplane.hash_blocks(list(range(8)), 4)))' 2>&1) || fail "import kvplane from $prefix/$pydir: $got"
  [ "$(echo "$got" | head -1)" = "$prefix/$libdir/libkvplane.so.0" ] ||
    fail "kvplane loaded $(echo "$got" | head -1), not $prefix/$libdir/libkvplane.so.0"
  [ "$(echo "$got" | tail -1)" = 2 ] || fail "kvplane.hash_blocks from the prefix: $got"
fi

step "libkvplane carries only what a worker needs"
# The daemons' libraries are not the worker's: not linked, not required by
# the .pc file, and their headers are not installed.
needed=$(readelf -d "$prefix/$libdir/libkvplane.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for l in libsqlite3 libinih libzmq libmsgpack libmicrohttpd libz.so; do
  if printf '%s\n' "$needed" | grep -q "^$l"; then
    fail "libkvplane.so links $l (NEEDED: $(echo $needed))"
  fi
done
for m in sqlite3 inih libzmq msgpack libmicrohttpd zlib; do
  if grep -E "^Requires" "$prefix/$libdir/pkgconfig/kvplane.pc" | grep -qw "$m"; then
    fail "kvplane.pc requires $m"
  fi
done
for h in advisor.h relay.h; do
  [ ! -e "$prefix/include/kvplane/$h" ] || fail "installed a daemon's header: include/kvplane/$h"
done

# A program that prints the default plugin directory: the installed tree's,
# whether it links libkvplane.so or libkvplane.a.
cat >"$tmp/probe.c" <<'EOF'
#include <stdio.h>
#include "kvplane/volume.h"
int main(void) {
  puts(kvp_volume_plugin_dir());
  return 0;
}
EOF

step "examples/ with find_package(kvplane)"
run "$tmp/ex-cmake.log" cmake -S "$src/examples" -B "$tmp/ex-cmake" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo
run "$tmp/ex-cmake-build.log" cmake --build "$tmp/ex-cmake" -j2
for b in minimal_worker minimal_worker_static; do
  [ -x "$tmp/ex-cmake/$b" ] || fail "find_package build made no $b"
done
if readelf -d "$tmp/ex-cmake/minimal_worker_static" | grep -q 'libkvplane\.so'; then
  fail "minimal_worker_static (kvplane::kvplane_static) needs libkvplane.so"
fi
readelf -d "$tmp/ex-cmake/minimal_worker" | grep -q 'libkvplane\.so' ||
  fail "minimal_worker (kvplane::kvplane) does not link libkvplane.so"

step "examples/ with pkg-config"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
[ "$(pkg-config --modversion kvplane)" = "$(sed -n 's/^Version: //p' "$PKG_CONFIG_PATH/kvplane.pc")" ] ||
  fail "pkg-config does not find kvplane in $PKG_CONFIG_PATH"
# Word splitting of pkg-config's output is intended.
# shellcheck disable=SC2046,SC2086
{
  shared_libs=$(pkg-config --libs kvplane)
  # libkvplane.a with shared dependencies: the static library by name (with
  # both, -lkvplane is the shared one), the Requires.private modules' libraries
  # and the Libs.private. (pkg-config --static would link the dependencies
  # statically too, which Debian's libzmq.pc cannot: it names libprotokit.a.)
  static_libs="-L$(pkg-config --variable=libdir kvplane) -l:libkvplane.a
    $(pkg-config --libs $(pkg-config --print-requires-private kvplane))
    $(sed -n 's/^Libs.private: //p' "$PKG_CONFIG_PATH/kvplane.pc")"
  run "$tmp/pc.log" "$cc" $CFLAGS -o "$tmp/mw-pc" "$src/examples/minimal_worker.c" \
    $(pkg-config --cflags kvplane) $shared_libs $LDFLAGS
  run "$tmp/pc-static.log" "$cc" $CFLAGS -o "$tmp/mw-pc-static" "$src/examples/minimal_worker.c" \
    $(pkg-config --cflags kvplane) $static_libs $LDFLAGS
  run "$tmp/probe.log" "$cc" $CFLAGS -o "$tmp/probe" "$tmp/probe.c" \
    $(pkg-config --cflags kvplane) $shared_libs $LDFLAGS
  run "$tmp/probe-static.log" "$cc" $CFLAGS -o "$tmp/probe-static" "$tmp/probe.c" \
    $(pkg-config --cflags kvplane) $static_libs $LDFLAGS
}
if readelf -d "$tmp/mw-pc-static" | grep -q 'libkvplane\.so'; then
  fail "mw-pc-static (pkg-config --static) needs libkvplane.so"
fi
# The shared builds run with the prefix's library directory, as after
# ldconfig; the static probe runs from a bin/ beside the prefix's lib/.
export LD_LIBRARY_PATH=$prefix/$libdir
got=$("$tmp/probe")
[ "$got" = "$plugins" ] || fail "libkvplane.so's default plugin directory is $got, not $plugins"
cp "$tmp/probe-static" "$prefix/$bindir/kvp-probe-static"
got=$("$prefix/$bindir/kvp-probe-static")
rm -f "$prefix/$bindir/kvp-probe-static"
[ "$got" = "$plugins" ] || fail "a program in $bindir with libkvplane.a has plugin directory $got, not $plugins"

step "nats-server with JetStream on a free loopback port"
command -v nats-server >/dev/null || fail "nats-server not found: apt-get install nats-server"
# A port found free may be taken before nats-server binds it: three tries.
for attempt in 1 2 3; do
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -f "$tmp/nats-server.log"
  nats-server -a 127.0.0.1 -p "$port" -js -sd "$tmp/jetstream" -l "$tmp/nats-server.log" &
  nats_pid=$!
  for _ in $(seq 100); do
    grep -q "Server is ready" "$tmp/nats-server.log" 2>/dev/null && break
    kill -0 "$nats_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "Server is ready" "$tmp/nats-server.log" 2>/dev/null && break
  kill -KILL "$nats_pid" 2>/dev/null || true
  wait "$nats_pid" 2>/dev/null || true
  nats_pid=
  [ "$attempt" = 3 ] && fail "nats-server did not start (3 tries); last log: $(tail -n 3 "$tmp/nats-server.log" 2>/dev/null)"
done
url=nats://127.0.0.1:$port

step "the installed advisor with the installed configuration"
conf=$tmp/kvplane-advisor.conf
state=$tmp/state/kvplane
db=$state/advisor.db
installed_conf=$prefix/$sysconfdir/kvplane/kvplane-advisor.conf
grep -qx 'path = /var/lib/kvplane/advisor.db' "$installed_conf" ||
  fail "$installed_conf: store.path is not /var/lib/kvplane/advisor.db (the unit's StateDirectory)"
# The examples publish in namespace "example"; the volume's plugin is found
# with no plugin_dir (empty in the installed file).
sed -e "s|^servers = .*|servers = $url|" \
  -e "s|^namespace = .*|namespace = example|" \
  -e "s|^path = /var/lib/kvplane/advisor.db|path = $db|" \
  -e "s|^enabled = false|enabled = true|" \
  -e "s|^connect_timeout = .*|connect_timeout = 10s|" \
  "$installed_conf" >"$conf"
cat >>"$conf" <<EOF

[volume g3-install]
tier = 3
plugin = posix
capacity = 64MiB
path = $tmp/g3-install
fsync = off
EOF
grep -qx "plugin_dir =" "$conf" || fail "$installed_conf sets a plugin_dir"
# As systemd makes StateDirectory=kvplane: the directory, not the database.
mkdir -p "$tmp/state"
mkdir -m 0750 "$state"
adv=$prefix/$bindir/kvplane-advisor
cli=$prefix/$bindir/kvplane
run "$tmp/print-config.log" "$adv" --config "$conf" --print-config
grep -q "$db" "$tmp/print-config.log" || fail "--print-config does not show store.path $db"

"$adv" --config "$conf" 2>"$tmp/advisor.log" &
adv_pid=$!
# Ready when it answers a stats request over NATS.
ready=0
for _ in $(seq 150); do
  kill -0 "$adv_pid" 2>/dev/null || fail "kvplane-advisor exited before it was ready"
  if "$cli" stats -s "$url" -n example -w 500 >"$tmp/stats.json" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.2
done
[ "$ready" = 1 ] || fail "kvplane-advisor did not answer kvplane stats within 30 s"
# The posix plugin came from the prefix, not from a path in the configuration.
grep -q "$plugins/kvplane-volume-posix.so" "/proc/$adv_pid/maps" ||
  fail "kvplane-advisor did not load $plugins/kvplane-volume-posix.so"

step "the four example builds publish to it"
for w in "$tmp/ex-cmake/minimal_worker" "$tmp/ex-cmake/minimal_worker_static" "$tmp/mw-pc" \
  "$tmp/mw-pc-static"; do
  run "$w.run.log" "$w" "$url" 5
  grep -q "hit rate" "$w.run.log" || fail "$w printed no figures"
done
# The worker's blocks reach the database (write-behind, every 200 ms).
seen=0
for _ in $(seq 100); do
  if "$cli" workers --db "$db" 2>/dev/null | grep -q minimal-worker; then
    seen=1
    break
  fi
  sleep 0.2
done
[ "$seen" = 1 ] || fail "worker minimal-worker not in $db after 20 s"

step "SIGTERM"
kill -TERM "$adv_pid"
for _ in $(seq 300); do
  kill -0 "$adv_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$adv_pid" 2>/dev/null && fail "kvplane-advisor still running 30 s after SIGTERM"
rc=0
wait "$adv_pid" || rc=$?
adv_pid=
[ "$rc" = 0 ] || fail "kvplane-advisor exited with status $rc after SIGTERM"
grep -q "stopping" "$tmp/advisor.log" || fail "the advisor did not log the stop"
[ -f "$db" ] || fail "no database at $db"
run "$tmp/status.log" "$cli" status --db "$db" -s "$url" -w 200
grep -q "^G1 .* 9 " "$tmp/status.log" || fail "kvplane status --db does not show the 9 G1 blocks"
# The volume opened through the plugin is recorded (docs/sql.md, volumes).
[ "$(sqlite3 "$db" "SELECT tier FROM volumes WHERE volume = 'g3-install'")" = 3 ] ||
  fail "$db: no volume g3-install in tier 3"
run "$tmp/workers.log" "$cli" workers --db "$db"
grep -q minimal-worker "$tmp/workers.log" || fail "kvplane workers --db does not show minimal-worker"

step "systemd units"
units=$prefix/lib/systemd/system
for u in kvplane-advisor kvplane-relay; do
  exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$units/$u.service")
  [ "$exe" = "$prefix/$bindir/$u" ] || fail "$u.service: ExecStart= runs '$exe', not $prefix/$bindir/$u"
  [ -x "$exe" ] || fail "$u.service: $exe is not executable"
  grep -qx "User=kvplane" "$units/$u.service" || fail "$u.service: not User=kvplane"
done
grep -q "^ExecStart=.* --config $installed_conf\$" "$units/kvplane-advisor.service" ||
  fail "kvplane-advisor.service does not read $installed_conf"
grep -qx "StateDirectory=kvplane" "$units/kvplane-advisor.service" ||
  fail "kvplane-advisor.service: StateDirectory is not kvplane (/var/lib/kvplane)"
grep -qx "EnvironmentFile=$prefix/$sysconfdir/kvplane/kvplane-relay.env" "$units/kvplane-relay.service" ||
  fail "kvplane-relay.service does not read $prefix/$sysconfdir/kvplane/kvplane-relay.env"
grep -q '^u kvplane ' "$prefix/lib/sysusers.d/kvplane.conf" || fail "sysusers.d/kvplane.conf makes no user kvplane"
if command -v systemd-analyze >/dev/null; then
  # Unknown keys and bad values are warnings with exit status 0: any line
  # naming one of our units is a failure.
  rc=0
  systemd-analyze verify "$units/kvplane-advisor.service" "$units/kvplane-relay.service" \
    >"$tmp/verify.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ] || grep -q 'kvplane-' "$tmp/verify.log"; then
    cat "$tmp/verify.log" >&2
    fail "systemd-analyze verify (exit status $rc)"
  fi
  echo "systemd-analyze verify: both units accepted"
else
  echo "systemd-analyze not installed: units not verified (apt-get install systemd)"
fi

echo "test_install: PASS"
