//! The default pod network and its interface.

use crate::api::VirtualMachineInstanceSpec;
use crate::api::{Interface, InterfaceBridge, InterfaceMasquerade, Network, PodNetwork};
use crate::config::ClusterConfig;

/// Name of the interface and network KubeVirt adds for the pod network.
pub(crate) const DEFAULT_NETWORK_NAME: &str = "default";

/// A VMI that names neither networks nor interfaces (and did not opt out with
/// `autoattachPodInterface: false`) is connected to the pod network through the cluster's
/// default binding (`bridge` unless configured otherwise).
///
/// A binding kvrs does not know (KubeVirt refuses `slirp` since v1.3) adds nothing; the
/// validation then reports the VMI as it is.
pub(super) fn set_default_pod_interface(
    spec: &mut VirtualMachineInstanceSpec,
    config: &ClusterConfig,
) {
    if spec.domain.devices.autoattach_pod_interface == Some(false) {
        return;
    }
    let has_networks = spec.networks.as_ref().is_some_and(|n| !n.is_empty());
    let has_ifaces = spec
        .domain
        .devices
        .interfaces
        .as_ref()
        .is_some_and(|i| !i.is_empty());
    if has_networks || has_ifaces {
        return;
    }
    let mut iface = Interface {
        name: DEFAULT_NETWORK_NAME.to_string(),
        ..Default::default()
    };
    match config.default_network_interface.as_str() {
        "bridge" => iface.bridge = Some(InterfaceBridge::default()),
        "masquerade" => iface.masquerade = Some(InterfaceMasquerade::default()),
        other => {
            tracing::debug!(binding = other, "no default pod interface for this binding");
            return;
        }
    }
    spec.domain.devices.interfaces = Some(vec![iface]);
    spec.networks = Some(vec![Network {
        name: DEFAULT_NETWORK_NAME.to_string(),
        pod: Some(PodNetwork::default()),
        ..Default::default()
    }]);
}
