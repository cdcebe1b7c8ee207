#!/usr/bin/env bash
# KubeVirt v1.9.0's own virt-launcher and kvrs's, side by side under one harness, with libvirt's
# own time for the same domain as the floor under both: the same pod
# (scripts/launcher-pod-harness.sh: mount + PID namespace, container /dev without kvm, UID 107),
# the same guest (kvrs-test-guest, 128 MiB, TCG), the same VMI (tests/kvlauncher/vmi.json after
# `kvrs defaults`), the same driver (tests/kvlauncher: KubeVirt's handler-side cmd client and
# notify server, one polling interval for both). Each round runs the three in turn, KubeVirt and
# the floor swapping ends every round (ABC, CBA), so all see the same machine load on average.
#
# Figures per launcher run: monitor exec -> launcher-sock ready; SyncVirtualMachine sent ->
# GetDomain Running (and -> the Running domain event); VmRSS of monitor + launcher, libvirtd and
# virtlogd once the guest has booted; KillVirtualMachine -> Shutoff, and -> the monitor's exit
# (Kill, then DeleteDomain once Shutoff, as virt-handler does). It prints the median of each per
# launcher and the ratio kvrs / KubeVirt, then where each launcher spent Sync -> Running (kvrs's
# "sync timings" line; KubeVirt's own log steps, timed from the Sync call).
#
# The floor ("libvirt" runs): bins/virt-launcher/examples/libvirt-floor.rs run by kvrs's monitor in
# place of the launcher — the launcher's own daemon start-up and libvirt client, a fresh
# libvirtd, then connect, define of the XML kvrs's launcher defined (taken from its log; libvirt
# probes QEMU's capabilities inside this first define, and a second define once probed splits
# the probe off), start -> Running, one after another. Floor = probe + define + start (a launcher
# is connected before SyncVirtualMachine arrives); each launcher's Sync -> Running minus the
# floor is its overhead above libvirt, printed as median minus median and as the median of each
# round's own difference. Those carry the machine's noise (libvirt's start alone varies by a
# second on a busy machine), so the script also splits each kvrs run by its own log: the Sync's
# way in, the launcher's steps before the define and how much of them libvirt's probe did not
# hide, libvirt's define and start, the way out to the notify server and to GetDomain — the sum
# of the launcher's parts is its own share of the run, next to libvirt's steps in the floor.
#
# The cache of Go harness builds (${KVRS_CACHE:-~/.cache/kvrs}), shared by every checkout, keeps one
# build per harness: a checkout whose tests/kvlauncher differs from another's running at the same
# time removes the other's build. Set KVRS_CACHE to a directory of your own then.
#
# Not run by CI: the figures depend on the machine. Needs root, Go >= 1.26 + the Go module proxy,
# libvirt-dev, libvirt 11 + QEMU (scripts/install-test-deps.sh). The first run builds KubeVirt's
# launcher (~30 s with a warm Go cache) and kvrs's with the `launcher` profile.
#
# usage: benches/compare-launchers.sh [ROUNDS]   (default 3; each round runs all three once)
# Environment: KVRS_CMP_KEEP=1 keeps the work directory (pod logs) for reading;
# KVRS_CMP_KVRS_BIN=DIR runs the virt-launcher and virt-launcher-monitor in DIR as kvrs's (e.g.
# an older build, for a before/after in one run); KVRS_CMP_DOMAIN_XML=FILE gives the floor its
# XML (by default the first kvrs run's "Domain XML generated" log line); KVRS_CMP_SYNC_DELAY=3s
# sends each SyncVirtualMachine that long after launcher-sock answers (a handler that syncs
# later): a launcher that probed QEMU meanwhile then has define + start left as its floor.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
case "$rounds" in '' | *[!0-9]* | 0) echo "usage: $0 [ROUNDS>0]" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "compare-launchers.sh: needs root (mount/PID namespaces, UID 107)" >&2; exit 1; }

harness_dir=$(bash scripts/kvlauncher-harness.sh | tail -n 1)
driver="$harness_dir/kvrs-kvlauncher"
kvroot="$harness_dir/kubevirt-root"

cargo build -q --profile launcher -p virt-launcher -p virt-launcher-monitor
cargo build -q --profile launcher -p virt-launcher --example libvirt-floor
cargo build -q -p kvrs --bin kvrs -p kvrs-test-guest --bin kvrs-guest-images
target=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
kvrs_bin=${KVRS_CMP_KVRS_BIN:-$target/launcher}
sync_delay=${KVRS_CMP_SYNC_DELAY:-0s}

