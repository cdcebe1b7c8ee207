//! `<interface>`: one per non-absent VMI interface that the domain itself attaches (tap for
//! bridge/masquerade, vhost-user for passt). SR-IOV and plugin bindings without a domain
//! attachment are attached elsewhere.

use super::util::intern;
use super::{Configurator, Env};
use crate::context::ConverterContext;
use crate::domain::{
    Acpi, Address, Alias, BootOrder, Domain, Interface, InterfaceBackend, InterfaceDriver,
    InterfaceSource, LinkState, Mac, Model, PortForward, PortForwardRange, Rom,
};
use crate::error::ConvertError;
use crate::topology::vcpu_count;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::Interface as VmiInterface;
use std::borrow::Cow;

/// Envoy's ports, excluded from passt forwarding when Istio injects its proxy.
const ISTIO_RESERVED_PORTS: [u32; 10] = [
    15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090,
];

/// passt's port forwards: the interface's declared ports, or everything when none are declared.
fn passt_port_forward(iface: &VmiInterface, vmi: &VirtualMachineInstance) -> Vec<PortForward> {
    let istio = super::util::annotation(vmi, "sidecar.istio.io/inject")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let range = |start: u32| PortForwardRange {
        start,
        ..PortForwardRange::default()
    };
    let mut tcp: Vec<PortForwardRange> = Vec::new();
    let mut udp: Vec<PortForwardRange> = Vec::new();
    if istio {
        tcp.extend(ISTIO_RESERVED_PORTS.iter().map(|&p| PortForwardRange {
            exclude: Some("yes".into()),
            ..range(p)
        }));
    }
    for port in iface.ports.iter().flatten() {
        let Ok(n) = u32::try_from(port.port.unwrap_or(0)) else {
            continue;
        };
        let proto = port.protocol.as_deref().unwrap_or("");
        if proto.is_empty() || proto.eq_ignore_ascii_case("tcp") {
            tcp.push(range(n));
        } else if proto.eq_ignore_ascii_case("udp") {
            udp.push(range(n));
        }
    }
    let fwd = |proto: &str, ranges| PortForward {
        proto: proto.into(),
        ranges,
        ..PortForward::default()
    };
    let mut out = Vec::new();
    if tcp.is_empty() && udp.is_empty() {
        out.push(fwd("tcp", Vec::new()));
        out.push(fwd("udp", Vec::new()));
    }
    if !tcp.is_empty() {
        out.push(fwd("tcp", tcp));
    }
    if !udp.is_empty() {
        out.push(fwd("udp", udp));
    }
    out
}

const PASST_LOG_FILE: &str = "/var/run/kubevirt/passt.log";
const MULTI_QUEUE_MAX: u32 = 256;

/// Writes network interfaces.
pub(super) struct Network<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// Parses `DDDD:BB:SS.F` into a PCI address.
pub(crate) fn pci_address(s: &str) -> Option<Address> {
    let (dom, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (slot, func) = rest.split_once('.')?;
    let hex = |v: &str, n: usize| v.len() == n && v.chars().all(|c| c.is_ascii_hexdigit());
    if !(hex(dom, 4) && hex(bus, 2) && hex(slot, 2) && hex(func, 1)) {
        return None;
    }
    Some(Address {
        kind: Some("pci".into()),
        domain: Some(format!("0x{dom}")),
        bus: Some(format!("0x{bus}")),
        slot: Some(format!("0x{slot}")),
        function: Some(format!("0x{func}")),
        ..Address::default()
    })
}

/// The handler's rule: bridge and masquerade interfaces are tap-attached.
fn derived_attachment(iface: &VmiInterface) -> Option<&'static str> {
    (iface.masquerade.is_some() || iface.bridge.is_some()).then_some("tap")
}

/// The handler's map of domain attachments (`ConverterContext::domain_attachment_by_interface_name`)
/// for `ifaces`, given the cluster's binding plugins by name with their `domainAttachmentType`
/// (`None`: the plugin sets none): bridge and masquerade interfaces are `tap`; a plugin
/// interface takes its plugin's type, `managedTap` written as `tap` (the converter treats
/// both alike); anything else is not in the map.
pub fn domain_attachment_by_interface_name<'p>(
    ifaces: &[VmiInterface],
    plugin_attachment: impl Fn(&str) -> Option<&'p str>,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for iface in ifaces {
        let kind = if let Some(tap) = derived_attachment(iface) {
            tap
        } else if let Some(kind) = iface
            .binding
            .as_ref()
            .and_then(|b| plugin_attachment(&b.name))
            .filter(|k| !k.is_empty())
        {
            if kind == "managedTap" { "tap" } else { kind }
        } else {
            continue;
        };
        out.insert(iface.name.clone(), kind.to_string());
    }
    out
}

