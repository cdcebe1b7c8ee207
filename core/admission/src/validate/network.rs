//! Networks and interfaces: names that match, one binding each, one pod network, supported
//! models and states, discontinued bindings, probes that need the pod network.

use std::collections::BTreeSet;

use super::CauseKind;
use super::causes::Causes;
use crate::api::{Interface, Network, VirtualMachineInstanceSpec};

const IFACES: &str = "spec.domain.devices.interfaces";
/// NIC models QEMU offers that KubeVirt accepts.
const MODELS: &[&str] = &[
    "e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio",
];
/// The MAC address of the in-pod bridge of masquerade binding.
const RESERVED_MAC: &str = "02:00:00:00:00:00";

fn binding_count(i: &Interface) -> usize {
    [
        i.bridge.is_some(),
        i.masquerade.is_some(),
        i.sriov.is_some(),
        i.passt_binding.is_some(),
        i.binding.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count()
}

fn valid_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

pub(super) fn check(spec: &VirtualMachineInstanceSpec, causes: &mut Causes) {
    let networks: &[Network] = spec.networks.as_deref().unwrap_or(&[]);
    let ifaces: &[Interface] = spec.domain.devices.interfaces.as_deref().unwrap_or(&[]);
    let network_of = |name: &str| networks.iter().find(|n| n.name == name);

    let pods = networks.iter().filter(|n| n.pod.is_some()).count();
    let multus_defaults = networks
        .iter()
        .filter(|n| n.multus.as_ref().is_some_and(|m| m.default == Some(true)))
        .count();
    if pods > 1 {
        causes.push(
            CauseKind::Duplicate,
            "spec.interfaces",
            "more than one interface is connected to a pod network in spec.interfaces",
        );
    }
    if multus_defaults > 1 {
        causes.invalid(
            "spec.networks",
            "Multus CNI should only have one default network",
        );
    }
    if pods > 0 && multus_defaults > 0 {
        causes.invalid(
            "spec.networks",
            "Pod network cannot be defined when Multus default network is defined",
        );
    }
    let mut seen = BTreeSet::new();
    for (idx, net) in networks.iter().enumerate() {
        let kinds = [
            net.pod.is_some(),
            net.multus.is_some(),
            net.resource_claim.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        let path = format!("spec.networks[{idx}]");
        match kinds {
            0 => causes.required(path.clone(), "should have a network type"),
            1 => {}
            _ => causes.required(path.clone(), "should have only one network type"),
        }
        if net
            .multus
            .as_ref()
            .is_some_and(|m| m.network_name.is_empty())
        {
            causes.required(
                path.clone(),
                "CNI delegating plugin must have a networkName",
            );
        }
        if !seen.insert(net.name.as_str()) {
            causes.push(
                CauseKind::Duplicate,
                format!("{path}.name"),
                format!(
                    "Network with name {:?} already exists, every network must have a unique name",
                    net.name
                ),
            );
        }
        if !ifaces.iter().any(|i| i.name == net.name) {
            causes.required(
                format!("{path}.name"),
                format!("{path}.name '{}' not found.", net.name),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for (idx, iface) in ifaces.iter().enumerate() {
        check_interface(idx, iface, network_of(&iface.name), causes);
        let path = format!("{IFACES}[{idx}].name");
        if !seen.insert(iface.name.as_str()) {
            causes.push(
                CauseKind::Duplicate,
                path.clone(),
                "Only one interface can be connected to one specific network",
            );
        }
        if network_of(&iface.name).is_none() {
            causes.invalid(path.clone(), format!("{path} '{}' not found.", iface.name));
        }
    }
    check_probes_need_pod_network(spec, pods > 0, causes);
}

/// How a discontinued binding's refusal ends. KubeVirt checks discontinued bindings only when a
/// VM or VMI is created (`ValidateCreation`), so a VM stored before may still be updated.
pub const DISCONTINUED: &str = "has been discontinued since v1.3";

fn check_interface(idx: usize, iface: &Interface, net: Option<&Network>, causes: &mut Causes) {
    let path = format!("{IFACES}[{idx}]");
    let discontinued = [
        (iface.slirp.is_some(), "slirp", "Slirp interface support"),
        (iface.passt.is_some(), "passt", "Passt network binding"),
        (
            iface.macvtap.is_some(),
            "macvtap",
            "Macvtap network binding",
        ),
    ];
    for (used, field, what) in discontinued {
        if used {
            causes.invalid(format!("{path}.{field}"), format!("{what} {DISCONTINUED}"));
        }
    }
    let legacy = discontinued.iter().any(|(used, _, _)| *used);
    if binding_count(iface) != 1 && !legacy {
        causes.invalid(
            path.clone(),
            format!(
                "logical {} interface must have exactly one binding method or binding plugin",
                iface.name
            ),
        );
    }
    let on_pod = net.is_some_and(|n| n.pod.is_some());
    if iface.masquerade.is_some() && !on_pod {
        causes.invalid(
            format!("{path}.name"),
            "Masquerade interface only implemented with pod network",
        );
    }
    if iface.passt_binding.is_some() && !on_pod {
        causes.invalid(
            format!("{path}.name"),
            "PasstBinding interface only implemented with pod network",
        );
    }
    let mac = iface.mac_address.as_deref().unwrap_or("");
    if iface.masquerade.is_some() && mac.eq_ignore_ascii_case(RESERVED_MAC) {
        causes.invalid(
            format!("{path}.macAddress"),
            "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
        );
    }
    if !mac.is_empty() && !valid_mac(mac) {
        causes.invalid(
            format!("{path}.macAddress"),
            format!("interface {path}.name has malformed MAC address ({mac})."),
        );
    }
    if !iface
        .name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        || iface.name.is_empty()
    {
        causes.invalid(
            format!("{path}.name"),
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
        );
    }
    if let Some(model) = iface.model.as_deref().filter(|m| !m.is_empty())
        && !MODELS.contains(&model)
    {
        causes.push(
            CauseKind::NotSupported,
            format!("{path}.model"),
            format!("interface {path}.name uses model {model} that is not supported."),
        );
    }
    if let Some(pci) = iface.pci_address.as_deref().filter(|p| !p.is_empty())
        && !super::devices::valid_pci_address(pci)
    {
        causes.invalid(
            format!("{path}.pciAddress"),
            format!("interface {path}.name has malformed PCI address ({pci})."),
        );
    }
    let state = iface.state.as_deref().unwrap_or("");
    if !matches!(state, "" | "absent" | "down" | "up") {
        causes.invalid(
            format!("{path}.state"),
            format!(
                "logical {} interface state value is unsupported: {state}",
                iface.name
            ),
        );
    }
    if iface.sriov.is_some() && matches!(state, "down" | "up") {
        causes.invalid(
            format!("{path}.state"),
            format!(
                "{:?} interface's state {state:?} is not supported for SR-IOV NICs",
                iface.name
            ),
        );
    }
    if state == "absent" && iface.bridge.is_none() {
        causes.invalid(
            format!("{path}.state"),
            format!(
                "{:?} interface's state {state:?} is supported only for bridge binding",
                iface.name
            ),
        );
    }
    if state == "absent" && on_pod {
        causes.invalid(
            format!("{path}.state"),
            format!(
                "{:?} interface's state {state:?} is not supported on default networks",
                iface.name
            ),
        );
    }
    for (pidx, port) in iface.ports.iter().flatten().enumerate() {
        let ppath = format!("{path}.ports[{pidx}]");
        match port.port {
            None => causes.required(format!("{ppath}.port"), "Port field is mandatory."),
            Some(p) if p <= 0 || p >= 65536 => causes.invalid(
                format!("{ppath}.port"),
                "Port field must be in range 0 < x < 65536.",
            ),
            Some(_) => {}
        }
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        if !matches!(protocol, "TCP" | "UDP" | "") {
            causes.invalid(
                format!("{ppath}.protocol"),
                "Unknown protocol, only TCP or UDP allowed",
            );
        }
    }
}

/// HTTP and TCP probes reach the guest through the pod network; without one they cannot work.
fn check_probes_need_pod_network(
    spec: &VirtualMachineInstanceSpec,
    pod: bool,
    causes: &mut Causes,
) {
    for (name, probe) in [
        ("readinessProbe", spec.readiness_probe.as_ref()),
        ("livenessProbe", spec.liveness_probe.as_ref()),
    ] {
        let Some(probe) = probe else { continue };
        let path = format!("spec.{name}");
        let handlers = [
            probe.http_get.is_some(),
            probe.tcp_socket.is_some(),
            probe.exec.is_some(),
            probe.guest_agent_ping.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if handlers > 1 {
            causes.invalid(
                path.clone(),
                format!("{path} must have exactly one probe type set"),
            );
        }
        if handlers == 0 {
            causes.required(
                path.clone(),
                format!(
                    "either {path}.tcpSocket, {path}.exec or {path}.httpGet must be set if a \
                     {path} is specified"
                ),
            );
        }
        if !pod {
            for (set, sub) in [
                (probe.http_get.is_some(), "httpGet"),
                (probe.tcp_socket.is_some(), "tcpSocket"),
            ] {
                if set {
                    causes.invalid(
                        format!("{path}.{sub}"),
                        format!("{path}.{sub} is only allowed if the Pod Network is attached"),
                    );
                }
            }
        }
    }
}
