#!/usr/bin/env bash
# Builds kvrs-mixed, the Go harness of the mixed-fleet tests (tests/mixed: KubeVirt v1.9.0's own
# virt-handler cmd client + notify server and virt-launcher cmd server, imported from the
# kubevirt.io/kubevirt module), and prints the binary's path as the LAST line of stdout (progress
# goes to stderr).
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/mixed-<hash>/kvrs-mixed, <hash> covering
# tests/mixed's go.mod, go.sum and Go files (stand-ins included), the Go version and the build
# flags: when the binary is there the script does nothing; a new build removes older ones. About
# 5 minutes on 2 cores the first time (cgo: KubeVirt's launcher packages link libvirt, so
# libvirt-dev must be installed).
#
# Safe to run concurrently (a lock file serializes builds). Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
gh_need_libvirt

# What the cache hash covers (in this order, as the cache directories already built): the Go
# files, stand-ins included, every go.mod, then go.sum.
mixed_sums() {
  gh_sums '*.go'
  gh_sums go.mod
  sha256sum go.sum
}
# The checksum database behind this proxy has no record of libvirt.org/go/libvirt v1.12003.0
# (404); go.sum pins its hash, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"
gh_harness mixed kvrs-mixed 1 "against kubevirt.io/kubevirt v1.9.0; about 5 minutes the first time" mixed_sums
