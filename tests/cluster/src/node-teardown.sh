# shellcheck shell=sh
# Tears a kvrs-test-cluster RealNode down to nothing: the one teardown both `RealNode`'s Drop and
# its watchdog (when the test process dies without unwinding) run. Idempotent; safe to run on a
# machine where only part of a node exists (a crashed earlier run).
#
#   KVRS_NODE_EXES="..." sh node-teardown.sh NODE_DIR KUBELET_ROOT CGROUP_NAME BRIDGE [SYSCTL=VALUE ...]
#
# NODE_DIR      the node's directory (/var/lib/kvrs-node): containerd's root and state, CNI and
#               kubelet configuration, logs. Removed at the end unless KVRS_KEEP_NODE_DIR is set
#               (then only its mounts and runtime state go, logs and configs stay).
# KUBELET_ROOT  /var/lib/kubelet: unmounted and removed.
# CGROUP_NAME   the cgroup (in every hierarchy under /sys/fs/cgroup) that holds containerd, the
#               shims, kubelet, kube-proxy and every pod: everything in it is killed, then it is
#               removed bottom-up.
# BRIDGE        the CNI bridge: links enslaved to it (pod veths) are deleted; the bridge itself
#               belongs to the TestCluster and stays.
# SYSCTL=VALUE  kernel settings to restore (those the kubelet and the bridge plugin change).
#
# Environment (the second node of RealNode::start_second sets the ones that keep its sweep off what
# it shares with the first node):
#   KVRS_NODE_EXES         absolute paths of the node's binaries, for the stray-process sweep
#   KVRS_NODE_NFT_TABLES   nftables tables to delete, comma-separated ("none": none); default
#                          kube-proxy's and portmap's, ip and ip6
#   KVRS_NODE_CNI_NETWORK  the CNI network's name (libcni's result files), default kvrs-pods
#   KVRS_NODE_OWN_BRIDGE   non-empty: the node owns BRIDGE, which is deleted at the end
#
# NODE_DIR/run/extra-paths lists further host paths, one per line (RealNode::remove_on_teardown:
# hostPath directories pods create, e.g. /var/run/kubevirt): unmounted and removed like the rest.
#
# Exit status 0 when nothing is left; 1 (with a message on stderr per leftover) otherwise.
set -u
NODE_DIR=$1
KUBELET_ROOT=$2
CGROUP_NAME=$3
BRIDGE=$4
shift 4

say() { echo "node-teardown: $*" >&2; }

# Read now: NODE_DIR goes at the end.
EXTRA=""
[ -f "$NODE_DIR/run/extra-paths" ] && EXTRA=$(cat "$NODE_DIR/run/extra-paths")

# Every process in the node's cgroup (the pids hierarchy sees every task; fall back to any).
node_pids() {
  for h in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/cpu /sys/fs/cgroup/unified; do
    if [ -d "$h/$CGROUP_NAME" ]; then
      find "$h/$CGROUP_NAME" -name cgroup.procs -exec cat {} + 2>/dev/null
      return
    fi
  done
}

# Processes of the node's binaries (KVRS_NODE_EXES: their absolute paths, space-separated) that
# are somehow outside the cgroup.
stray_pids() {
  [ -n "${KVRS_NODE_EXES:-}" ] || return 0
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    for e in $KVRS_NODE_EXES; do
      [ "$exe" = "$e" ] && echo "${p#/proc/}"
    done
  done
}

thaw() {
  f=/sys/fs/cgroup/freezer/$CGROUP_NAME
  [ -d "$f" ] || return 0
  find "$f" -name freezer.state | while read -r s; do echo THAWED >"$s" 2>/dev/null; done
}

# 1. The kubelet and kube-proxy first (so nothing restarts containers), then the pods' processes
#    with SIGTERM and a short grace, then everything (containerd, shims, runc) with SIGKILL.
for pidfile in "$NODE_DIR/run/kubelet.pid" "$NODE_DIR/run/kube-proxy.pid"; do
  [ -f "$pidfile" ] && kill -TERM "$(cat "$pidfile")" 2>/dev/null
done
pods=/sys/fs/cgroup/pids/$CGROUP_NAME/kubepods
if [ -d "$pods" ]; then
  thaw
  pids=$(find "$pods" -name cgroup.procs -exec cat {} + 2>/dev/null)
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  i=0
  while [ $i -lt 20 ] && [ -n "$(find "$pods" -name cgroup.procs -exec cat {} + 2>/dev/null)" ]; do
    sleep 0.25
    i=$((i + 1))
  done
fi
i=0
while [ $i -lt 100 ]; do
  pids="$(node_pids) $(stray_pids)"
  pids=$(echo $pids)
  [ -z "$pids" ] && break
  thaw
  kill -KILL $pids 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done

