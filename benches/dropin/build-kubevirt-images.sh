#!/usr/bin/env bash
# Builds KubeVirt v1.9.0's own images for the drop-in run (benches/dropin/run.sh), outside CI:
#
#   quay.io/kubevirt/virt-operator:v1.9.0     virt-operator (static, USER 1001, as KubeVirt's)
#   quay.io/kubevirt/virt-api:v1.9.0          virt-api
#   quay.io/kubevirt/virt-controller:v1.9.0   virt-controller
#   quay.io/kubevirt/virt-exportproxy:v1.9.0  virt-exportproxy (the operator renders it; only
#                                             deployed with the VMExport gate)
#   quay.io/kubevirt/virt-handler:v1.9.0      virt-handler + virt-chroot on a Debian base
#   quay.io/kubevirt/virt-launcher:v1.9.0     virt-launcher, -monitor, virt-freezer, virt-probe,
#                                             virt-tail, container-disk, node-labeller.sh,
#                                             KubeVirt's qemu.conf / virtqemud.conf, USER 107
#
# The names are the ones KubeVirt's operator derives from its own image (registry
# `quay.io/kubevirt`, tag `v1.9.0`): imported into the node's containerd, they are found there and
# nothing is pulled (the CR's imagePullPolicy is IfNotPresent). They are built from source, not
# pulled from quay.io.
#
# The binaries come from the KubeVirt v1.9.0 snapshot KVRS_KUBEVIRT_SRC (with vendor/, e.g.
# exported from the search tool's `fetch github:kubevirt/kubevirt`; nothing of it is copied into
# this repository) with `go build -mod=vendor` under `nice -n 10` (build-binaries.sh).
#
# Where this differs from KubeVirt's Bazel images, and why:
# - The handler and launcher base is kvrs's launcher Debian base (scripts/images.sh: bookworm +
#   libvirt 11.3 / QEMU 10.0 from bookworm-backports, the packages kvrs's launcher uses) instead
#   of KubeVirt's CentOS Stream RPM set; KubeVirt's own files (passwd entries, nsswitch.conf,
#   libvirt configuration, hook) are added on top.
# - libnbd: KubeVirt's launcher links libnbd >= 1.18 for its backup export's NBD client; Debian 12
#   has 1.14, so build-binaries.sh compiles it against the repository's stand-in (every NBD call
#   fails; nothing but backup/CBT export makes one).
# - Debian has no modular `virtqemud`, only the monolithic `libvirtd` with the same QEMU driver:
#   /usr/sbin/virtqemud is a two-line stand-in that links `virtqemud-sock` to libvirtd's socket
#   (as scripts/kvlauncher-harness.sh does for the mixed-fleet tests).
# - Built without Bazel's `selinux` build tag: on a host without SELinux both variants of
#   go-selinux report it disabled.
#
# Output: ${KVRS_CACHE:-~/.cache/kvrs}/dropin-<hash>/ with bin/ (the binaries) and images/*.oci.tar;
# <hash> covers the snapshot's sources, the Debian base's stamp, the Go version and these scripts.
# Prints the images directory as its last line (progress on stderr). A second run with the same
# inputs builds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${KVRS_CACHE:-$HOME/.cache/kvrs}
say() { echo "build-kubevirt-images.sh: $*" >&2; }
die() { say "$*"; exit 1; }

src=${KVRS_KUBEVIRT_SRC:-}
[ -n "$src" ] || die "set KVRS_KUBEVIRT_SRC to a KubeVirt v1.9.0 source tree with vendor/ (e.g. \
\`git --git-dir \$(fetch github:kubevirt/kubevirt) archive v1.9.0 | tar -x -C DIR\`)"
[ -f "$src/vendor/modules.txt" ] || die "$src has no vendor/modules.txt"
grep -q '^module kubevirt.io/kubevirt' "$src/go.mod" || die "$src/go.mod is not kubevirt.io/kubevirt"
command -v go >/dev/null || die "go is not on PATH"
command -v gcc >/dev/null || die "gcc is needed for KubeVirt's container-disk (a C program)"
pkg-config --exists libvirt 2>/dev/null || die "libvirt-dev is needed (virt-launcher links libvirt through cgo)"

