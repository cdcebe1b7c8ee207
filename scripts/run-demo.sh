#!/usr/bin/env bash
# The README's main job: boot a KubeVirt VirtualMachine on this machine with `kvrs run`.
#   1. installs libvirt and QEMU as the test script does (scripts/install-test-deps.sh, idempotent);
#   2. builds kvrs and its launcher (release);
#   3. builds the fixture's guest images (a Debian kernel + busybox initramfs, and an empty qcow2
#      container disk) into ~/.cache/kvrs/images — no registry is contacted;
#   4. runs `kvrs run fixtures/run/guest-vm.yaml`: KubeVirt's phases with their times, the guest's
#      address and its console, then — once the guest got its DHCP lease and pinged its gateway —
#      the VM's graceful stop and the cleanup.
# Extra arguments go to `kvrs run` (e.g. --console to keep the console attached, then Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
  bash scripts/install-test-deps.sh
else
  sudo bash scripts/install-test-deps.sh
fi

cargo build --release -q -p kvrs -p virt-launcher -p virt-launcher-monitor -p kvrs-test-guest
images="${KVRS_IMAGES:-$HOME/.cache/kvrs/images}"
target/release/kvrs-guest-images "$images" >/dev/null

run=(target/release/kvrs run fixtures/run/guest-vm.yaml --images "$images")
if [ $# -eq 0 ]; then
  run+=(--stop-after-console "KVRS-E2E: gateway answers ping")
fi
if [ "$(id -u)" = 0 ]; then
  exec "${run[@]}" "$@"
else
  exec sudo "${run[@]}" "$@"
fi
