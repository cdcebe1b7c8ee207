#!/usr/bin/env bash
# Installs the system packages kvrs's end-to-end tests need on Debian 12 (bookworm), as root:
# libvirt 11.x and QEMU 10.x from bookworm-backports (bookworm's libvirt 9.0 rejects KubeVirt's
# `<maxMemory slots="0">`), qemu-utils from the same QEMU build (the tests and virt-launcher call
# `qemu-img`), xorriso for the cloud-init ISO (KubeVirt builds it with xorrisofs too),
# libxml2-utils for `virt-xml-validate`, nftables for the masquerade network, swtpm for TPM 2.0
# devices, cpio, iproute2/iputils-ping/curl/openssl for the network and cluster tests, procps
# (sysctl, kill) for the handler tests, pkgconf for the mixed-fleet harness (cgo libvirt binding),
# e2fsprogs/util-linux/coreutils (mkfs.ext4, losetup, fallocate, truncate) for the disk-full test,
# gcc/libc6-dev/libseccomp-dev for the real node's runc (cgo, seccomp) and pause binary; make
# and xz-utils (with gcc) for scripts/passt.sh (builds from an .orig.tar.xz)
# (scripts/node-components.sh), python3 for its pause image (scripts/lib/oci_image.py),
# busybox-static for the node test's pod image (tests/cluster/tests/node.rs), runc for the pods of
# kvrs's own kubelet (`kvrs run`, `kvrs kubelet`: each launcher pod is an OCI container), and, when a
# Go toolchain is there, runc 1.5.3 from scripts/node-components.sh, which that kubelet prefers
# (bookworm's 1.1.5 lacks the November 2025 runc fixes; see fixed_runc below).
#
# Idempotent: the backports suite and its pin are added through a PRIVATE apt directory passed with
# `-o Dir::Etc::sourceparts=... -o Dir::Etc::preferencesparts=...`, so nothing under /etc/apt
# changes; when every tool is already installed at an acceptable version the script does nothing
# (no network). On failure it says what is missing and why apt refused.
#
# Deterministic by construction (this used to pick a different package subset per run: an
# `apt-cache madison P | grep -q bookworm-backports` under `set -o pipefail` failed whenever grep
# exited at its first match before apt-cache had written everything, apt-cache died of SIGPIPE
# (141), and P silently fell out of the list pinned to backports; qemu-system-x86 10.x then met
# bookworm's qemu-system-data 7.2 and apt gave up). Now:
#   * no pipeline feeds an early-exiting reader: command output is captured in a variable first;
#   * every backports package is REQUIRED: if one is not offered, the script stops and says so
#     instead of quietly installing a mixed set;
#   * the top-level packages are requested as `pkg/bookworm-backports`, AND an apt preferences pin
#     (priority 990) in the private directory makes bookworm-backports the candidate for every
#     binary built from the qemu, libvirt and seabios sources, so the dependencies apt pulls in by
#     itself (libvirt0, libvirt-common, libvirt-daemon-common, libvirt-daemon-log,
#     qemu-system-common, qemu-system-data, seabios, ...) can only come from the
#     same backports build: the whole chain resolves the same way on every run, whatever the
#     machine already has (a qemu-utils from bookworm is upgraded, one from backports kept);
#   * the bookworm packages are requested by plain name: their candidate is bookworm's newest
#     (bookworm, -updates, -security all have priority 500; backports stays at its default 100
#     outside the pinned family). Spelling them `pkg/bookworm` would select bookworm's *point
#     release* version and try to downgrade anything that already has a security update.
#
# Environment: KVRS_APT_DIR (default /var/lib/kvrs-apt) holds the private source list and pin.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps.sh: must run as root (try: sudo bash $0)" >&2
  exit 1
fi
os_release=$(cat /etc/os-release 2>/dev/null || true)
if [[ $os_release != *VERSION_CODENAME=bookworm* ]]; then
  pretty=$(awk -F= '$1 == "PRETTY_NAME" { print $2 }' <<<"$os_release")
  echo "install-test-deps.sh: expects Debian 12 (bookworm); found: ${pretty:-unknown}" >&2
  exit 1
fi

