#!/usr/bin/env bash
# Side by side, in one run: kvrs's converter and KubeVirt v1.9.0's own (kubevirt.io/kubevirt as
# a Go module in tests/diff, built here by scripts/diff-harness.sh), on the same defaulted VMIs:
# the Fedora example, a Windows-like VMI and a many-disk VMI. Each side does, per conversion,
# what its launcher does before defining the domain — KubeVirt: Convert_v1_VirtualMachineInstance
# _To_api_Domain, libvirt-domain defaulting, xml.MarshalIndent; kvrs: convert + indented XML —
# with the oracle's converter context, one core each, alternating KubeVirt / kvrs for ROUNDS
# rounds of N conversions. Prints per case the median of the rounds' medians, the ratio, and
# allocations per conversion (Go runtime.MemStats.Mallocs; kvrs: a separate, untimed run of the
# same conversions on a counting allocator, kvrs-bench-convert-allocs — the timed runs use the
# system allocator, as the launcher does).
#
# Usage: bash benches/compare-kubevirt.sh [ROUNDS] [N]   (defaults 5 and 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
N=${2:-2000}
SHARED=${KVRS_SHARED:-$(cd .. && pwd)/shared}

GO_BIN=$(bash scripts/diff-harness.sh | tail -n 1)
cargo build -q --release -p kvrs-benches --bin kvrs-bench-convert --bin kvrs-bench-convert-allocs
KVRS_BIN=${CARGO_TARGET_DIR:-target}/release/kvrs-bench-convert
KVRS_ALLOCS=${CARGO_TARGET_DIR:-target}/release/kvrs-bench-convert-allocs
for bin in "$KVRS_BIN" "$KVRS_ALLOCS"; do
  [ -x "$bin" ] || { echo "compare-kubevirt.sh: $bin not built" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The many-disk case: 200 virtio disks of container disks, defaulted by kvrs itself.
python3 - "$work/many-disks.vmi.json" <<'PY'
import json, sys
n = 200
vmi = {
    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
    "metadata": {"name": "many-disks", "namespace": "default", "uid": "11111111-2222-3333-4444-555555555555"},
    "spec": {
        "domain": {
            "firmware": {"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223"},
            "resources": {"requests": {"memory": "1Gi"}},
            "devices": {"disks": [{"name": f"d{i}", "disk": {"bus": "virtio"}} for i in range(n)]},
        },
        "volumes": [{"name": f"d{i}", "containerDisk": {"image": f"registry.example/disk:{i}"}} for i in range(n)],
    },
}
json.dump(vmi, open(sys.argv[1], "w"))
PY
cargo build -q --release -p kvrs --bin kvrs
"${CARGO_TARGET_DIR:-target}/release/kvrs" defaults "$work/many-disks.vmi.json" >"$work/many-disks.defaulted.json"

cases=(
  "fedora:$SHARED/oracle/example-vmi-fedora.defaulted.json"
  "windows-like:$SHARED/oracle/windows-like.defaulted.json"
  "many-disks(200):$work/many-disks.defaulted.json"
)

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
field() { sed -n "s/^$1: //p"; }

printf '%-16s %14s %14s %8s %12s %12s\n' case "KubeVirt ns" "kvrs ns" ratio "KubeVirt allocs" "kvrs allocs"
for entry in "${cases[@]}"; do
  name=${entry%%:*}
  file=${entry#*:}
  [ -f "$file" ] || { echo "compare-kubevirt.sh: missing input $file" >&2; exit 1; }
  : >"$work/go" && : >"$work/rs"
  for _ in $(seq "$ROUNDS"); do
    taskset -c 0 "$GO_BIN" bench-convert "$file" "$N" >"$work/go.out"
    taskset -c 0 "$KVRS_BIN" "$file" "$N" >"$work/rs.out"
    field "median ns\/conversion" <"$work/go.out" >>"$work/go"
    field "median ns\/conversion" <"$work/rs.out" >>"$work/rs"
  done
  go_ns=$(median <"$work/go")
  rs_ns=$(median <"$work/rs")
  go_alloc=$(field "allocations\/conversion" <"$work/go.out")
  rs_alloc=$(taskset -c 0 "$KVRS_ALLOCS" "$file" "$N" | field "allocations\/conversion")
  ratio=$(awk -v g="$go_ns" -v r="$rs_ns" 'BEGIN { printf "%.1fx", g / r }')
  printf '%-16s %14s %14s %8s %12s %12s\n' "$name" "$go_ns" "$rs_ns" "$ratio" "$go_alloc" "$rs_alloc"
done
echo "(median of $ROUNDS rounds x $N conversions each, one core; ratio = KubeVirt time / kvrs time)"
