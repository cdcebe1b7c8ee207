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
# progress goes to stderr, a line as each binary starts and one with its build time when it is done. A stamp file next to bin/
# holds the sha256 of tests/node's go.mod, go.sum, Go files and pause.c, of oci_image.py, the Go
# and gcc versions and the build flags: when it matches and every output is there, the script does
# nothing and prints the path at once. Idempotent and safe to run concurrently (a lock file
# serializes builds). Environment: KVRS_CACHE (cache root), GO (the go command).
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CNI_PLUGINS_VERSION=v1.10.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
MOD_DIR="$ROOT/tests/node"
OCI_WRITER="$ROOT/scripts/lib/oci_image.py"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
[ -f "$OCI_WRITER" ] || die "missing $OCI_WRITER (the OCI archive writer the pause image needs)"
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

# name | package | cgo | tags | ldflags | extra build flags (gh_components in lib/go-harness.sh)
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

WANT=$(
  cd "$MOD_DIR"
  {
    gh_sums '*.go' '*.c'
    sha256sum go.mod go.sum "$OCI_WRITER"
    echo "go=$GO_VERSION gcc=$(gcc -dumpfullversion) pause=$PAUSE_CFLAGS"
    printf '%s\n' "${TARGETS[@]}"
  } | sha256sum | cut -d' ' -f1
)

# build_pause DIR LOG: kvrs's pause binary and its OCI image archive, into DIR.
build_pause() {
  local dir=$1 log=$2 start rootfs
  echo "node-components.sh: building pause and pause.tar (kvrs.local/pause:1)" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086 # flags
  gcc $PAUSE_CFLAGS -o "$dir/pause" "$MOD_DIR/pause/pause.c" >>"$log" 2>&1 ||
    { tail -n 20 "$log" >&2; die "gcc could not build tests/node/pause/pause.c; full log: $log"; }
  rootfs="$dir/pause-rootfs"
  mkdir -p "$rootfs"
  install -m 0755 "$dir/pause" "$rootfs/pause"
  if ! python3 "$OCI_WRITER" --rootfs "$rootfs" --ref kvrs.local/pause:1 --out "$dir/pause.tar" \
    --entrypoint '["/pause"]' --user 65535:65535 >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "oci_image.py could not write the pause image; full log: $log"
  fi
  rm -rf "$rootfs"
  echo "node-components.sh: pause and pause.tar built in $(($(date +%s) - start)) s" >&2
}

gh_components "${KVRS_CACHE:-$HOME/.cache/kvrs}/node" "$WANT" \
  "containerd $CONTAINERD_VERSION, runc $RUNC_VERSION, CNI plugins $CNI_PLUGINS_VERSION with $GO_VERSION (about 5 minutes on 2 cores the first time)" \
  build_pause
