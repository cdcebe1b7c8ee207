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

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
STUBS="$GH_ROOT/tests/mixed/stubs"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"
gh_need_libvirt

# What the cache hash covers: tests/diff, then the stand-ins' Go files and go.mod files.
diff_sums() {
  gh_module_sums
  (cd "$STUBS" && gh_sums '*.go' go.mod)
}
# The checksum database behind this proxy has no record of these modules (404); go.sum pins
# their hashes, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_harness diff kvrs-diff-go 1 "against kubevirt.io/kubevirt v1.9.0; about 5 minutes the first time" diff_sums
