//! `<interface>`: one per non-absent VMI interface that the domain itself attaches (tap for
//! bridge/masquerade, vhost-user for passt). SR-IOV and plugin bindings without a domain
//! attachment are attached elsewhere.

use super::{Configurator, Env};
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
pub struct Network<'a> {
    /// Conversion environment.
    pub env: &'a Env<'a>,
}

/// Parses `DDDD:BB:SS.F` into a PCI address.
pub fn pci_address(s: &str) -> Option<Address> {
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

impl Network<'_> {
    fn attachment<'v>(&self, iface: &'v VmiInterface) -> Option<Cow<'v, str>> {
        let map = &self.env.ctx.domain_attachment_by_interface_name;
        if map.is_empty() {
            derived_attachment(iface).map(Cow::Borrowed)
        } else {
            map.get(&iface.name).map(|s| Cow::Owned(s.clone()))
        }
    }
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
        let mut out = Vec::with_capacity(ifaces.len());
        for (i, iface) in ifaces.iter().enumerate() {
            if iface.state.as_deref() == Some("absent") {
                continue;
            }
            let path = || format!("spec.domain.devices.interfaces[{i}]");
            if !networks.iter().any(|n| n.name == iface.name) {
                return Err(ConvertError::new(
                    path(),
                    format!("failed to find network {}", iface.name),
                ));
            }
            let attachment = self.attachment(iface);
            let is_tap = attachment.as_deref() == Some("tap");
            if (iface.binding.is_some() && !is_tap) || iface.sriov.is_some() {
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
                        model.into()
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
                d.address = Some(pci_address(pci).ok_or_else(|| {
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
                d.acpi = Some(Acpi { index: idx as u32 });
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
                let status = vmi
                    .status
                    .as_ref()
                    .and_then(|s| s.interfaces.as_ref())
                    .and_then(|v| {
                        v.iter()
                            .find(|s| s.name.as_deref() == Some(iface.name.as_str()))
                    });
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
        domain.devices.interfaces = out;
        Ok(())
    }
}
