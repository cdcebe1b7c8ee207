#!/usr/bin/env bash
# Installs the system packages kvrs's end-to-end tests need on Debian 12 (bookworm), as root:
# libvirt 11.x and QEMU 10.x from bookworm-backports (bookworm's libvirt 9.0 rejects KubeVirt's
# `<maxMemory slots="0">`, and the machine's qemu-utils from backports breaks bookworm's QEMU 7.2),
# xorriso for the cloud-init ISO (KubeVirt builds it with xorrisofs too), libxml2-utils for
# `virt-xml-validate`, nftables for the masquerade network.
#
# Idempotent: the backports suite is added through a PRIVATE apt source directory passed with
# `-o Dir::Etc::sourceparts=...`, so nothing under /etc/apt changes; when every package is already
# installed at an acceptable version the script does nothing (no network).
#
# Environment: KVRS_APT_DIR (default /var/lib/kvrs-apt) holds the private source list.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps.sh: must run as root (try: sudo bash $0)" >&2
  exit 1
fi
if ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  echo "install-test-deps.sh: expects Debian 12 (bookworm); found: $(grep PRETTY_NAME /etc/os-release 2>/dev/null)" >&2
  exit 1
fi

BPO=bookworm-backports
# Packages taken from backports (libvirt too: 11.x accepts KubeVirt's domain XML, 9.0 does not).
# apt picks their dependencies (libvirt0, libvirt-daemon-log, ...) from backports as needed.
BPO_PKGS=(
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev
  qemu-system-x86 qemu-system-common qemu-system-data seabios
)
# Packages from bookworm itself (swtpm: libvirt refuses TPM 2.0 devices without it).
MAIN_PKGS=(libxml2-utils nftables xorriso cpio swtpm swtpm-tools)

# --- already done? -----------------------------------------------------------------------------
have_all() {
  command -v libvirtd >/dev/null && command -v virtlogd >/dev/null && command -v virsh >/dev/null \
    && command -v qemu-system-x86_64 >/dev/null && command -v xorrisofs >/dev/null \
    && command -v virt-xml-validate >/dev/null && command -v nft >/dev/null && command -v cpio >/dev/null \
    && command -v swtpm >/dev/null && command -v swtpm_setup >/dev/null \
    && [ -e /usr/include/libvirt/libvirt.h ] || return 1
  local lv
  lv=$(dpkg-query -W -f='${Version}' libvirt-daemon 2>/dev/null || true)
  # Need libvirt >= 11 (backports).
  dpkg --compare-versions "${lv:-0}" ge 11 || return 1
}
if have_all; then
  echo "install-test-deps.sh: everything present (libvirt $(dpkg-query -W -f='${Version}' libvirt-daemon), $(qemu-system-x86_64 --version | head -1))"
  exit 0
fi

# --- private source list with bookworm-backports -------------------------------------------------
APT_DIR=${KVRS_APT_DIR:-/var/lib/kvrs-apt}
mkdir -p "$APT_DIR/sources.list.d"
rm -f "$APT_DIR/sources.list.d/"*

# Copy the machine's own deb822/.list entries so the private view still sees bookworm itself.
shopt -s nullglob
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  cp "$f" "$APT_DIR/sources.list.d/"
done
shopt -u nullglob

# Mirror of the main Debian archive: the URI of the entry that carries the `bookworm` suite.
mirror=""
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  mirror=$(awk '
    /^[[:space:]]*$/ { if (suite && uri) { print uri; exit } suite=0; uri="" ; next }
    /^URIs:/ { uri=$2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite=1 }
    END { if (suite && uri) print uri }
  ' /etc/apt/sources.list.d/*.sources | head -1)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^deb[[:space:]]+[^[:space:]]+[[:space:]]+bookworm[[:space:]]' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | head -1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

cat >"$APT_DIR/sources.list.d/kvrs-bookworm-backports.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $BPO
Components: main
Signed-By: $keyring
EOF
echo "install-test-deps.sh: $BPO from $mirror (private list in $APT_DIR)"

APT_OPTS=(
  -o "Dir::Etc::sourceparts=$APT_DIR/sources.list.d"
  -o "Dir::Etc::sourcelist=/dev/null"
  -o "APT::Get::List-Cleanup=false"
)
export DEBIAN_FRONTEND=noninteractive
apt-get "${APT_OPTS[@]}" update -qq

# Only the backports packages that exist for this architecture (some split packages may not).
bpo_args=()
for p in "${BPO_PKGS[@]}"; do
  if apt-cache "${APT_OPTS[@]}" madison "$p" 2>/dev/null | grep -q "$BPO"; then
    bpo_args+=("$p/$BPO")
  fi
done

# No libvirt-daemon-system recommends/postinst services are wanted: the tests start their own
# private daemons. --no-install-recommends keeps it to the minimum.
# apt's resolver has been seen to give up once ("held broken packages") on the systemd upgrade that
# systemd-container pulls in and succeed on the next try: retry once, verbosely.
install() { apt-get "${APT_OPTS[@]}" install -y "$@" --no-install-recommends "${bpo_args[@]}" "${MAIN_PKGS[@]}"; }
if ! install -qq; then
  echo "install-test-deps.sh: first install attempt failed; retrying" >&2
  install -o Debug::pkgProblemResolver=yes
fi

# libvirt-daemon-system's postinst may have started system daemons; the tests never use them.
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now libvirtd.service libvirtd.socket virtlogd.socket virtlogd.service >/dev/null 2>&1 || true
fi

echo "install-test-deps.sh: libvirt $(dpkg-query -W -f='${Version}' libvirt-daemon), $(qemu-system-x86_64 --version | head -1)"
have_all || { echo "install-test-deps.sh: some tools are still missing" >&2; exit 1; }
