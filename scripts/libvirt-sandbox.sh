#!/usr/bin/env bash
# Runs a command the way a virt-launcher pod would see the node, without changing the host:
# a private mount namespace (`unshare -m`) in which
#   - /dev/kvm is masked by an inaccessible empty file when the target user cannot open it (a libvirt
#     daemon that sees a /dev/kvm QEMU cannot use re-probes QEMU on every call: ~1 min per define),
#   - /etc/passwd and /etc/group gain a `qemu` entry for the target UID when it has none (libvirt
#     needs a passwd entry for the user it runs as),
# then the command runs as that UID/GID with no supplementary groups (setpriv).
#
# usage: libvirt-sandbox.sh [--uid N] [--state-dir DIR] [--keep-kvm] [--bind SRC:DST]... -- COMMAND [ARGS...]
#   --uid N        user and group to run as (default 107, KubeVirt's qemu user); 0 keeps root
#   --state-dir D  where the masked files live (default: a new directory under /tmp, kept)
#   --keep-kvm     never mask /dev/kvm
#   --bind SRC:DST bind-mount SRC over DST inside the namespace (e.g. a pod's directory tree over
#                  /run, so /var/run/kubevirt... are the test's directories), before dropping root
# Must start as root. No argument is ever passed through a shell string.
set -euo pipefail

uid=107
state=""
keep_kvm=0
binds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --uid) uid=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --keep-kvm) keep_kvm=1; shift ;;
    --bind) binds+=("$2"); shift 2 ;;
    --inner) inner=1; shift ;;
    --) shift; break ;;
    *) echo "libvirt-sandbox.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "libvirt-sandbox.sh: no command given" >&2; exit 2; }
case "$uid" in ''|*[!0-9]*) echo "libvirt-sandbox.sh: --uid must be a number" >&2; exit 2 ;; esac
if [ "$(id -u)" != 0 ]; then
  echo "libvirt-sandbox.sh: must start as root (it makes a mount namespace)" >&2
  exit 1
fi

if [ -z "${inner:-}" ]; then
  if [ -z "$state" ]; then state=$(mktemp -d /tmp/kvrs-sandbox.XXXXXX); fi
  mkdir -p "$state"
  args=(--inner --uid "$uid" --state-dir "$state")
  [ "$keep_kvm" = 1 ] && args+=(--keep-kvm)
  for b in "${binds[@]}"; do args+=(--bind "$b"); done
  exec unshare -m --propagation private -- "$0" "${args[@]}" -- "$@"
fi

# --- inside the private mount namespace --------------------------------------------------------
for b in "${binds[@]}"; do
  src=${b%%:*}
  dst=${b#*:}
  [ -e "$src" ] || { echo "libvirt-sandbox.sh: --bind source $src missing" >&2; exit 2; }
  mount --bind "$src" "$dst"
done
if [ "$keep_kvm" = 0 ] && [ -e /dev/kvm ]; then
  usable=0
  if [ "$uid" = 0 ]; then
    (: <>/dev/kvm) 2>/dev/null && usable=1
  else
    setpriv --reuid "$uid" --regid "$uid" --clear-groups -- sh -c ': <>/dev/kvm' 2>/dev/null && usable=1
  fi
  if [ "$usable" = 0 ]; then
    : >"$state/kvm-mask"
    chmod 000 "$state/kvm-mask"
    mount --bind "$state/kvm-mask" /dev/kvm
  fi
fi

if [ "$uid" != 0 ]; then
  if ! getent passwd "$uid" >/dev/null; then
    cp /etc/passwd "$state/passwd"
    printf 'qemu:x:%s:%s:qemu user:/home/qemu:/usr/sbin/nologin\n' "$uid" "$uid" >>"$state/passwd"
    mount --bind "$state/passwd" /etc/passwd
  fi
  if ! getent group "$uid" >/dev/null; then
    cp /etc/group "$state/group"
    printf 'qemu:x:%s:\n' "$uid" >>"$state/group"
    mount --bind "$state/group" /etc/group
  fi
  exec setpriv --reuid "$uid" --regid "$uid" --clear-groups -- "$@"
fi
exec "$@"
