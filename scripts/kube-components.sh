#!/usr/bin/env bash
# Builds the Kubernetes control plane the end-to-end tests run against, from the Go module in
# tests/kube (k8s.io/kubernetes v1.36.3, its staging modules at v0.36.3, etcd's server module):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd, and the node's kubelet
# and kube-proxy (tests/cluster's RealNode; its container runtime comes from
# scripts/node-components.sh). One module set for all of them, so the node runs exactly the
# control plane's release.
#
# The binaries go to ${KVRS_CACHE:-$HOME/.cache/kvrs}/kube-v1.36.3/bin/, whose path is printed as
# the LAST line of stdout (progress goes to stderr). A stamp file next to bin/ holds the sha256 of
# tests/kube's go.mod, go.sum and Go files, the Go version and the build flags: when it matches
# and every binary is there, the script does nothing and prints the path at once.
#
# Idempotent and safe to run concurrently (a lock file serializes builds). A module that cannot be
# fetched fails the script with a message naming the proxy. Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

K8S_VERSION=v1.36.3
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet kube-proxy)
PACKAGES=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  ./cmd/etcd
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
)
# What `kubectl version` and the apiserver's /version report (Kubernetes' own build sets these).
VERSION_PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X ${VERSION_PKG}.gitVersion=${K8S_VERSION} -X ${VERSION_PKG}.gitMajor=1 -X ${VERSION_PKG}.gitMinor=36 -X ${VERSION_PKG}.gitTreeState=clean"

die() {
  echo "kube-components.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/kube"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"

# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
gh_find_go

CACHE_DIR="${KVRS_CACHE:-$HOME/.cache/kvrs}/kube-${K8S_VERSION}"
BIN_DIR="$CACHE_DIR/bin"
STAMP="$CACHE_DIR/stamp"

compute_stamp() {
  (
    cd "$MOD_DIR"
    # Sorted for a stable order; -print0 keeps odd names intact.
    find . -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum go.mod go.sum
    echo "go=$GO_VERSION cgo=0 flags=-trimpath ldflags=$LDFLAGS"
  ) | sha256sum | cut -d' ' -f1
}

is_current() {
  [ -f "$STAMP" ] || return 1
  [ "$(cat "$STAMP")" = "$WANT" ] || return 1
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BIN_DIR/$b" ] || return 1
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
  echo "kube-components.sh: another build holds $CACHE_DIR/lock; waiting" >&2
  flock 9
fi
# Another run may have finished the build while this one waited.
if is_current; then
  echo "$BIN_DIR"
  exit 0
fi

LOG="$CACHE_DIR/build.log"
: >"$LOG"
cd "$MOD_DIR"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"

echo "kube-components.sh: fetching Go modules for tests/kube (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
if ! "$GO_CMD" list -deps "${PACKAGES[@]}" >/dev/null 2>>"$LOG"; then
  tail -n 30 "$LOG" >&2
  die "could not fetch or resolve the Go modules of tests/kube (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $LOG"
fi

TMP_BIN="$CACHE_DIR/bin.tmp.$$"
rm -rf "$TMP_BIN"
mkdir -p "$TMP_BIN"
trap 'rm -rf "$TMP_BIN"' EXIT
echo "kube-components.sh: building ${BINARIES[*]} with $GO_VERSION (takes 15-30 minutes on 2 cores the first time)" >&2
start=$(date +%s)
# One package at a time, for a progress line each (the Go build cache shares what they have in
# common, so this costs little over one `go build` of all of them).
for pkg in "${PACKAGES[@]}"; do
  one=$(date +%s)
  if ! "$GO_CMD" build -trimpath -ldflags="$LDFLAGS" -o "$TMP_BIN/" "$pkg" >>"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    die "go build of $pkg failed; full log: $LOG"
  fi
  echo "kube-components.sh: ${pkg##*/} built in $(($(date +%s) - one)) s" >&2
done
for b in "${BINARIES[@]}"; do
  [ -x "$TMP_BIN/$b" ] || die "go build produced no $b in $TMP_BIN"
done
rm -rf "$BIN_DIR"
mv "$TMP_BIN" "$BIN_DIR"
echo "$WANT" >"$STAMP"
echo "kube-components.sh: built in $(($(date +%s) - start)) s into $BIN_DIR" >&2
echo "$BIN_DIR"
