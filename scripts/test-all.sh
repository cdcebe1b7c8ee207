#!/usr/bin/env bash
# Runs every kvrs test: installs the system packages the end-to-end tests need (libvirt, QEMU from
# Debian), builds the Kubernetes components the controller tests run against (Go modules), then
# the whole workspace's tests, doc tests included, prints how kvrs stands against KubeVirt
# v1.9.0's own outputs, and ends with the total count. Used by README.md and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real node's kubelet evicts its pods when the disk runs low (tests/cluster/src/node.rs):
# a cold run needs about 6 GB for the target directory, 2 GB for the Go builds and images and
# room for the guests' disks. Say so up front rather than as an evicted pod 20 minutes in.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((12 * 1024 * 1024)) ]; then
  echo "test-all: only $((free_kb / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'); the tests need about 12 GiB (target directory, Go builds, images, guest disks)" >&2
  exit 1
fi

if [ "$(id -u)" = 0 ]; then
  bash scripts/install-test-deps.sh
else
  sudo bash scripts/install-test-deps.sh
fi

echo "== Go builds into ~/.cache/kvrs: Kubernetes, the node's runtime, KubeVirt's harnesses (instant when cached; otherwise a line per binary with its build time)"

# The real Kubernetes control plane the controller tests run against (kube-apiserver, etcd,
# kube-controller-manager, kube-scheduler, kubectl) and the real node's kubelet and kube-proxy,
# built from the Go module proxy and cached in ~/.cache/kvrs (about 20 minutes on 2 cores the
# first time, instant afterwards).
bash scripts/kube-components.sh

# The real node's container runtime (containerd v2, runc, CNI plugins; tests/node) and kvrs's
# pause image, for tests/cluster's RealNode (about 4 minutes the first time).
bash scripts/node-components.sh

# Multus's thin CNI plugin (multus-cni v4.2.2) for the real node's secondary networks
# (bins/kvrs/tests/real_multus.rs; about 2 minutes the first time).
bash scripts/multus.sh
bash scripts/cdi.sh >/dev/null # CDI v1.64.0 for real_datavolume.rs (tests/cdi; ~5 min first time)

# The mixed-fleet harness (tests/mixed): KubeVirt v1.9.0's own handler/launcher gRPC code as a Go
# module, built into ~/.cache/kvrs (about 5 minutes the first time).
bash scripts/mixed-harness.sh

# The differential harness (tests/diff): KubeVirt v1.9.0's webhooks, converter, overhead and pod
# renderer as a Go module, built into ~/.cache/kvrs (about 5 minutes the first time).
bash scripts/diff-harness.sh

# The Go json-tag reader (tests/gotags, kubevirt.io/api v1.9.0 by reflection) whose table
# decides how kvrs writes kubevirt.io/v1 objects; tests/go_json_rules.rs checks it.
bash scripts/gotags.sh

# The instancetype harness (tests/instancetype): KubeVirt v1.9.0's instancetype/preference
# application code as a Go module, for tests/instancetype_differential.rs.
bash scripts/instancetype-harness.sh

bash scripts/kvlauncher-harness.sh

# KubeVirt v1.9.0's hook sidecar (sidecar-shim + the smbios hook) and its hook manager (tests/hooks),
# for the launcher's hook-sidecar wire tests (seconds once the module cache is warm).
bash scripts/hooks-harness.sh

# KubeVirt v1.9.0's own virtctl commands (tests/virtctl: its pkg/virtctl subcommand constructors
# as a Go module) for bins/virt-handler/tests/virtctl.rs (about a minute the first time).
bash scripts/virtctl-harness.sh

# KubeVirt v1.9.0's pods/eviction admitter and evacuation controller as a Go module (tests/evacuation)
# for tests/evacuation_oracle.rs (about 2 minutes the first time).
bash scripts/evacuation-harness.sh >/dev/null

# KubeVirt v1.9.0's node labeller as a Go module (tests/nodelabeller, cgo) for
# tests/nodelabeller_oracle.rs (seconds once the module cache is warm).
bash scripts/nodelabeller-harness.sh >/dev/null

# KubeVirt v1.9.0's migration controller as a Go module (tests/migration) for
# tests/migration_oracle.rs (seconds once the module cache is warm).
bash scripts/migration-harness.sh >/dev/null

# KubeVirt v1.9.0's VMI controller as a Go module (tests/vmistorage) for
# tests/vmistorage_oracle.rs (seconds once the module cache is warm).
bash scripts/vmistorage-harness.sh >/dev/null

# A fresh clone builds once: incremental artefacts would only double the target directory.
export CARGO_INCREMENTAL=0

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== cargo test --workspace: doc tests, then every test target (cargo's progress follows: a line per crate compiled)"
cargo test --workspace --doc 2>&1 | tee -a "$log"
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee -a "$log"

# The conformance tests already ran above; run them once more, uncaptured, for their counts.
echo "== kvrs against KubeVirt v1.9.0's oracle corpus"
cargo test -q -p kvrs-tests \
  --test oracle_roundtrip --test oracle_defaults --test oracle_convert --test oracle_overhead \
  --test oracle_pod --test oracle_vm --test oracle_handler --test differential --test instancetype_differential --test evacuation_oracle --test migration_oracle --test vmistorage_oracle --test nodelabeller_oracle -- --nocapture 2>&1 |
  grep -E "match|round-tripped|idempotently|agree" | sed "s/^\.*//" || true

# One closing line for the whole run, summed over every test binary above.
awk '/^test result:/ { p += $4; f += $6 } END { printf "kvrs: %d passed, %d failed\n", p, f }' "$log"
echo "== fuzzing: scripts/fuzz.sh 30"
bash scripts/fuzz.sh 30
