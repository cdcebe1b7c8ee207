#!/usr/bin/env bash
# Builds the container runtime of the test cluster's real node (tests/cluster's `RealNode`) from
# the Go module in tests/node, plus kvrs's own pause image:
#
#   containerd, ctr, containerd-shim-runc-v2   github.com/containerd/containerd/v2 v2.4.2
#   runc                                       github.com/opencontainers/runc v1.5.3
#   cni/bridge, cni/host-local, cni/loopback, cni/portmap
#                                              github.com/containernetworking/plugins v1.10.0
#   pause, pause.tar                           tests/node/pause/pause.c (ours), as the OCI archive
#                                              of image kvrs.local/pause:1 (scripts/lib/oci_image.py)
#
# (kubelet and kube-proxy come from scripts/kube-components.sh: the same k8s.io/kubernetes v1.36.3
# module set as the control plane.)
#
# Why these and not Debian's packages (checked against the sources, not assumed):
#   * containerd: bookworm ships 1.6.20. Its CRI server has no RuntimeConfig call (the kubelet
#     1.36 still falls back to its own cgroupDriver, but counts the runtime as losing support in
#     1.37) and ignores the CRI mount's `image` field: CRI image volumes (`volumes: - image:`,
#     which KubeVirt container disks go through on this node) arrived in containerd 2.1. 2.4.2 is
#     the newest release the module proxy serves; it still runs on cgroup v1, which these machines
#     mount (with a deprecation warning: removal "no later than May 2029").
#   * runc: containerd 2.4.2 is tested with runc 1.5.2 (its script/setup/runc-version); bookworm's
#     1.1.5 is four minor series older. 1.5.3 is the newest stable 1.5. Built with cgo and the
#     `seccomp` tag against Debian's libseccomp-dev (the default seccomp profile needs it), as a
#     PIE like runc's Makefile does; without the `libpathrs` tag (that Rust library is not in
#     Debian; runc then uses its pure-Go path resolution).
#   * CNI plugins: bookworm's 1.1.1 would work, but building them from the same module graph
#     keeps the node reproducible from go.sum; 1.10.0 is the newest (its portmap has the nftables
#     backend; this machine has no iptables).
#   * pause: containerd's sandbox image must be local (no registry here); a static ~20-line C
#     program of ours, built with Debian's gcc.
#
# Everything goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/node/bin/ (CNI plugins in bin/cni/, the
# pause image archive as bin/pause.tar), whose path is printed as the LAST line of stdout;
# progress goes to stderr, one line per binary with its build time. A stamp file next to bin/
# holds the sha256 of tests/node's go.mod, go.sum, Go files and pause.c, of oci_image.py, the Go
# and gcc versions and the build flags: when it matches and every output is there, the script does
# nothing and prints the path at once. Idempotent and safe to run concurrently (a lock file
# serializes builds). Environment: KVRS_CACHE (cache root), GO (the go command).
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CNI_PLUGINS_VERSION=v1.10.0

