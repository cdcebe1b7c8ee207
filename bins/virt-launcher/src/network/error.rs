//! Why the pod network could not be prepared for the domain. Every message names the VMI
//! interface, so a failed SyncVMI says which NIC is at fault.

/// A network phase-2 failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// A pod link could not be read (missing, or netlink refused).
    #[error("interface {iface}: pod link {link}: {reason}")]
    Link {
        /// The VMI interface.
        iface: String,
        /// The pod link looked up.
        link: String,
        /// What went wrong.
        reason: String,
    },
    /// The DHCP lease could not be worked out (bad CIDR, unreadable vif cache, bad options).
    #[error("interface {iface}: DHCP configuration: {reason}")]
    Config {
        /// The VMI interface.
        iface: String,
        /// What went wrong.
        reason: String,
    },
    /// The DHCP server could not start (socket, bind, device, marker file).
    #[error("interface {iface}: failed to start DHCP server on {bridge}: {reason}")]
    DhcpStart {
        /// The VMI interface.
        iface: String,
        /// The bridge it serves on.
        bridge: String,
        /// What went wrong.
        reason: String,
    },
}

impl NetworkError {
    /// A [`NetworkError::Config`].
    pub fn config(iface: &str, reason: impl Into<String>) -> NetworkError {
        NetworkError::Config {
            iface: iface.to_string(),
            reason: reason.into(),
        }
    }
}
