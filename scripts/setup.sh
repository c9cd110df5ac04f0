#!/usr/bin/env bash
# Installs the Debian packages kvplane needs (only the missing ones), then
# configures and builds. Sourced by demo.sh and test.sh; also runnable alone.
#   scripts/setup.sh [extra cmake args...]
# Environment: KVP_BUILD_DIR (default: build), KVP_EXTRA_PACKAGES.
set -euo pipefail

KVP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVP_BUILD_DIR=${KVP_BUILD_DIR:-$KVP_ROOT/build}

KVP_PACKAGES=(
  build-essential cmake pkg-config
  libuv1-dev libnats-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libsqlite3-dev sqlite3 libxxhash-dev libinih-dev zlib1g-dev libjansson-dev
  libcmocka-dev nats-server python3 python3-xxhash python3-protobuf openssl
  libcurl4-openssl-dev libssl-dev python3-botocore
  libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack gnuplot-nox
  libmicrohttpd-dev curl python3-prometheus-client prometheus
  radosgw ceph-mon ceph-osd
)

kvp_install_packages() {
  local missing=() p
  for p in "${KVP_PACKAGES[@]}" ${KVP_EXTRA_PACKAGES:-}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}" >&2
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# s3rver (npm) is the S3-protocol server the s3 plugin's tests run on
# loopback; installed into .npm-tools/ (git-ignored), pinned. nodejs and npm
# come from Debian when the machine has none.
KVP_S3RVER_VERSION=3.7.1
kvp_install_npm_tools() {
  local bin="$KVP_ROOT/.npm-tools/node_modules/.bin/s3rver"
  [ -x "$bin" ] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    KVP_EXTRA_PACKAGES="${KVP_EXTRA_PACKAGES:-} nodejs npm" kvp_install_packages
  fi
  echo "setup: installing s3rver@$KVP_S3RVER_VERSION (npm) into $KVP_ROOT/.npm-tools" >&2
  mkdir -p "$KVP_ROOT/.npm-tools"
  npm install --prefix "$KVP_ROOT/.npm-tools" --no-audit --no-fund --loglevel=error \
    "s3rver@$KVP_S3RVER_VERSION" >/dev/null
}

kvp_build() {
  cmake -S "$KVP_ROOT" -B "$KVP_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$KVP_BUILD_DIR" -j"$(nproc)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  kvp_install_packages
  kvp_install_npm_tools
  kvp_build -DKVP_BENCH=ON "$@"
fi
