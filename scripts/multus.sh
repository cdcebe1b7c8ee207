#!/usr/bin/env bash
# Builds Multus's thin CNI plugin (`cmd/multus` of gopkg.in/k8snetworkplumbingwg/multus-cni.v4)
# for the real node's secondary networks (tests/cluster's `RealNode::start_with_multus`) and
# fetches the NetworkAttachmentDefinition client module whose CRD the node applies:
#
#   multus                                     gopkg.in/k8snetworkplumbingwg/multus-cni.v4 v4.2.2
#   (artifacts/networks-crd.yaml, read in place from the Go module cache)
#                                              github.com/k8snetworkplumbingwg/network-attachment-definition-client v1.7.7
#
# Why a generated module and not `go install ...@v4.2.2`: `go install` asks the proxy for the
# module's version list (its deprecation check), which this proxy refuses; a module of our own
# that requires the exact version only asks for that version. It is generated under the cache
# (not kept in the repo): its only requirement is the one line below, and its go.sum comes from
# the checksum database, so the build is still pinned.
#
# Output: ${KVRS_CACHE:-$HOME/.cache/kvrs}/multus-<hash>/bin/multus, the hash covering the two
# versions, the Go version and the build flags. Prints `crd=<path of networks-crd.yaml>` and then
# the binary's path as the LAST line of stdout; progress goes to stderr. Idempotent (a present
# binary is reused at once) and safe to run concurrently (a lock serializes builds).
# Environment: KVRS_CACHE (cache root), GO (the go command).
set -euo pipefail

MULTUS_MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
MULTUS_VERSION=v4.2.2
NAD_MODULE=github.com/k8snetworkplumbingwg/network-attachment-definition-client
NAD_VERSION=v1.7.7
LDFLAGS="-s -w"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
gh_find_go

hash=$(echo "$MULTUS_MODULE@$MULTUS_VERSION $NAD_MODULE@$NAD_VERSION go=$GO_VERSION cgo=0 ldflags=$LDFLAGS -trimpath" |
  sha256sum | cut -c1-16)
cache_dir="${KVRS_CACHE:-$HOME/.cache/kvrs}/multus-$hash"
bin="$cache_dir/bin/multus"

# The CRD stays in the module cache: `go mod download` of the exact version prints its directory.
nad_dir() {
  (cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod "$GO_CMD" mod download -json "$NAD_MODULE@$NAD_VERSION") |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

if [ ! -x "$bin" ]; then
  gh_lock "$cache_dir"
  if [ ! -x "$bin" ]; then
    log="$cache_dir/build.log"
    mod="$cache_dir/mod"
    : >"$log"
    rm -rf "$mod"
    mkdir -p "$mod" "$cache_dir/bin"
    echo "$GH_SCRIPT: building multus $MULTUS_VERSION with $GO_VERSION (GOPROXY=$("$GO_CMD" env GOPROXY); about 2 minutes on 2 cores)" >&2
    start=$(date +%s)
    if ! (
      cd "$mod" &&
        "$GO_CMD" mod init kvrs.local/multus &&
        GOFLAGS=-mod=mod "$GO_CMD" get "$MULTUS_MODULE/cmd/multus@$MULTUS_VERSION" &&
        CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" "$GO_CMD" build -trimpath \
          -ldflags "$LDFLAGS" -o "$bin.tmp.$$" "$MULTUS_MODULE/cmd/multus"
    ) >>"$log" 2>&1; then
      rm -f "$bin.tmp.$$"
      tail -n 30 "$log" >&2
      die "could not build $MULTUS_MODULE/cmd/multus@$MULTUS_VERSION; full log: $log"
    fi
    mv "$bin.tmp.$$" "$bin"
    echo "$GH_SCRIPT: multus built in $(($(date +%s) - start)) s: $bin" >&2
  fi
fi

dir=$(nad_dir) || die "could not fetch $NAD_MODULE@$NAD_VERSION (GOPROXY=$("$GO_CMD" env GOPROXY))"
crd="$dir/artifacts/networks-crd.yaml"
[ -s "$crd" ] || die "$NAD_MODULE@$NAD_VERSION has no artifacts/networks-crd.yaml (looked in '$dir')"
echo "crd=$crd"
echo "$bin"
