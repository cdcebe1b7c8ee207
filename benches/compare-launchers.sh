#!/usr/bin/env bash
# KubeVirt v1.9.0's own virt-launcher and kvrs's, side by side under one harness: the same pod
# (scripts/launcher-pod-harness.sh: mount + PID namespace, container /dev without kvm, UID 107),
# the same guest (kvrs-test-guest, 128 MiB, TCG), the same VMI (tests/kvlauncher/vmi.json after
# `kvrs defaults`), the same driver (tests/kvlauncher: KubeVirt's handler-side cmd client and
# notify server, one polling interval for both). Rounds alternate which launcher goes first
# (ABBA), so both see the same machine load on average.
#
# Figures per run: monitor exec -> launcher-sock ready; SyncVirtualMachine sent -> GetDomain
# Running (and -> the Running domain event); VmRSS of monitor + launcher, libvirtd and virtlogd
# once the guest has booted; KillVirtualMachine -> Shutoff, and -> the monitor's exit (Kill, then
# DeleteDomain once Shutoff, as virt-handler does). It prints the median of each per launcher and
# the ratio kvrs / KubeVirt, then where each launcher spent Sync -> Running (kvrs's
# "sync timings" line; KubeVirt's own log steps, timed from the Sync call).
#
# Not run by CI: the figures depend on the machine. Needs root, Go >= 1.26 + the Go module proxy,
# libvirt-dev, libvirt 11 + QEMU (scripts/install-test-deps.sh). The first run builds KubeVirt's
# launcher (~30 s with a warm Go cache) and kvrs's with the `launcher` profile.
#
# usage: benches/compare-launchers.sh [ROUNDS]   (default 3; each round runs both launchers once)
# Environment: KVRS_CMP_KEEP=1 keeps the work directory (pod logs) for reading.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
case "$rounds" in '' | *[!0-9]* | 0) echo "usage: $0 [ROUNDS>0]" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "compare-launchers.sh: needs root (mount/PID namespaces, UID 107)" >&2; exit 1; }

harness_dir=$(bash scripts/kvlauncher-harness.sh | tail -n 1)
driver="$harness_dir/kvrs-kvlauncher"
kvroot="$harness_dir/kubevirt-root"

cargo build -q --profile launcher -p virt-launcher -p virt-launcher-monitor
cargo build -q -p kvrs --bin kvrs -p kvrs-test-guest --bin kvrs-guest-images
target=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

work=$(mktemp -d /tmp/kvrs-compare-launchers.XXXXXX)
if [ "${KVRS_CMP_KEEP:-}" != 1 ]; then trap 'rm -rf "$work"' EXIT; fi
chmod 755 "$work"
# UID 107 runs kvrs's binaries: copies outside a possibly private checkout or target dir.
mkdir -p "$work/kvrs-bin"
install -m 0755 "$target/launcher/virt-launcher" "$target/launcher/virt-launcher-monitor" "$work/kvrs-bin/"
"$target/debug/kvrs-guest-images" "$work/guest" >/dev/null
"$target/debug/kvrs" defaults tests/kvlauncher/vmi.json >"$work/vmi.json"

echo "binaries (stripped):"
ls -l "$kvroot/usr/bin/virt-launcher" "$kvroot/usr/bin/virt-launcher-monitor" \
  "$work/kvrs-bin/virt-launcher" "$work/kvrs-bin/virt-launcher-monitor" | awk '{printf "  %6.1f MB %s\n", $5 / 1e6, $9}'

run_one() { # KIND ROUND
  local kind=$1 round=$2 out args
  args=(measure --kind "$kind" --pod-script scripts/launcher-pod-harness.sh
    --guest "$work/guest" --vmi "$work/vmi.json" --work "$work")
  if [ "$kind" = kubevirt ]; then
    args+=(--monitor /usr/bin/virt-launcher-monitor --kubevirt-root "$kvroot")
  else
    args+=(--monitor "$work/kvrs-bin/virt-launcher-monitor")
  fi
  out="$work/run-$round-$kind.jsonl"
  if "$driver" "${args[@]}" >"$out" 2>"$out.err"; then
    echo "  round $round $kind: ok"
  else
    echo "  round $round $kind: FAILED" >&2
    tail -n 5 "$out.err" >&2
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if "error" in j: print(j["error"]); print(j.get("log_tail","")[-2000:])' "$out" >&2 || true
  fi
}

echo "running $rounds rounds (each: both launchers, order alternating):"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order=(kubevirt kvrs); else order=(kvrs kubevirt); fi
  for k in "${order[@]}"; do run_one "$k" "$r"; done
done

python3 - "$work" <<'EOF'
import datetime, glob, json, os, re, statistics, sys

