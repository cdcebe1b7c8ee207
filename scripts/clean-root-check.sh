#!/usr/bin/env bash
# Proves scripts/install-test-deps.sh on a fresh Debian 12 root, N times (default 5):
#   clean-root-check.sh [N]
# Each run: a pristine copy of a debootstrapped bookworm root, the host's apt sources, keyrings
# and Acquire settings (proxy, Check-Valid-Until) copied in, /proc /sys /dev mounted, then
# `chroot ROOT bash /install-test-deps.sh` must exit 0, libvirtd, virsh, qemu-system-x86_64,
# qemu-img, nft, xorrisofs, swtpm, ip, ping, curl, openssl, pkg-config (libvirt), sysctl, runc (the
# one-machine kubelet's OCI runtime) and the disk-full
# test's mkfs.ext4, losetup, fallocate and truncate must run inside with libvirt >= 11 and
# QEMU >= 10, and a second run of the script must find everything present (its no-network path).
# Then the root is unmounted and deleted. One line per run, then `clean-root-check: N passed,
# N failed`; exit 1 on any failure (the failed runs' logs are kept and named).
#
# KVRS_INSTALL_SCRIPT=PATH checks another version of the script (e.g. an older commit's).
# Variants (KVRS_CLEAN_ROOT_VARIANTS, one word per run, cycled; default: run 2 is bpo-qemu-utils,
# every other run plain):
#   plain                the bare debootstrap root;
#   bpo-qemu-utils       qemu-utils from bookworm-backports installed first (as some machines have it);
#   bookworm-qemu-utils  qemu-utils 7.2 from bookworm (with its recommends) installed first.
#
# The base root is built once with debootstrap and kept as a tarball in
# ${KVRS_CACHE:-$HOME/.cache/kvrs}/clean-root/ (delete it to rebuild); every run unpacks it anew.
# Needs root; installs the host's `debootstrap` package if it is missing. The chroot gets a
# policy-rc.d that forbids starting services, as any chroot install should: a daemon started from
# a postinst would otherwise keep the root busy.
set -euo pipefail

