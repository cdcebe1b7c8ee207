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

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
# The checksum database behind this proxy has no record of this module (404); go.sum pins its
# hash, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"
gh_harness instancetype kvrs-instancetype-harness 0 "against kubevirt.io/kubevirt v1.9.0"
