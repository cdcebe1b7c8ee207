//! The one error type of the node side, with a stable label per failure kind.
//!
//! The handler turns these into VMI events and log lines; the label is what it matches on
//! (and what metrics are keyed by), the message is what a person reads: it always names the
//! interface, path or spec field involved and the reason.

use std::path::PathBuf;

/// Everything that can go wrong preparing a pod from the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The pod's network namespace could not be opened or entered.
    #[error("entering network namespace {path}: {reason}")]
    NetnsEnter {
        /// The namespace file (`/proc/<pid>/ns/net` or `/run/netns/<name>`).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A netlink request about a link or address failed.
    #[error("netlink {op} on {iface}: {reason}")]
    Netlink {
        /// The link the request was about.
        iface: String,
        /// What was asked (`create bridge`, `set mtu`, ...).
        op: String,
        /// The kernel's (or the socket's) answer.
        reason: String,
    },
    /// The `nft` binary failed or could not be run.
    #[error("nft: {reason}")]
    Nft {
        /// Why, with nft's own output when it printed any.
        reason: String,
    },
    /// A tap device could not be created.
    #[error("tap device {name}: {reason}")]
    Tap {
        /// The tap's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A `/proc/sys/net` knob could not be written.
    #[error("sysctl {key}: {reason}")]
    Sysctl {
        /// The knob, e.g. `net/ipv4/ip_forward`.
        key: String,
        /// Why.
        reason: String,
    },
    /// The VMI asks for something the node side cannot (yet) prepare.
    #[error("{field}: {reason}")]
    Unsupported {
        /// The spec field, e.g. `spec.domain.devices.interfaces[1]`.
        field: String,
        /// What is not supported.
        reason: String,
    },
    /// The VMI spec is inconsistent or malformed where the node side reads it.
    #[error("{field}: {reason}")]
    InvalidSpec {
        /// The spec field.
        field: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The pod does not look the way the VMI needs it (e.g. its interface is missing).
    #[error("pod interface {iface}: {reason}")]
    PodInterface {
        /// The pod interface name.
        iface: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The pod has no link for a VMI interface the node must wire (KubeVirt's "pod link (%s)
    /// is missing"): the CNI (or Multus) did not make the network the VMI asks for.
    #[error("{field}: pod link ({link}) is missing")]
    PodLinkMissing {
        /// The VMI interface, e.g. `spec.domain.devices.interfaces[0]`.
        field: String,
        /// The pod link it needs (`eth0`, `pod16477688c0e`).
        link: String,
    },
    /// A device node could not be claimed for the VM's user.
    #[error("device {path}: {reason}")]
    Device {
        /// The device path relative to the pod root.
        path: String,
        /// Why.
        reason: String,
    },
    /// A container disk is not where, or not what, the launcher expects.
    #[error("{field}: container disk {path}: {reason}")]
    ContainerDisk {
        /// The volume, e.g. `spec.volumes[0]`.
        field: String,
        /// The path inside the pod.
        path: String,
        /// Why.
        reason: String,
    },
    /// The DHCP cache file for the launcher could not be written or read.
    #[error("dhcp cache {path}: {reason}")]
    DhcpCache {
        /// The cache file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The node's mount namespace (where hotplug mounts are made) could not be entered.
    #[error("entering mount namespace {path}: {reason}")]
    MountnsEnter {
        /// The namespace file (`/proc/1/ns/mnt`).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A hotplugged volume could not be mounted into, or removed from, the launcher pod.
    #[error("{action} hotplug volume {volume}: {reason}")]
    Hotplug {
        /// What failed, as KubeVirt words it (`failed to mount filesystem`, ...).
        action: String,
        /// The volume's name (`spec.volumes[].name`).
        volume: String,
        /// Why; ends in `waiting for hotplug mount` while the attachment pod is not ready.
        reason: String,
    },
    /// The launcher's PID could not be learned from its socket.
    #[error("peer credentials of {path}: {reason}")]
    PeerCredentials {
        /// The Unix socket.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl NodeError {
    /// A short, stable name of the failure kind, for events, metrics and tests.
    pub fn label(&self) -> &'static str {
        match self {
            NodeError::NetnsEnter { .. } => "netns_enter",
            NodeError::Netlink { .. } => "netlink",
            NodeError::Nft { .. } => "nft",
            NodeError::Tap { .. } => "tap",
            NodeError::Sysctl { .. } => "sysctl",
            NodeError::Unsupported { .. } => "unsupported",
            NodeError::InvalidSpec { .. } => "invalid_spec",
            NodeError::PodInterface { .. } => "pod_interface",
            NodeError::PodLinkMissing { .. } => "pod_link_missing",
            NodeError::Device { .. } => "device",
            NodeError::ContainerDisk { .. } => "container_disk",
            NodeError::DhcpCache { .. } => "dhcp_cache",
            NodeError::PeerCredentials { .. } => "peer_credentials",
            NodeError::Hotplug { .. } => "hotplug",
            NodeError::MountnsEnter { .. } => "mountns_enter",
        }
    }

    pub(crate) fn netlink(iface: &str, op: impl Into<String>, reason: impl ToString) -> Self {
        NodeError::Netlink {
            iface: iface.to_string(),
            op: op.into(),
            reason: reason.to_string(),
        }
    }
}
