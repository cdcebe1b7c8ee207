//! Planning a bridge-bound interface, as KubeVirt rewires the pod for it (the links, without
//! the placeholder address and the DHCP cache, are also a `managedTap` plugin's: see
//! [`super::managed_tap`]):
//!
//! * bridge `k6t-<iface>` (up; a link-local placeholder `169.254.75.1<i>/32` when the pod had
//!   IPv4, `i` being the interface's index);
//! * the pod interface renamed `<iface>-nic`, stripped of its addresses, given the bridge's MAC,
//!   enslaved with MAC learning off — the guest now owns the pod's L2;
//! * the tap, enslaved;
//! * a dummy named like the pod interface keeping the pod's MAC, MTU and addresses, so the
//!   pod still "has" its IP for the CNI and for status reporting (on a kernel without dummy
//!   links the executor makes it a veth pair left down, peer `<iface>-ph`: see `apply`);
//! * `arp_ignore=1` so the pod does not answer ARP for the guest's (former pod) address;
//! * the DHCP cache the launcher serves the guest from, written before the rewiring.
//!
//! On a pod already rewired (a restarted handler) `<iface>-nic` exists and the dummy holds the
//! original facts; the plan then describes the same end state and keeps the cache file.

use super::dhcp_cache::{DhcpConfig, IpNet, NetlinkAddr, NetlinkRoute};
use super::facts::{IfAddr, PodFacts, PodLink};
use super::names;
use super::plan::{
    DhcpCacheFile, InterfaceSetup, LinkKind, LinkSpec, MacSpec, NetPlan, PlanContext, Sysctl,
    TapSpec, parse_mac,
};
use super::spec::WiredIface;
use crate::error::NodeError;
use std::net::{IpAddr, Ipv4Addr};

pub(crate) fn plan_iface(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    facts: &PodFacts,
    plan: &mut NetPlan,
) -> Result<(), NodeError> {
    let pod = BridgedPod::find(w, facts)?;
    if !pod.rewired {
        plan.dhcp_caches.push(DhcpCacheFile {
            pod_iface: w.pod_iface.clone(),
            config: dhcp_config(ctx, w, facts, pod.original, pod.ipv4)?,
        });
    }
    let placeholder: Vec<IfAddr> = if pod.ipv4.is_some() {
        let ip: Ipv4Addr =
            format!("169.254.75.1{}", w.index)
                .parse()
                .map_err(|_| NodeError::InvalidSpec {
                    field: w.field(),
                    reason: "too many interfaces for the bridge placeholder address".into(),
                })?;
        vec![IfAddr::new(IpAddr::V4(ip), 32)]
    } else {
        Vec::new()
    };
    let mut setup = push_bridged_links(ctx, w, &pod, placeholder, plan);
    let gateway = first_link_route(facts, pod.original.index).and_then(|r| r.gateway);
    setup.guest_ipv4 = pod.ipv4;
    setup.gateway_ipv4 = gateway.map(IpAddr::V4);
    plan.interfaces.push(setup);
    Ok(())
}

/// The pod's side of a bridged binding (bridge, `managedTap`) as the node finds it.
pub(crate) struct BridgedPod<'f> {
    /// The pod's own link (already renamed `<iface>-nic` on a rewired pod).
    pub original: &'f PodLink,
    /// The link carrying the facts the guest inherits: the pod's link before the rewiring,
    /// the dummy after.
    pub held: &'f PodLink,
    /// Whether a previous run rewired the pod already.
    pub rewired: bool,
    /// The held link's first global unicast IPv4 address.
    pub ipv4: Option<IfAddr>,
}

impl<'f> BridgedPod<'f> {
    /// Finds the pod link of `w`, renamed or not; KubeVirt's "pod link (NAME) is missing" when
    /// it is not there.
    pub fn find(w: &WiredIface<'_>, facts: &'f PodFacts) -> Result<Self, NodeError> {
        let nic = names::bridged_pod_iface(&w.pod_iface);
        let (original, held, rewired) = match facts.link(&nic) {
            Some(renamed) => (renamed, w.pod_link(facts, &w.pod_iface)?, true),
            None => {
                let link = w.pod_link(facts, &w.pod_iface)?;
                (link, link, false)
            }
        };
        let ipv4 = held
            .addresses
            .iter()
            .find(|a| a.ip.is_ipv4() && a.is_global_unicast())
            .copied();
        Ok(BridgedPod {
            original,
            held,
            rewired,
            ipv4,
        })
    }
}