work=$(mktemp -d /tmp/kvrs-compare-launchers.XXXXXX)
if [ "${KVRS_CMP_KEEP:-}" != 1 ]; then trap 'rm -rf "$work"' EXIT; fi
chmod 755 "$work"
# UID 107 runs kvrs's binaries: copies outside a possibly private checkout or target dir.
mkdir -p "$work/kvrs-bin"
install -m 0755 "$kvrs_bin/virt-launcher" "$kvrs_bin/virt-launcher-monitor" \
  "$target/launcher/examples/libvirt-floor" "$work/kvrs-bin/"
"$target/debug/kvrs-guest-images" "$work/guest" >/dev/null
"$target/debug/kvrs" defaults tests/kvlauncher/vmi.json >"$work/vmi.json"
xml="$work/domain.xml"
if [ -n "${KVRS_CMP_DOMAIN_XML:-}" ]; then install -m 0644 "$KVRS_CMP_DOMAIN_XML" "$xml"; fi

echo "binaries (stripped):"
ls -l "$kvroot/usr/bin/virt-launcher" "$kvroot/usr/bin/virt-launcher-monitor" \
  "$work/kvrs-bin/virt-launcher" "$work/kvrs-bin/virt-launcher-monitor" | awk '{printf "  %6.1f MB %s\n", $5 / 1e6, $9}'

# The XML kvrs's launcher defined, from the log of a kvrs run (KubeVirt's launcher logs the same
# line): what the floor defines.
take_xml() { # POD_LOG
  [ -s "$xml" ] && return 0
  python3 - "$1" "$xml" <<'EOF'
import base64, json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        msg = json.loads(line).get("msg", "")
    except ValueError:
        continue
    if msg.startswith("Domain XML generated. Base64 dump "):
        with open(sys.argv[2], "wb") as f:
            f.write(base64.b64decode(msg.split()[-1]))
        break
EOF
  if [ -s "$xml" ]; then chmod 0644 "$xml"; else
    echo "  no 'Domain XML generated' line in $1: set KVRS_CMP_DOMAIN_XML for the floor" >&2
  fi
}

run_one() { # KIND ROUND
  local kind=$1 round=$2 out args pod_log
  out="$work/run-$round-$kind.jsonl"
  if [ "$kind" = libvirt ]; then
    [ -s "$xml" ] || { echo "  round $round libvirt: skipped (no domain XML yet)" >&2; return 0; }
    args=(floor --pod-script scripts/launcher-pod-harness.sh --monitor "$work/kvrs-bin/virt-launcher-monitor"
      --floor "$work/kvrs-bin/libvirt-floor"
      --guest "$work/guest" --domain-xml "$xml" --work "$work")
  else
    args=(measure --kind "$kind" --pod-script scripts/launcher-pod-harness.sh
      --guest "$work/guest" --vmi "$work/vmi.json" --work "$work" --sync-delay "$sync_delay")
    if [ "$kind" = kubevirt ]; then
      args+=(--monitor /usr/bin/virt-launcher-monitor --kubevirt-root "$kvroot")
    else
      args+=(--monitor "$work/kvrs-bin/virt-launcher-monitor")
    fi
  fi
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
  if [ "$kind" = kvrs ]; then
    pod_log=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if "log" in j: print(j["log"]); break' "$out" || true)
    [ -n "$pod_log" ] && take_xml "$pod_log"
  fi
  return 0
}

echo "running $rounds rounds (each: all three, order alternating):"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order=(kubevirt kvrs libvirt); else order=(libvirt kvrs kubevirt); fi
  for k in "${order[@]}"; do run_one "$k" "$r"; done
done

python3 - "$work" <<'EOF'
import datetime, glob, json, os, re, statistics, sys

work = sys.argv[1]
runs = {"kubevirt": [], "kvrs": [], "libvirt": []}
for path in sorted(glob.glob(os.path.join(work, "run-*.jsonl"))):
    pod_log = None
    for line in open(path):
        j = json.loads(line)
        if "log" in j:
            pod_log = j["log"]
        if "figures" in j:
            f = j["figures"]
            f["pod_log"] = pod_log
            f["round"] = int(os.path.basename(path).split("-")[1])
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
for kind in ("kubevirt", "kvrs"):
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

