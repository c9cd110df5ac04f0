#!/usr/bin/env bash
# A real S3 server that verifies every signature, for tests: Ceph's radosgw
# (Debian 12: Ceph 16 Pacific) on a one-node RADOS cluster on 127.0.0.1,
# everything under DIR.
#
#   tests/tools/rgw_cluster.sh start DIR [PORT]   PORT 0 or none: a free one
#   tests/tools/rgw_cluster.sh stop DIR
#
# start makes a monitor (ceph-mon), one OSD keeping its objects in memory
# (osd objectstore = memstore) and radosgw with the beast frontend on
# 127.0.0.1:PORT, rgw_dns_name localhost (virtual-hosted kvb.localhost) and
# STS on; then a user with fixed keys, bucket "kvb", and a session
# credential from STS AssumeRole. It writes DIR/env (KEY=VALUE lines:
# KVP_RGW_ENDPOINT, _HOST_ENDPOINT, _BUCKET, _ACCESS, _SECRET,
# _SESSION_ACCESS, _SESSION_SECRET, _SESSION_TOKEN, _REGION) and prints it.
# Each step is bounded; the whole start takes 15-30 s. Nothing outside DIR
# is written (logs, sockets, pid files, the cluster log are all set into
# DIR) and nothing listens beyond 127.0.0.1. Cluster auth is "none": the
# cluster is private to this machine's loopback for the length of a test run;
# S3 requests are signed and checked as always.
#
# stop kills what start started (pid files in DIR/run) and removes DIR.
# Exit status: 0; 77 (with "SKIP: ...") when radosgw or ceph-mon/ceph-osd are
# not installed (scripts/setup.sh installs them); 1 on a failure, with the
# daemons' log tails on stderr and nothing left running.
set -euo pipefail

ACCESS=KVPRGWKEY
SECRET='kvp/rgw+secret=1'
BUCKET=kvb
REGION=us-east-1

