#!/usr/bin/env bash
# `kvrs run` figures next to KubeVirt v1.9.0's seed figures (../shared/notes/performance-anchors.md,
# ../shared/notes/kubevirt-launcher-observed.md):
#   - start -> Running: from `kvrs run` starting to the VMI's Running phase (API server, both
#     controllers, the kubelet, the launcher pod, libvirt's define + start: everything);
#   - Scheduled -> Running: the VMI handed to the node -> Running (KubeVirt's handler: 1.1 s);
#   - RSS of the whole stack while the VM runs: kvrs (API server + virt-controller +
#     virt-handler + kubelet in one process) + the launcher pod's processes (monitor, launcher,
#     virtqemud, virtlogd), QEMU apart. KubeVirt's launcher pod alone: 123.6 MiB.
# Builds release binaries, the guest images, then runs the fixture VM RUNS times (real libvirt +
# QEMU TCG, UID 107). Needs root and scripts/install-test-deps.sh.
#
# usage: benches/run-figures.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}

cargo build -q --release -p kvrs -p virt-launcher -p virt-launcher-monitor -p kvrs-test-guest
images=$(mktemp -d)
trap 'rm -rf "$images"' EXIT
target/release/kvrs-guest-images "$images" >/dev/null

for i in $(seq "$runs"); do
  out=$(mktemp)
  target/release/kvrs run fixtures/run/guest-vm.yaml --images "$images" \
    --state-dir "/tmp/kvrs-run-fig-$$" --pods-dir "/tmp/kf$$" \
    --stop-after-console "KVRS-E2E: gateway answers ping" >"$out" 2>/dev/null &
  pid=$!
  rss=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ -z "$rss" ] && grep -q " Running$" "$out"; then
      sleep 2 # steady state: the guest is up
      rss=$(python3 - "$pid" <<'PY'
import os, sys
root = int(sys.argv[1])
def children(p):
    # Every thread's children: the kubelet spawns pods from tokio worker threads.
    out = []
    try:
        tasks = os.listdir(f"/proc/{p}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            out += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except OSError:
            pass
    return out
stack, total, seen = [root], 0, []
while stack:
    p = stack.pop()
    stack.extend(children(p))
    try:
        comm = open(f"/proc/{p}/comm").read().strip()
        rss = next(int(l.split()[1]) for l in open(f"/proc/{p}/status") if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        continue
    if comm.startswith("qemu-system"):
        continue
    total += rss
    seen.append(f"{comm}={rss // 1024}M")
print(f"{total / 1024:.1f} MiB ({' '.join(sorted(seen))})")
PY
)
    fi
    sleep 0.2
  done
  wait "$pid" || echo "run $i: kvrs run failed" >&2
  python3 - "$out" "$rss" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
t = {m.group(2): float(m.group(1)) for m in re.finditer(r"^\s*([\d.]+)s default/guest (\w+)", text, re.M)}
run, sched = t.get("Running"), t.get("Scheduled")
print(f"kvrs run: start -> Running {run:.2f} s, Scheduled -> Running {run - sched:.2f} s, stack RSS {sys.argv[2]}"
      if run and sched else f"kvrs run: no Running phase in:\n{text}")
PY
  rm -f "$out"
done
echo "KubeVirt v1.9.0 (seed, same kind of machine): VMI handed over -> Running 1.1 s; launcher pod processes 123.6 MiB (plus virt-handler, virt-controller, virt-api, the kubelet and an API server)"
