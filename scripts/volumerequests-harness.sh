#!/usr/bin/env bash
# Builds kvrs-volumerequests-go, the Go harness of bins/virt-api/tests/volume_requests_differential.rs
# (tests/volumerequests: KubeVirt v1.9.0's VMsAdmitter.AdmitStatus — the virtualmachines/status
# part of virt-api's kubevirt-crd-status-validator — imported from the kubevirt.io/kubevirt module
# and run against a fake clientset), and prints the binary's path as the LAST line of stdout
# (progress goes to stderr).
#
# The admitters package pulls in kubevirt.io/virt-template-api and -client-go, which the module
# proxy refuses; go.mod replaces them with the compile-only stand-ins of tests/mixed/stubs, as
# tests/evacuation does.
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/volumerequests-<hash>/kvrs-volumerequests-go,
# <hash> covering tests/volumerequests' go.mod, go.sum and Go files, the stand-ins, the Go version
# and the build flags. No cgo. Safe to run concurrently. Environment: KVRS_CACHE, GO.
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
STUBS="$GH_ROOT/tests/mixed/stubs"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"

volumerequests_sums() {
  gh_module_sums
  (cd "$STUBS" && gh_sums '*.go' go.mod)
}
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_harness volumerequests kvrs-volumerequests-go 0 "against kubevirt.io/kubevirt v1.9.0; about 2 minutes the first time" volumerequests_sums