/// The domain attachment of `iface`: the handler's map from the context, or the derived rule.
fn attachment<'v>(ctx: &ConverterContext, iface: &'v VmiInterface) -> Option<Cow<'v, str>> {
    let map = &ctx.domain_attachment_by_interface_name;
    if map.is_empty() {
        derived_attachment(iface).map(Cow::Borrowed)
    } else {
        map.get(&iface.name).map(|s| Cow::Owned(s.clone()))
    }
}

/// How an interface the domain XML does not carry is attached instead (KubeVirt's converter
/// leaves these out: the SR-IOV device plugin provides a host device, a binding plugin's sidecar
/// edits the domain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachedElsewhere {
    /// An SR-IOV interface (`sriov: {}`): a `<hostdev>` from the prepared SR-IOV devices.
    Sriov,
    /// A network binding plugin without a `tap` domain attachment (`binding: {name: ...}`).
    BindingPlugin(String),
}

/// The one per-interface decision: does the domain carry `iface` itself, or is it attached
/// elsewhere? (`is_tap`: its domain attachment is `tap`.)
fn attached_elsewhere(iface: &VmiInterface, is_tap: bool) -> Option<AttachedElsewhere> {
    if iface.sriov.is_some() {
        return Some(AttachedElsewhere::Sriov);
    }
    match &iface.binding {
        Some(b) if !is_tap => Some(AttachedElsewhere::BindingPlugin(b.name.clone())),
        _ => None,
    }
}

/// An interface `kvrs convert` cannot render: the domain would come out without it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct UnrenderedInterface {
    /// Index in `spec.domain.devices.interfaces`.
    pub index: usize,
    /// The interface name.
    pub name: String,
    /// How KubeVirt would attach it.
    pub kind: AttachedElsewhere,
}

impl UnrenderedInterface {
    /// The VMI field at fault, e.g. `spec.domain.devices.interfaces[0].binding`.
    pub fn path(&self) -> String {
        let field = match self.kind {
            AttachedElsewhere::Sriov => "sriov",
            AttachedElsewhere::BindingPlugin(_) => "binding",
        };
        format!("spec.domain.devices.interfaces[{}].{field}", self.index)
    }

    fn message(&self) -> String {
        let what = match &self.kind {
            AttachedElsewhere::Sriov => format!(
                "SR-IOV interface {:?} is not rendered without its device (it comes from the \
                 SR-IOV device plugin; give it as sriovDevices in --context)",
                self.name
            ),
            AttachedElsewhere::BindingPlugin(plugin) => format!(
                "interface {:?} is left to network binding plugin {plugin:?}: it has no domain \
                 attachment, so its sidecar adds the interface when the launcher defines the \
                 domain",
                self.name
            ),
        };
        format!("{}: {what}", self.path())
    }
}

/// Names an interface the domain would silently lack: a network binding plugin without a `tap`
/// domain attachment (its sidecar edits the domain in the launcher), or an SR-IOV interface when
/// the context holds no prepared SR-IOV device. [`crate::convert`] itself follows KubeVirt and
/// leaves them out; callers that print a domain for a user (`kvrs convert`) call this first and
/// warn.
pub fn check_rendered_interfaces(
    vmi: &VirtualMachineInstance,
    ctx: &ConverterContext,
) -> Result<(), UnrenderedInterface> {
    let ifaces = vmi.spec.domain.devices.interfaces.as_deref().unwrap_or(&[]);
    for (index, iface) in ifaces.iter().enumerate() {
        if iface.state.as_deref() == Some("absent") {
            continue;
        }
        let is_tap = attachment(ctx, iface).as_deref() == Some("tap");
        let kind = match attached_elsewhere(iface, is_tap) {
            None => continue,
            Some(AttachedElsewhere::Sriov) if !ctx.sriov_devices.is_empty() => continue,
            Some(kind) => kind,
        };
        return Err(UnrenderedInterface {
            index,
            name: iface.name.clone(),
            kind,
        });
    }
    Ok(())
}

