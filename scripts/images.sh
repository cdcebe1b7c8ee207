#!/usr/bin/env bash
# Builds kvrs's container images as OCI archives, without a registry or a container engine:
#
#   kvrs/virt-controller:<tag>   distroless: the binary, the shared libraries it links (ldd),
#                                /etc/passwd + group with nonroot 65532, no shell
#   kvrs/virt-api:<tag>          distroless like virt-controller: KubeVirt's webhooks and
#                                subresource API (bins/virt-api), nonroot 65532
#   kvrs/virt-handler:<tag>      distroless: the binary + `ip` and `nft` (the only programs the
#                                handler's node steps run, bins/node/src/network/tools.rs) with
#                                their libraries, from this machine's Debian packages
#   kvrs/virt-launcher:<tag>     Debian bookworm (mmdebstrap, Essential set) + libvirt 11.3 and
#                                QEMU 10.0 from bookworm-backports, qemu-utils, xorriso, swtpm,
#                                OVMF (bins/images/virt-launcher/packages.txt), and kvrs's
#                                /usr/bin/virt-launcher-monitor, virt-launcher, virt-tail and the
#                                static /usr/bin/container-disk (paths the pod renderer uses)
#   kvrs.local/test-guest-kernel:v6   the test guest's kernel-boot container (/boot/vmlinuz,
#                                /boot/initramfs.gz; fixtures/run/guest-vm.yaml)
#   kvrs.local/empty-disk:64m    its containerDisk: /disk/disk.qcow2 (64 MiB, empty), 107:107
#
# into ${KVRS_CACHE:-~/.cache/kvrs}/images/<reference with / and : as _>.oci.tar, then prints
# each image's size next to KubeVirt's image of the same role (on stderr) and the archive paths,
# one per line, last (the only lines on stdout). Import with `ctr -n k8s.io images import FILE`
# (the image is named docker.io/kvrs/virt-handler:<tag> etc., as the kubelet normalizes
# `kvrs/virt-handler:<tag>`), or `skopeo copy oci-archive:FILE docker://REGISTRY/...`.
#
# usage: scripts/images.sh [controller] [api] [handler] [launcher] [guest]   (default: all)
#
# Why these tools: the archives are written by scripts/lib/oci_image.py (stdlib Python: the image
# format is three JSON files and gzip tars, and a writer this small is reproducible by
# construction: sorted entries, clamped mtimes, numeric owners, gzip mtime 0); root filesystems
# come from mmdebstrap (Debian's own, one apt-get away, resolves and unpacks with the host's apt)
# or are assembled from this machine's files. umoci/skopeo/buildah would have to be built from Go
# modules first and add nothing a single-layer-per-rootfs image needs.
#
# Why the handler is distroless rather than a Debian rootfs: it runs two programs (`ip`, `nft`),
# and reaches launcher pods through /proc and the host paths its DaemonSet mounts; a Debian
# minbase would add ~80 MB of shell, apt and coreutils it never runs. The two tools and their
# libraries are copied from this machine's iproute2 and nftables packages (Debian 12, installed
# by scripts/install-test-deps.sh); their package versions are written into the image
# (/usr/share/kvrs/packages.txt) and so into its digest.
#
# Environment:
#   KVRS_IMAGE_PROFILE=release|dev  release (default): cargo --release binaries, the launcher ones
#                                   from the `launcher` profile; dev: target/debug (no second build)
#   KVRS_IMAGE_TAG                  tag of the kvrs/* images (default v<workspace version>)
#   KVRS_IMAGE_NO_BUILD=1           do not run cargo; use the binaries already built (fails if absent)
#   KVRS_IMAGE_REFRESH=1            rebuild the launcher's Debian base even if its recipe is unchanged
#   KVRS_CACHE                      cache root (default ~/.cache/kvrs)
#   SOURCE_DATE_EPOCH               timestamp of every file and the image configs (default 1700000000)
#
# Cached: each image has a stamp, the sha256 of its inputs (every file of its root filesystems
# with path, mode, owner and content, the image config, this script and the writer); unchanged
# inputs print "cached" and write nothing. The launcher's Debian base is cached by its recipe
# (package list, purge list, mirrors, pins) and rebuilt with KVRS_IMAGE_REFRESH=1; its resolved
# package versions are in the base (dpkg database) and so in the image stamp.
#
# Needs root for the launcher's Debian base (mmdebstrap --mode=root; installed with apt-get
# when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