/// The links both bridged bindings make — bridge `k6t-<iface>` holding `bridge_addrs`, the pod
/// link renamed `<iface>-nic` on it with the bridge's MAC and no addresses, the tap on it, the
/// dummy keeping the pod's MAC, MTU and addresses — and `arp_ignore=1` when the pod has a
/// global IPv4 address. Returns the interface's setup without guest addresses.
pub(crate) fn push_bridged_links(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    pod: &BridgedPod<'_>,
    bridge_addrs: Vec<IfAddr>,
    plan: &mut NetPlan,
) -> InterfaceSetup {
    let bridge = names::bridge_name(&w.pod_iface);
    let tap = names::tap_name(&w.pod_iface, w.secondary);
    let mtu = pod.held.mtu;
    plan.links.push(LinkSpec {
        name: bridge.clone(),
        kind: Some(LinkKind::Bridge),
        existing_index: None,
        mac: MacSpec::Keep,
        mtu: None,
        controller: None,
        addresses: Some(bridge_addrs),
        up: true,
        learning_off: false,
    });
    plan.links.push(LinkSpec {
        name: names::bridged_pod_iface(&w.pod_iface),
        kind: None,
        existing_index: Some(pod.original.index),
        mac: MacSpec::CopyFrom(bridge.clone()),
        mtu: None,
        controller: Some(bridge.clone()),
        addresses: Some(Vec::new()),
        up: true,
        learning_off: true,
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
        mtu: Some(mtu),
        controller: Some(bridge.clone()),
        addresses: None,
        up: true,
        learning_off: false,
    });
    plan.links.push(LinkSpec {
        name: w.pod_iface.clone(),
        kind: Some(LinkKind::Dummy),
        existing_index: None,
        mac: pod.held.mac.map_or(MacSpec::Keep, MacSpec::Set),
        mtu: Some(mtu),
        controller: None,
        addresses: Some(pod.held.addresses.clone()),
        up: false,
        learning_off: false,
    });
    if pod.ipv4.is_some() {
        plan.sysctls.push(Sysctl {
            key: "net/ipv4/conf/all/arp_ignore".into(),
            value: "1".into(),
        });
    }
    InterfaceSetup {
        network: w.network.name.clone(),
        binding: w.binding,
        pod_iface: w.pod_iface.clone(),
        bridge,
        tap,
        mtu,
        multi_queue,
        guest_ipv4: None,
        gateway_ipv4: None,
        guest_ipv6: None,
        gateway_ipv6: None,
    }
}

fn first_link_route(facts: &PodFacts, index: u32) -> Option<&super::facts::Route4> {
    facts.routes4.iter().find(|r| r.oif == Some(index))
}

/// KubeVirt's bridge-binding DHCP data: the pod's first global IPv4 address, the MAC the guest
/// must use (spec, else status, else the pod's), the gateway of the link's first route and the
/// link's routes other than the on-link subnet.
fn dhcp_config(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    facts: &PodFacts,
    link: &PodLink,
    pod_v4: Option<IfAddr>,
) -> Result<DhcpConfig, NodeError> {
    let Some(addr) = pod_v4 else {
        return Ok(DhcpConfig {
            ipam_disabled: true,
            ..Default::default()
        });
    };
    let mac = guest_mac(ctx, w, link)?;
    let routes: Vec<_> = facts
        .routes4
        .iter()
        .filter(|r| r.oif == Some(link.index))
        .collect();
    let first = routes.first().ok_or_else(|| NodeError::PodInterface {
        iface: w.pod_iface.clone(),
        reason: "no gateway address found in routes".into(),
    })?;
    let IpAddr::V4(v4) = addr.ip else {
        return Ok(DhcpConfig::default());
    };
    let local = (mask_v4(v4, addr.prefix_len), addr.prefix_len);
    let other: Vec<NetlinkRoute> = routes
        .iter()
        .filter(|r| {
            r.destination
                .is_none_or(|(ip, p)| (mask_v4(ip, p), p) != local)
        })
        .map(|r| NetlinkRoute {
            dst: r
                .destination
                .filter(|(_, p)| *p != 0)
                .map(|(ip, p)| IpNet::new(IpAddr::V4(mask_v4(ip, p)), p)),
            gw: r.gateway.map(IpAddr::V4),
            ..Default::default()
        })
        .collect();
    Ok(DhcpConfig {
        ip: NetlinkAddr {
            ipnet: Some(IpNet::new(addr.ip, addr.prefix_len)),
            ..Default::default()
        },
        mac: Some(mac.to_vec()),
        gateway: first.gateway.map(IpAddr::V4),
        routes: if other.is_empty() { None } else { Some(other) },
        ipam_disabled: false,
        ..Default::default()
    })
}

fn guest_mac(
    ctx: &PlanContext<'_>,
    w: &WiredIface<'_>,
    link: &PodLink,
) -> Result<[u8; 6], NodeError> {
    let field = format!("spec.domain.devices.interfaces[{}].macAddress", w.index);
    if let Some(text) = w.iface.mac_address.as_deref().filter(|m| !m.is_empty()) {
        return parse_mac(text).ok_or_else(|| NodeError::InvalidSpec {
            field,
            reason: format!("{text:?} is not a MAC address"),
        });
    }
    let status_mac = ctx
        .vmi
        .status
        .as_ref()
        .and_then(|s| s.interfaces.as_ref())
        .and_then(|ifs| {
            ifs.iter()
                .find(|s| s.name.as_deref() == Some(w.iface.name.as_str()))
        })
        .and_then(|s| s.mac.as_deref())
        .filter(|m| !m.is_empty());
    if let Some(text) = status_mac {
        return parse_mac(text).ok_or_else(|| NodeError::InvalidSpec {
            field: "status.interfaces[].mac".into(),
            reason: format!("{text:?} is not a MAC address"),
        });
    }
    link.mac.ok_or_else(|| NodeError::PodInterface {
        iface: w.pod_iface.clone(),
        reason: "has no MAC address".into(),
    })
}

fn mask_v4(ip: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix.min(32))
    };
    Ipv4Addr::from(u32::from(ip) & mask)
}