impl Configurator for Network<'_> {
    fn configure(
        &self,
        vmi: &VirtualMachineInstance,
        domain: &mut Domain,
    ) -> Result<(), ConvertError> {
        let ifaces = vmi.spec.domain.devices.interfaces.as_deref().unwrap_or(&[]);
        let networks = vmi.spec.networks.as_deref().unwrap_or(&[]);
        let use_ls = self.env.sev || self.env.pv;
        let out = &mut domain.devices.interfaces;
        out.clear();
        out.reserve(ifaces.len());
        let network_index = super::util::first_by_name(networks, |n| n.name.as_str());
        let statuses = vmi
            .status
            .as_ref()
            .and_then(|s| s.interfaces.as_deref())
            .unwrap_or(&[]);
        // The first status of each name; a status without a name matches no interface. Built
        // when the first passt interface needs it (no other binding looks at the status).
        let mut status_index: Option<std::collections::HashMap<&str, _>> = None;
        for (i, iface) in ifaces.iter().enumerate() {
            if iface.state.as_deref() == Some("absent") {
                continue;
            }
            let path = || format!("spec.domain.devices.interfaces[{i}]");
            if network_index.get(iface.name.as_str()).is_none() {
                return Err(ConvertError::new(
                    path(),
                    format!("failed to find network {}", iface.name),
                ));
            }
            let is_tap = attachment(self.env.ctx, iface).as_deref() == Some("tap");
            if attached_elsewhere(iface, is_tap).is_some() {
                continue;
            }
            let model = iface
                .model
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or("virtio");
            let mut d = Interface {
                alias: Some(Alias::user(&iface.name)),
                model: Some(Model {
                    kind: if model == "virtio" {
                        self.env.virtio_model.into()
                    } else {
                        intern(model)
                    },
                }),
                ..Interface::default()
            };
            if model == "virtio" {
                let queues = if vmi.spec.domain.devices.network_interface_multiqueue == Some(true) {
                    vcpu_count(vmi).min(MULTI_QUEUE_MAX)
                } else {
                    0
                };
                if queues > 0 || use_ls {
                    d.driver = Some(InterfaceDriver {
                        name: "vhost".into(),
                        queues: (queues > 0).then_some(queues),
                        iommu: use_ls.then(|| "on".into()),
                    });
                }
            }
            if let Some(pci) = iface.pci_address.as_deref().filter(|s| !s.is_empty()) {
                d.address = Some(pci_address(pci).map(Box::new).ok_or_else(|| {
                    ConvertError::new(
                        format!("{}.pciAddress", path()),
                        format!(
                            "failed to configure interface {}: invalid PCI address {pci}",
                            iface.name
                        ),
                    )
                })?);
            }
            if let Some(idx) = iface.acpi_index.filter(|&v| v > 0) {
                // Positive: the filter above.
                d.acpi = Some(Acpi {
                    index: idx.unsigned_abs(),
                });
            }
            if let Some(mac) = iface.mac_address.as_deref().filter(|s| !s.is_empty()) {
                d.mac = Some(Mac {
                    address: mac.into(),
                });
            }
            if is_tap {
                d.kind = "ethernet".into();
                let boot = iface.boot_order.and_then(|b| u32::try_from(b).ok());
                if let Some(order) = boot {
                    d.boot = Some(BootOrder { order });
                }
                if self.env.rom_tuning() && (boot.is_none() || use_ls) {
                    d.rom = Some(Rom {
                        enabled: "no".into(),
                    });
                }
                if iface.state.as_deref() == Some("down") {
                    d.link = Some(LinkState {
                        state: "down".into(),
                    });
                }
            } else if iface.passt_binding.is_some() {
                let status = status_index
                    .get_or_insert_with(|| {
                        let mut index = std::collections::HashMap::with_capacity(statuses.len());
                        for st in statuses {
                            if let Some(name) = st.name.as_deref() {
                                index.entry(name).or_insert(st);
                            }
                        }
                        index
                    })
                    .get(iface.name.as_str())
                    .copied();
                let pod_iface = status
                    .and_then(|s| s.pod_interface_name.clone())
                    .filter(|s| !s.is_empty());
                let Some(pod_iface) = pod_iface else {
                    return Err(ConvertError::new(
                        path(),
                        format!(
                            "pod interface name not found in vmi {} status, for interface {}",
                            vmi.metadata.name.as_deref().unwrap_or(""),
                            iface.name
                        ),
                    ));
                };
                d.kind = "vhostuser".into();
                d.source = InterfaceSource {
                    dev: Some(pod_iface),
                    ..InterfaceSource::default()
                };
                d.port_forward = passt_port_forward(iface, vmi);
                d.backend = Some(InterfaceBackend {
                    kind: Some("passt".into()),
                    log_file: Some(PASST_LOG_FILE.into()),
                });
            }
            out.push(d);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
