//! Reading the VMI's network interfaces: which binding, which network, which pod interface.

use super::facts::{PodFacts, PodLink};
use super::names;
use crate::error::NodeError;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::{Interface, Network};
use serde::Serialize;
use std::collections::BTreeMap;

/// The `domainAttachmentType` of a binding plugin whose pod side virt-handler makes itself.
pub const MANAGED_TAP: &str = "managedTap";

/// The bindings the node side prepares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Binding {
    /// NAT between the pod interface and a private guest subnet (KubeVirt's default).
    Masquerade,
    /// The pod interface's L2 handed to the guest through an in-pod bridge.
    Bridge,
    /// A network binding plugin with `domainAttachmentType: managedTap`: the bridge binding's
    /// links without its DHCP (the plugin gives the guest its address).
    #[serde(rename = "managedTap")]
    ManagedTap,
}

/// The cluster's network binding plugins as the node side needs them: each plugin's
/// `domainAttachmentType` by plugin name (the KubeVirt CR's
/// `spec.configuration.network.binding`). The VMI names its plugin only; whether the handler
/// must make the plugin's pod side is the cluster's word, so it comes in beside the VMI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingPlugins {
    /// Plugin name -> its `domainAttachmentType` (`tap`, `managedTap`); a plugin without one is
    /// absent.
    pub attachment_by_name: BTreeMap<String, String>,
}

impl BindingPlugins {
    /// The `domainAttachmentType` of plugin `name`, if the cluster registers it with one.
    pub fn attachment(&self, name: &str) -> Option<&str> {
        self.attachment_by_name.get(name).map(String::as_str)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for BindingPlugins {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        BindingPlugins {
            attachment_by_name: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
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

impl WiredIface<'_> {
    /// The spec field of this interface, for errors.
    pub fn field(&self) -> String {
        format!("spec.domain.devices.interfaces[{}]", self.index)
    }

    /// The pod link `name`, or KubeVirt's "pod link (NAME) is missing" naming this interface.
    pub fn pod_link<'f>(&self, facts: &'f PodFacts, name: &str) -> Result<&'f PodLink, NodeError> {
        facts.link(name).ok_or_else(|| NodeError::PodLinkMissing {
            field: self.field(),
            link: name.to_string(),
        })
    }
}

/// The interfaces to wire, in spec order. Absent (hot-unplugged) interfaces are skipped, and
/// so are binding plugins' interfaces unless `plugins` says the plugin is `managedTap`.
pub(crate) fn wired_ifaces<'a>(
    vmi: &'a VirtualMachineInstance,
    facts: &PodFacts,
    plugins: &BindingPlugins,
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
        let field = format!("spec.domain.devices.interfaces[{index}]");
        let Some(binding) = binding_of(iface, &field, plugins)? else {
            continue;
        };
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

/// The binding the node wires for `iface`; `None` for an interface left to its binding plugin.
fn binding_of(
    iface: &Interface,
    field: &str,
    plugins: &BindingPlugins,
) -> Result<Option<Binding>, NodeError> {
    let unsupported = |what: &str| NodeError::Unsupported {
        field: field.to_string(),
        reason: format!("{what} binding is not supported by kvrs's node setup"),
    };
    if iface.masquerade.is_some() {
        Ok(Some(Binding::Masquerade))
    } else if iface.bridge.is_some() {
        Ok(Some(Binding::Bridge))
    } else if let Some(plugin) = &iface.binding {
        // As KubeVirt v1.9.0's virt-handler (netpod.go): only a `managedTap` plugin has the
        // handler make the pod side (bridge, tap, dummy). Any other plugin's interface — `tap`
        // or no attachment type, or a plugin the cluster does not register — is left to the
        // plugin: its sidecar writes the domain's interface and its CNI plugin (or the backend
        // libvirt starts, e.g. passt) owns the pod side.
        Ok((plugins.attachment(&plugin.name) == Some(MANAGED_TAP)).then_some(Binding::ManagedTap))
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