say() { echo "images.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# --- configuration -------------------------------------------------------------------------------
PROFILE=${KVRS_IMAGE_PROFILE:-release}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
HOST_TRIPLE=$(rustc -vV 2>/dev/null | awk '/^host:/ { print $2 }')
HOST_TRIPLE=${HOST_TRIPLE:-x86_64-unknown-linux-gnu}
case $PROFILE in
  release)
    BIN_DIR=$TARGET/release LAUNCHER_DIR=$TARGET/launcher
    STATIC_DIR=$TARGET/$HOST_TRIPLE/launcher
    CARGO_MAIN=(--release) CARGO_LAUNCHER=(--profile launcher) GZIP_LEVEL=9 ;;
  dev)
    BIN_DIR=$TARGET/debug LAUNCHER_DIR=$TARGET/debug
    STATIC_DIR=$TARGET/$HOST_TRIPLE/debug
    CARGO_MAIN=() CARGO_LAUNCHER=() GZIP_LEVEL=1 ;;
  *) die "KVRS_IMAGE_PROFILE=$PROFILE: expected release or dev" ;;
esac
VERSION=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 }
               p && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' Cargo.toml)
[ -n "$VERSION" ] || die "no [workspace.package] version in Cargo.toml"
TAG=${KVRS_IMAGE_TAG:-v$VERSION}
CACHE=${KVRS_CACHE:-$HOME/.cache/kvrs}
OUT=$CACHE/images
WORK=$OUT/.work
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
WRITER=$REPO/scripts/lib/oci_image.py
mkdir -p "$OUT" "$WORK/stamps" "$WORK/rootfs"

REF_CONTROLLER=kvrs/virt-controller:$TAG
REF_API=kvrs/virt-api:$TAG
REF_HANDLER=kvrs/virt-handler:$TAG
REF_LAUNCHER=kvrs/virt-launcher:$TAG
REF_KERNEL=kvrs.local/test-guest-kernel:v6
REF_DISK=kvrs.local/empty-disk:64m
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# KubeVirt's published image sizes, for the comparison line. No size of the v1.9.0 images was
# found published (quay.io's tag pages are not reachable from here, and nothing citable states
# them); the newest figures found are for v1.3.1, `docker images` (uncompressed) sizes quoted in
# https://github.com/deckhouse/virtualization/pull/372 (2024-09): quay.io/kubevirt/virt-launcher
# v1.3.1 458MB, quay.io/kubevirt/virt-handler v1.3.1 231MB; none for virt-controller (the only
# one found, 388M for v0.33.0 in https://github.com/kubevirt/kubevirt/issues/4423, is 4 years
# older and not shown). kvrs's comparable figure is its uncompressed size.
KUBEVIRT_HANDLER="KubeVirt virt-handler v1.9.0: unknown (v1.3.1: 231 MB uncompressed, deckhouse/virtualization#372)"
KUBEVIRT_LAUNCHER="KubeVirt virt-launcher v1.9.0: unknown (v1.3.1: 458 MB uncompressed, deckhouse/virtualization#372)"
KUBEVIRT_CONTROLLER="KubeVirt virt-controller v1.9.0: unknown (no published size found)"
KUBEVIRT_API="KubeVirt virt-api v1.9.0: unknown (no published size found)"

