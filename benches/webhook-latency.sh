#!/usr/bin/env bash
# Webhook latency: kvrs's virt-api next to KubeVirt v1.9.0's own virt-api, side by side.
#
# What: p50 / p99 latency of the four admission webhooks a VM/VMI create goes through —
# /virtualmachineinstances-mutate, /virtualmachineinstances-validate-create,
# /virtualmachines-mutate, /virtualmachines-validate — answered by KubeVirt's real `cmd/virt-api`
# (built from a KubeVirt v1.9.0 source snapshot with its vendor/ by benches/kubevirt/build.sh: set
# KVRS_KUBEVIRT_SRC or KVRS_KUBEVIRT_GIT) and by kvrs's `virt-api`, both running against one real
# kube-apiserver + etcd (the repo's test cluster) with KubeVirt's CRDs and a KubeVirt CR with the
# default configuration. KubeVirt's virt-api gets what its operator would give it: its serving
# and handler-client certificate files, the `kubevirt-ca` ConfigMap, the KubeVirt CR.
#
# How: `kvrs-bench-webhooks` (benches/bin/webhooks/) builds AdmissionReview v1 CREATE bodies at
# run time from KubeVirt's oracle inputs (../shared/oracle: every VMI case KubeVirt admits with
# default feature gates, raw for the mutate path and as KubeVirt defaulted it for validate;
# ../shared/oracle-vm: the distinct VMs of its scenarios for both VM paths), checks that both
# servers answer every body with the same `allowed`, then runs ROUNDS paired rounds: each
# server in turn (order alternating) answers PER_ROUND requests per path over CONCURRENCY
# kept-alive HTTPS connections (one rustls HTTP/1.1 client for both; certificates verified).
#
# Caveats: a shared 2-core machine — client, both servers and the API server share it; read the
# ratio (median of the per-round ratios), not the absolute figures. Both virt-apis run with the
# admin kubeconfig rather than their service accounts (no decision here depends on it). KubeVirt's
# server speaks HTTP/1.1 only (it disables HTTP/2), so both are measured over HTTP/1.1.
# Not run by CI.
#
# usage: benches/webhook-latency.sh [ROUNDS [PER_ROUND [CONCURRENCY]]]   (default 20 100 4)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
per_round=${2:-100}
concurrency=${3:-4}
shared=${KVRS_SHARED:-$(cd .. && pwd)/shared}

KVRS_KUBE_BIN=$(bash scripts/kube-components.sh | tail -n 1)
export KVRS_KUBE_BIN
kubevirt_bin=$(bash benches/kubevirt/build.sh | tail -n 1)
cargo build -q --release -p kvrs-virt-api --bin virt-api
cargo build -q --release -p kvrs-benches --bin kvrs-bench-webhooks
target_dir=${CARGO_TARGET_DIR:-target}
"$target_dir/release/kvrs-bench-webhooks" --kvrs "$target_dir/release/virt-api" \
  --kubevirt-bin "$kubevirt_bin" --oracle "$shared/oracle" --oracle-vm "$shared/oracle-vm" \
  --rounds "$rounds" --per-round "$per_round" --concurrency "$concurrency"