work = sys.argv[1]
runs = {"kubevirt": [], "kvrs": []}
for path in sorted(glob.glob(os.path.join(work, "run-*.jsonl"))):
    pod_log = None
    for line in open(path):
        j = json.loads(line)
        if "log" in j:
            pod_log = j["log"]
        if "figures" in j:
            f = j["figures"]
            f["pod_log"] = pod_log
            runs[f["kind"]].append(f)
if not runs["kubevirt"] or not runs["kvrs"]:
    sys.exit("compare-launchers: no figures for %s" % [k for k, v in runs.items() if not v])

def med(kind, key):
    return statistics.median(r[key] for r in runs[kind])

def rng(kind, key):
    vals = [r[key] for r in runs[kind]]
    return min(vals), max(vals)

rows = [
    ("launcher start -> launcher-sock ready", "ready_s", "s"),
    ("SyncVirtualMachine returned", "sync_return_s", "s"),
    ("SyncVirtualMachine -> Running (GetDomain)", "sync_to_running_s", "s"),
    ("SyncVirtualMachine -> Running event", "notify_running_s", "s"),
    ("Kill -> Shutoff (GetDomain)", "kill_to_shutoff_s", "s"),
    ("Kill -> monitor exit (Kill, Delete)", "kill_to_exit_s", "s"),
    ("VmRSS virt-launcher-monitor", "rss_monitor_kib", "MiB"),
    ("VmRSS virt-launcher", "rss_launcher_kib", "MiB"),
    ("VmRSS monitor + launcher", "rss_ml_kib", "MiB"),
    ("VmRSS libvirtd (as virtqemud for KubeVirt)", "rss_libvirtd_kib", "MiB"),
    ("VmRSS virtlogd", "rss_virtlogd_kib", "MiB"),
    ("VmRSS qemu-system-x86_64", "rss_qemu_kib", "MiB"),
    ("guest boot (Running -> init marker)", "boot_s", "s"),
]
for kind in runs:
    for r in runs[kind]:
        r["rss_ml_kib"] = r["rss_monitor_kib"] + r["rss_launcher_kib"]

n = (len(runs["kubevirt"]), len(runs["kvrs"]))
print(f"\nmedian (min-max) of {n[0]} KubeVirt / {n[1]} kvrs runs")
print(f"{'figure':44} {'KubeVirt v1.9.0':>22} {'kvrs':>22} {'kvrs/KubeVirt':>13}")
for label, key, unit in rows:
    scale = 1024 if unit == "MiB" else 1
    cells = []
    for kind in ("kubevirt", "kvrs"):
        lo, hi = rng(kind, key)
        cells.append(f"{med(kind, key) / scale:7.2f} ({lo / scale:.2f}-{hi / scale:.2f}) {unit:3}")
    a, b = med("kubevirt", key), med("kvrs", key)
    ratio = f"{b / a:.2f}" if a else "-"
    print(f"{label:44} {cells[0]:>22} {cells[1]:>22} {ratio:>13}")

# Where Sync -> Running went, per run, from each launcher's own log.
def ts(j):
    t = j.get("timestamp")
    if isinstance(t, (int, float)):
        return float(t)
    if isinstance(t, str):
        try:
            return datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            return None
    return None

KUBEVIRT_STEPS = [
    ("first domain XML", lambda m: m.startswith("Domain XML generated")),
    ("Domain defined.", lambda m: m == "Domain defined."),
    ("QEMU starting (libvirt log)", lambda m: "starting up libvirt" in m),
    ("Domain started.", lambda m: m == "Domain started."),
    ("Synced vmi", lambda m: m == "Synced vmi"),
]
print("\nSync -> Running, step by step (seconds after SyncVirtualMachine was sent):")
for r in runs["kubevirt"]:
    seen = {}
    for line in open(r["pod_log"], errors="replace"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        t, m = ts(j), str(j.get("msg", ""))
        if t is None or t < r["sync_start_unix"] - 0.5:
            continue
        for name, match in KUBEVIRT_STEPS:
            if name not in seen and match(m):
                seen[name] = t - r["sync_start_unix"]
    steps = "  ".join(f"{name} {seen[name]:.2f}" for name, _ in KUBEVIRT_STEPS if name in seen)
    print(f"  KubeVirt: {steps}  Running {r['sync_to_running_s']:.2f}")
for r in runs["kvrs"]:
    timings, probe = "", ""
    for line in open(r["pod_log"], errors="replace"):
        if m := re.search(r"sync timings: ([^)]*)", line):
            timings = m.group(1)
        if m := re.search(r"libvirt probed QEMU in ([0-9.]+m?s)", line):
            probe = m.group(1)
    print(f"  kvrs:     {timings}  (of define: libvirt's QEMU probe {probe or '?'})  Running {r['sync_to_running_s']:.2f}")
EOF
if [ "${KVRS_CMP_KEEP:-}" = 1 ]; then echo "pod logs kept in $work"; fi