# Each launcher's own log, read for its steps (seconds after SyncVirtualMachine was sent).
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

def log_lines(r):
    for line in open(r["pod_log"], errors="replace"):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict):
            yield j, ts(j), str(j.get("msg", ""))

KUBEVIRT_STEPS = [
    ("first domain XML", lambda m: m.startswith("Domain XML generated")),
    ("Domain defined.", lambda m: m == "Domain defined."),
    ("Domain started.", lambda m: m == "Domain started."),
    ("Synced vmi", lambda m: m == "Synced vmi"),
]
for r in runs["kubevirt"]:
    seen = {}
    for j, t, m in log_lines(r):
        if t is None or t < r["sync_start_unix"] - 0.5:
            continue
        for name, match in KUBEVIRT_STEPS:
            if name not in seen and match(m):
                seen[name] = t - r["sync_start_unix"]
    r["steps"] = seen

# kvrs's launcher logs its steps ("sync timings": ms, key=value) and when libvirt answered its
# QEMU probe (which it starts as soon as it is connected).
for r in runs["kvrs"]:
    r["timings"], r["probe"] = {}, None
    for j, t, m in log_lines(r):
        if mt := re.search(r"sync timings: ([^)]*)", m):
            r["timings"] = {k: float(v) for k, v in (kv.split("=", 1) for kv in mt.group(1).split())}
            r["started_at"] = t - r["sync_start_unix"] if t is not None else None
        if (mp := re.search(r"libvirt probed QEMU in ([0-9.]+)(m?s)", m)) and t is not None:
            took = float(mp.group(1)) / (1000 if mp.group(2) == "ms" else 1)
            r["probe"] = (t - took - r["sync_start_unix"], t - r["sync_start_unix"])

print("\nSync -> Running, step by step (seconds after SyncVirtualMachine was sent):")
for r in sorted(runs["kubevirt"], key=lambda r: r["round"]):
    steps = "  ".join(f"{name} {r['steps'][name]:.2f}" for name, _ in KUBEVIRT_STEPS if name in r["steps"])
    print(f"  round {r['round']} KubeVirt: {steps}  Running {r['sync_to_running_s']:.2f}  event {r['notify_running_s']:.2f}")
for r in sorted(runs["kvrs"], key=lambda r: r["round"]):
    t = r["timings"]
    probe = f"probe {r['probe'][0]:+.2f}..{r['probe'][1]:.2f}" if r["probe"] else "probe ?"
    if "define_sent_ms" in t:
        ds = t["define_sent_ms"] / 1000
        steps = (f"{probe}  define sent {ds:.2f}  defined {ds + t['define_ms'] / 1000:.2f}"
                 f"  started {t['total_ms'] / 1000:.2f}")
    else:
        steps = f"{probe}  " + " ".join(f"{k}={v}" for k, v in t.items())
    print(f"  round {r['round']} kvrs:     {steps}  Running {r['sync_to_running_s']:.2f}  event {r['notify_running_s']:.2f}")

# libvirt's own time for the same domain, and each launcher's time above it.
if not runs["libvirt"]:
    print("\nno libvirt floor figures (see the failures above)")
    sys.exit(0)
fl = runs["libvirt"]
for r in fl:
    r.setdefault("probe_define_s", r["probe_s"] + r["define_s"])
    r["floor_late_s"] = r["define_s"] + r["start_s"]
late = any(r.get("sync_delay_s", 0) > 0 for r in runs["kvrs"])
floor_key = "floor_late_s" if late else "floor_s"
print(f"\nlibvirt's floor, median (min-max) of {len(fl)} runs (fresh libvirtd, same pod set-up, kvrs's XML):")
for label, key in [("connect (daemon start -> connected)", "connect_s"),
                   ("first define (libvirt probes QEMU inside it)", "probe_define_s"),
                   ("  of it the QEMU capability probe", "probe_s"),
                   ("  of it the define (defined again, once probed)", "define_s"),
                   ("start (create -> reply)", "start_s"),
                   ("start (create -> Started event)", "started_event_s"),
                   ("floor = probe + define + start", "floor_s"),
                   ("floor once probed (a late Sync) = define + start", "floor_late_s")]:
    lo, hi = rng("libvirt", key)
    print(f"  {label:50} {med('libvirt', key) * 1000:7.0f} ms ({lo * 1000:.0f}-{hi * 1000:.0f})")

