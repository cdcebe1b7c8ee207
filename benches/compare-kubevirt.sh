#!/usr/bin/env bash
# Side by side, in one run: kvrs's converter and KubeVirt v1.9.0's own (kubevirt.io/kubevirt as
# a Go module in tests/diff, built here by scripts/diff-harness.sh), on the same defaulted VMIs:
# the Fedora example, a Windows-like VMI and a many-disk VMI. Each side does, per conversion,
# what its launcher does before defining the domain — KubeVirt: Convert_v1_VirtualMachineInstance
# _To_api_Domain, libvirt-domain defaulting, xml.MarshalIndent; kvrs: convert + indented XML —
# with the oracle's converter context, one core each.
#
# Paired rounds: this machine's speed changes by up to 2x within seconds (the same kvrs binary
# prints 3.3 or 6.5 µs per Fedora conversion in back-to-back runs; KubeVirt's side moves the
# same way), so two medians taken apart compare the machine, not the code. Both converters
# therefore run as servers (`kvrs-diff-go bench-convert-serve`, `kvrs-bench-convert --serve`,
# started once per case: KubeVirt's process takes seconds to start) and each round asks one,
# then the other, for a window of about WINDOW_MS of conversions (counts calibrated per case),
# the order alternating between rounds; the round's ratio is KubeVirt's median over kvrs's.
# Printed per case: the median of the rounds' ratios and its interquartile range, the median of
# each side's round medians, and allocations per conversion (Go runtime.MemStats.Mallocs;
# kvrs: a separate, untimed run of the same conversions on a counting allocator,
# kvrs-bench-convert-allocs — the timed runs use the system allocator, as the launcher does).
#
# Rounds are spread over PAIRS fresh pairs of processes: the same binary runs a few percent
# faster or slower from one process to the next (where its code and heap landed; measured
# 0.967-1.011 between eight pairs of the same kvrs binary), more than the changes a run is
# meant to tell apart, so one pair's ratio is that pair's. Also printed: the lowest and highest
# pair's median ratio.
#
# Usage: bash benches/compare-kubevirt.sh [ROUNDS] [WINDOW_MS] [PAIRS]   (defaults 60, 50, 4)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-60}
WINDOW_MS=${2:-50}
PAIRS=${3:-4}
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

field() { sed -n "s/^$1: //p"; }

printf '%-16s %8s %14s %13s %13s %13s %10s %10s\n' case ratio "ratio IQR" "pairs' range" \
  "KubeVirt ns" "kvrs ns" "KV allocs" "kvrs allocs"
for entry in "${cases[@]}"; do
  name=${entry%%:*}
  file=${entry#*:}
  [ -f "$file" ] || { echo "compare-kubevirt.sh: missing input $file" >&2; exit 1; }
  rs_alloc=$(taskset -c 0 "$KVRS_ALLOCS" "$file" 1000 | field "allocations\/conversion")
  python3 - "$name" "$file" "$GO_BIN" "$KVRS_BIN" "$ROUNDS" "$WINDOW_MS" "$rs_alloc" "$PAIRS" <<'PY'
import statistics, subprocess, sys

name, file, go_bin, rs_bin, rounds, window_ms, rs_alloc, pairs = sys.argv[1:]
rounds, window_ms, pairs = int(rounds), float(window_ms), max(1, int(pairs))

def server(argv):
    return subprocess.Popen(["taskset", "-c", "0", *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)

def ask(proc, n, who):
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    line = proc.stdout.readline().split()
    if not line:
        sys.exit(f"compare-kubevirt.sh: {name}: the {who} server answered nothing (exit {proc.poll()})")
    return [int(x) for x in line]

count = lambda ns: max(5, int(window_ms * 1e6 / ns))
go_ns, rs_ns, ratios, pair_ratios, go_alloc = [], [], [], [], 0
for p in range(pairs):
    # A fresh pair of processes each time: one process's speed depends on where its code and
    # heap landed (a few percent from one process to the next, on both sides), so a ratio from
    # one pair measures that pair; the rounds are spread over `pairs` of them.
    go = server([go_bin, "bench-convert-serve", file])
    rs = server([rs_bin, file, "--serve"])
    # Calibration (not part of the result): a short window per side sizes the rounds' windows.
    n_go = count(ask(go, 5, "KubeVirt")[0])
    n_rs = count(ask(rs, 200, "kvrs")[0])
    mine = []
    for r in range(p * rounds // pairs, (p + 1) * rounds // pairs):
        if r % 2 == 0:
            g, go_alloc = ask(go, n_go, "KubeVirt")
            (k,) = ask(rs, n_rs, "kvrs")
        else:
            (k,) = ask(rs, n_rs, "kvrs")
            g, go_alloc = ask(go, n_go, "KubeVirt")
        go_ns.append(g)
        rs_ns.append(k)
        mine.append(g / k)
    for proc in (go, rs):
        proc.stdin.close()
        proc.wait()
    ratios += mine
    if mine:
        pair_ratios.append(statistics.median(mine))
q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
iqr = f"{q[0]:.1f}-{q[2]:.1f}x"
spread = f"{min(pair_ratios):.1f}-{max(pair_ratios):.1f}x"
print(f"{name:<16} {statistics.median(ratios):7.1f}x {iqr:>14} {spread:>13} "
      f"{statistics.median(go_ns):>13.0f} {statistics.median(rs_ns):>13.0f} {go_alloc:>10} {rs_alloc:>10}")
PY
done
echo "(median of $ROUNDS paired rounds of ~${WINDOW_MS} ms per side over $PAIRS pairs of processes, one core;"
echo " ratio = KubeVirt's median / kvrs's in the same round; pairs' range = the lowest and highest pair's median)"
