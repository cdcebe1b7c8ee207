#!/usr/bin/env bash
# Builds CDI (kubevirt.io/containerized-data-importer v1.64.0) from the Go module proxy for the
# real-node DataVolume test (bins/kvrs/tests/real_datavolume.rs), through the Go module tests/cdi:
#
#   bin/cdi-controller      CDI's controller (cmd/cdi-controller), run by the test as a host process
#   bin/cdi-importer        CDI's importer (cmd/cdi-importer), the importer pod's program
#   bin/cdi-manifests       tests/cdi/main.go: CDI's CRDs and the controller's RBAC, printed from
#                           CDI's operator resource generators (`cdi-manifests NAMESPACE`)
#   bin/cdi-importer.tar    the importer image kvrs.local/cdi-importer:v1.64.0 (OCI archive for the
#                           node's containerd): cdi-importer as its entrypoint, plus Debian's
#                           qemu-img and nbdkit with its curl plugin (what CDI's importer image
#                           ships and its http source runs) with the shared libraries ldd names
#
# Why v1.64.0: the proxy refuses v1.63.0 (403). libguestfs.org/libnbd v1.11.5 is refused as well;
# tests/cdi/stubs/libnbd stands in for it (only the VMware VDDK source uses it).
#
# Output: ${KVRS_CACHE:-$HOME/.cache/kvrs}/cdi-<hash>/bin, the hash covering tests/cdi (Go files,
# go.mod, go.sum), oci_image.py, this script, the Go version and the host's qemu-utils / nbdkit
# versions; printed as the LAST line of stdout, progress on stderr. Idempotent (a current build is
# reused at once) and safe to run concurrently (a lock serializes builds). The Go builds run
# under `nice -n 10` (about 5 minutes on 2 cores). Environment: KVRS_CACHE, GO.
set -euo pipefail

CDI_VERSION=v1.64.0
IMPORTER_REF=kvrs.local/cdi-importer:$CDI_VERSION

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/go-harness.sh
. "$ROOT/scripts/lib/go-harness.sh"
MOD_DIR="$ROOT/tests/cdi"
OCI_WRITER="$ROOT/scripts/lib/oci_image.py"
[ -f "$MOD_DIR/go.mod" ] && [ -f "$MOD_DIR/go.sum" ] || die "missing $MOD_DIR/go.mod or go.sum"
gh_find_go
command -v python3 >/dev/null || die "python3 is needed for the importer image (scripts/lib/oci_image.py)"

# The importer image's programs come from Debian (CDI's own image is built from Fedora packages).
need_pkgs=()
command -v qemu-img >/dev/null || need_pkgs+=(qemu-utils)
if ! command -v nbdkit >/dev/null; then need_pkgs+=(nbdkit); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "$GH_SCRIPT: installing ${need_pkgs[*]} from Debian (the importer image's programs)" >&2
  apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2 ||
    die "apt-get install ${need_pkgs[*]} failed (run apt-get update first?)"
fi
NBDKIT_PLUGINS=$(nbdkit --dump-config | sed -n 's/^plugindir=//p')
NBDKIT_FILTERS=$(nbdkit --dump-config | sed -n 's/^filterdir=//p')
[ -f "$NBDKIT_PLUGINS/nbdkit-curl-plugin.so" ] ||
  die "nbdkit has no curl plugin in '$NBDKIT_PLUGINS' (Debian 12 package nbdkit ships it); CDI's http import needs it"

pkg_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo unknown; }

TARGETS=(
  "cdi-controller|kubevirt.io/containerized-data-importer/cmd/cdi-controller|0||-s -w|"
  "cdi-importer|kubevirt.io/containerized-data-importer/cmd/cdi-importer|0||-s -w|"
  "cdi-manifests|.|0||-s -w|"
)
OUTPUTS=(cdi-controller cdi-importer cdi-manifests cdi-importer.tar)
WANT=$(
  cd "$MOD_DIR"
  {
    gh_module_sums
    sha256sum "$OCI_WRITER" "$ROOT/scripts/cdi.sh"
    echo "go=$GO_VERSION qemu-utils=$(pkg_version qemu-utils) nbdkit=$(pkg_version nbdkit)"
    printf '%s\n' "${TARGETS[@]}"
  } | sha256sum | cut -d' ' -f1
)
cache_dir="${KVRS_CACHE:-$HOME/.cache/kvrs}/cdi-${WANT:0:16}"