# 2. Every mount under the node's directories, deepest first, until none is left (kubelet makes its
#    root a shared bind mount of itself; overlays, image volumes, netns files, secrets' tmpfs).
mounts_under() {
  printf '%s\n%s\n%s\n' "$NODE_DIR" "$KUBELET_ROOT" "$EXTRA" | awk '
    NR == FNR { if ($0 != "") dirs[$0] = 1; next }
    {
      m = $5; gsub(/\\040/, " ", m)
      for (d in dirs) if (m == d || index(m, d "/") == 1) { print length(m) " " m; break }
    }' - /proc/self/mountinfo | sort -rn | cut -d' ' -f2-
}
i=0
while [ $i -lt 10 ]; do
  left=$(mounts_under)
  [ -z "$left" ] && break
  echo "$left" | while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  i=$((i + 1))
done

# 3. The node's cgroups, bottom-up, in every hierarchy.
for h in /sys/fs/cgroup/*; do
  [ -d "$h/$CGROUP_NAME" ] || continue
  find "$h/$CGROUP_NAME" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# 4. Pod veths left on the bridge (normally gone with their network namespaces), nftables tables
#    of kube-proxy and the portmap plugin.
if [ -d "/sys/class/net/$BRIDGE/brif" ]; then
  for l in /sys/class/net/"$BRIDGE"/brif/*; do
    [ -e "$l" ] && ip link del "${l##*/}" 2>/dev/null
  done
fi
TABLES=${KVRS_NODE_NFT_TABLES:-ip kube-proxy,ip6 kube-proxy,ip cni_hostport,ip6 cni_hostport}
[ "$TABLES" = none ] && TABLES=""
echo "$TABLES" | tr , '\n' | while IFS= read -r t; do
  [ -n "$t" ] || continue
  # shellcheck disable=SC2086
  nft list table $t >/dev/null 2>&1 && nft delete table $t 2>/dev/null
done

# 5. Kernel settings back as they were.
for kv in "$@"; do
  k=${kv%%=*}
  v=${kv#*=}
  f=/proc/sys/$(echo "$k" | tr . /)
  [ -f "$f" ] && [ "$(cat "$f")" != "$v" ] && echo "$v" >"$f"
done

# 6. The kubelet's symlinks in /var/log/containers (into our pod logs), the directory if we made it.
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*; do
    [ -L "$l" ] || continue
    case "$(readlink "$l")" in "$NODE_DIR"/*) rm -f "$l" ;; esac
  done
  [ -f "$NODE_DIR/run/made-var-log-containers" ] && rmdir /var/log/containers 2>/dev/null
fi

# 7. libcni's result cache (/var/lib/cni, not configurable through containerd): the entries of our
#    network and the loopback entries of the same sandboxes, the directory if we made it.
NET=${KVRS_NODE_CNI_NETWORK:-kvrs-pods}
if [ -d /var/lib/cni/results ]; then
  for f in /var/lib/cni/results/"$NET"-*; do
    [ -e "$f" ] || continue
    id=${f#/var/lib/cni/results/"$NET"-}
    id=${id%-*}
    rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
  done
  if [ -f "$NODE_DIR/run/made-var-lib-cni" ]; then
    rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null
  fi
fi

# 8. The directories, once nothing is mounted there any more; host directories the node created
#    as mount points of its own namespace (NODE_DIR/run/made-paths) if empty; its own bridge.
MADE=""
[ -f "$NODE_DIR/run/made-paths" ] && MADE=$(cat "$NODE_DIR/run/made-paths")
if [ -n "${KVRS_NODE_OWN_BRIDGE:-}" ] && [ -e "/sys/class/net/$BRIDGE" ]; then
  ip link del "$BRIDGE" 2>/dev/null || { say "could not delete bridge $BRIDGE"; }
fi
status=0
left=$(mounts_under)
if [ -n "$left" ]; then
  say "still mounted, directories kept: $(echo $left)"
  status=1
else
  rm -rf "$KUBELET_ROOT"
  echo "$EXTRA" | while IFS= read -r p; do [ -n "$p" ] && rm -rf "$p"; done
  if [ -n "${KVRS_KEEP_NODE_DIR:-}" ]; then
    rm -rf "$NODE_DIR/containerd" "$NODE_DIR/kubelet-plugins"
  else
    rm -rf "$NODE_DIR"
  fi
  echo "$MADE" | while IFS= read -r p; do [ -n "$p" ] && rmdir "$p" 2>/dev/null; done
fi
left=$(echo $(node_pids) $(stray_pids))
[ -n "$left" ] && { say "processes still alive: $left"; status=1; }
for h in /sys/fs/cgroup/*; do
  [ -d "$h/$CGROUP_NAME" ] && { say "cgroup left: $h/$CGROUP_NAME"; status=1; }
done
exit $status
