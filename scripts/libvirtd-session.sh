#!/usr/bin/env bash
# Starts (or stops) a private libvirtd + virtlogd for tests: session mode as a non-root UID
# (default 107), every path inside DIR, no TCP/TLS listeners, QEMU's stdio through virtlogd, no
# cgroups or namespaces (as KubeVirt's launcher configures libvirt), /dev/kvm masked when the user
# cannot open it (see libvirt-sandbox.sh).
#
# usage: libvirtd-session.sh start DIR [--uid N]   prints the client URI once the socket answers
#        libvirtd-session.sh stop DIR              stops the daemons started for DIR (by their PIDs)
#
# The URI is qemu+unix:///session?socket=DIR/run/libvirt/libvirt-sock (a `virtqemud-sock` symlink
# beside it serves clients expecting KubeVirt's name). Debian has the monolithic libvirtd only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,12p' "$0" >&2; exit 2; }
shift 2
uid=107
while [ $# -gt 0 ]; do
  case "$1" in
    --uid) uid=$2; shift 2 ;;
    *) echo "libvirtd-session.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

stop() {
  # Signal the daemons (never the sandbox shell first: it is their parent and reaps them).
  local f
  for f in "$dir/libvirtd.pid.kvrs" "$dir/run/libvirt/virtlogd.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  for _ in $(seq 50); do
    [ -f "$dir/sandbox.pid" ] && kill -0 "$(cat "$dir/sandbox.pid")" 2>/dev/null || break
    sleep 0.1
  done
  if [ -f "$dir/sandbox.pid" ] && kill -0 "$(cat "$dir/sandbox.pid")" 2>/dev/null; then
    for f in "$dir/libvirtd.pid.kvrs" "$dir/run/libvirt/virtlogd.pid"; do
      [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
    done
  fi
  rm -f "$dir/sandbox.pid" "$dir/libvirtd.pid.kvrs"
}

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  __daemons)
    # Runs inside the sandbox as the target user: both daemons as children, reaped here.
    export HOME="$dir/home" XDG_RUNTIME_DIR="$dir/run" XDG_CONFIG_HOME="$dir/config" XDG_CACHE_HOME="$dir/cache"
    virtlogd >"$dir/virtlogd.log" 2>&1 &
    libvirtd -f "$dir/libvirtd.conf" >"$dir/libvirtd.log" 2>&1 &
    echo $! >"$dir/libvirtd.pid.kvrs"
    wait
    exit 0 ;;
  *) echo "libvirtd-session.sh: unknown command $cmd" >&2; exit 2 ;;
esac

case "$uid" in ''|0|*[!0-9]*)
  echo "libvirtd-session.sh: --uid must be a non-root number (system mode uses the host's fixed /run/libvirt paths)" >&2
  exit 2 ;;
esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/run/libvirt" "$dir/config/libvirt" "$dir/cache" "$dir/home"
cat >"$dir/libvirtd.conf" <<EOF
listen_tls = 0
listen_tcp = 0
unix_sock_dir = "$dir/run/libvirt"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "2:stderr"
EOF
cat >"$dir/config/libvirt/qemu.conf" <<'EOF'
stdio_handler = "logd"
namespaces = [ ]
cgroup_controllers = [ ]
EOF
chown -R "$uid:$uid" "$dir"
rm -f "$dir/run/libvirt/libvirt-sock"

setsid "$here/libvirt-sandbox.sh" --uid "$uid" --state-dir "$dir/sandbox" -- \
  "$here/libvirtd-session.sh" __daemons "$dir" </dev/null >"$dir/sandbox.log" 2>&1 &
echo $! >"$dir/sandbox.pid"

uri="qemu+unix:///session?socket=$dir/run/libvirt/libvirt-sock"
for _ in $(seq 300); do
  if [ -S "$dir/run/libvirt/libvirt-sock" ]; then
    ln -sf libvirt-sock "$dir/run/libvirt/virtqemud-sock"
    echo "$uri"
    exit 0
  fi
  if ! kill -0 "$(cat "$dir/sandbox.pid")" 2>/dev/null; then break; fi
  sleep 0.05
done
echo "libvirtd-session.sh: libvirtd did not open its socket; logs:" >&2
tail -n 20 "$dir/sandbox.log" "$dir/libvirtd.log" >&2 2>/dev/null || true
stop
exit 1