floor = med("libvirt", floor_key)
by_round = {r["round"]: r for r in fl}
def paired(kind, key):
    d = [r[key] - by_round[r["round"]][floor_key] for r in runs[kind] if r["round"] in by_round]
    return statistics.median(d) if d else float("nan")
if late:
    print(f"\nthe Sync came {runs['kvrs'][0]['sync_delay_s']:.1f} s after launcher-sock answered: the floor is define + start")
print(f"\noverhead above libvirt's floor: median - floor median ({floor * 1000:.0f} ms), and the median of")
print("each round's difference (same minute, same load; the machine's noise is still in both):")
print(f"{'':44} {'KubeVirt v1.9.0':>22} {'kvrs':>22}")
for label, key in [("SyncVirtualMachine -> Running (GetDomain)", "sync_to_running_s"),
                   ("SyncVirtualMachine -> Running event", "notify_running_s")]:
    cells = [f"{(med(k, key) - floor) * 1000:+6.0f} / {paired(k, key) * 1000:+6.0f} ms" for k in ("kubevirt", "kvrs")]
    print(f"{label:44} {cells[0]:>22} {cells[1]:>22}")

# kvrs step by step next to libvirt's own steps (medians, ms). Its work before the define runs
# while libvirt probes QEMU, and the define waits for that probe inside libvirt: the launcher
# holds the domain up only where its own steps outlast the probe, and between libvirt's answer
# to create and the handler seeing Running.
ks = [r for r in runs["kvrs"] if "define_sent_ms" in r["timings"]]
if ks:
    km = lambda f: statistics.median(f(r) for r in ks)
    fm = lambda k: med("libvirt", k) * 1000
    def held_up(r):
        # What of the launcher's steps before the define outlasted libvirt's probe (whose
        # answer came at p[1] s after the Sync was sent, maybe before it).
        p, sent = r["probe"], r["timings"]["define_sent_ms"]
        return max(0.0, sent - max(0.0, p[1] * 1000)) if p else sent
    probe_head = km(lambda r: -r["probe"][0] * 1000 if r["probe"] else float("nan"))
    print("\nkvrs step by step against libvirt's own (medians, ms; kvrs's steps from its log):")
    print(f"  {'step':58} {'kvrs':>7} {'libvirt':>7} {'above':>7}")
    # The launcher logs "Domain started" as create returns: its timestamp splits the driver's
    # Sync -> Running into the Sync's way in, the launcher's steps and the way back out.
    ks_at = [r for r in ks if r.get("started_at") is not None]
    kma = lambda f: statistics.median(f(r) for r in ks_at) if ks_at else float("nan")
    table = [
        ("QEMU probe started before the Sync arrived (head start)", probe_head, None),
        ("Sync sent -> arrived in the launcher (gRPC)", kma(lambda r: (r["started_at"] * 1000 - r["timings"]["total_ms"])), 0.0),
        ("Sync arrived -> define sent (convert, disks)", km(lambda r: r["timings"]["define_sent_ms"]), None),
        ("  of it not hidden by libvirt's probe", km(held_up), 0.0),
        ("define sent -> defined (waits for the probe in libvirt)", km(lambda r: r["timings"]["define_ms"]), fm("define_s") if late else fm("probe_define_s")),
        ("create -> reply", km(lambda r: r["timings"]["start_ms"]), fm("start_s")),
        ("create replied -> Running event at the notify server", kma(lambda r: (r["notify_running_s"] - r["started_at"]) * 1000), fm("started_event_s") - fm("start_s")),
        ("create replied -> Running seen by GetDomain (driver polls)", kma(lambda r: (r["sync_to_running_s"] - r["started_at"]) * 1000), 0.0),
        ("Sync -> Running (GetDomain)", km(lambda r: r["sync_to_running_s"] * 1000), fm(floor_key)),
        ("kvrs's own share: Sync in + steps not hidden + event out", kma(lambda r: r["started_at"] * 1000 - r["timings"]["total_ms"] + held_up(r) + (r["notify_running_s"] - r["started_at"]) * 1000), 0.0),
    ]
    for label, k, f in table:
        fs = f"{f:7.0f}" if f is not None else f"{'':>7}"
        ab = f"{k - f:+7.0f}" if f is not None else f"{'':>7}"
        print(f"  {label:58} {k:7.0f} {fs} {ab}")
EOF
if [ "${KVRS_CMP_KEEP:-}" = 1 ]; then echo "pod logs kept in $work"; fi