BPO=bookworm-backports
# Packages from backports, every one required (the whole QEMU/libvirt stack comes from one build).
BPO_PKGS=(
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev libvirt0
  libvirt-common libvirt-daemon-common libvirt-daemon-log
  qemu-system-x86 qemu-system-common qemu-system-data qemu-utils seabios
)
# (qemu-block-extra is not wanted: it drags in ceph and glusterfs. If an older one is already
# installed, it is upgraded from backports with every other stale binary of these sources.)
# Source packages whose binaries are pinned to backports (see the preferences file below).
BPO_SOURCES=(qemu libvirt seabios)
# Minimum upstream versions of those sources (what the tests need).
MIN_QEMU=1:10
MIN_LIBVIRT=11
# Packages from bookworm itself (swtpm: libvirt refuses TPM 2.0 devices without it; nbdkit with
# its curl plugin: CDI's importer image, packed by scripts/cdi.sh, streams http imports with it;
# ovmf: EFI guests, tests/e2e_backend_storage.rs boots one with persistent EFI variables).
MAIN_PKGS=(libxml2-utils nftables xorriso cpio swtpm swtpm-tools ovmf iproute2 iputils-ping curl openssl pkgconf procps e2fsprogs util-linux coreutils gcc make xz-utils libc6-dev libseccomp-dev python3 busybox-static runc nbdkit)
# Tools the tests run (have_all checks each one).
NEED_CMDS=(
  libvirtd virtlogd virsh qemu-system-x86_64 qemu-img xorrisofs virt-xml-validate nft cpio
  swtpm swtpm_setup ip ping curl openssl pkg-config sysctl kill mkfs.ext4 losetup fallocate truncate
  gcc python3 busybox runc
)

# --- already done? -----------------------------------------------------------------------------
# scan_installed: INSTALLED[pkg]=version for every installed package; STALE=(packages built from
# the qemu or libvirt sources whose version is below the minimum: a bookworm leftover next to the
# backports stack, e.g. qemu-utils or qemu-block-extra 7.2).
declare -A INSTALLED=()
STALE=()
scan_installed() {
  local db status src pkg ver
  INSTALLED=() STALE=()
  db=$(dpkg-query -W -f='${db:Status-Abbrev}|${source:Package}|${Package}|${Version}\n' 2>/dev/null || true)
  while IFS='|' read -r status src pkg ver; do
    [[ $status == ii* ]] || continue
    INSTALLED[$pkg]=$ver
    case $src in
      qemu) dpkg --compare-versions "$ver" ge "$MIN_QEMU" || STALE+=("$pkg") ;;
      libvirt) dpkg --compare-versions "$ver" ge "$MIN_LIBVIRT" || STALE+=("$pkg") ;;
    esac
  done <<<"$db"
}