registry=${KVRS_DROPIN_REGISTRY:-quay.io/kubevirt}
tag=${KVRS_DROPIN_TAG:-v1.9.0}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

# The Debian base of kvrs's launcher image (built by scripts/images.sh, cached by its recipe).
base=$cache/images/.work/launcher-base/rootfs
if [ ! -x "$base/usr/sbin/libvirtd" ]; then
  say "kvrs's launcher Debian base is missing: building it with scripts/images.sh launcher"
  bash "$repo/scripts/images.sh" launcher >/dev/null
fi
[ -x "$base/usr/sbin/libvirtd" ] || die "$base has no libvirtd"

hash=$(
  {
    # The snapshot's own sources; benches/kubevirt/build.sh drops its program into cmd/kvrs-*.
    (cd "$src" && find cmd pkg staging tools -path 'cmd/kvrs-*' -prune -o -name '*.go' \
      -printf '%p %s %T@\n' | LC_ALL=C sort)
    sha256sum "$src/vendor/modules.txt" "$here/build-kubevirt-images.sh" "$here/build-binaries.sh" \
      "$repo/scripts/lib/oci_image.py" "$cache/images/.work/launcher-base/stamp" | cut -d' ' -f1
    go version
    echo "$registry $tag $SOURCE_DATE_EPOCH"
  } | sha256sum | cut -c1-16
)
out=$cache/dropin-$hash
mkdir -p "$out/bin" "$out/images" "$out/rootfs"
if [ -f "$out/images/done" ]; then
  say "cached: $out/images"
  echo "$out/images"
  exit 0
fi

t0=$(date +%s)
say "building KubeVirt v1.9.0's commands from $src into $out/bin (nice -n 10; cold: tens of minutes)"
bash "$here/build-binaries.sh" "$out/bin"
say "binaries built in $(( $(date +%s) - t0 ))s"

writer=$repo/scripts/lib/oci_image.py
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# image NAME ROOTFS... -- EXTRA...: writes $out/images/<registry_name_tag>.oci.tar.
image() {
  local name=$1; shift
  local ref=$registry/$name:$tag roots=() t=$(date +%s)
  while [ "$1" != -- ]; do roots+=(--rootfs "$1"); shift; done
  shift
  local file=$out/images/$(tr '/:' '__' <<<"$ref").oci.tar
  python3 "$writer" "${roots[@]}" --ref "$ref" --out "$file.tmp" --env "$PATH_ENV" \
    --label "org.opencontainers.image.title=KubeVirt $name (built from $tag sources for kvrs's drop-in run)" \
    "$@" >&2
  mv "$file.tmp" "$file"
  say "$ref: $(du -m "$file" | cut -f1) MB in $(( $(date +%s) - t ))s"
}

# The distroless components: the static binary, root + nonroot 1001 as KubeVirt's
# distroless/base images have them.
for c in virt-operator virt-api virt-controller virt-exportproxy; do
  r=$out/rootfs/$c
  rm -rf "$r"
  mkdir -p "$r"/{usr/bin,etc,tmp}
  chmod 1777 "$r/tmp"
  install -m 0755 "$out/bin/$c" "$r/usr/bin/$c"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:1001:1001:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:1001:' >"$r/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
  # ServiceAccount tokens, TLS to the API server: the CA comes from the pod's mount.
  image "$c" "$r" -- --entrypoint "[\"/usr/bin/$c\"]" --user 1001:1001
done

