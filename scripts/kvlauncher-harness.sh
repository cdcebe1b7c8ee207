#!/usr/bin/env bash
# Builds what benches/compare-launchers.sh (and tests/mixed_fleet.rs) need to run KubeVirt v1.9.0's
# own launcher next to kvrs's, and prints the directory as the LAST line of stdout (progress goes
# to stderr):
#   DIR/kvrs-kvlauncher       the measuring driver (tests/kvlauncher: KubeVirt's handler-side cmd
#                             client + notify server, imported from kubevirt.io/kubevirt)
#   DIR/kubevirt-root/        what KubeVirt's launcher image holds that this host lacks, for
#                             scripts/launcher-pod-harness.sh --kubevirt-root:
#     usr/bin/virt-launcher, usr/bin/virt-launcher-monitor
#                             KubeVirt's cmd/virt-launcher and cmd/virt-launcher-monitor, built
#                             unchanged from the module (cgo, libvirt)
#     usr/sbin/virtqemud      a two-line stand-in: this host has only the monolithic libvirtd,
#                             which serves the same QEMU driver (it links virtqemud-sock to the
#                             socket libvirtd makes)
#     etc/libvirt/virtqemud.conf, etc/libvirt/qemu.conf
#                             KubeVirt's own, copied from the module (its image installs them there)
#
# DIR is ${KVRS_CACHE:-$HOME/.cache/kvrs}/kvlauncher-<hash>, <hash> covering tests/kvlauncher, the
# stubs it uses, this script and the Go version; a build there is reused. About 30 s with a warm Go
# build cache, several minutes cold. Needs Go >= 1.26, the Go module proxy and libvirt-dev.
set -euo pipefail

die() {
  echo "kvlauncher-harness.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/kvlauncher"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"

# shellcheck source=lib/go-harness.sh
source "$ROOT/scripts/lib/go-harness.sh"
gh_find_go
command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libvirt ||
  die "libvirt's C headers are needed (cgo, libvirt.org/go/libvirt): apt-get install libvirt-dev pkg-config"

HASH=$(
  {
    (cd "$MOD_DIR" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum)
    (cd "$ROOT/tests/mixed/stubs" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    echo "go=$GO_VERSION cgo=1"
  } | sha256sum | cut -c1-16
)
# As in mixed-harness.sh: the checksum database has no record of this module; go.sum pins it.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"
driver=$(gh_build kvlauncher-harness.sh kvlauncher kvrs-kvlauncher "$HASH" "$MOD_DIR" 1 "against kubevirt.io/kubevirt v1.9.0") ||
  exit 1
dir=$(dirname "$driver")
kv="$dir/kubevirt-root"
if [ -f "$kv/done" ]; then
  echo "$dir"
  exit 0
fi

exec 8>"$dir/root.lock"
flock 8
if [ ! -f "$kv/done" ]; then
  rm -rf "$kv"
  mkdir -p "$kv/usr/bin" "$kv/usr/sbin" "$kv/etc/libvirt"
  echo "kvlauncher-harness.sh: building KubeVirt v1.9.0's virt-launcher and virt-launcher-monitor" >&2
  log="$dir/launcher-build.log"
  if ! (cd "$MOD_DIR" && CGO_ENABLED=1 GOFLAGS="-mod=readonly -buildvcs=false" \
    "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$kv/usr/bin/" \
    kubevirt.io/kubevirt/cmd/virt-launcher kubevirt.io/kubevirt/cmd/virt-launcher-monitor) >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "go build of KubeVirt's launcher failed; full log: $log"
  fi
  src=$(cd "$MOD_DIR" && "$GO_CMD" list -m -f '{{.Dir}}' kubevirt.io/kubevirt) ||
    die "cannot locate kubevirt.io/kubevirt in the module cache"
  install -m 0644 "$src/cmd/virt-launcher/virtqemud.conf" "$src/cmd/virt-launcher/qemu.conf" "$kv/etc/libvirt/"
  cat >"$kv/usr/sbin/virtqemud" <<'EOF'
#!/bin/sh
# kvrs stand-in: this host has no virtqemud, only the monolithic libvirtd (same QEMU driver). In
# session mode libvirtd listens on $XDG_RUNTIME_DIR/libvirt/libvirt-sock; KubeVirt's launcher
# dials /var/run/libvirt/virtqemud-sock.
ln -sfn libvirt-sock "${XDG_RUNTIME_DIR:-/var/run}/libvirt/virtqemud-sock"
exec /usr/sbin/libvirtd "$@"
EOF
  chmod 0755 "$kv/usr/sbin/virtqemud"
  touch "$kv/done"
fi
echo "$dir"
