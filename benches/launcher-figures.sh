#!/usr/bin/env bash
# kvrs virt-launcher figures next to KubeVirt v1.9.0's (../shared/notes/kubevirt-launcher-observed.md):
# VmRSS of virt-launcher-monitor + virt-launcher while a domain runs, launcher start -> launcher-sock
# ready, SyncVirtualMachine -> domain Running (and libvirt's own define + start inside it),
# Kill -> monitor exit (Kill + Delete, as the handler does).
#
# It builds the two binaries with the size-optimised `launcher` profile (root Cargo.toml) and
# runs the end-to-end test (tests/e2e_launcher.rs)
# RUNS times against them (real libvirt 11 + QEMU TCG, UID 107, a 128 MiB busybox guest), then
# prints medians. Needs root and scripts/install-test-deps.sh.
#
# usage: benches/launcher-figures.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}

cargo build -q --profile launcher -p virt-launcher -p virt-launcher-monitor
bin_dir=$(cargo metadata -q --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/launcher
ls -la "$bin_dir/virt-launcher" "$bin_dir/virt-launcher-monitor" | awk '{print "binary", $5, $9}'

out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
for i in $(seq "$runs"); do
  log=$(KVRS_E2E_FIGURES=1 KVRS_E2E_BIN_DIR="$bin_dir" \
    cargo test -q -p kvrs-tests --test e2e_launcher -- --nocapture launcher_boots_a_guest 2>&1) || true
  if line=$(grep '^launcher figures:' <<<"$log"); then
    echo "$line" | tee -a "$out"
  else
    failed=$((failed + 1))
    echo "run $i failed:" >&2
    tail -n 12 <<<"$log" >&2 || true
  fi
done
[ "$failed" = 0 ] || echo "$failed of $runs runs failed" >&2

python3 - "$out" <<'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    kv = dict(p.split("=") for p in line.split(":", 1)[1].split())
    rows.append({k: float(v) for k, v in kv.items()})
if not rows:
    sys.exit("no figures collected (did the e2e test pass?)")
med = lambda k: statistics.median(r[k] for r in rows)
mib = lambda kib: kib / 1024
print(f"\nmedian of {len(rows)} runs (kvrs)                    | KubeVirt v1.9.0 | kvrs goal")
print(f"VmRSS monitor + launcher, VM running   {mib(med('rss_monitor_kib')):5.1f} + {mib(med('rss_launcher_kib')):5.1f} MiB | 9.5 + 64.4 MiB  | < 10 MiB together")
print(f"launcher start -> launcher-sock ready  {med('ready_s'):8.3f} s      | 0.77 s          | < 0.2 s")
print(f"SyncVirtualMachine -> Running          {med('sync_to_running_s'):8.3f} s      | 0.94 s          | libvirt + a few ms")
print(f"  of which libvirt define + start      {med('libvirt_define_start_s'):8.3f} s")
print(f"  of which disks/ISO preparation       {med('prepare_s'):8.3f} s")
print(f"Kill (+Delete) -> monitor exit         {med('kill_to_monitor_exit_s'):8.3f} s      | ~8.5 s          | < 1 s")
EOF
