#!/usr/bin/env bash
# Builds kvrs-evacuation-go, the Go harness of tests/evacuation_oracle.rs (tests/evacuation:
# KubeVirt v1.9.0's PodEvictionAdmitter — virt-api's pods/eviction webhook — imported from the
# kubevirt.io/kubevirt module and run against fake clientsets), and prints the binary's path as
# the LAST line of stdout (progress goes to stderr).
#
# kubevirt.io/kubevirt/pkg/controller (which the admitters and the evacuation controller import)
# pulls in kubevirt.io/virt-template-api and -client-go, which the module proxy refuses; go.mod
# replaces them with the compile-only stand-ins of tests/mixed/stubs, as tests/diff does.
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/evacuation-<hash>/kvrs-evacuation-go,
# <hash> covering tests/evacuation's go.mod, go.sum and Go files, the stand-ins, the Go version
# and the build flags. No cgo. Safe to run concurrently. Environment: KVRS_CACHE, GO.
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
STUBS="$GH_ROOT/tests/mixed/stubs"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"

evacuation_sums() {
  gh_module_sums
  (cd "$STUBS" && gh_sums '*.go' go.mod)
}
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_harness evacuation kvrs-evacuation-go 0 "against kubevirt.io/kubevirt v1.9.0; about 2 minutes the first time" evacuation_sums