# virt-handler: the Debian base + KubeVirt's handler, virt-chroot and nsswitch.conf. Root, as
# KubeVirt's (its DaemonSet runs it privileged).
r=$out/rootfs/virt-handler
rm -rf "$r"
mkdir -p "$r"/{usr/bin,etc}
install -m 0755 "$out/bin/virt-handler" "$r/usr/bin/"
install -m 0755 "$out/bin/virt-chroot" "$r/usr/bin/virt-chroot.kubevirt"
install -m 0644 "$src/cmd/virt-handler/nsswitch.conf" "$r/etc/nsswitch.conf"
# KubeVirt's handler runs `virt-chroot --mount /proc/1/ns/mnt ...` to act in the host's mount
# namespace (at start: `selinux getenforce`, which panics the handler when it fails). On these
# machines PID 1 is the sandbox's own process, which holds a capability root here lacks, so even
# root cannot open /proc/1/ns/mnt (EACCES). Only there, this stand-in runs KubeVirt's virt-chroot
# in the handler container's own mount namespace (which has the host directories the DaemonSet
# mounts); every other namespace (a launcher's) is joined unchanged.
cat >"$r/usr/bin/virt-chroot" <<'EOF'
#!/bin/sh
# Silent: the handler reads the combined output (`selinux getenforce` must print only "disabled").
if [ "$1" = --mount ] && ! (exec 3<"$2") 2>/dev/null; then
  shift 2
fi
exec /usr/bin/virt-chroot.kubevirt "$@"
EOF
chmod 0755 "$r/usr/bin/virt-chroot"
image virt-handler "$base" "$r" -- --entrypoint '["/usr/bin/virt-handler"]'

# virt-launcher: the Debian base + KubeVirt's launcher tar (cmd/virt-launcher/BUILD.bazel).
r=$out/rootfs/virt-launcher
rm -rf "$r"
mkdir -p "$r"/{usr/bin,usr/sbin,etc/libvirt/hooks,usr/lib64/qemu-kvm}
for b in virt-launcher virt-launcher-monitor virt-freezer virt-probe virt-tail container-disk libvirt-hook-client; do
  install -m 0755 "$out/bin/$b" "$r/usr/bin/$b"
done
install -m 0755 "$src/cmd/virt-launcher/node-labeller/node-labeller.sh" "$r/usr/bin/node-labeller.sh"
install -m 0644 "$src/cmd/virt-launcher/qemu.conf" "$src/cmd/virt-launcher/virtqemud.conf" "$r/etc/libvirt/"
install -m 0755 "$src/cmd/virt-launcher/qemu" "$r/etc/libvirt/hooks/qemu"
install -m 0644 "$src/cmd/virt-launcher/nsswitch.conf" "$r/etc/nsswitch.conf"
cat >"$r/usr/sbin/virtqemud" <<'EOF'
#!/bin/sh
# kvrs drop-in stand-in: Debian has no virtqemud, only the monolithic libvirtd (same QEMU
# driver). KubeVirt's launcher and node-labeller.sh dial /var/run/libvirt/virtqemud-sock (the link
# dangles until libvirtd listens). Run as root by the node labeller, Debian's libvirtd logs into
# /var/log/libvirt, which the image does not keep.
mkdir -p "${XDG_RUNTIME_DIR:-/var/run}/libvirt"
[ "$(id -u)" != 0 ] || mkdir -p /var/log/libvirt
ln -sfn libvirt-sock "${XDG_RUNTIME_DIR:-/var/run}/libvirt/virtqemud-sock"
exec /usr/sbin/libvirtd "$@"
EOF
chmod 0755 "$r/usr/sbin/virtqemud"
# Every library KubeVirt's launcher loads must be in the base.
while read -r lib; do
  [ -e "$base$lib" ] || [ -e "$r$lib" ] || [ -e "$r/usr$lib" ] ||
    die "virt-launcher needs $lib, which neither the Debian base nor KubeVirt's layer has"
done < <(ldd "$out/bin/virt-launcher" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p')
image virt-launcher "$base" "$r" -- --entrypoint '["/usr/bin/virt-launcher"]' --user 107:107 \
  --owner /etc/libvirt/hooks/qemu=107:107

touch "$out/images/done"
say "all images in $(( $(date +%s) - t0 ))s: $out/images"
echo "$out/images"
