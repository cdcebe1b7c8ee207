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

if [ -n "${GO:-}" ]; then
  GO_CMD=$GO
elif command -v go >/dev/null 2>&1; then
  GO_CMD=$(command -v go)
elif [ -x /usr/local/go/bin/go ]; then
  GO_CMD=/usr/local/go/bin/go
else
  die "no Go toolchain found (set GO=/path/to/go or put go on PATH); Go >= 1.26 is needed"
fi
GO_VERSION=$("$GO_CMD" env GOVERSION) || die "'$GO_CMD env GOVERSION' failed"
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
CACHE_DIR="${KVRS_CACHE:-$HOME/.cache/kvrs}/diff-$HASH"
BIN="$CACHE_DIR/kvrs-diff-go"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  echo "diff-harness.sh: another build holds $CACHE_DIR/lock; waiting" >&2
  flock 9
fi
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

LOG="$CACHE_DIR/build.log"
: >"$LOG"
cd "$MOD_DIR"
export CGO_ENABLED=1
export GOFLAGS="-mod=readonly -buildvcs=false"
# The checksum database behind this proxy has no record of these modules (404); go.sum pins
# their hashes, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"

echo "diff-harness.sh: building kvrs-diff-go with $GO_VERSION against kubevirt.io/kubevirt v1.9.0 (GOPROXY=$("$GO_CMD" env GOPROXY); about 5 minutes the first time)" >&2
start=$(date +%s)
if ! "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$BIN.tmp.$$" . >>"$LOG" 2>&1; then
  rm -f "$BIN.tmp.$$"
  tail -n 40 "$LOG" >&2
  die "go build of tests/diff failed (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $LOG"
fi
mv "$BIN.tmp.$$" "$BIN"
# Builds of older harness sources (about 60 MB each) are not needed any more.
for old in "${CACHE_DIR%/*}"/diff-*; do
  [ "$old" != "$CACHE_DIR" ] && [ -f "$old/kvrs-diff-go" -o -f "$old/lock" ] && rm -rf "$old"
done
echo "diff-harness.sh: built in $(($(date +%s) - start)) s: $BIN" >&2
echo "$BIN"
