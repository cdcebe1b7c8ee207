//! The default pod network and its interface.

use crate::api::VirtualMachineInstanceSpec;
use crate::api::{Interface, InterfaceBridge, InterfaceMasquerade, Network, PodNetwork};
use crate::config::ClusterConfig;

/// Name of the interface and network KubeVirt adds for the pod network.
pub(crate) const DEFAULT_NETWORK_NAME: &str = "default";

/// Why the cluster's default binding cannot connect a VMI to the pod network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefaultInterfaceError {
    /// The cluster's default binding is `slirp`, which KubeVirt refuses since v1.3.
    #[error("slirp interface is deprecated as of v1.3")]
    SlirpDeprecated,
}

/// A VMI that names neither networks nor interfaces (and did not opt out with
/// `autoattachPodInterface: false`) is connected to the pod network through the cluster's
/// default binding (`bridge` unless configured otherwise; an empty setting is that default).
///
/// Both KubeVirt's VM controller (before it creates a VMI) and its mutating webhook run this
/// step; the controller fails the start on the error, the webhook leaves the VMI as it is for the
/// validation to report. A binding kvrs does not know adds nothing.
pub(crate) fn add_default_pod_interface(
    spec: &mut VirtualMachineInstanceSpec,
    config: &ClusterConfig,
) -> Result<(), DefaultInterfaceError> {
    if spec.domain.devices.autoattach_pod_interface == Some(false) {
        return Ok(());
    }
    let has_networks = spec.networks.as_ref().is_some_and(|n| !n.is_empty());
    let has_ifaces = spec
        .domain
        .devices
        .interfaces
        .as_ref()
        .is_some_and(|i| !i.is_empty());
    if has_networks || has_ifaces {
        return Ok(());
    }
    let mut iface = Interface {
        name: DEFAULT_NETWORK_NAME.to_string(),
        ..Default::default()
    };
    match config.default_network_interface.as_str() {
        "bridge" | "" => iface.bridge = Some(InterfaceBridge::default()),
        "masquerade" => iface.masquerade = Some(InterfaceMasquerade::default()),
        "slirp" => return Err(DefaultInterfaceError::SlirpDeprecated),
        other => {
            tracing::debug!(binding = other, "no default pod interface for this binding");
            return Ok(());
        }
    }
    spec.domain.devices.interfaces = Some(vec![iface]);
    spec.networks = Some(vec![Network {
        name: DEFAULT_NETWORK_NAME.to_string(),
        pod: Some(PodNetwork::default()),
        ..Default::default()
    }]);
    Ok(())
}

/// The webhook's use of [`add_default_pod_interface`]: an unusable default binding adds nothing.
pub(super) fn set_default_pod_interface(
    spec: &mut VirtualMachineInstanceSpec,
    config: &ClusterConfig,
) {
    if let Err(e) = add_default_pod_interface(spec, config) {
        tracing::debug!(error = %e, "no default pod interface");
    }
}
