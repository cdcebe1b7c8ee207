#!/usr/bin/env bash
# Builds KubeVirt v1.9.0's own Go commands for the drop-in run (benches/dropin/run.sh) from the
# snapshot named by KVRS_KUBEVIRT_SRC (a KubeVirt v1.9.0 tree with vendor/, e.g. exported from the
# search tool's `fetch github:kubevirt/kubevirt`; never copied into this repository), with
# `go build -mod=vendor` under `nice -n 10`, into OUT (first argument). Called by
# build-kubevirt-images.sh; a script of its own so the slow Go builds can be run alone.
set -euo pipefail
src=${KVRS_KUBEVIRT_SRC:?set KVRS_KUBEVIRT_SRC to a KubeVirt v1.9.0 tree with vendor/}
out=${1:?usage: build-binaries.sh OUT_DIR}
[ -f "$src/vendor/modules.txt" ] || { echo "build-binaries.sh: $src has no vendor/modules.txt" >&2; exit 2; }
mkdir -p "$out"
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src"
# KubeVirt's launcher links libnbd >= 1.18 (its backup export's NBD client); Debian 12 has 1.14
# and no backport. As for the mixed-fleet harness (tests/kvlauncher/go.mod), the vendored
# bindings are swapped, through `go build -overlay` (the snapshot stays untouched), for the
# repository's compile-only stand-in tests/kvlauncher/stubs/libnbd: every NBD call fails, which
# only KubeVirt's backup/CBT export ever makes.
overlay=$out/libnbd-overlay.json
python3 - "$src/vendor/libguestfs.org/libnbd" "$repo/tests/kvlauncher/stubs/libnbd/libnbd.go" >"$overlay" <<'PY'
import json, os, sys
vendored, stub = sys.argv[1], sys.argv[2]
replace = {os.path.join(vendored, f): "" for f in os.listdir(vendored)
           if f.endswith((".go", ".c", ".h"))}
replace[os.path.join(vendored, "kvrs_stand_in.go")] = stub
print(json.dumps({"Replace": replace}, indent=1, sort_keys=True))
PY
export GOFLAGS="-mod=vendor -buildvcs=false" CGO_ENABLED=0
# What the operator deploys and the launcher/handler images carry (KubeVirt's cmd/*/BUILD.bazel).
cmds=(virt-operator virt-api virt-controller virt-handler virt-chroot virt-launcher
      virt-launcher-monitor virt-freezer virt-probe virt-tail virt-exportproxy
      virt-launcher/libvirt-hook-client tools/resource-generator tools/manifest-templator)
for c in "${cmds[@]}"; do
  name=$(basename "$c")
  [ -x "$out/$name" ] && continue
  case $c in tools/*) pkg=./$c ;; *) pkg=./cmd/$c ;; esac
  t0=$(date +%s)
  # virt-launcher links libvirt and virt-handler's node labeller reads KVM's capabilities through
  # cgo, as KubeVirt builds them; the others are pure Go.
  cgo=0; case $name in virt-launcher | virt-handler) cgo=1 ;; esac
  CGO_ENABLED=$cgo nice -n 10 go build -overlay "$overlay" -o "$out/$name.tmp" "$pkg"
  mv "$out/$name.tmp" "$out/$name"
  echo "build-binaries.sh: $name in $(( $(date +%s) - t0 ))s" >&2
done
# container-disk: KubeVirt's small static C program (cmd/container-disk-v2alpha/main.c).
if [ ! -x "$out/container-disk" ]; then
  nice -n 10 gcc -static -O2 -o "$out/container-disk" cmd/container-disk-v2alpha/main.c
fi