die() {
  echo "rgw_cluster: $*" >&2
  for f in "$DIR"/log/*.log; do
    [ -f "$f" ] || continue
    echo "--- tail of $f" >&2
    tail -n 6 "$f" | cut -c1-300 >&2
  done
  stop_daemons
  exit 1
}

stop_daemons() {
  local f pid pids=()
  for f in "$DIR"/run/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    # Only a process started with this DIR's config is ours.
    if [ -n "$pid" ] && grep -qs -- "$DIR/ceph.conf" "/proc/$pid/cmdline"; then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    fi
    rm -f "$f"
  done
  local i
  for i in $(seq 1 50); do
    local alive=0
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ $alive -eq 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Runs a bounded command with the cluster's config.
c() {
  timeout 30 "$@" -c "$DIR/ceph.conf"
}

start() {
  local port=${1:-0}
  for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph; do
    if ! command -v "$b" >/dev/null 2>&1; then
      echo "SKIP: $b is not installed (Debian packages radosgw ceph-mon ceph-osd; scripts/setup.sh)"
      exit 77
    fi
  done
  [ -f "$DIR/ceph.conf" ] && stop_daemons
  rm -rf "$DIR"
  mkdir -p "$DIR/run" "$DIR/log" "$DIR/crash" "$DIR/mon.a" "$DIR/osd.0" "$DIR/rgw"
  [ "$port" = 0 ] && port=$(free_port)
  local monport fsid
  monport=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$monport
mon initial members = a
public addr = 127.0.0.1
ms bind ipv6 = false
ms bind msgr1 = false
# No cephx inside this private loopback cluster; "none" allows only crc mode.
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc secure
ms client mode = crc secure
mon allow insecure global id reclaim = true
mon warn on insecure global id reclaim allowed = false
run dir = $DIR/run
# No admin sockets: unix socket paths are limited to 107 bytes, DIR may be
# deeper, and nothing here uses them.
admin socket =
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/\$cluster.\$channel.log
pid file = $DIR/run/\$name.pid
crash dir = $DIR/crash
keyring = $DIR/keyring
mon data = $DIR/mon.\$id
osd data = $DIR/osd.\$id
client mount timeout = 20
rados mon op timeout = 20
rados osd op timeout = 30
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
osd objectstore = memstore
# Objects live in memory: at most 2 GiB of them (the OSD reports full
# past 95%), and radosgw frees deleted and replaced data within seconds
# (its default waits two hours), so a run stays well under that.
memstore device bytes = 2147483648
[client.rgw]
# tcp_nodelay: without it beast's Nagle holds the last bytes of a response
# until the client's delayed ACK (40 ms): 64 KiB gets took 40-80 ms instead
# of 1-2 ms for half of the plugin's and 5-30% of botocore's, so the
# benchmark measured that, not the clients.
rgw frontends = beast endpoint=127.0.0.1:$port tcp_nodelay=1
rgw data = $DIR/rgw
rgw dns name = localhost
rgw init timeout = 30
rgw s3 auth use sts = true
rgw sts key = kvpRgwStsKey0123
rgw enable usage log = false
rgw thread pool size = 64
rgw gc obj min wait = 10
rgw gc processor period = 10
EOF
  timeout 30 ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' \
    >/dev/null 2>&1 || die "ceph-authtool failed"
  timeout 30 monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$monport]" \
    "$DIR/monmap" >/dev/null 2>&1 || die "monmaptool failed"
  c ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
    >"$DIR/log/mkfs-mon.out" 2>&1 || die "ceph-mon --mkfs failed"
  c ceph-mon -i a </dev/null >"$DIR/log/mon.out" 2>&1 || die "ceph-mon did not start"
  c ceph -s --connect-timeout 20 >/dev/null 2>&1 || die "the monitor does not answer"

  local osd_uuid id
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  id=$(c ceph osd new "$osd_uuid" 2>>"$DIR/log/osd.out") || die "ceph osd new failed"
  [ "$id" = 0 ] || die "ceph osd new gave id '$id', not 0"
  c ceph-osd -i 0 --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/mkfs-osd.out" 2>&1 ||
    die "ceph-osd --mkfs failed"
  c ceph-osd -i 0 </dev/null >"$DIR/log/osd.out" 2>&1 || die "ceph-osd did not start"
  local i up=0
  for i in $(seq 1 200); do
    if c ceph osd dump 2>/dev/null | grep -q '^osd\.0 up'; then
      up=1
      break
    fi
    sleep 0.1
  done
  [ $up = 1 ] || die "osd.0 not up after 20 s"

  c radosgw -n client.rgw </dev/null >"$DIR/log/rgw.out" 2>&1 || die "radosgw did not start"
  up=0
  for i in $(seq 1 600); do
    if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; then
      up=1
      break
    fi
    sleep 0.1
  done
  [ $up = 1 ] || die "radosgw not answering on 127.0.0.1:$port after 60 s"

  c radosgw-admin -n client.admin user create --uid kvp --display-name kvp \
    --access-key "$ACCESS" --secret "$SECRET" >/dev/null 2>"$DIR/log/admin.out" ||
    die "radosgw-admin user create failed"
  # AssumeRole needs the caller allowed by the role's trust policy; the
  # role may do anything in S3.
  c radosgw-admin -n client.admin caps add --uid kvp --caps 'roles=*' \
    >/dev/null 2>>"$DIR/log/admin.out" || die "radosgw-admin caps add failed"
  c radosgw-admin -n client.admin role create --role-name kvp-s3 \
    --assume-role-policy-doc '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/kvp"]},"Action":["sts:AssumeRole"]}]}' \
    >/dev/null 2>>"$DIR/log/admin.out" || die "radosgw-admin role create failed"
  c radosgw-admin -n client.admin role-policy put --role-name kvp-s3 --policy-name all \
    --policy-doc '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":"arn:aws:s3:::*"}]}' \
    >/dev/null 2>>"$DIR/log/admin.out" || die "radosgw-admin role-policy put failed"

  # The bucket and the session credential, through botocore (Debian's
  # python3-botocore, which the other S3 tests use too).
  timeout 60 /usr/bin/python3 - "http://127.0.0.1:$port" "$ACCESS" "$SECRET" "$BUCKET" "$REGION" \
    >"$DIR/session" 2>"$DIR/log/setup.out" <<'PY' || die "creating the bucket or the STS session failed"
import sys
import botocore.session
from botocore.config import Config
ep, ak, sk, bucket, region = sys.argv[1:6]
s = botocore.session.get_session()
cfg = Config(retries={"max_attempts": 1}, connect_timeout=10, read_timeout=30)
s3 = s.create_client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                     region_name=region, config=cfg)
s3.create_bucket(Bucket=bucket)
sts = s.create_client("sts", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                      region_name=region, config=cfg)
c = sts.assume_role(RoleArn="arn:aws:iam:::role/kvp-s3", RoleSessionName="kvp-tests",
                    DurationSeconds=3600)["Credentials"]
print(c["AccessKeyId"])
print(c["SecretAccessKey"])
print(c["SessionToken"])
PY
  {
    echo "KVP_RGW_ENDPOINT=http://127.0.0.1:$port"
    echo "KVP_RGW_HOST_ENDPOINT=http://localhost:$port"
    echo "KVP_RGW_BUCKET=$BUCKET"
    echo "KVP_RGW_ACCESS=$ACCESS"
    echo "KVP_RGW_SECRET=$SECRET"
    echo "KVP_RGW_SESSION_ACCESS=$(sed -n 1p "$DIR/session")"
    echo "KVP_RGW_SESSION_SECRET=$(sed -n 2p "$DIR/session")"
    echo "KVP_RGW_SESSION_TOKEN=$(sed -n 3p "$DIR/session")"
    echo "KVP_RGW_REGION=$REGION"
  } >"$DIR/env.tmp"
  mv "$DIR/env.tmp" "$DIR/env"
  cat "$DIR/env"
}

[ $# -ge 2 ] || {
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2
  exit 2
}
cmd=$1
DIR=$(mkdir -p "$2" && cd "$2" && pwd)
case "$cmd" in
start) start "${3:-0}" ;;
stop)
  stop_daemons
  rm -rf "$DIR"
  ;;
*)
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2
  exit 2
  ;;
esac
