#!/usr/bin/env bash
# The README's main job: boot a KubeVirt VirtualMachine on this machine with `kvrs run`.
#   1. installs libvirt and QEMU, and builds runc 1.5.3 from Go modules (the launcher pod runs as a
#      container; Debian's runc lacks the November 2025 fixes) as the test script does
#      (scripts/install-test-deps.sh, idempotent);
#   2. builds kvrs and its launcher (release);
#   3. builds the fixture's guest images (a Debian kernel + busybox initramfs, and an empty qcow2
#      container disk) into ~/.cache/kvrs/images — no registry is contacted;
#   4. runs `kvrs run fixtures/run/guest-vm.yaml`: KubeVirt's phases with their times, the guest's
#      address and its console, then — once the guest got its DHCP lease and pinged its gateway —
#      the VM's graceful stop and the cleanup.
# Extra arguments go to `kvrs run` (e.g. --console to keep the console attached, then Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

# What needs root (the packages, the VM's network and cgroups) goes through sudo unless this is root.
as_root=()
[ "$(id -u)" = 0 ] || as_root=(sudo)

"${as_root[@]}" bash scripts/install-test-deps.sh

# Cargo's own progress (its bar on a terminal, a line per crate otherwise) shows on stderr.
echo "run-demo.sh: building kvrs, virt-launcher, virt-launcher-monitor and the test guest (release; about 20 minutes on 2 cores the first time)" >&2
start=$(date +%s)
cargo build --release -p kvrs -p virt-launcher -p virt-launcher-monitor -p kvrs-test-guest
echo "run-demo.sh: built in $(($(date +%s) - start)) s" >&2

images="${KVRS_IMAGES:-$HOME/.cache/kvrs/images}"
echo "run-demo.sh: writing the guest images into $images (a Debian kernel + busybox initramfs from downloaded Debian packages, built once into target/release; an empty qcow2 container disk)" >&2
start=$(date +%s)
target/release/kvrs-guest-images "$images" >/dev/null
echo "run-demo.sh: guest images ready in $(($(date +%s) - start)) s" >&2

run=(target/release/kvrs run fixtures/run/guest-vm.yaml --images "$images")
if [ $# -eq 0 ]; then
  run+=(--stop-after-console "KVRS-E2E: gateway answers ping")
fi
exec "${as_root[@]}" "${run[@]}" "$@"
