#!/usr/bin/env bash
# Builds virtctl-harness, the Go harness of the virtctl tests (tests/virtctl: KubeVirt v1.9.0's own
# virtctl commands — vm start/stop/restart, pause/unpause, console, vnc, guestosinfo, addvolume,
# removevolume — over its
# client-go, imported from the kubevirt.io/kubevirt module), for
# bins/virt-handler/tests/virtctl.rs, and prints the binary's path as the LAST line of stdout
# (progress goes to stderr).
#
# The binary goes to ${KVRS_CACHE:-$HOME/.cache/kvrs}/virtctl-<hash>/virtctl-harness, <hash>
# covering tests/virtctl's Go files, go.mod and go.sum, the stand-ins of tests/mixed/stubs it
# uses, the Go version and the build flags: when the binary is there the script does nothing; a
# new build removes older ones. A few minutes on 2 cores the first time (no cgo).
#
# virtctl's root command (pkg/virtctl) is not linked: its template commands need
# kubevirt.io/virt-template-engine, which the module proxy refuses (403), besides the
# virt-template-{api,client-go} tests/mixed stands in for. tests/virtctl/main.go assembles the
# root from virtctl's own subcommand constructors instead.
#
# Safe to run concurrently (a lock file serializes builds). Environment: KVRS_CACHE (cache root),
# GO (the go command; default: go on PATH, else /usr/local/go/bin/go).
set -euo pipefail

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"

virtctl_sums() {
  gh_module_sums
  (cd ../mixed/stubs && gh_sums '*.go' go.mod)
}
# The checksum database behind this proxy has no record of libvirt.org/go/libvirt v1.12003.0
# (404); go.sum pins its hash, which the build still checks.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}libvirt.org/go/libvirt"
gh_harness virtctl virtctl-harness 0 "against kubevirt.io/kubevirt v1.9.0; a few minutes the first time" virtctl_sums
