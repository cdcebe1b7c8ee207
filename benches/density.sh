#!/usr/bin/env bash
# KubeVirt v1.9.0's density scenario (tests/performance/density.go) through the whole stack on
# one real node of this machine: a real kube-apiserver, etcd, controller-manager and scheduler, a
# real kubelet + containerd + runc + CNI (kvrs_test_cluster::RealNode), kvrs's images from
# scripts/images.sh and the manifests of bins/deploy. A primer VMI, then N minimal VMIs
# (container disk, masquerade, 90Mi memory and 100m CPU as request and limit) created 100 ms
# apart, then N VMs with runStrategy Always. Per batch: creation -> Running P50 / P95 / max, API
# calls per VMI against density.go's thresholds, CPU seconds per component and per VM, RSS per
# VM outside QEMU, and the per-step breakdown of where the time goes. The program is the
# #[ignore]d `density` test of bins/kvrs (it prints figures, asserts none); the node's teardown
# runs when it ends, fails or is killed.
#
# KubeVirt's published anchor (v1.8.0, its performance cluster, under KVM): P50 ~15-20 s for
# VMIs, P95 ~20-30 s for VMs. Where /dev/kvm does not run ordinary guests (kvm_pvm here) the
# guests run under TCG with useEmulation, and the output says so.
#
# usage: [N=100] benches/density.sh   (as root; needs scripts/install-test-deps.sh)
# KVRS_IMAGE_NO_BUILD=1 builds the images from the binaries already in target/debug (scripts/images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export N=${N:-100}
export DENSITY_LOGS=${DENSITY_LOGS:-/tmp/kvrs-density}
mkdir -p "$DENSITY_LOGS"

echo "density: N=$N, $(nproc) cores, load average before the build $(cut -d' ' -f1-3 /proc/loadavg)"
if ! cargo test -q -p kvrs --test density --no-run >"$DENSITY_LOGS/build.log" 2>&1; then
  echo "density: building the bench failed:"; tail -n 40 "$DENSITY_LOGS/build.log"; exit 1
fi
status=0
cargo test -q -p kvrs --test density -- --ignored --nocapture --test-threads 1 2>"$DENSITY_LOGS/stderr.log" || status=$?
if [ "$status" != 0 ]; then
  echo "density: the run failed (status $status); the end of its log ($DENSITY_LOGS/stderr.log):"
  tail -n 60 "$DENSITY_LOGS/stderr.log"
fi

# The node's teardown ran in the program (RealNode's drop, or its watchdog if it died): say
# what, if anything, is left.
left=""
for p in kubelet containerd containerd-shim kube-proxy; do
  pgrep -x "$p" >/dev/null && left="$left process:$p"
done
[ -e /var/lib/kubelet ] && left="$left /var/lib/kubelet"
[ -e /var/lib/kvrs-node ] && left="$left /var/lib/kvrs-node"
grep -qE ' /var/lib/(kubelet|kvrs-node)' /proc/mounts && left="$left mounts"
compgen -G "/sys/fs/cgroup/*/kvrs-node" >/dev/null && left="$left cgroup:kvrs-node"
if [ -n "$left" ]; then
  echo "density: LEFT BEHIND:$left"
  status=1
else
  echo "density: the node left nothing behind (no kubelet, containerd, shim or kube-proxy, no /var/lib/kubelet, mount or cgroup); on the machine now: $(pgrep -c qemu-system || true) QEMU, $(ip netns list | wc -l) netns (other sessions' count too)"
fi
exit "$status"
