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

# shellcheck source=lib/go-harness.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-harness.sh"
gh_harness gotags kvrs-gotags 0 "against kubevirt.io/api v1.9.0"