N=${1:-5}
if ! [[ $N =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [N]   (N >= 1 runs, default 5)" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "clean-root-check.sh: must run as root" >&2
  exit 1
fi
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT=${KVRS_INSTALL_SCRIPT:-$REPO/scripts/install-test-deps.sh}  # override: try another version
CACHE=${KVRS_CACHE:-$HOME/.cache/kvrs}/clean-root
SUITE=bookworm
BPO=bookworm-backports
BASE_TAR=$CACHE/$SUITE-base.tar
LOGS=$CACHE/logs
mkdir -p "$CACHE" "$LOGS"
read -r -a VARIANTS <<<"${KVRS_CLEAN_ROOT_VARIANTS:-}"
CHROOT_ENV=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
  LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive)

log() { echo "clean-root-check: $*" >&2; }

# --- cleanup: every root this script made, whatever happens -------------------------------------
ROOTS=()
# mounts_under DIR: the mount points at or below DIR, deepest first.
mounts_under() {
  local dir=$1 table
  table=$(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print length($2), $2 }' /proc/self/mounts)
  [ -n "$table" ] || return 0
  sort -rn <<<"$table" | awk '{ print $2 }'
}
# kill_inside DIR: end the processes whose root directory is DIR (daemons a postinst left).
kill_inside() {
  local dir=$1 p r pids=()
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null || true)
    if [ "$r" = "$dir" ]; then pids+=("${p#/proc/}"); fi
  done
  if [ ${#pids[@]} -gt 0 ]; then
    log "ending processes left in $dir: ${pids[*]}"
    kill "${pids[@]}" 2>/dev/null || true
    sleep 1
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
}
# teardown DIR: kill, unmount, delete; never deletes through a mount still in place.
teardown() {
  local dir=$1 m left
  [ -d "$dir" ] || return 0
  kill_inside "$dir"
  while read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" || log "cannot unmount $m"
  done < <(mounts_under "$dir")
  left=$(mounts_under "$dir")
  if [ -n "$left" ]; then
    log "NOT deleting $dir: still mounted: $left"
    return 1
  fi
  rm -rf --one-file-system "$dir"
}
cleanup() {
  local r
  for r in "${ROOTS[@]}"; do teardown "$r" || true; done
  ROOTS=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the host's mirror (the URI that carries the bookworm suite) --------------------------------
host_mirror() {
  local m="" f=() l=()
  shopt -s nullglob
  f=(/etc/apt/sources.list.d/*.sources)
  l=(/etc/apt/sources.list.d/*.list)
  shopt -u nullglob
  if [ -s /etc/apt/sources.list ]; then l+=(/etc/apt/sources.list); fi
  if [ ${#f[@]} -gt 0 ]; then
    m=$(awk '
      /^[[:space:]]*$/ { if (suite && uri) { print uri; exit } suite=0; uri=""; next }
      /^URIs:/ { uri=$2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") suite=1 }
      END { if (suite && uri) print uri }
    ' "${f[@]}")
  fi
  if [ -z "$m" ] && [ ${#l[@]} -gt 0 ]; then
    m=$(awk '$1 == "deb" { s = $0; sub(/\[[^]]*\]/, "", s); split(s, w, " ");
                           if (w[3] == "bookworm") { print w[2]; exit } }' "${l[@]}")
  fi
  m=${m%%$'\n'*}
  echo "${m:-http://deb.debian.org/debian}"
}
MIRROR=$(host_mirror)

# --- pristine base root, built once ---------------------------------------------------------------
ensure_base() {
  if [ -s "$BASE_TAR" ]; then return 0; fi
  if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
  fi
  local build t0=$SECONDS
  build=$(mktemp -d "$CACHE/build.XXXXXX")
  ROOTS+=("$build")
  log "building the base $SUITE root from $MIRROR (once; log $LOGS/debootstrap.log)"
  if ! debootstrap --arch="$(dpkg --print-architecture)" "$SUITE" "$build" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1; then
    log "debootstrap failed; last lines of $LOGS/debootstrap.log:"
    tail -20 "$LOGS/debootstrap.log" >&2
    exit 1
  fi
  # No apt lists and no downloaded debs in the pristine copy: a fresh machine has neither.
  rm -rf "$build/var/cache/apt/archives/"*.deb "$build/var/lib/apt/lists/"*
  teardown_mounts_only "$build"
  tar --numeric-owner -C "$build" -cpf "$BASE_TAR.partial" .
  mv "$BASE_TAR.partial" "$BASE_TAR"
  teardown "$build"
  ROOTS=()
  log "base root cached in $BASE_TAR ($((SECONDS - t0))s)"
}
teardown_mounts_only() {
  local m
  while read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m"
  done < <(mounts_under "$1")
}

# --- one run ------------------------------------------------------------------------------------
# prepare ROOT: the host's apt config, DNS, mounts, no services.
prepare() {
  local root=$1 f
  # The host's sources replace debootstrap's one-line list.
  rm -f "$root/etc/apt/sources.list"
  rm -f "$root/etc/apt/sources.list.d/"*
  if [ -s /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$root/etc/apt/sources.list"; fi
  shopt -s nullglob
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do cp "$f" "$root/etc/apt/sources.list.d/"; done
  # Keyrings the sources may name, and apt's trusted keys.
  mkdir -p "$root/usr/share/keyrings" "$root/etc/apt/trusted.gpg.d" "$root/etc/apt/keyrings"
  for f in /usr/share/keyrings/*; do [ -e "$root$f" ] || cp "$f" "$root$f"; done
  for f in /etc/apt/trusted.gpg.d/* /etc/apt/keyrings/*; do cp "$f" "$root$f"; done
  if [ -s /etc/apt/trusted.gpg ]; then cp /etc/apt/trusted.gpg "$root/etc/apt/trusted.gpg"; fi
  # Acquire settings that reaching the mirror may need (proxy, frozen-snapshot date checks).
  for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] || continue
    if grep -Eiq 'Acquire::(([a-z]+::)?proxy|Check-Valid-Until|Check-Date)' "$f"; then
      cp "$f" "$root/etc/apt/apt.conf.d/"
    fi
  done
  if [ -s /etc/apt/apt.conf ]; then cp /etc/apt/apt.conf "$root/etc/apt/apt.conf"; fi
  shopt -u nullglob
  cp -L --remove-destination /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"

  mount -t proc proc "$root/proc" 2>/dev/null || mount --bind /proc "$root/proc"
  mount --bind /sys "$root/sys"
  mount --bind /dev "$root/dev"
  if [ -d /dev/pts ] && [ -d "$root/dev/pts" ]; then mount --bind /dev/pts "$root/dev/pts"; fi
}

in_root() { local root=$1; shift; "${CHROOT_ENV[@]}" /usr/sbin/chroot "$root" "$@"; }

# preinstall_qemu_utils ROOT SUITE: put qemu-utils from SUITE on the root before the script runs.
preinstall_qemu_utils() {
  local root=$1 suite=$2 pre=/tmp/kvrs-pre
  mkdir -p "$root$pre/sources.list.d"
  cp -a "$root/etc/apt/sources.list.d/." "$root$pre/sources.list.d/"
  if [ -s "$root/etc/apt/sources.list" ]; then cp "$root/etc/apt/sources.list" "$root$pre/sources.list.d/00.list"; fi
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$MIRROR" "$BPO" >"$root$pre/sources.list.d/bpo.sources"
  local o=(-o "Dir::Etc::sourceparts=$pre/sources.list.d" -o Dir::Etc::sourcelist=/dev/null)
  in_root "$root" apt-get "${o[@]}" update -qq
  if [ "$suite" = "$BPO" ]; then
    in_root "$root" apt-get "${o[@]}" install -y -qq --no-install-recommends "qemu-utils/$BPO"
  else
    in_root "$root" apt-get "${o[@]}" install -y -qq qemu-utils   # bookworm's, recommends too
  fi
  rm -rf "${root:?}$pre"
  # shellcheck disable=SC2016 # dpkg-query's own ${field} syntax
  in_root "$root" dpkg-query -W -f='preinstalled ${Package} ${Version}\n' qemu-utils
}

# major_of TEXT FIELD: the major number of the FIELD-th word of TEXT's first line ("v" dropped).
major_of() {
  local line=${1%%$'\n'*} words word
  read -r -a words <<<"$line"
  word=${words[$2 - 1]:-}
  word=${word#v}
  echo "${word%%.*}"
}

# check_tools ROOT: every tool runs; libvirt >= 11, QEMU >= 10.
check_tools() {
  local root=$1 out bad=0 lv vv qv c
  out=$(in_root "$root" libvirtd --version) || { log "libvirtd --version failed"; return 1; }
  lv=$(major_of "$out" 3); echo "$out"
  [ "${lv:-0}" -ge 11 ] 2>/dev/null || { log "libvirtd is not >= 11: $out"; bad=1; }
  out=$(in_root "$root" virsh --version) || { log "virsh --version failed"; return 1; }
  vv=$(major_of "$out" 1); echo "virsh $out"
  [ "${vv:-0}" -ge 11 ] 2>/dev/null || { log "virsh is not >= 11: $out"; bad=1; }
  out=$(in_root "$root" qemu-system-x86_64 --version) || { log "qemu-system-x86_64 --version failed"; return 1; }
  qv=$(major_of "$out" 4); echo "${out%%$'\n'*}"
  [ "${qv:-0}" -ge 10 ] 2>/dev/null || { log "QEMU is not >= 10: $out"; bad=1; }
  out=$(in_root "$root" qemu-img --version) || { log "qemu-img --version failed"; return 1; }
  echo "${out%%$'\n'*}"
  [ "$(major_of "$out" 3)" -ge 10 ] 2>/dev/null || { log "qemu-img is not >= 10: $out"; bad=1; }
  for c in "nft --version" "xorrisofs -version" "swtpm --version" "swtpm_setup --print-capabilities" \
    "ip -V" "ping -V" "curl --version" "openssl version" "cpio --version" "virt-xml-validate --help" \
    "pkg-config --modversion libvirt" "sysctl --version" "mkfs.ext4 -V" "losetup --version" \
    "fallocate --version" "truncate --version" "runc --version" "make --version"; do
    # shellcheck disable=SC2086 # the word list is the command line
    out=$(in_root "$root" $c 2>&1) || { log "'$c' failed in the root: $out"; bad=1; continue; }
    echo "$c: ${out%%$'\n'*}"
  done
  out=$(in_root "$root" passt --help 2>&1 || true)
  if [[ $out == *--vhost-user* ]]; then echo "passt: with --vhost-user"; else log "passt without --vhost-user in the root: ${out%%$'\n'*}"; bad=1; fi
  return $bad
}

# run_one I VARIANT ROOT: the whole run, in a subshell with `set -eE` (the caller's `if` would
# switch errexit off), output to the caller's log; the ERR trap names the command that failed.
run_one() {
  local i=$1 variant=$2 root=$3 out
  set -eE
  trap 'echo "== FAIL: \`$BASH_COMMAND\` exited $? (line $LINENO)"' ERR
  echo "== run $i ($variant) in $root"
  tar --numeric-owner -C "$root" -xpf "$BASE_TAR"
  prepare "$root"
  case $variant in
    plain) ;;
    bpo-qemu-utils) preinstall_qemu_utils "$root" "$BPO" ;;
    bookworm-qemu-utils) preinstall_qemu_utils "$root" "$SUITE" ;;
    *) echo "== FAIL: unknown variant $variant"; return 1 ;;
  esac
  cp "$SCRIPT" "$root/install-test-deps.sh"
  # The script builds passt with vhost-user through its sibling passt.sh (runc 1.5.3 through
  # node-components.sh needs Go, which a fresh root lacks: it warns then, as checked below).
  if [ -f "$(dirname "$SCRIPT")/passt.sh" ]; then cp "$(dirname "$SCRIPT")/passt.sh" "$root/passt.sh"; fi
  echo "== install-test-deps.sh (first run)"
  timeout 3600 "${CHROOT_ENV[@]}" /usr/sbin/chroot "$root" bash /install-test-deps.sh
  echo "== tools"
  check_tools "$root"
  echo "== install-test-deps.sh (second run: must be a no-op)"
  out=$(timeout 300 "${CHROOT_ENV[@]}" /usr/sbin/chroot "$root" bash /install-test-deps.sh)
  echo "$out"
  if [[ $out != *"everything present"* ]]; then echo "== FAIL: second run was not a no-op"; return 1; fi
  echo "== PASS"
}

# --- main ---------------------------------------------------------------------------------------
[ -f "$SCRIPT" ] || { log "missing $SCRIPT"; exit 1; }
ensure_base
passed=0 failed=0
for ((i = 1; i <= N; i++)); do
  if [ ${#VARIANTS[@]} -gt 0 ]; then
    variant=${VARIANTS[(i - 1) % ${#VARIANTS[@]}]}
  elif [ "$i" -eq 2 ] || [ "$N" -eq 1 ]; then
    variant=bpo-qemu-utils
  else
    variant=plain
  fi
  logf=$LOGS/run-$i.log
  t0=$SECONDS
  root=$(mktemp -d "$CACHE/root-$i.XXXXXX")
  ROOTS+=("$root")
  set +e
  (run_one "$i" "$variant" "$root") >"$logf" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    SUMMARY=$(awk '/^libvirtd \(libvirt\)/ { l = $3 } /^QEMU emulator version/ { q = $4 } END { print "libvirt " l ", QEMU " q }' "$logf")
    echo "run $i/$N $variant: PASS in $((SECONDS - t0))s ($SUMMARY)"
    :  # the log stays, for the record
  else
    failed=$((failed + 1))
    echo "run $i/$N $variant: FAIL after $((SECONDS - t0))s (log: $logf)"
    tail -15 "$logf" | sed 's/^/    /'
  fi
  cleanup
done
echo "clean-root-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
