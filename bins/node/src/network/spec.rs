//! Reading the VMI's network interfaces: which binding, which network, which pod interface.

use super::facts::PodFacts;
use super::names;
use crate::error::NodeError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::{Interface, Network};
use serde::Serialize;

/// The bindings the node side prepares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Binding {
    /// NAT between the pod interface and a private guest subnet (KubeVirt's default).
    Masquerade,
    /// The pod interface's L2 handed to the guest through an in-pod bridge.
    Bridge,
}

/// One VMI interface the node has to wire, with everything resolved.
#[derive(Clone, Debug)]
pub(crate) struct WiredIface<'a> {
    /// Index in `spec.domain.devices.interfaces`.
    pub index: usize,
    pub iface: &'a Interface,
    pub network: &'a Network,
    /// Index in `spec.networks`.
    pub network_index: usize,
    pub binding: Binding,
    /// The pod interface carrying this network.
    pub pod_iface: String,
    /// Whether this is a secondary (non-default Multus) network.
    pub secondary: bool,
}

/// The interfaces to wire, in spec order. Absent (hot-unplugged) interfaces are skipped.
pub(crate) fn wired_ifaces<'a>(
    vmi: &'a VirtualMachineInstance,
    facts: &PodFacts,
) -> Result<Vec<WiredIface<'a>>, NodeError> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let networks = vmi.spec.networks.as_deref().unwrap_or_default();
    let ordinal = facts.links.iter().any(|l| names::is_ordinal(&l.name));
    let mut out = Vec::new();
    for (index, iface) in ifaces.iter().enumerate() {
        if iface.state.as_deref() == Some("absent") {
            continue;
        }
        // A binding plugin's interface is left to the plugin, as KubeVirt v1.9.0's virt-handler
        // leaves it (netpod.go): its sidecar writes the domain's interface and its CNI plugin
        // (or the backend libvirt starts, e.g. passt) owns the pod side. Only a `managedTap`
        // plugin has the handler make a bridge and tap; this planner sees the VMI alone, not the
        // KubeVirt CR that says which plugin is one, so such plugins get no tap here.
        if iface.binding.is_some() {
            continue;
        }
        let field = format!("spec.domain.devices.interfaces[{index}]");
        let binding = binding_of(iface, &field)?;
        let (network_index, network) = networks
            .iter()
            .enumerate()
            .find(|(_, n)| n.name == iface.name)
            .ok_or_else(|| NodeError::InvalidSpec {
                field: field.clone(),
                reason: format!("no network named {:?} in spec.networks", iface.name),
            })?;
        let secondary = is_secondary(network);
        if !secondary && network.pod.is_none() && network.multus.is_none() {
            return Err(NodeError::Unsupported {
                field: format!("spec.networks[{network_index}]"),
                reason: "only pod and multus networks are supported".into(),
            });
        }
        if secondary && binding == Binding::Masquerade {
            return Err(NodeError::InvalidSpec {
                field,
                reason: "masquerade binding is only allowed on the pod network".into(),
            });
        }
        let pod_iface = if secondary {
            secondary_pod_iface(networks, network, ordinal)
        } else {
            primary_pod_iface(vmi, network)
        };
        out.push(WiredIface {
            index,
            iface,
            network,
            network_index,
            binding,
            pod_iface,
            secondary,
        });
    }
    Ok(out)
}

fn binding_of(iface: &Interface, field: &str) -> Result<Binding, NodeError> {
    let unsupported = |what: &str| NodeError::Unsupported {
        field: field.to_string(),
        reason: format!("{what} binding is not supported by kvrs's node setup"),
    };
    if iface.masquerade.is_some() {
        Ok(Binding::Masquerade)
    } else if iface.bridge.is_some() {
        Ok(Binding::Bridge)
    } else if iface.passt_binding.is_some() || iface.passt.is_some() {
        Err(unsupported("passt"))
    } else if iface.sriov.is_some() {
        Err(unsupported("sriov"))
    } else if iface.slirp.is_some() {
        Err(unsupported("slirp"))
    } else if iface.macvtap.is_some() {
        Err(unsupported("macvtap"))
    } else {
        Err(NodeError::InvalidSpec {
            field: field.to_string(),
            reason: "no binding method (masquerade, bridge, ...) set".into(),
        })
    }
}

fn is_secondary(network: &Network) -> bool {
    network
        .multus
        .as_ref()
        .is_some_and(|m| m.default != Some(true))
}

/// `eth0`, unless the VMI status recorded another pod interface name for the primary network.
fn primary_pod_iface(vmi: &VirtualMachineInstance, network: &Network) -> String {
    vmi.status
        .as_ref()
        .and_then(|s| s.interfaces.as_ref())
        .and_then(|ifs| {
            ifs.iter()
                .find(|s| s.name.as_deref() == Some(network.name.as_str()))
        })
        .and_then(|s| s.pod_interface_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| names::PRIMARY_POD_IFACE.to_string())
}

/// The hashed name, or `net<N>` when the pod uses the ordinal scheme.
fn secondary_pod_iface(networks: &[Network], network: &Network, ordinal: bool) -> String {
    if ordinal {
        let n = networks
            .iter()
            .filter(|n| is_secondary(n))
            .position(|n| n.name == network.name)
            .unwrap_or(0);
        names::ordinal_pod_iface(n + 1)
    } else {
        names::hashed_pod_iface(&network.name)
    }
}
