#!/usr/bin/env bash
# Builds kvrs-migration-go, the Go harness of tests/migration_oracle.rs (tests/migration:
# KubeVirt v1.9.0's migration controller, pkg/virt-controller/watch/migration, with its real
# launcher template service, imported from the kubevirt.io/kubevirt module and run once per
# scenario against fake clientsets and informer caches), and prints the binary's path as the
# LAST line of stdout (progress goes to stderr).
#
# kubevirt.io/kubevirt/pkg/controller pulls in kubevirt.io/virt-template-api and -client-go,
# which the module proxy refuses; go.mod replaces them with the compile-only stand-ins of
# tests/mixed/stubs, as tests/evacuation does.
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/migration-<hash>/kvrs-migration-go,
# <hash> covering tests/migration's go.mod, go.sum and Go files, the stand-ins, the skeleton
# it shares with tests/vmistorage (tests/oracleharness), the Go version
# and the build flags. No cgo. Safe to run concurrently. Environment: KVRS_CACHE, GO.
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
STUBS="$GH_ROOT/tests/mixed/stubs"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"
SHARED="$GH_ROOT/tests/oracleharness"
[ -d "$SHARED" ] || die "missing $SHARED (the shared harness skeleton go.mod replaces)"

migration_sums() {
  gh_module_sums
  (cd "$STUBS" && gh_sums '*.go' go.mod)
  (cd "$SHARED" && gh_sums '*.go' go.mod)
}
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_harness migration kvrs-migration-go 0 "against kubevirt.io/kubevirt v1.9.0; about 2 minutes the first time" migration_sums
