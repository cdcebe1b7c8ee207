#!/usr/bin/env bash
# Runs a virt-launcher-monitor as the `compute` container of a launcher pod, the same way for
# KubeVirt's Go launcher and kvrs's (tests/kvlauncher, benches/compare-launchers.sh), without
# changing the host:
#   - a private mount namespace AND a private PID namespace with its own /proc (KubeVirt's monitor
#     SIGTERMs every `qemu-system` it finds in /proc on exit: on a bare host that would be anyone's);
#     the monitor is the namespace's PID 1, as a container's entrypoint is;
#   - the pod directory bound over /run (so /var/run/kubevirt... are the pod's directories);
#   - a container's /dev, without /dev/kvm (the VM runs under TCG, emulation allowed);
#   - /etc/passwd and /etc/group gain a `qemu` entry (107) when they have none, as in KubeVirt's image;
#   - with --kubevirt-root DIR, what KubeVirt's launcher image has and this host lacks, layered
#     (read-only overlayfs mounts of this namespace) over /usr/bin, /usr/sbin and
#     /etc/libvirt: DIR/usr/bin/virt-launcher, DIR/usr/sbin/virtqemud, DIR/etc/libvirt/*;
#   - then the command runs as 107:107, no supplementary groups, with CAP_NET_BIND_SERVICE
#     inheritable + ambient (KubeVirt's compute container adds it; its monitor hands it on to the
#     launcher as an ambient capability and fails to start it without).
#
# usage: launcher-pod-harness.sh --pod DIR --state-dir DIR [--kubevirt-root DIR] -- COMMAND [ARGS...]
# Must start as root. No argument is ever passed through a shell string. SIGTERM to this script's
# process (unshare) kills the whole pod (--kill-child).
set -euo pipefail

die() {
  echo "launcher-pod-harness.sh: $*" >&2
  exit 2
}

pod=""
state=""
kvroot=""
inner=0
while [ $# -gt 0 ]; do
  case "$1" in
    --pod) pod=$2; shift 2 ;;
    --state-dir) state=$2; shift 2 ;;
    --kubevirt-root) kvroot=$2; shift 2 ;;
    --inner) inner=1; shift ;;
    --) shift; break ;;
    *) die "unknown option $1" ;;
  esac
done
[ $# -gt 0 ] || die "no command given"
[ -n "$pod" ] && [ -d "$pod" ] || die "--pod DIR (an existing directory) is required"
[ -n "$state" ] || die "--state-dir DIR is required"
[ "$(id -u)" = 0 ] || die "must start as root (it makes mount and PID namespaces)"
uid=107

if [ "$inner" = 0 ]; then
  mkdir -p "$state"
  args=(--inner --pod "$pod" --state-dir "$state")
  [ -n "$kvroot" ] && args+=(--kubevirt-root "$kvroot")
  exec unshare --mount --propagation private --pid --fork --mount-proc --kill-child=SIGKILL \
    -- "$0" "${args[@]}" -- "$@"
fi

# --- inside the pod's mount + PID namespaces -----------------------------------------------------
mount --bind "$pod" /run
mount -t tmpfs -o mode=0700 kvrs-pod-state "$state"

if [ -n "$kvroot" ]; then
  for dir in usr/bin usr/sbin etc/libvirt; do
    [ -d "$kvroot/$dir" ] || continue
    # Read-only, two lower layers: KubeVirt's files over the host's (none is ever written).
    mount -t overlay "kvrs-pod-${dir//\//-}" -o "lowerdir=$kvroot/$dir:/$dir" "/$dir"
  done
fi

# A container's /dev: the usual nodes and no /dev/kvm (KubeVirt's launcher decides "emulation"
# from /dev/kvm being absent, not unusable; and a libvirt that sees a /dev/kvm QEMU cannot use
# re-probes QEMU on every call).
mkdir -p "$state/dev/pts" "$state/dev/shm"
for node in null zero full random urandom tty ptmx; do
  : >"$state/dev/$node"
  mount --bind "/dev/$node" "$state/dev/$node"
done
mount --bind /dev/pts "$state/dev/pts"
mount --bind /dev/shm "$state/dev/shm"
ln -s /proc/self/fd "$state/dev/fd"
ln -s /proc/self/fd/0 "$state/dev/stdin"
ln -s /proc/self/fd/1 "$state/dev/stdout"
ln -s /proc/self/fd/2 "$state/dev/stderr"
mount --rbind "$state/dev" /dev

# By name: KubeVirt's qemu.conf says user = group = "qemu" (here GID 107 may be another group's).
if ! getent passwd qemu >/dev/null; then
  cp /etc/passwd "$state/passwd"
  printf 'qemu:x:%s:%s:qemu user:/home/qemu:/usr/sbin/nologin\n' "$uid" "$uid" >>"$state/passwd"
  mount --bind "$state/passwd" /etc/passwd
fi
if ! getent group qemu >/dev/null; then
  cp /etc/group "$state/group"
  printf 'qemu:x:%s:\n' "$uid" >>"$state/group"
  mount --bind "$state/group" /etc/group
fi
# The figures count from here, the container's entrypoint starting (the set-up above is the
# runtime's): the driver reads this line from the pod's log.
echo "launcher-pod-harness.sh: exec at $(date +%s.%N)" >&2
exec setpriv --reuid "$uid" --regid "$uid" --clear-groups \
  --inh-caps +net_bind_service --ambient-caps +net_bind_service -- "$@"
