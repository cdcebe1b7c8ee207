#!/usr/bin/env bash
# Builds kvrs-instancetype-harness, the Go side of tests/instancetype_differential.rs
# (tests/instancetype: KubeVirt v1.9.0's own instancetype and preference code, imported from the
# kubevirt.io/kubevirt module), and prints the binary's path as the LAST line of stdout (progress
# goes to stderr).
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/instancetype-<hash>/kvrs-instancetype-harness,
# <hash> covering tests/instancetype's go.mod, go.sum and Go files, the Go version and the build
# flags: when the binary is there the script does nothing; a new build removes older ones. No
# cgo: the instancetype packages link nothing from C. Under a minute with the module cache warm
# (the first download of KubeVirt's module graph takes longer).
#
# Safe to run concurrently (a lock file serializes builds). Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

die() {
  echo "instancetype-harness.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/instancetype"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"

# shellcheck source=lib/go-harness.sh
source "$ROOT/scripts/lib/go-harness.sh"
gh_find_go

FLAGS="-trimpath -ldflags=-s -w"
HASH=$(
  cd "$MOD_DIR"
  {
    find . -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum go.mod go.sum
    echo "go=$GO_VERSION cgo=0 flags=$FLAGS"
  } | sha256sum | cut -c1-16
)
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"
gh_build instancetype-harness.sh instancetype kvrs-instancetype-harness "$HASH" "$MOD_DIR" 0 "against kubevirt.io/kubevirt v1.9.0"
