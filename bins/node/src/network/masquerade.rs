//! Planning a masquerade interface: bridge `k6t-<iface>` holding the gateway address, the tap
//! on it, forwarding on, and KubeVirt's NAT between the pod interface and the guest address.

use super::cidr::{DEFAULT_VM_CIDR, DEFAULT_VM_IPV6_CIDR, MasqueradeSubnet, masquerade_subnet};
use super::facts::{IfAddr, PodFacts};
use super::names;
use super::nft::{FamilyNat, ForwardedPort, nat_script};
use super::plan::{
    InterfaceSetup, LinkKind, LinkSpec, MacSpec, NetPlan, PlanContext, Sysctl, TapSpec,
};
use super::spec::WiredIface;
use crate::error::NodeError;

/// The bridge's fixed MAC (KubeVirt's `StaticMasqueradeBridgeMAC`): the guest's gateway MAC.
pub const MASQUERADE_BRIDGE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0];

pub(crate) fn plan_iface(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    facts: &PodFacts,
    with_nat: bool,
    plan: &mut NetPlan,
) -> Result<(), NodeError> {
    let pod = w.pod_link(facts, &w.pod_iface)?;
    let has_v4 = pod
        .addresses
        .iter()
        .any(|a| a.ip.is_ipv4() && a.is_global_unicast());
    let has_v6 = pod
        .addresses
        .iter()
        .any(|a| a.ip.is_ipv6() && a.is_global_unicast());
    let pod_net = w.network.pod.as_ref();
    let net_field = |key: &str| format!("spec.networks[{}].pod.{key}", w.network_index);
    let subnet = |cidr: Option<&String>, default: &str, key: &str| {
        let cidr = cidr
            .map(String::as_str)
            .filter(|c| !c.is_empty())
            .unwrap_or(default);
        masquerade_subnet(cidr).map_err(|reason| NodeError::InvalidSpec {
            field: net_field(key),
            reason,
        })
    };
    let v4 = if has_v4 {
        Some(subnet(
            pod_net.and_then(|p| p.vm_network_cidr.as_ref()),
            DEFAULT_VM_CIDR,
            "vmNetworkCIDR",
        )?)
    } else {
        None
    };
    let v6 = if has_v6 {
        Some(subnet(
            pod_net.and_then(|p| p.vm_i_pv6_network_cidr.as_ref()),
            DEFAULT_VM_IPV6_CIDR,
            "vmIPv6NetworkCIDR",
        )?)
    } else {
        None
    };
    let ports = forwarded_ports(w)?;

    let bridge = names::bridge_name(&w.pod_iface);
    let tap = names::tap_name(&w.pod_iface, w.secondary);
    let gateway_addr = |s: &MasqueradeSubnet| IfAddr::new(s.gateway, s.prefix_len);
    let bridge_addrs: Vec<IfAddr> = v4.iter().chain(v6.iter()).map(gateway_addr).collect();
    plan.links.push(LinkSpec {
        name: bridge.clone(),
        kind: Some(LinkKind::Bridge),
        existing_index: None,
        mac: MacSpec::Set(MASQUERADE_BRIDGE_MAC),
        mtu: Some(pod.mtu),
        controller: None,
        addresses: Some(bridge_addrs),
        up: true,
        learning_off: false,
    });
    let multi_queue = ctx.multi_queue(w);
    plan.links.push(LinkSpec {
        name: tap.clone(),
        kind: Some(LinkKind::Tap(TapSpec {
            owner: ctx.tap_owner,
            multi_queue,
        })),
        existing_index: None,
        mac: MacSpec::Keep,
        mtu: Some(pod.mtu),
        controller: Some(bridge.clone()),
        addresses: None,
        up: true,
        learning_off: false,
    });
    if has_v4 {
        // Lets the guest reach services DNAT-ed to 127.0.0.1 through the bridge.
        plan.sysctls.push(Sysctl {
            key: format!("net/ipv4/conf/{bridge}/route_localnet"),
            value: "1".into(),
        });
        plan.sysctls.push(Sysctl {
            key: "net/ipv4/ip_forward".into(),
            value: "1".into(),
        });
    }
    if has_v6 {
        plan.sysctls.push(Sysctl {
            key: "net/ipv6/conf/all/forwarding".into(),
            value: "1".into(),
        });
    }
    if with_nat {
        let mut script = String::new();
        for (subnet, present) in [(v4, facts.nat_present_v4), (v6, facts.nat_present_v6)] {
            if let (Some(s), false) = (subnet, present) {
                script.push_str(&nat_script(&FamilyNat {
                    pod_iface: w.pod_iface.clone(),
                    bridge: bridge.clone(),
                    gateway: s.gateway,
                    guest: s.guest,
                    ports: ports.clone(),
                }));
            }
        }
        if !script.is_empty() {
            plan.nft_script = Some(script);
        }
    }
    plan.interfaces.push(InterfaceSetup {
        network: w.network.name.clone(),
        binding: w.binding,
        pod_iface: w.pod_iface.clone(),
        bridge,
        tap,
        mtu: pod.mtu,
        multi_queue,
        guest_ipv4: v4.map(|s| IfAddr::new(s.guest, s.prefix_len)),
        gateway_ipv4: v4.map(|s| s.gateway),
        guest_ipv6: v6.map(|s| IfAddr::new(s.guest, s.prefix_len)),
        gateway_ipv6: v6.map(|s| s.gateway),
    });
    Ok(())
}

/// The interface's `ports`, protocol defaulted to TCP and lower-cased as KubeVirt writes them.
fn forwarded_ports(w: &WiredIface<'_>) -> Result<Vec<ForwardedPort>, NodeError> {
    let mut out = Vec::new();
    for (j, p) in w
        .iface
        .ports
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let field = format!("spec.domain.devices.interfaces[{}].ports[{j}]", w.index);
        let port = p
            .port
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0)
            .ok_or_else(|| NodeError::InvalidSpec {
                field: format!("{field}.port"),
                reason: format!("{:?} is not a port number (1-65535)", p.port),
            })?;
        let protocol = p
            .protocol
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("tcp")
            .to_ascii_lowercase();
        if !matches!(protocol.as_str(), "tcp" | "udp" | "sctp") {
            return Err(NodeError::InvalidSpec {
                field: format!("{field}.protocol"),
                reason: format!("{protocol:?} is not one of TCP, UDP, SCTP"),
            });
        }
        out.push(ForwardedPort { protocol, port });
    }
    Ok(out)
}
