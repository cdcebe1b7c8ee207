#!/usr/bin/env bash
# Builds the Kubernetes control plane the end-to-end tests run against, from the Go module in
# tests/kube (k8s.io/kubernetes v1.36.3, its staging modules at v0.36.3, etcd's server module):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd, and the node's kubelet
# and kube-proxy (tests/cluster's RealNode; its container runtime comes from
# scripts/node-components.sh). One module set for all of them, so the node runs exactly the
# control plane's release.
#
# The binaries go to ${KVRS_CACHE:-$HOME/.cache/kvrs}/kube-v1.36.3/bin/, whose path is printed as
# the LAST line of stdout; progress goes to stderr, a line as each binary starts and one with its
# build time when it is done (15-30 minutes in all on 2 cores the first time). A stamp file next
# to bin/ holds the sha256 of tests/kube's go.mod, go.sum and Go files, the Go version and the
# build flags: when it matches and every binary is there, the script does nothing and prints the
# path at once.
#
# Idempotent and safe to run concurrently (a lock file serializes builds). A module that cannot be
# fetched fails the script with a message naming the proxy. Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

K8S_VERSION=v1.36.3
# What `kubectl version` and the apiserver's /version report (Kubernetes' own build sets these).
VERSION_PKG=k8s.io/component-base/version
LDFLAGS="-s -w -X ${VERSION_PKG}.gitVersion=${K8S_VERSION} -X ${VERSION_PKG}.gitMajor=1 -X ${VERSION_PKG}.gitMinor=36 -X ${VERSION_PKG}.gitTreeState=clean"
CMD=k8s.io/kubernetes/cmd

# name | package | cgo | tags | ldflags | extra build flags (gh_components in lib/go-harness.sh)
TARGETS=(
  "kube-apiserver|$CMD/kube-apiserver|0||$LDFLAGS|"
  "kube-controller-manager|$CMD/kube-controller-manager|0||$LDFLAGS|"
  "kube-scheduler|$CMD/kube-scheduler|0||$LDFLAGS|"
  "kubectl|$CMD/kubectl|0||$LDFLAGS|"
  "etcd|./cmd/etcd|0||$LDFLAGS|"
  "kubelet|$CMD/kubelet|0||$LDFLAGS|"
  "kube-proxy|$CMD/kube-proxy|0||$LDFLAGS|"
)
OUTPUTS=()
for t in "${TARGETS[@]}"; do OUTPUTS+=("${t%%|*}"); done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
MOD_DIR="$ROOT/tests/kube"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
gh_find_go

WANT=$(
  cd "$MOD_DIR"
  {
    gh_module_sums
    echo "go=$GO_VERSION cgo=0 flags=-trimpath ldflags=$LDFLAGS"
  } | sha256sum | cut -d' ' -f1
)
gh_components "${KVRS_CACHE:-$HOME/.cache/kvrs}/kube-$K8S_VERSION" "$WANT" \
  "${OUTPUTS[*]} with $GO_VERSION (15-30 minutes on 2 cores the first time)"