# install_elf ROOT SRC DEST: SRC at ROOT/DEST and every shared library ldd names at its own path.
install_elf() {
  local root=$1 src=$2 dest=$3 lib
  install -D -m 0755 "$src" "$root$dest"
  # A static binary (cdi-importer, built without cgo) has nothing more to bring.
  ldd "$src" >/dev/null 2>&1 || return 0
  ldd "$src" | grep -q "not found" && die "$src: a shared library is missing: $(ldd "$src" | grep "not found")"
  for lib in $(ldd "$src" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'); do
    [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

# importer_image DIR LOG: the importer image archive, into DIR.
importer_image() {
  local dir=$1 log=$2 rootfs="$1/importer-rootfs" start so
  echo "$GH_SCRIPT: packing $IMPORTER_REF (cdi-importer, Debian's qemu-img and nbdkit)" >&2
  start=$(date +%s)
  rm -rf "$rootfs"
  # No /data or /scratch: the importer takes a missing /scratch for "no scratch space yet" and
  # asks the controller for a scratch claim (http sources of kubevirt content need one).
  mkdir -p "$rootfs/tmp" "$rootfs/etc"
  chmod 1777 "$rootfs/tmp"
  install_elf "$rootfs" "$dir/cdi-importer" /usr/bin/cdi-importer
  install_elf "$rootfs" "$(command -v qemu-img)" /usr/bin/qemu-img
  install_elf "$rootfs" "$(command -v nbdkit)" /usr/sbin/nbdkit
  install_elf "$rootfs" "$NBDKIT_PLUGINS/nbdkit-curl-plugin.so" "$NBDKIT_PLUGINS/nbdkit-curl-plugin.so"
  # The filters CDI's importer stacks on the curl plugin (pkg/image/nbdkit.go).
  for so in readahead retry cacheextents xz gzip tar; do
    install_elf "$rootfs" "$NBDKIT_FILTERS/nbdkit-$so-filter.so" "$NBDKIT_FILTERS/nbdkit-$so-filter.so"
  done
  # CDI's importer runs as UID 107; name it, as its image does, for the programs that look it up.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nqemu:x:107:107:qemu:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nqemu:x:107:\n' >"$rootfs/etc/group"
  [ -d /etc/ssl/certs ] && mkdir -p "$rootfs/etc/ssl" && cp -rL /etc/ssl/certs "$rootfs/etc/ssl/"
  if ! python3 "$OCI_WRITER" --rootfs "$rootfs" --ref "$IMPORTER_REF" --out "$dir/cdi-importer.tar" \
    --entrypoint '["/usr/bin/cdi-importer","-alsologtostderr"]' --user 107:107 \
    --env PATH=/usr/bin:/usr/sbin:/bin >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "oci_image.py could not write the importer image; full log: $log"
  fi
  rm -rf "$rootfs"
  echo "$GH_SCRIPT: $IMPORTER_REF packed in $(($(date +%s) - start)) s" >&2
}

# The Go builds share the machine with everything else: this shell and its children run niced.
renice -n 10 -p $$ >/dev/null
bin_dir=$(gh_components "$cache_dir" "$WANT" \
  "CDI $CDI_VERSION cdi-controller, cdi-importer and cdi-manifests with $GO_VERSION (about 5 minutes on 2 cores the first time)" \
  importer_image)
# Builds of older inputs (about 200 MB each) are not needed any more.
for old in "${cache_dir%/*}"/cdi-*; do
  if [ "$old" != "$cache_dir" ] && { [ -f "$old/stamp" ] || [ -f "$old/lock" ]; }; then rm -rf "$old"; fi
done
echo "$bin_dir"
