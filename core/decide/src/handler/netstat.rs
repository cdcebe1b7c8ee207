//! `status.interfaces` from the domain's NICs, the pod interface cache, the guest agent and Multus
//! (KubeVirt's network status updater), and which networks a sync must plug.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::HandlerWorld;
use super::domain::{Domain, GuestInterface};
use crate::api::{
    Interface, VirtualMachineInstance, VirtualMachineInstanceNetworkInterface as IfaceStatus,
};

const DOMAIN: &str = "domain";
const GUEST_AGENT: &str = "guest-agent";
const MULTUS: &str = "multus-status";
const SRIOV_ALIAS_PREFIX: &str = "sriov-";
/// The guest may report many interfaces of its own; only this many are kept.
const GUEST_ONLY_LIMIT: usize = 10;

fn contains_source(sources: Option<&str>, name: &str) -> bool {
    sources.is_some_and(|s| s.split(", ").any(|x| x == name))
}

fn add_source(sources: Option<&str>, name: &str) -> String {
    match sources.filter(|s| !s.is_empty()) {
        Some(s) if contains_source(Some(s), name) => s.to_string(),
        Some(s) => format!("{s}, {name}"),
        None => name.to_string(),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// Recomputes `status.interfaces` from the domain (nothing happens without a domain).
pub(super) fn update(
    w: &HandlerWorld<'_>,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) {
    let Some(d) = domain else { return };
    let spec_ifaces: &[Interface] = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let prev: Vec<IfaceStatus> = vmi
        .status
        .as_ref()
        .and_then(|s| s.interfaces.clone())
        .unwrap_or_default();
    let multus: BTreeMap<String, &IfaceStatus> = prev
        .iter()
        .filter(|i| contains_source(i.info_source.as_deref(), MULTUS))
        .filter_map(|i| Some((i.name.clone()?, i)))
        .collect();

    let mut list: Vec<IfaceStatus> = d
        .spec
        .devices
        .interfaces
        .iter()
        .map(|i| IfaceStatus {
            name: i.alias.as_ref().map(|a| a.name.clone()),
            mac: i.mac.as_ref().and_then(|m| non_empty(&m.mac)),
            info_source: Some(DOMAIN.into()),
            queue_count: Some(
                i.driver
                    .as_ref()
                    .and_then(|d| d.queues)
                    .map_or(1, |q| i32::try_from(q).unwrap_or(i32::MAX)),
            ),
            link_state: Some(
                i.link_state
                    .as_ref()
                    .map_or_else(|| "up".to_string(), |l| l.state.clone()),
            ),
            ..Default::default()
        })
        .collect();
    for hd in &d.spec.devices.host_devices {
        let Some(name) = hd
            .alias
            .as_ref()
            .and_then(|a| a.name.strip_prefix(SRIOV_ALIAS_PREFIX))
        else {
            continue;
        };
        let mac = spec_ifaces
            .iter()
            .find(|i| i.name == name)
            .and_then(|i| i.mac_address.clone());
        list.push(IfaceStatus {
            name: Some(name.into()),
            mac,
            info_source: Some(DOMAIN.into()),
            ..Default::default()
        });
    }

    // IPs the pod had when the network was set up.
    for iface in spec_ifaces {
        let Some(status) = list
            .iter_mut()
            .find(|s| s.name.as_deref() == Some(iface.name.as_str()))
        else {
            continue;
        };
        let cache = w.facts.pod_interface_cache.get(&iface.name);
        status.ip_address = cache.and_then(|c| non_empty(&c.pod_ip));
        status.ip_addresses = cache.map(|c| c.pod_ips.clone()).filter(|v| !v.is_empty());
    }

    merge_guest_agent(&mut list, &d.status.interfaces, spec_ifaces);

    if let Some(primary) = vmi
        .spec
        .networks
        .iter()
        .flatten()
        .find(|n| n.pod.is_some())
        .map(|n| n.name.clone())
    {
        let present = list
            .iter()
            .any(|s| s.name.as_deref() == Some(primary.as_str()));
        if !present
            && prev
                .iter()
                .any(|s| s.name.as_deref() == Some(primary.as_str()))
        {
            list.insert(
                0,
                IfaceStatus {
                    name: Some(primary.clone()),
                    ..Default::default()
                },
            );
        }
        if let Some(pos) = list
            .iter()
            .position(|s| s.name.as_deref() == Some(primary.as_str()))
        {
            let p = list.remove(pos);
            list.insert(0, p);
        }
    }

    for name in multus.keys() {
        match list
            .iter_mut()
            .find(|s| s.name.as_deref() == Some(name.as_str()))
        {
            Some(s) => s.info_source = Some(add_source(s.info_source.as_deref(), MULTUS)),
            None if spec_ifaces.iter().any(|i| &i.name == name) => list.push(IfaceStatus {
                name: Some(name.clone()),
                info_source: Some(MULTUS.into()),
                ..Default::default()
            }),
            None => {}
        }
    }

    // The VMI controller reports the pod-side interface name; keep it.
    for s in list.iter_mut() {
        if let Some(name) = s.name.as_deref().filter(|n| !n.is_empty()) {
            s.pod_interface_name = prev
                .iter()
                .find(|p| p.name.as_deref() == Some(name))
                .and_then(|p| p.pod_interface_name.clone());
        }
    }
    vmi.status.get_or_insert_with(Default::default).interfaces = Some(list);
}

fn split_families(ips: &[String]) -> (Vec<String>, Vec<String>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for ip in ips {
        match ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(_)) => v4.push(ip.clone()),
            Ok(IpAddr::V6(_)) => v6.push(ip.clone()),
            Err(_) => {}
        }
    }
    (v4, v6)
}

