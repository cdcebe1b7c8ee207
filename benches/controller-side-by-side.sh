#!/usr/bin/env bash
# kvrs's virt-controller next to KubeVirt v1.9.0's own on the same kube-apiserver + etcd, the
# same VMs, alternating runs (see bins/virt-controller/examples/side_by_side.rs for what is
# measured and how). KubeVirt's controller is built from a KubeVirt v1.9.0 source snapshot with
# its vendor/ (benches/kubevirt/build.sh: set KVRS_KUBEVIRT_SRC or KVRS_KUBEVIRT_GIT).
#
# Not run by CI: it takes minutes, its figures depend on the machine, and it needs the snapshot.
#
# usage: benches/controller-side-by-side.sh [N [ROUNDS]]   (default 300 VMs per run, 2 rounds;
# both set-ups: without virt-api, then with kvrs's virt-api in front of both controllers)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-300}
rounds=${2:-2}

KVRS_KUBE_BIN=$(bash scripts/kube-components.sh | tail -n 1)
export KVRS_KUBE_BIN
kubevirt_bin=$(bash benches/kubevirt/build.sh | tail -n 1)

cargo build --release -p kvrs-virt-controller -p kvrs-virt-api --bins --examples
target_dir=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
run() {
  "$target_dir/release/examples/side_by_side" --vms "$n" --rounds "$rounds" \
    --kvrs "$target_dir/release/virt-controller" --kubevirt-bin "$kubevirt_bin" "$@"
}
# The two set-ups the performance issue names: no virt-api, then a virt-api in front of both.
run
run --virt-api "$target_dir/release/virt-api"