# --- arguments -----------------------------------------------------------------------------------
WANT=("$@")
[ ${#WANT[@]} -gt 0 ] || WANT=(controller api handler launcher guest)
for w in "${WANT[@]}"; do
  case $w in controller | api | handler | launcher | guest) ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown image '$w' (expected controller, api, handler, launcher, guest)" ;;
  esac
done
want() { [[ " ${WANT[*]} " == *" $1 "* ]]; }

# --- helpers -------------------------------------------------------------------------------------
archive_of() { echo "$OUT/$(tr '/:' '__' <<<"$1").oci.tar"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
human() { awk -v n="$1" 'BEGIN { split("B KB MB GB", u); i = 1; while (n >= 1000 && i < 4) { n /= 1000; i++ } printf (i == 1 ? "%d %s" : "%.1f %s"), n, u[i] }'; }

# tree_digest DIR...: sha256 of every entry (path, type, mode, owner, link target, content).
tree_digest() {
  local d
  for d in "$@"; do
    echo "== layer"
    (cd "$d" && find . -printf '%p %y %m %U:%G %l\n' | LC_ALL=C sort)
    (cd "$d" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
  done | sha256sum | cut -d' ' -f1
}

# distroless_base ROOT: the merged-/usr skeleton, /etc files and /tmp of a distroless image.
distroless_base() {
  local root=$1
  rm -rf "$root"
  mkdir -p "$root"/{etc,tmp,root,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/share/kvrs,home/nonroot}
  ln -s usr/bin "$root/bin"
  ln -s usr/sbin "$root/sbin"
  ln -s usr/lib "$root/lib"
  ln -s usr/lib64 "$root/lib64"
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$root/etc/nsswitch.conf"
  : >"$root/usr/share/kvrs/packages.txt"
}

# install_elf ROOT SRC DEST: copies the ELF SRC to ROOT/DEST and every shared library `ldd` says
# it loads to the same path in ROOT; notes the Debian package of each file in packages.txt.
install_elf() {
  local root=$1 src=$2 dest=$3 ldd_out line lib
  [ -x "$src" ] || die "missing binary $src"
  install -D -m 0755 "$src" "$root$dest"
  note_package "$root" "$src"
  ldd_out=$(ldd "$src" 2>&1) || die "ldd $src failed: $ldd_out"
  if [[ $ldd_out == *"not found"* ]]; then die "$src: a library is missing on this machine: $ldd_out"; fi
  while read -r line; do
    # "libx.so.1 => /lib/x86_64-linux-gnu/libx.so.1 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
    lib=${line#*=> }
    lib=${lib%% (*}
    [[ $lib == /* ]] || continue
    if [ ! -e "$root$lib" ]; then
      mkdir -p "$(dirname "$root$lib")"
      cp -L "$lib" "$root$lib"
      # The source's mode: the loader (PT_INTERP) must stay executable, the kernel execs it.
      chmod --reference="$(readlink -f "$lib")" "$root$lib"
      note_package "$root" "$lib"
    fi
  done <<<"$ldd_out"
}
# note_package ROOT FILE: appends "package version" of the Debian package owning FILE (if any).
note_package() {
  local root=$1 file=$2 real pkg ver
  real=$(readlink -f "$2")
  # dpkg's database names bookworm's files by their pre-merged-/usr paths (/bin/ip, /lib/...).
  pkg=$(dpkg -S "$file" 2>/dev/null || dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || true)
  pkg=${pkg%%:*}
  pkg=${pkg%%,*}
  [ -n "$pkg" ] || return 0
  ver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
  grep -qx "$pkg $ver" "$root/usr/share/kvrs/packages.txt" || echo "$pkg $ver" >>"$root/usr/share/kvrs/packages.txt"
  sort -o "$root/usr/share/kvrs/packages.txt" "$root/usr/share/kvrs/packages.txt"
}

# --- building the binaries -----------------------------------------------------------------------
cargo_build() {
  if [ "${KVRS_IMAGE_NO_BUILD:-}" = 1 ]; then return 0; fi
  local t0
  t0=$(now)
  say "cargo build $*"
  "${CARGO:-cargo}" build -q "$@" || die "cargo build $* failed"
  say "  ($(elapsed "$t0"))"
}
if want controller || want api || want handler; then
  pkgs=()
  want controller && pkgs+=(-p kvrs-virt-controller)
  want api && pkgs+=(-p kvrs-virt-api)
  want handler && pkgs+=(-p kvrs-virt-handler)
  cargo_build "${CARGO_MAIN[@]}" "${pkgs[@]}" --bins
fi
if want launcher; then
  cargo_build "${CARGO_LAUNCHER[@]}" -p virt-launcher -p virt-launcher-monitor --bins
  # container-disk runs inside container-disk images (no libc there): statically linked, as is
  # virt-tail. An explicit --target keeps these RUSTFLAGS off build scripts and out of the
  # normal target directory.
  RUSTFLAGS="-C target-feature=+crt-static" cargo_build "${CARGO_LAUNCHER[@]}" \
    --target "$HOST_TRIPLE" -p kvrs-image-tools --bins
fi
if want guest; then
  cargo_build "${CARGO_MAIN[@]}" -p kvrs-test-guest --bin kvrs-guest-images
fi

# --- writing one image ---------------------------------------------------------------------------
ARCHIVES=() SUMMARY=()
# image ROLE REF STAMP_EXTRA -- WRITER_ARGS...: writes REF's archive unless its stamp is unchanged.
image() {
  local role=$1 ref=$2 t0=$3
  shift 3
  local args=("$@") archive stamp_file stamp rootfs=() i stats line
  archive=$(archive_of "$ref")
  stamp_file=$WORK/stamps/$(basename "$archive" .oci.tar)
  stats=$stamp_file.stats.json
  for ((i = 0; i < ${#args[@]}; i++)); do
    [ "${args[i]}" = --rootfs ] && rootfs+=("${args[i + 1]}")
  done
  stamp=$({
    echo "ref $ref epoch $SOURCE_DATE_EPOCH level $GZIP_LEVEL"
    printf '%s\n' "${args[@]}" | sed "s|$WORK|WORK|g"
    sha256sum "$WRITER" "$REPO/scripts/images.sh" | cut -d' ' -f1
    tree_digest "${rootfs[@]}"
  } | sha256sum | cut -d' ' -f1)
  if [ -f "$archive" ] && [ -f "$stats" ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ]; then
    say "$ref: cached ($(elapsed "$t0"))"
  else
    rm -f "$stamp_file"
    python3 "$WRITER" --ref "$ref" --out "$archive" --stats "$stats" --compress-level "$GZIP_LEVEL" "${args[@]}" >/dev/null \
      || die "$ref: writing the archive failed"
    echo "$stamp" >"$stamp_file"
    say "$ref: built in $(elapsed "$t0")"
  fi
  ARCHIVES+=("$archive")
  local c u kv
  c=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["compressed_bytes"])' "$stats")
  u=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["uncompressed_bytes"])' "$stats")
  case $role in
    controller) kv=$KUBEVIRT_CONTROLLER ;;
    api) kv=$KUBEVIRT_API ;;
    handler) kv=$KUBEVIRT_HANDLER ;;
    launcher) kv=$KUBEVIRT_LAUNCHER ;;
    *) kv="" ;;
  esac
  line=$(printf '%-36s %10s compressed %10s uncompressed' "$ref" "$(human "$c")" "$(human "$u")")
  SUMMARY+=("$line${kv:+  | $kv}")
}

# --- virt-controller and virt-api ----------------------------------------------------------------
# distroless_daemon ROLE REF BINARY: the binary alone (and its libraries), as nonroot 65532 —
# bins/deploy/<BINARY>/deployment.yaml runs command ["BINARY"] with runAsUser 65532.
distroless_daemon() {
  local role=$1 ref=$2 bin=$3 t0 root
  t0=$(now)
  root=$WORK/rootfs/$bin
  distroless_base "$root"
  install_elf "$root" "$BIN_DIR/$bin" "/usr/bin/$bin"
  image "$role" "$ref" "$t0" --rootfs "$root" \
    --entrypoint "[\"/usr/bin/$bin\"]" --env "$PATH_ENV" --user 65532:65532 \
    --workdir /home/nonroot --owner /home/nonroot=65532:65532 \
    --label "org.opencontainers.image.title=kvrs $bin" \
    --label "org.opencontainers.image.version=$VERSION"
}
want controller && distroless_daemon controller "$REF_CONTROLLER" virt-controller
want api && distroless_daemon api "$REF_API" virt-api

# --- virt-handler --------------------------------------------------------------------------------
if want handler; then
  t0=$(now)
  root=$WORK/rootfs/virt-handler
  distroless_base "$root"
  install_elf "$root" "$BIN_DIR/virt-handler" /usr/bin/virt-handler
  for tool in ip nft; do
    src=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v "$tool") \
      || die "$tool not found on this machine (apt-get install iproute2 nftables, or scripts/install-test-deps.sh)"
    src=$(readlink -f "$src")
    install_elf "$root" "$src" "$src"
  done
  # Name databases nft and ip read (protocol and service names, routing table names).
  for f in /etc/protocols /etc/services; do
    [ -f "$f" ] && cp "$f" "$root$f"
  done
  [ -d /etc/iproute2 ] && cp -r /etc/iproute2 "$root/etc/iproute2"
  # Runs as root (privileged DaemonSet): no USER.
  image handler "$REF_HANDLER" "$t0" --rootfs "$root" \
    --entrypoint '["/usr/bin/virt-handler"]' --env "$PATH_ENV" \
    --label "org.opencontainers.image.title=kvrs virt-handler" \
    --label "org.opencontainers.image.version=$VERSION"
fi

# --- virt-launcher -------------------------------------------------------------------------------
# The Debian base: mmdebstrap's Essential set + packages.txt, QEMU/libvirt/seabios pinned to
# bookworm-backports, docs/man/locales not unpacked, purge.txt removed, the qemu user 107 added.
launcher_base() {
  local base=$WORK/launcher-base recipe stamp mirror security sources pin t0 pkgs purge
  local defs=$REPO/bins/images/virt-launcher
  pkgs=$(sed 's/#.*//' "$defs/packages.txt" | xargs | tr ' ' ',')
  purge=$(sed 's/#.*//' "$defs/purge.txt" | xargs)
  [ -n "$pkgs" ] || die "$defs/packages.txt lists no package"

  # Mirrors: the URI of this machine's entry carrying the `bookworm` suite (and
  # `bookworm-security`), as scripts/install-test-deps.sh finds it; deb.debian.org otherwise.
  shopt -s nullglob
  local src_files=(/etc/apt/sources.list.d/*.sources) list_files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
  shopt -u nullglob
  find_uri() { # SUITE
    local u=""
    if [ ${#src_files[@]} -gt 0 ]; then
      u=$(awk -v want="$1" '
        /^[[:space:]]*$/ { if (suite && uri) { print uri; exit } suite=0; uri=""; next }
        /^URIs:/ { uri=$2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) suite=1 }
        END { if (suite && uri) print uri }' "${src_files[@]}")
    fi
    if [ -z "$u" ]; then
      local existing=()
      for f in "${list_files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
      if [ ${#existing[@]} -gt 0 ]; then
        u=$(awk -v want="$1" '$1 == "deb" { l = $0; sub(/\[[^]]*\]/, "", l); split(l, f, " ");
                                            if (f[3] == want) { print f[2]; exit } }' "${existing[@]}")
      fi
    fi
    echo "${u%%$'\n'*}"
  }
  mirror=$(find_uri bookworm)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(find_uri bookworm-security)
  security=${security:-http://deb.debian.org/debian-security}
  sources=(
    "deb $mirror bookworm main"
    "deb $mirror bookworm-updates main"
    "deb $security bookworm-security main"
    "deb $mirror bookworm-backports main"
  )
  pin=$'Package: src:qemu src:libvirt src:seabios\nPin: release n=bookworm-backports\nPin-Priority: 990\n'
  # The recipe: everything that decides what the base holds.
  recipe=$(printf '%s\n' "recipe v1" "$pkgs" "$purge" "$pin" "${sources[@]}" "epoch $SOURCE_DATE_EPOCH")
  stamp=$(sha256sum <<<"$recipe" | cut -d' ' -f1)
  if [ "${KVRS_IMAGE_REFRESH:-}" != 1 ] && [ -f "$base/stamp" ] && [ "$(cat "$base/stamp")" = "$stamp" ] \
    && [ -x "$base/rootfs/usr/sbin/libvirtd" ]; then
    echo "$base/rootfs"
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "building the launcher's Debian base needs root (mmdebstrap --mode=root): sudo bash $0 launcher"
  if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2 \
      || die "apt-get install mmdebstrap failed"
  fi
  t0=$(now)
  say "launcher base: mmdebstrap bookworm (+ backports QEMU/libvirt) from $mirror; ~2 minutes"
  rm -rf "$base"
  mkdir -p "$base"
  printf '%s' "$pin" >"$base/backports.pref"
  local dpkgopts=() p
  for p in /usr/share/doc/'*' /usr/share/man/'*' /usr/share/info/'*' /usr/share/locale/'*' \
    /usr/share/lintian/'*' /usr/share/linda/'*' /usr/share/bash-completion/'*' /usr/share/zsh/'*'; do
    dpkgopts+=(--dpkgopt="path-exclude=$p")
  done
  # Licences stay (their copyright files are small).
  dpkgopts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
  # mmdebstrap's own "I: ..." lines are the progress; prefixed and sent to stderr.
  if ! mmdebstrap --mode=root --variant=essential --format=directory \
    --include="$pkgs" --aptopt='APT::Install-Recommends "false"' "${dpkgopts[@]}" \
    --setup-hook="mkdir -p \"\$1/etc/apt/preferences.d\" && cp '$base/backports.pref' \"\$1/etc/apt/preferences.d/kvrs-backports.pref\"" \
    --essential-hook='echo "qemu:x:107:107:qemu user:/var/lib/qemu:/usr/sbin/nologin" >>"$1/etc/passwd"; echo "qemu:x:107:" >>"$1/etc/group"; echo "qemu:!:19000::::::" >>"$1/etc/shadow"; mkdir -p "$1/var/lib/qemu"; chown 107:107 "$1/var/lib/qemu"' \
    --customize-hook="out=\$(chroot \"\$1\" dpkg --purge --force-depends $purge 2>&1) || { echo \"\$out\" >&2; exit 1; }" \
    bookworm "$base/rootfs" "${sources[@]}" >&2 2> >(sed -u 's/^/images.sh:   /' >&2); then
    die "mmdebstrap failed (see above)"
  fi
  # No device nodes (the runtime mounts /dev), logs, caches, apt lists or machine id in an image.
  (cd "$base/rootfs" && rm -rf dev/* var/log/* var/cache/* var/lib/apt/lists/* \
    etc/apt/preferences.d/kvrs-backports.pref etc/machine-id var/lib/dbus/machine-id)
  echo "$stamp" >"$base/stamp"
  say "launcher base: $(du -sm "$base/rootfs" | cut -f1) MB in $(elapsed "$t0")"
  echo "$base/rootfs"
}

if want launcher; then
  t0=$(now)
  base=$(launcher_base)
  grep -q '^qemu:x:107:107:' "$base/etc/passwd" || die "$base/etc/passwd has no qemu user 107"
  kvrs_layer=$WORK/rootfs/virt-launcher-kvrs
  rm -rf "$kvrs_layer"
  mkdir -p "$kvrs_layer/usr/bin" "$kvrs_layer/usr/share/kvrs"
  for b in virt-launcher-monitor virt-launcher; do
    [ -x "$LAUNCHER_DIR/$b" ] || die "missing $LAUNCHER_DIR/$b (cargo build ${CARGO_LAUNCHER[*]} -p $b)"
    install -m 0755 "$LAUNCHER_DIR/$b" "$kvrs_layer/usr/bin/$b"
    # Every library the binary loads must be in the Debian base.
    while read -r lib; do
      [ -e "$base$lib" ] || die "$b needs $lib, which the launcher base lacks"
    done < <(ldd "$LAUNCHER_DIR/$b" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p')
  done
  for b in container-disk virt-tail; do
    [ -x "$STATIC_DIR/$b" ] || die "missing $STATIC_DIR/$b (the static kvrs-image-tools build)"
    [[ $(file -b "$STATIC_DIR/$b") == *static* ]] || die "$STATIC_DIR/$b is not statically linked"
    install -m 0755 "$STATIC_DIR/$b" "$kvrs_layer/usr/bin/$b"
  done
  dpkg-query --admindir="$base/var/lib/dpkg" -W -f='${Package} ${Version}\n' >"$kvrs_layer/usr/share/kvrs/packages.txt"
  # KubeVirt's launcher image runs as the qemu user; the pod sets runAsUser 107 anyway.
  image launcher "$REF_LAUNCHER" "$t0" --rootfs "$base" --rootfs "$kvrs_layer" \
    --entrypoint '["/usr/bin/virt-launcher-monitor"]' --env "$PATH_ENV" --user 107:107 \
    --label "org.opencontainers.image.title=kvrs virt-launcher" \
    --label "org.opencontainers.image.version=$VERSION"
fi

# --- the test guest as KubeVirt images -----------------------------------------------------------
if want guest; then
  t0=$(now)
  gen=$BIN_DIR/kvrs-guest-images
  [ -x "$gen" ] || die "missing $gen (cargo build ${CARGO_MAIN[*]} -p kvrs-test-guest)"
  gdir=$WORK/rootfs/guest
  rm -rf "$gdir"
  mkdir -p "$gdir"
  "$gen" "$gdir" >/dev/null || die "kvrs-guest-images failed"
  kdir=$gdir/$(tr '/:' '__' <<<"$REF_KERNEL")
  ddir=$gdir/$(tr '/:' '__' <<<"$REF_DISK")
  [ -f "$kdir/boot/vmlinuz" ] && [ -f "$kdir/boot/initramfs.gz" ] || die "kvrs-guest-images wrote no $kdir/boot/{vmlinuz,initramfs.gz}"
  disk=$(cd "$ddir/disk" && ls)
  [ "$(wc -w <<<"$disk")" = 1 ] || die "$ddir/disk must hold exactly one file (KubeVirt's containerDisk rule), has: $disk"
  chmod 0755 "$kdir" "$kdir/boot" "$ddir" "$ddir/disk"
  chmod 0644 "$kdir/boot/"* "$ddir/disk/$disk"
  image guest "$REF_KERNEL" "$t0" --rootfs "$kdir" \
    --owner /boot=107:107 --owner /boot/vmlinuz=107:107 --owner /boot/initramfs.gz=107:107
  t0=$(now)
  image guest "$REF_DISK" "$t0" --rootfs "$ddir" --owner /disk=107:107 --owner "/disk/$disk=107:107"
fi

# --- summary -------------------------------------------------------------------------------------
say "sizes (kvrs, $PROFILE binaries; KubeVirt's published sizes are uncompressed):"
for l in "${SUMMARY[@]}"; do say "  $l"; done
printf '%s\n' "${ARCHIVES[@]}"