fn link_local(ip: &str) -> bool {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.is_link_local(),
        Ok(IpAddr::V6(a)) => (a.segments()[0] & 0xffc0) == 0xfe80,
        Err(_) => true,
    }
}

fn merge_guest_agent(list: &mut Vec<IfaceStatus>, guest: &[GuestInterface], spec: &[Interface]) {
    let mut guest_only = 0;
    for ga in guest {
        if let Some(status) = list
            .iter_mut()
            .find(|s| s.mac.as_deref().unwrap_or("") == ga.mac)
        {
            let masquerade = spec
                .iter()
                .any(|i| Some(i.name.as_str()) == status.name.as_deref() && i.masquerade.is_some());
            let ga_ips: Vec<String> = ga
                .ips
                .iter()
                .filter(|ip| !(masquerade && link_local(ip)))
                .cloned()
                .collect();
            status.interface_name = non_empty(&ga.interface_name);
            let (mut v4, mut v6) =
                split_families(status.ip_addresses.as_deref().unwrap_or_default());
            let (ga4, ga6) = split_families(&ga_ips);
            // Guest data adds addresses, or clears them when the guest reports none of a family.
            if v4.is_empty() || ga4.is_empty() {
                v4 = ga4;
            }
            if v6.is_empty() || ga6.is_empty() {
                v6 = ga6;
            }
            let ips: Vec<String> = v4.into_iter().chain(v6).collect();
            status.ip_address = ips.first().cloned();
            status.ip_addresses = (!ips.is_empty()).then_some(ips);
            if !ga.interface_name.is_empty() {
                status.info_source = Some(format!("{DOMAIN}, {GUEST_AGENT}"));
            }
        } else if guest_only < GUEST_ONLY_LIMIT {
            guest_only += 1;
            list.push(IfaceStatus {
                mac: non_empty(&ga.mac),
                ip_address: non_empty(&ga.ip),
                ip_addresses: (!ga.ips.is_empty()).then(|| ga.ips.clone()),
                interface_name: non_empty(&ga.interface_name),
                info_source: Some(GUEST_AGENT.into()),
                ..Default::default()
            });
        }
    }
}

/// Networks plugged before the domain first starts: those whose interface is not marked absent.
pub(super) fn nets_for_startup(vmi: &VirtualMachineInstance) -> Vec<String> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    vmi.spec
        .networks
        .iter()
        .flatten()
        .filter(|n| {
            ifaces
                .iter()
                .any(|i| i.name == n.name && i.state.as_deref() != Some("absent"))
        })
        .map(|n| n.name.clone())
        .collect()
}

/// Networks hot-plugged into a running VMI: in the pod (Multus reports them) but not yet in the domain.
pub(super) fn nets_for_live_update(vmi: &VirtualMachineInstance) -> Vec<String> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let statuses = vmi
        .status
        .as_ref()
        .and_then(|s| s.interfaces.as_deref())
        .unwrap_or_default();
    vmi.spec
        .networks
        .iter()
        .flatten()
        .filter(|n| {
            ifaces
                .iter()
                .any(|i| i.name == n.name && i.state.as_deref() != Some("absent"))
        })
        .filter(|n| {
            statuses.iter().any(|s| {
                s.name.as_deref() == Some(n.name.as_str())
                    && contains_source(s.info_source.as_deref(), MULTUS)
                    && !contains_source(s.info_source.as_deref(), DOMAIN)
            })
        })
        .map(|n| n.name.clone())
        .collect()
}
