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

FLAGS="-trimpath -ldflags=-s -w"
HASH=$(
  cd "$MOD_DIR"
  {
    find . -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    sha256sum go.mod go.sum
    echo "go=$GO_VERSION cgo=0 flags=$FLAGS"
  } | sha256sum | cut -c1-16
)
CACHE_DIR="${KVRS_CACHE:-$HOME/.cache/kvrs}/instancetype-$HASH"
BIN="$CACHE_DIR/kvrs-instancetype-harness"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  echo "instancetype-harness.sh: another build holds $CACHE_DIR/lock; waiting" >&2
  flock 9
fi
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

LOG="$CACHE_DIR/build.log"
: >"$LOG"
cd "$MOD_DIR"
export CGO_ENABLED=0
export GOFLAGS="-mod=readonly -buildvcs=false"
# As in scripts/mixed-harness.sh: go.sum pins libvirt.org/go/libvirt, which the checksum
# database behind this proxy does not know (it is in KubeVirt's module graph).
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"

echo "instancetype-harness.sh: building kvrs-instancetype-harness with $GO_VERSION against kubevirt.io/kubevirt v1.9.0 (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
start=$(date +%s)
if ! "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$BIN.tmp.$$" . >>"$LOG" 2>&1; then
  rm -f "$BIN.tmp.$$"
  tail -n 40 "$LOG" >&2
  die "go build of tests/instancetype failed (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $LOG"
fi
mv "$BIN.tmp.$$" "$BIN"
for old in "${CACHE_DIR%/*}"/instancetype-*; do
  [ "$old" != "$CACHE_DIR" ] && [ -f "$old/kvrs-instancetype-harness" -o -f "$old/lock" ] && rm -rf "$old"
done
echo "instancetype-harness.sh: built in $(($(date +%s) - start)) s: $BIN" >&2
echo "$BIN"
