#!/usr/bin/env bash
# Builds kvrs-nodelabeller-go, the Go harness of tests/nodelabeller_oracle.rs (tests/nodelabeller:
# KubeVirt v1.9.0's node labeller — pkg/virt-handler/node-labeller — imported from the
# kubevirt.io/kubevirt module and run against a fake clientset), and prints the binary's path as
# the LAST line of stdout (progress goes to stderr).
#
# The labeller's package reads /dev/kvm's Hyper-V capabilities through cgo (linux/kvm.h), so this
# build needs a C compiler. kubevirt.io/kubevirt pulls in kubevirt.io/virt-template-api and
# -client-go, which the module proxy refuses; go.mod replaces them with the compile-only
# stand-ins of tests/mixed/stubs, as tests/evacuation does.
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/nodelabeller-<hash>/kvrs-nodelabeller-go,
# <hash> covering tests/nodelabeller's go.mod, go.sum and Go files, the stand-ins, the Go version
# and the build flags. Safe to run concurrently. Environment: KVRS_CACHE, GO.
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
STUBS="$GH_ROOT/tests/mixed/stubs"
[ -d "$STUBS" ] || die "missing $STUBS (the stand-in modules go.mod replaces)"
command -v gcc >/dev/null 2>&1 || die "a C compiler is needed (cgo, linux/kvm.h): apt-get install gcc linux-libc-dev"

nodelabeller_sums() {
  gh_module_sums
  (cd "$STUBS" && gh_sums '*.go' go.mod)
}
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt,github.com/rhobs/operator-observability-toolkit"
gh_harness nodelabeller kvrs-nodelabeller-go 1 "against kubevirt.io/kubevirt v1.9.0; about 2 minutes the first time" nodelabeller_sums