# have_all [verbose]: 0 when every tool is there and the QEMU/libvirt stack is one consistent
# backports set; with `verbose`, says on stderr what is missing or too old.
have_all() {
  local verbose=${1:-} problems=() c pkg
  for c in "${NEED_CMDS[@]}"; do
    command -v "$c" >/dev/null || problems+=("command $c not found")
  done
  [ -e /usr/include/libvirt/libvirt.h ] || problems+=("/usr/include/libvirt/libvirt.h missing (libvirt-dev)")
  scan_installed
  for pkg in "${BPO_PKGS[@]}" "${MAIN_PKGS[@]}"; do
    [ -n "${INSTALLED[$pkg]:-}" ] || problems+=("package $pkg not installed")
  done
  for pkg in "${STALE[@]}"; do
    problems+=("$pkg ${INSTALLED[$pkg]} is older than QEMU ${MIN_QEMU#1:} / libvirt $MIN_LIBVIRT")
  done

  if [ ${#problems[@]} -eq 0 ]; then
    return 0
  fi
  if [ "$verbose" = verbose ]; then
    printf 'install-test-deps.sh:   %s\n' "${problems[@]}" >&2
  fi
  return 1
}
versions() {
  local lv qv
  lv=$(dpkg-query -W -f='${Version}' libvirt-daemon 2>/dev/null || true)
  qv=$(qemu-system-x86_64 --version 2>/dev/null || true)
  echo "libvirt ${lv:-none}, ${qv%%$'\n'*}"
}
# fixed_runc: kvrs's own kubelet (`kvrs run`, `kvrs kubelet`) refuses a runc without the November
# 2025 fixes (CVE-2025-31133, -52565, -52881; fixed in 1.2.8, 1.3.3, 1.4.0-rc.3), which bookworm's
# 1.1.5 lacks; it uses the runc 1.5.3 scripts/node-components.sh builds into
# ${KVRS_CACHE:-~/.cache/kvrs}/node/bin/runc when that is there. Built here when a Go toolchain is
# (cached: a no-op once built); otherwise says how to get one.
fixed_runc() {
  local cached=${KVRS_CACHE:-$HOME/.cache/kvrs}/node/bin/runc
  [ -x "$cached" ] && return 0
  if [ -n "${GO:-}" ] || command -v go >/dev/null || [ -x /usr/local/go/bin/go ]; then
    echo "install-test-deps.sh: building runc 1.5.3 (bookworm's 1.1.5 lacks the November 2025 fixes) with scripts/node-components.sh" >&2
    bash "$(dirname "${BASH_SOURCE[0]}")/node-components.sh" >/dev/null && [ -x "$cached" ] && return 0
    echo "install-test-deps.sh: scripts/node-components.sh did not build $cached" >&2
  fi
  echo "install-test-deps.sh: WARNING: no runc with the fixes of CVE-2025-31133, CVE-2025-52565 and CVE-2025-52881: kvrs run / kvrs kubelet refuse $(runc --version 2>/dev/null | head -n1) unless --allow-vulnerable-runtime; install Go >= 1.26 and run scripts/node-components.sh, or pass --runtime PATH to runc >= 1.2.8 / 1.3.3" >&2
}
# passt_vhost_user: KubeVirt's passt binding has libvirt run `passt --vhost-user`; bookworm's passt
# (2023) has no such mode and backports has none: scripts/passt.sh builds a pinned passt and
# installs it as /usr/bin/passt (a no-op once there). A failure is a warning: only the passt
# binding tests (bins/kvrs/tests/run_bindings.rs) need it.
passt_vhost_user() {
  bash "$(dirname "$0")/passt.sh" --install >/dev/null ||
    echo "install-test-deps.sh: WARNING: no passt with vhost-user (scripts/passt.sh failed; set KVRS_PASST_SRC to a passt git repository if the Debian archive is unreachable): VMs with the passt binding plugin cannot start" >&2
}
if have_all; then
  echo "install-test-deps.sh: everything present ($(versions))"
  fixed_runc
  passt_vhost_user
  exit 0
fi

# --- private apt view: the machine's sources + bookworm-backports, and the backports pin ---------
APT_DIR=${KVRS_APT_DIR:-/var/lib/kvrs-apt}
mkdir -p "$APT_DIR/sources.list.d" "$APT_DIR/preferences.d"
rm -f "$APT_DIR/sources.list.d/"* "$APT_DIR/preferences.d/"*

# Copy the machine's own entries (deb822 and one-line, /etc/apt/sources.list too, since the private
# view replaces it with /dev/null) and its own pins, so the private view is the machine's plus ours.
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  cp "$f" "$APT_DIR/sources.list.d/"
done
if [ -s /etc/apt/sources.list ]; then
  cp /etc/apt/sources.list "$APT_DIR/sources.list.d/00-etc-apt-sources.list"
fi
for f in /etc/apt/preferences.d/*; do
  if [ -f "$f" ]; then cp "$f" "$APT_DIR/preferences.d/"; fi
done
source_files=("$APT_DIR/sources.list.d/"*.sources)
list_files=("$APT_DIR/sources.list.d/"*.list)
shopt -u nullglob

# Mirror of the main Debian archive: the URI of the entry that carries the `bookworm` suite.
mirror=""
if [ ${#source_files[@]} -gt 0 ]; then
  mirror=$(awk '
    /^[[:space:]]*$/ { if (suite && uri) { print uri; exit } suite=0; uri=""; next }
    /^URIs:/ { uri=$2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite=1 }
    END { if (suite && uri) print uri }
  ' "${source_files[@]}")
  mirror=${mirror%%$'\n'*}
fi
if [ -z "$mirror" ] && [ ${#list_files[@]} -gt 0 ]; then
  # "deb [options] URI suite components...": drop the options, then URI is field 2, suite field 3.
  mirror=$(awk '$1 == "deb" { l = $0; sub(/\[[^]]*\]/, "", l); split(l, f, " ");
                              if (f[3] == "bookworm") { print f[2]; exit } }' "${list_files[@]}")
fi
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

cat >"$APT_DIR/sources.list.d/zz-kvrs-bookworm-backports.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $BPO
Components: main
Signed-By: $keyring
EOF
# Priority 990 (< 1000: never a downgrade) for every binary of these sources: apt takes the whole
# QEMU/libvirt dependency chain from backports, not a mix (see the header).
{
  echo "# Written by kvrs scripts/install-test-deps.sh: the QEMU/libvirt stack comes from $BPO."
  echo "Package: ${BPO_SOURCES[*]/#/src:}"
  echo "Pin: release n=$BPO"
  echo "Pin-Priority: 990"
} >"$APT_DIR/preferences.d/zz-kvrs-backports.pref"
echo "install-test-deps.sh: $BPO from $mirror (private sources and pin in $APT_DIR)"

APT_OPTS=(
  -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
  -o "Dir::Etc::sourcelist=/dev/null"
  -o "Dir::Etc::preferencesparts=$APT_DIR/preferences.d"
  -o "APT::Get::List-Cleanup=false"
)
export DEBIAN_FRONTEND=noninteractive
echo "install-test-deps.sh: apt-get update"
if ! apt-get "${APT_OPTS[@]}" update -qq; then
  echo "install-test-deps.sh: apt-get update failed (private sources in $APT_DIR/sources.list.d)" >&2
  exit 1
fi

# Every backports package must be offered by backports, or nothing is installed.
# Stale binaries of the pinned sources already on the machine are upgraded in the same transaction.
scan_installed
want=("${BPO_PKGS[@]}")
for p in "${STALE[@]}"; do
  [[ " ${want[*]} " == *" $p "* ]] || want+=("$p")
done
bpo_args=() unavailable=()
for p in "${want[@]}"; do
  table=$(apt-cache "${APT_OPTS[@]}" madison "$p" 2>/dev/null || true)
  # madison: "pkg | version | URI suite/component arch Packages"
  if awk -F'|' -v s=" $BPO/" 'index($3, s) { found = 1 } END { exit !found }' <<<"$table"; then
    bpo_args+=("$p/$BPO")
  else
    unavailable+=("$p")
  fi
done
if [ ${#unavailable[@]} -gt 0 ]; then
  echo "install-test-deps.sh: not offered by $BPO from $mirror: ${unavailable[*]}" >&2
  exit 1
fi

# --no-install-recommends: no libvirt-daemon-system, no services: the tests start their own private
# daemons. One retry, with the resolver's reasoning, for a transient download error.
install() { apt-get "${APT_OPTS[@]}" install -y "$@" --no-install-recommends "${bpo_args[@]}" "${MAIN_PKGS[@]}"; }
echo "install-test-deps.sh: installing ${bpo_args[*]} ${MAIN_PKGS[*]} (a few minutes the first time)"
install_start=$(date +%s)
if ! install -qq; then
  echo "install-test-deps.sh: first install attempt failed; retrying verbosely" >&2
  if ! install -o Debug::pkgProblemResolver=yes; then
    echo "install-test-deps.sh: apt-get install failed; candidates were:" >&2
    policy=$(apt-cache "${APT_OPTS[@]}" policy qemu-system-x86 qemu-system-data qemu-utils libvirt-daemon libvirt0 2>&1 || true)
    echo "$policy" >&2
    exit 1
  fi
fi

# libvirt's postinst may have started system daemons on a systemd machine; the tests never use them.
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now libvirtd.service libvirtd.socket virtlogd.socket virtlogd.service >/dev/null 2>&1 || true
fi

echo "install-test-deps.sh: installed in $(($(date +%s) - install_start)) s: $(versions)"
if ! have_all verbose; then
  echo "install-test-deps.sh: installed, but the set above is still missing or too old" >&2
  exit 1
fi
fixed_runc
passt_vhost_user
