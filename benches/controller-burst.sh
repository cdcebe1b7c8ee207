#!/usr/bin/env bash
# The virt-controller burst benchmark: N VirtualMachines (default 1000) created in a burst on one
# real kube-apiserver + etcd + kube-controller-manager, and how fast kvrs's virt-controller turns
# them into VMIs and launcher pods (VMs/s from the first VM create to the N-th launcher pod),
# next to the raw object-create ceiling of the same apiserver measured in the same run (N small
# ConfigMaps, same concurrency). The issue's goal: kvrs reaches at least half of the ceiling.
# Also printed: the API writes per VM (apiserver_request_total deltas; the example's output says
# exactly what was counted) and the wall times. See bins/virt-controller/examples/burst.rs.
#
# Not run by CI: it takes minutes and its figures depend on the machine.
#
# usage: benches/controller-burst.sh [N [burst flags...]]   (default 1000; e.g. `1000 --vm-workers 16`
# raises the controller's VM workers above KubeVirt's 3, and the output says so)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
shift || true

# The Kubernetes binaries (built once into a cache); the cluster crate finds them the same way.
KVRS_KUBE_BIN=$(bash scripts/kube-components.sh | tail -n 1)
export KVRS_KUBE_BIN

cargo build --release -p kvrs-virt-controller --bins --examples
target_dir=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/release/examples/burst" --vms "$n" --controller "$target_dir/release/virt-controller" "$@"
