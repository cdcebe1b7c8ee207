//! Network phase 2, the launcher's half of pod networking (KubeVirt runs it before defining the
//! domain): the handler has already built the pod side (bridge `k6t-eth0`, `tap0`, NAT or the
//! bridged pod NIC, and for bridge binding the vif cache); the launcher completes each
//! tap-attached domain interface from what it finds in the pod and starts the DHCP server that
//! gives the guest its address.
//!
//! Only pod networks are handled; tap-attached interfaces on secondary (Multus) networks are
//! skipped with a warning. A VMI without interfaces does nothing here.

pub mod dhcp;
pub mod domain_iface;
pub mod error;
pub mod link;
pub mod names;

use std::collections::HashMap;

use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::{Interface, Network};
use kvrs_converter::Domain;

use crate::log;
use dhcp::DhcpEnv;
use dhcp::config::{self as dhcp_config, DhcpConfig, PodNic};
use domain_iface::TapAttachment;
use error::NetworkError;

/// The handler's domain attachment for tap-attached interfaces.
const TAP: &str = "tap";

/// The interface's domain attachment is a tap: the handler's word when it sent the map (as
/// KubeVirt's handler always does), else the converter's own rule (masquerade or bridge).
fn is_tap(iface: &Interface, attachments: &HashMap<String, String>) -> bool {
    if attachments.is_empty() {
        iface.masquerade.is_some() || iface.bridge.is_some()
    } else {
        attachments.get(&iface.name).is_some_and(|a| a == TAP)
    }
}

fn link_err(iface: &str, link: &str, e: link::LinkError) -> NetworkError {
    NetworkError::Link {
        iface: iface.to_string(),
        link: link.to_string(),
        reason: e.to_string(),
    }
}

/// Completes the domain's tap-attached interfaces and starts their DHCP servers.
pub fn setup_phase2(
    vmi: &VirtualMachineInstance,
    attachments: &HashMap<String, String>,
    domain: &mut Domain,
    env: &DhcpEnv,
) -> Result<(), NetworkError> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    let live = |i: &&Interface| i.state.as_deref() != Some("absent");
    for network in vmi.spec.networks.iter().flatten() {
        let Some((index, iface)) = ifaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.name == network.name)
        else {
            return Err(NetworkError::config(
                &network.name,
                format!("no interface matches network {}", network.name),
            ));
        };
        if !live(&iface) || !is_tap(iface, attachments) {
            continue;
        }
        if network.pod.is_none() {
            log::warn(format_args!(
                "interface {}: tap attachment on a non-pod network is not set up by kvrs's launcher",
                iface.name
            ));
            continue;
        }
        setup_pod_iface(vmi, index, iface, network, domain, env)?;
    }
    Ok(())
}

fn setup_pod_iface(
    vmi: &VirtualMachineInstance,
    index: usize,
    iface: &Interface,
    network: &Network,
    domain: &mut Domain,
    env: &DhcpEnv,
) -> Result<(), NetworkError> {
    let pod_iface = names::PRIMARY_POD_IFACE;
    let pod_link = link::by_name(pod_iface).map_err(|e| link_err(&iface.name, pod_iface, e))?;
    // As KubeVirt, a domain interface that cannot be completed is logged and left as converted;
    // the DHCP set-up below then reports what is missing.
    match attachment(iface, pod_iface, &pod_link) {
        Ok(att) => {
            domain_iface::apply(domain, &iface.name, &att);
        }
        Err(e) => log::error(format_args!("failed to create libvirt configuration: {e}")),
    }
    let subdomain = vmi.spec.subdomain.as_deref().unwrap_or_default();
    let cfg = if iface.bridge.is_some() {
        bridge_config(index, iface, pod_iface, subdomain, env)?
    } else {
        let nic = PodNic {
            name: pod_iface.to_string(),
            mtu: pod_link.mtu,
            has_ipv4: link::has_ipv4_global_unicast(pod_iface)
                .map_err(|e| link_err(&iface.name, pod_iface, e))?,
        };
        let cidr = network
            .pod
            .as_ref()
            .and_then(|p| p.vm_network_cidr.as_deref());
        dhcp_config::masquerade(&iface.name, &nic, cidr, subdomain)?
    };
    let bridge = names::bridge_name(pod_iface);
    dhcp::ensure_started(env, &iface.name, &bridge, &cfg, iface.dhcp_options.as_ref())
}

/// Target, MTU and MAC of the domain interface.
fn attachment(
    iface: &Interface,
    pod_iface: &str,
    pod_link: &link::Link,
) -> Result<TapAttachment, NetworkError> {
    let mac = match iface.mac_address.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => names::parse_mac(m)
            .map(|b| link::format_mac(&b))
            .ok_or_else(|| {
                NetworkError::config(&iface.name, format!("invalid MAC address {m:?}"))
            })?,
        None => link::format_mac(&pod_link.mac),
    };
    let tap = names::tap_name(pod_iface, false);
    let target = match link::exists(&tap) {
        Ok(true) => tap,
        Ok(false) => pod_iface.to_string(),
        Err(e) => return Err(link_err(&iface.name, &tap, e)),
    };
    Ok(TapAttachment {
        target,
        mtu: pod_link.mtu,
        mac,
    })
}

/// Bridge binding: the handler's cached lease, served from the fake link-local address with the
/// MTU of the renamed pod NIC.
fn bridge_config(
    index: usize,
    iface: &Interface,
    pod_iface: &str,
    subdomain: &str,
    env: &DhcpEnv,
) -> Result<DhcpConfig, NetworkError> {
    let mut cfg = dhcp::vif_cache::read(&env.private_dir, &iface.name, pod_iface)?;
    if cfg.ipam_disabled {
        return Ok(cfg);
    }
    cfg.name = pod_iface.to_string();
    cfg.server_ip = dhcp_config::bridge_server_ip(&iface.name, index)?;
    let nic = names::bridged_nic_name(pod_iface);
    let nic_link = link::by_name(&nic).map_err(|e| link_err(&iface.name, &nic, e))?;
    cfg.mtu = dhcp_config::mtu16(nic_link.mtu);
    cfg.subdomain = subdomain.to_string();
    Ok(cfg)
}
