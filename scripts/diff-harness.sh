#!/usr/bin/env bash
# Builds kvrs-diff-go, the Go harness of the differential test (tests/diff: KubeVirt v1.9.0's own
# mutating and validating VMI webhooks, converter, memory-overhead calculator and launcher pod
# renderer, imported from the kubevirt.io/kubevirt module), and prints the binary's path as the
# LAST line of stdout (progress goes to stderr).
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/diff-<hash>/kvrs-diff-go, <hash> covering
# tests/diff's go.mod, go.sum and Go files, the compile-only stand-ins it shares with tests/mixed,
# the Go version and the build flags: when the binary is there the script does nothing; a new
# build removes older ones. About 5 minutes on 2 cores the first time (cgo: KubeVirt's launcher
# packages link libvirt, so libvirt-dev must be installed).
#
# Safe to run concurrently (a lock file serializes builds). Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

die() {
  echo "diff-harness.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/diff"
STUBS="$ROOT/tests/mixed/stubs"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"

# shellcheck source=lib/go-harness.sh
source "$ROOT/scripts/lib/go-harness.sh"
gh_find_go
command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libvirt ||
  die "libvirt's C headers are needed (cgo, libvirt.org/go/libvirt): apt-get install libvirt-dev pkg-config"

FLAGS="-trimpath -ldflags=-s -w"
HASH=$(
  {
    cd "$MOD_DIR"
    find . -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum go.mod go.sum
    cd "$STUBS"
    find . \( -name '*.go' -o -name 'go.mod' \) -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "go=$GO_VERSION cgo=1 flags=$FLAGS"
  } | sha256sum | cut -c1-16
)
# The checksum database behind this proxy has no record of these modules (404); go.sum pins
# their hashes, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_build diff-harness.sh diff kvrs-diff-go "$HASH" "$MOD_DIR" 1 "against kubevirt.io/kubevirt v1.9.0; about 5 minutes the first time"
