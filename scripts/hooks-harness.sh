#!/usr/bin/env bash
# Builds KubeVirt v1.9.0's own hook sidecar, as its example-hook-sidecar image holds it, for the
# launcher's wire-compatibility test (bins/virt-launcher/src/hooks/tests_kubevirt.rs), and prints
# the directory as the LAST line of stdout (progress goes to stderr):
#   DIR/sidecar-shim     cmd/sidecars: serves the hook gRPC services (Info, Callbacks v1alpha1-3)
#                        on /var/run/kubevirt-hooks/shim-XXXX.sock and runs `onDefineDomain` from
#                        $PATH for each OnDefineDomain call
#   DIR/bin/onDefineDomain
#                        cmd/sidecars/smbios: sets the base board manufacturer from the VMI's
#                        smbios.vm.kubevirt.io/baseBoardManufacturer annotation
#   DIR/network-passt-binding
#                        cmd/sidecars/network-passt-binding: the passt binding plugin's sidecar
#                        (its image's entrypoint); OnDefineDomain adds the vhost-user interface
#                        with the passt backend and shared memfd memory, on .../passt.sock
#   DIR/network-slirp-binding
#                        cmd/sidecars/network-slirp-binding: the slirp binding plugin's sidecar;
#                        OnDefineDomain adds the `user` interface (QEMU's libslirp) with the pod's
#                        DNS search domains, on .../slirp.sock
#   DIR/kubevirt-hook-manager
#                        tests/hooks/main.go: KubeVirt's own hook manager (pkg/hooks: Collect,
#                        OnDefineDomain, Shutdown) run against the sidecars under
#                        /var/run/kubevirt-hooks (ipc/tests/hooks_kubevirt_manager.rs)
# All but the last are built unchanged from the kubevirt.io/kubevirt module (tests/hooks/go.mod pins
# it); the last only calls its packages. The binding sidecars serve bins/kvrs/tests/run_bindings.rs.
#
# DIR is ${KVRS_CACHE:-$HOME/.cache/kvrs}/hooks-<hash>, <hash> covering tests/hooks, the stubs it
# uses, this script and the Go version; a build there is reused. Needs Go >= 1.26 and the Go module
# proxy (no cgo).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="$ROOT/tests/hooks"

# shellcheck source=lib/go-harness.sh
source "$ROOT/scripts/lib/go-harness.sh"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
gh_find_go

HASH=$(
  {
    (cd "$MOD_DIR" && gh_module_sums)
    (cd "$ROOT/tests/mixed/stubs" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    (cd "$ROOT/tests/kvlauncher/stubs" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    echo "go=$GO_VERSION cgo=0"
  } | sha256sum | cut -c1-16
)
dir="${KVRS_CACHE:-$HOME/.cache/kvrs}/hooks-$HASH"
if [ -f "$dir/done" ]; then
  echo "$dir"
  exit 0
fi
gh_lock "$dir"
if [ ! -f "$dir/done" ]; then
  rm -rf "$dir/bin" "$dir/sidecar-shim" "$dir/kubevirt-hook-manager" "$dir/network-passt-binding" \
    "$dir/network-slirp-binding" "$dir/out"
  mkdir -p "$dir/bin" "$dir/out"
  log="$dir/build.log"
  echo "$GH_SCRIPT: building KubeVirt v1.9.0's sidecar-shim, smbios hook, passt and slirp binding sidecars and hook manager with $GO_VERSION (GOPROXY=$("$GO_CMD" env GOPROXY))" >&2
  start=$(date +%s)
  if ! (cd "$MOD_DIR" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    "$GO_CMD" build -trimpath -ldflags="-s -w" -o "$dir/out/" \
    . kubevirt.io/kubevirt/cmd/sidecars kubevirt.io/kubevirt/cmd/sidecars/smbios \
    kubevirt.io/kubevirt/cmd/sidecars/network-passt-binding \
    kubevirt.io/kubevirt/cmd/sidecars/network-slirp-binding) >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "go build of KubeVirt's hook sidecar failed (GOPROXY=$("$GO_CMD" env GOPROXY)); full log: $log"
  fi
  # The names KubeVirt's images give them (cmd/sidecars/BUILD.bazel, cmd/sidecars/smbios/BUILD.bazel).
  mv "$dir/out/sidecars" "$dir/sidecar-shim"
  mv "$dir/out/smbios" "$dir/bin/onDefineDomain"
  mv "$dir/out/hooks" "$dir/kubevirt-hook-manager"
  # Their images' entrypoints (cmd/sidecars/network-{passt,slirp}-binding/BUILD.bazel).
  mv "$dir/out/network-passt-binding" "$dir/network-passt-binding"
  mv "$dir/out/network-slirp-binding" "$dir/network-slirp-binding"
  rmdir "$dir/out"
  # Builds of older harness sources are not needed any more.
  for old in "${dir%/*}"/hooks-*; do
    [ "$old" = "$dir" ] || rm -rf "$old"
  done
  touch "$dir/done"
  echo "$GH_SCRIPT: built in $(($(date +%s) - start)) s: $dir" >&2
fi
echo "$dir"
