#!/usr/bin/env bash
# Builds kvrs-gotags (tests/gotags: the json tags of KubeVirt v1.9.0's API types read by
# reflection from kubevirt.io/api, and Go's own re-marshalling of VMs and VMIs) and prints the
# binary's path as the LAST line of stdout (progress goes to stderr).
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/gotags-<hash>/kvrs-gotags, <hash> covering
# tests/gotags's go.mod, go.sum and Go files, the Go version and the build flags: when the binary
# is there the script does nothing; a new build removes older ones. Under a minute the first time
# (no cgo; kubevirt.io/api and the k8s.io modules it needs come from the Go module proxy).
#
# Regenerating the table the API types are generated from:
#   "$(bash scripts/gotags.sh | tail -n1)" rules > core/api/go-json-rules.json
#
# Safe to run concurrently (a lock file serializes builds). Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

die() {
  echo "gotags.sh: $*" >&2
  exit 1
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/gotags"
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
CACHE_DIR="${KVRS_CACHE:-$HOME/.cache/kvrs}/gotags-$HASH"
BIN="$CACHE_DIR/kvrs-gotags"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/lock"
if ! flock -n 9; then
  echo "gotags.sh: another build holds $CACHE_DIR/lock; waiting" >&2
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
echo "gotags.sh: building kvrs-gotags with $GO_VERSION against kubevirt.io/api v1.9.0 (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
start=$(date +%s)
if ! "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$BIN.tmp.$$" . >>"$LOG" 2>&1; then
  rm -f "$BIN.tmp.$$"
  tail -n 40 "$LOG" >&2
  die "go build of tests/gotags failed (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $LOG"
fi
mv "$BIN.tmp.$$" "$BIN"
for old in "${CACHE_DIR%/*}"/gotags-*; do
  [ "$old" != "$CACHE_DIR" ] && [ -f "$old/kvrs-gotags" -o -f "$old/lock" ] && rm -rf "$old"
done
echo "gotags.sh: built in $(($(date +%s) - start)) s: $BIN" >&2
echo "$BIN"