die() {
  echo "node-components.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/node"
OCI_WRITER="$ROOT/scripts/lib/oci_image.py"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
[ -f "$OCI_WRITER" ] || die "missing $OCI_WRITER (the OCI archive writer the pause image needs)"

# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
gh_find_go
command -v gcc >/dev/null || die "gcc is needed (runc's cgo, the pause binary); run scripts/install-test-deps.sh"
command -v pkg-config >/dev/null && pkg-config --exists libseccomp ||
  die "libseccomp-dev (and pkg-config) is needed for runc's seccomp support; run scripts/install-test-deps.sh"
command -v python3 >/dev/null || die "python3 is needed for the pause image (scripts/lib/oci_image.py)"

CD_PKG=github.com/containerd/containerd/v2
CD_LDFLAGS="-s -w -X $CD_PKG/version.Version=$CONTAINERD_VERSION -X $CD_PKG/version.Revision=$CONTAINERD_VERSION -X $CD_PKG/version.Package=$CD_PKG"
CD_TAGS="urfave_cli_no_docs"
RUNC_LDFLAGS="-s -w -X main.gitCommit=$RUNC_VERSION"
RUNC_TAGS="seccomp urfave_cli_no_docs"
CNI_LDFLAGS="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
PAUSE_CFLAGS="-static -O2 -s -Wall -Wextra -Werror"

# name | package | cgo | tags | ldflags | extra build flags
TARGETS=(
  "containerd|$CD_PKG/cmd/containerd|0|$CD_TAGS|$CD_LDFLAGS|"
  "containerd-shim-runc-v2|$CD_PKG/cmd/containerd-shim-runc-v2|0|$CD_TAGS no_grpc|$CD_LDFLAGS|"
  "ctr|$CD_PKG/cmd/ctr|0|$CD_TAGS|$CD_LDFLAGS|"
  "runc|github.com/opencontainers/runc|1|$RUNC_TAGS|$RUNC_LDFLAGS|-buildmode=pie"
  "cni/bridge|github.com/containernetworking/plugins/plugins/main/bridge|0||$CNI_LDFLAGS|"
  "cni/host-local|github.com/containernetworking/plugins/plugins/ipam/host-local|0||$CNI_LDFLAGS|"
  "cni/loopback|github.com/containernetworking/plugins/plugins/main/loopback|0||$CNI_LDFLAGS|"
  "cni/portmap|github.com/containernetworking/plugins/plugins/meta/portmap|0||$CNI_LDFLAGS|"
)
OUTPUTS=(pause pause.tar)
for t in "${TARGETS[@]}"; do OUTPUTS+=("${t%%|*}"); done

CACHE_DIR="${KVRS_CACHE:-$HOME/.cache/kvrs}/node"
BIN_DIR="$CACHE_DIR/bin"
STAMP="$CACHE_DIR/stamp"

compute_stamp() {
  (
    cd "$MOD_DIR"
    find . \( -name '*.go' -o -name '*.c' \) -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum go.mod go.sum "$OCI_WRITER"
    echo "go=$GO_VERSION gcc=$(gcc -dumpfullversion) pause=$PAUSE_CFLAGS"
    printf '%s\n' "${TARGETS[@]}"
  ) | sha256sum | cut -d' ' -f1
}

is_current() {
  [ -f "$STAMP" ] || return 1
  [ "$(cat "$STAMP")" = "$WANT" ] || return 1
  local b
  for b in "${OUTPUTS[@]}"; do
    [ -s "$BIN_DIR/$b" ] || return 1
  done
}

WANT=$(compute_stamp)
if is_current; then
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  echo "node-components.sh: another build holds $CACHE_DIR/lock; waiting" >&2
  flock 9
fi
if is_current; then
  echo "$BIN_DIR"
  exit 0
fi

LOG="$CACHE_DIR/build.log"
: >"$LOG"
cd "$MOD_DIR"
export GOFLAGS="-mod=readonly -buildvcs=false"

pkgs=()
for t in "${TARGETS[@]}"; do
  IFS='|' read -r _ pkg _ <<<"$t"
  pkgs+=("$pkg")
done
echo "node-components.sh: fetching Go modules for tests/node (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
if ! "$GO_CMD" mod download >>"$LOG" 2>&1 || ! "$GO_CMD" list -deps "${pkgs[@]}" >/dev/null 2>>"$LOG"; then
  tail -n 30 "$LOG" >&2
  die "could not fetch or resolve the Go modules of tests/node (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $LOG"
fi

TMP_BIN="$CACHE_DIR/bin.tmp.$$"
rm -rf "$TMP_BIN"
mkdir -p "$TMP_BIN/cni"
trap 'rm -rf "$TMP_BIN"' EXIT
echo "node-components.sh: building containerd $CONTAINERD_VERSION, runc $RUNC_VERSION, CNI plugins $CNI_PLUGINS_VERSION with $GO_VERSION (about 5 minutes on 2 cores the first time)" >&2
total_start=$(date +%s)
for t in "${TARGETS[@]}"; do
  IFS='|' read -r name pkg cgo tags ldflags extra <<<"$t"
  start=$(date +%s)
  # shellcheck disable=SC2086 # $extra is empty or one flag
  if ! CGO_ENABLED=$cgo "$GO_CMD" build -trimpath $extra -tags "$tags" -ldflags "$ldflags" \
    -o "$TMP_BIN/$name" "$pkg" >>"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    die "go build of $pkg failed; full log: $LOG"
  fi
  echo "node-components.sh: $name built in $(($(date +%s) - start)) s" >&2
done

start=$(date +%s)
# shellcheck disable=SC2086 # flags
gcc $PAUSE_CFLAGS -o "$TMP_BIN/pause" "$MOD_DIR/pause/pause.c" >>"$LOG" 2>&1 ||
  { tail -n 20 "$LOG" >&2; die "gcc could not build tests/node/pause/pause.c; full log: $LOG"; }
rootfs="$TMP_BIN/pause-rootfs"
mkdir -p "$rootfs"
install -m 0755 "$TMP_BIN/pause" "$rootfs/pause"
if ! python3 "$OCI_WRITER" --rootfs "$rootfs" --ref kvrs.local/pause:1 --out "$TMP_BIN/pause.tar" \
  --entrypoint '["/pause"]' --user 65535:65535 >>"$LOG" 2>&1; then
  tail -n 20 "$LOG" >&2
  die "oci_image.py could not write the pause image; full log: $LOG"
fi
rm -rf "$rootfs"
echo "node-components.sh: pause and pause.tar (kvrs.local/pause:1) built in $(($(date +%s) - start)) s" >&2

for b in "${OUTPUTS[@]}"; do
  [ -s "$TMP_BIN/$b" ] || die "the build produced no $b in $TMP_BIN"
done
rm -rf "$BIN_DIR"
mv "$TMP_BIN" "$BIN_DIR"
echo "$WANT" >"$STAMP"
echo "node-components.sh: built in $(($(date +%s) - total_start)) s into $BIN_DIR" >&2
echo "$BIN_DIR"
