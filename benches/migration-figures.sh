#!/usr/bin/env bash
# kvrs live-migration figures: migration time and the guest's downtime for guests of 256 MiB and
# 1 GiB, idle and dirtying memory.
#
# Each case runs the end-to-end migration test (tests/e2e_migration.rs,
# a_running_guest_moves_to_the_target_with_its_memory) RUNS times: two launcher pods on this
# machine, each with its own libvirt and QEMU, the memory and disks streamed through
# virt-handler's migration proxy (mutual TLS over loopback). Per run the test prints one
# `migration figures:` line:
#   migrate_to_result_s  MigrateVirtualMachine call -> the source launcher's domain carries the
#                        migration result (EndTimestamp), polled every 20 ms;
#   libvirt_elapsed_s    libvirt's completed-job "Time elapsed" on the source;
#   downtime_ms          libvirt's completed-job "Total downtime" (QEMU's measurement of the
#                        guest's stop on the source to its run on the target), read with
#                        `virsh domjobinfo --completed` from the source pod's daemon;
#   iterations           the memory pre-copy passes;
#   memory_sent_mib      guest memory sent over all passes (libvirt's "Memory processed");
#   bandwidth_mib_s      libvirt's "Memory bandwidth" of the stream (TLS proxy over loopback).
# "dirty" guests run a loop rewriting DIRTY_MIB (default 64) MiB of non-zero data in their RAM
# without end (the guest's cloud-init KVRS-RUN mechanism). Migration options are the test's own:
# unlimited bandwidth, max downtime 300 ms, no auto-converge, no post-copy.
#
# Under QEMU TCG (no usable /dev/kvm for the pods' UID 107) the figures are those of emulated
# guests; with KVM they would be lower. Needs root, virsh and scripts/install-test-deps.sh.
#
# usage: benches/migration-figures.sh [RUNS]   (default 3; DIRTY_MIB=… to change the dirty set)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
dirty_mib=${DIRTY_MIB:-64}

cargo build -q -p kvrs-tests --test e2e_migration

out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
for memory in 256Mi 1Gi; do
  for dirty in 0 "$dirty_mib"; do
    for i in $(seq "$runs"); do
      log=$(KVRS_E2E_MIGRATION_FIGURES=1 KVRS_E2E_MIGRATION_MEMORY=$memory \
        KVRS_E2E_MIGRATION_DIRTY_MIB=$dirty \
        cargo test -q -p kvrs-tests --test e2e_migration -- --nocapture \
        a_running_guest_moves_to_the_target_with_its_memory 2>&1) || true
      if line=$(grep '^migration figures:' <<<"$log"); then
        echo "$line" | tee -a "$out"
      else
        failed=$((failed + 1))
        echo "run $i ($memory, dirty $dirty MiB) failed:" >&2
        tail -n 20 <<<"$log" >&2 || true
      fi
    done
  done
done
[ "$failed" = 0 ] || echo "$failed runs failed" >&2

python3 - "$out" <<'PY'
import statistics, sys
cases = {}
for line in open(sys.argv[1]):
    kv = dict(p.split("=", 1) for p in line.split(":", 1)[1].split())
    key = (kv.pop("memory"), int(kv.pop("dirty_mib")))
    cases.setdefault(key, []).append({k: float(v) for k, v in kv.items()})
if not cases:
    sys.exit("no figures collected (did the e2e test pass?)")
order = lambda k: (float(k[0][:-2]) * (1024 if k[0].endswith("Gi") else 1), k[1])
print("\nmedians (kvrs, QEMU TCG)")
print(f"{'guest':>6} {'workload':>15} {'runs':>4} {'Migrate->result s':>17} {'libvirt elapsed s':>17} {'downtime ms':>11} {'iterations':>10} {'sent MiB':>8} {'MiB/s':>6}")
for key in sorted(cases, key=order):
    rows = cases[key]
    med = lambda f: statistics.median(r[f] for r in rows)
    work = "idle" if key[1] == 0 else f"dirty {key[1]} MiB"
    print(f"{key[0]:>6} {work:>15} {len(rows):>4} {med('migrate_to_result_s'):17.3f} "
          f"{med('libvirt_elapsed_s'):17.3f} {med('downtime_ms'):11.0f} {med('iterations'):10.0f} "
          f"{med('memory_sent_mib'):8.1f} {med('bandwidth_mib_s'):6.1f}")
PY
