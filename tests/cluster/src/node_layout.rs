//! Where each of the (at most two) real nodes of a machine lives: names, addresses, ports,
//! directories, cgroups, and what of the machine it owns. The first node is the one
//! [`RealNode::start`](crate::RealNode::start) has always started; the second one
//! ([`RealNode::start_second`](crate::RealNode::start_second)) runs beside it.
//!
//! # Why the second node looks like this
//!
//! - **Its own containerd** (socket, root, state, shim sockets, runc root, stream port 10011): a
//!   kubelet removes every CRI sandbox it does not know of, so two kubelets on one containerd
//!   would kill each other's pods.
//! - **Its own mount namespace** (created with `unshare --mount --propagation private` by a
//!   holder process in the node's cgroup; containerd and the kubelet are started inside it with
//!   `nsenter`): DaemonSets such as virt-handler's mount *fixed* host paths (`/var/lib/kubelet`,
//!   `/var/run/kubevirt`, ...). On one machine the two nodes' pods would share those directories
//!   — one handler would see the other node's launcher sockets and device-plugin registrations.
//!   Inside the second node's namespace each such path is a bind mount of a directory of its own
//!   (under `<node dir>/host/`), made shared there (as a systemd host has `/`), so the same
//!   DaemonSet runs unchanged on both nodes and each pod sees only its node's files. Nothing it
//!   mounts propagates to the machine's namespace: its mounts disappear with its last process.
//! - **Its own bridge and pod subnet** (`kvrs-cni1`, `10.252.1.0/24`), created and removed by the
//!   node: both bridges are in the host's network namespace, so the kernel routes between the
//!   two pod networks (and to the API server on the first bridge) with no further setup.
//! - **No kube-proxy**: the first node's kube-proxy programs the host's nftables, which is the
//!   one network namespace both nodes' pods are routed through; a second one would fight it over
//!   the same tables.
//! - **No kernel settings recorded**: the first node records and restores them; the second node
//!   must be stopped before the first (its kubelet sets the same values at start).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// Which of the machine's two node slots a [`RealNode`](crate::RealNode) occupies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeSlot {
    /// [`RealNode::start`](crate::RealNode::start): the standard kubelet paths, kube-proxy, the
    /// cluster's bridge.
    First,
    /// [`RealNode::start_second`](crate::RealNode::start_second): see the module documentation.
    Second,
}

/// The second node's name.
pub const SECOND_NODE_NAME: &str = "kvrs-node-b";
/// The second node's bridge (created and removed by the node itself).
pub const SECOND_NODE_BRIDGE: &str = "kvrs-cni1";
/// The second node's bridge address and InternalIP.
pub const SECOND_NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 252, 1, 1);
/// The second node's pod subnet.
pub const SECOND_POD_SUBNET: &str = "10.252.1.0/24";
/// The second node's directory (containerd, CNI, configs, logs, and `kubelet/`, its kubelet's
/// root, seen as `/var/lib/kubelet` inside its mount namespace).
pub const SECOND_NODE_DIR: &str = "/var/lib/kvrs-node-b";

/// Everything that differs between the two slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub slot: NodeSlot,
    pub name: &'static str,
    pub bridge: &'static str,
    pub ip: Ipv4Addr,
    pub subnet: &'static str,
    pub range_start: &'static str,
    /// The node's own directory.
    pub dir: &'static str,
    /// Where the kubelet's root is stored on the machine (`/var/lib/kubelet` for the first
    /// node; for the second, a directory bind-mounted there inside its mount namespace).
    pub kubelet_store: &'static str,
    /// The cgroup (in every hierarchy) holding the node's daemons and pods.
    pub cgroup: &'static str,
    /// The CNI network's name (libcni's cache entries in `/var/lib/cni/results` start with it).
    pub cni_network: &'static str,
    pub kubelet_healthz_port: u16,
    pub stream_port: u16,
}

pub(crate) const FIRST: Layout = Layout {
    slot: NodeSlot::First,
    name: crate::node::NODE_NAME,
    bridge: crate::node::NODE_BRIDGE,
    ip: crate::node::NODE_IP,
    subnet: crate::node::POD_SUBNET,
    range_start: "10.252.0.10",
    dir: crate::node::NODE_DIR,
    kubelet_store: crate::node::KUBELET_ROOT,
    cgroup: "kvrs-node",
    cni_network: "kvrs-pods",
    kubelet_healthz_port: 10248,
    stream_port: 10010,
};

pub(crate) const SECOND: Layout = Layout {
    slot: NodeSlot::Second,
    name: SECOND_NODE_NAME,
    bridge: SECOND_NODE_BRIDGE,
    ip: SECOND_NODE_IP,
    subnet: SECOND_POD_SUBNET,
    range_start: "10.252.1.10",
    dir: SECOND_NODE_DIR,
    kubelet_store: "/var/lib/kvrs-node-b/kubelet",
    cgroup: "kvrs-node-b",
    cni_network: "kvrs2-pods",
    kubelet_healthz_port: 10258,
    stream_port: 10011,
};

impl Layout {
    pub fn of(slot: NodeSlot) -> Layout {
        match slot {
            NodeSlot::First => FIRST,
            NodeSlot::Second => SECOND,
        }
    }

    pub fn second(&self) -> bool {
        self.slot == NodeSlot::Second
    }

    pub fn dir(&self) -> &'static Path {
        Path::new(self.dir)
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir().join("logs")
    }

    pub fn config_dir(&self) -> PathBuf {
        self.dir().join("config")
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.dir().join("containerd/containerd.sock")
    }

    /// Where a host path made private to the second node is stored on the machine
    /// (`/run/kubevirt` → `<dir>/host/run/kubevirt`).
    pub fn private_store(&self, host_path: &Path) -> PathBuf {
        let relative = host_path.strip_prefix("/").unwrap_or(host_path);
        self.dir().join("host").join(relative)
    }
}
